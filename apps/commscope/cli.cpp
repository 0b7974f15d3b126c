// `commscope <verb>`: parses the command line, runs the verb, turns errors into one line on
// stderr and exit status 2. The program's main() is main.cpp; the Python module calls
// run_command too (embed.h).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string_view>

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/scenario_options.h"
#include "commscope/spec/preset.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/flag_error.h"
#include "commscope/util/input_file.h"
#include "commscope/util/text.h"
#include "embed.h"
#include "verbs.h"

namespace commscope::cli {

namespace {
// An error is one line of bounded length, whatever it echoes: a line break in a trace's key
// printed a message over several lines, and a 100 KB model name or a 20,000-deep $((...))
// was echoed whole (found by probing, 2026-12-02). Control characters are written as \n, \r,
// \t or \xNN; past 4,096 bytes the middle is left out (cut between UTF-8 characters).
std::string one_bounded_line(const std::string& message) {
  std::string out;
  out.reserve(std::min<std::size_t>(message.size(), 4096) + 64);
  for (char ch : message) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u != 0x7f)
      out += ch;
    else
      out += ch == '\n'   ? "\\n"
             : ch == '\r' ? "\\r"
             : ch == '\t' ? "\\t"
                          : fmt::format("\\x{:02x}", u);
  }
  constexpr std::size_t kMax = 4096, kHead = 3000, kTail = 600;
  if (out.size() <= kMax) return out;
  auto boundary = [&](std::size_t at) {  // back to the start of a UTF-8 character
    while (at > 0 && (static_cast<unsigned char>(out[at]) & 0xc0) == 0x80) --at;
    return at;
  };
  const std::size_t head = boundary(kHead), tail = boundary(out.size() - kTail);
  return out.substr(0, head) + fmt::format(" [... {} bytes left out ...] ", tail - head) +
         out.substr(tail);
}
}  // namespace

int fail(const std::string& raw) {
  const std::string message = one_bounded_line(raw);
  if (Capture* c = current_capture()) {
    c->errors.push_back(message);
    return 2;
  }
  std::fprintf(stderr, "commscope: %s\n", message.c_str());
  return 2;
}

void print_warnings(const std::vector<std::string>& warnings) {
  if (Capture* c = current_capture()) {
    c->warnings.insert(c->warnings.end(), warnings.begin(), warnings.end());
    return;
  }
  for (const auto& w : warnings) std::fprintf(stderr, "commscope: warning: %s\n", w.c_str());
}

// Notes reach a capture as warnings that say "note: " (the Python module's CommscopeWarning;
// they went to the process's stderr past it, found by probing, 2026-11-30).
void print_notes(const std::vector<std::string>& notes) {
  if (Capture* c = current_capture()) {
    for (const auto& n : notes) c->warnings.push_back("note: " + n);
    return;
  }
  for (const auto& n : notes) std::fprintf(stderr, "commscope: note: %s\n", n.c_str());
}

void add_output_options(CLI::App& cmd, OutputOptions& o) {
  cmd.add_option("--format", o.format, "output: table|json|csv|md [table]");
  cmd.add_option("-o,--output", o.path, "write the output to this file (whole or not at all)");
}

Result<Format> output_format(const OutputOptions& o) {
  auto f = format_from_name(o.format);
  if (!f)
    return Error{fmt::format("--format: expected one of {}, got '{}'", format_choices(), o.format)};
  // -o is checked here, before the verb reads anything (the verbs with more outputs check
  // them all together again).
  if (Status s = check_outputs({{"-o/--output", o.path}}); !s.ok()) return s.error();
  return *f;
}

int emit(const std::string& text, const std::string& output_path) {
  if (output_path.empty()) {
    if (Capture* c = current_capture()) {
      c->out += text;
      return 0;
    }
    // A text longer than stdio's buffer fails in fwrite, after which fflush has nothing left
    // to write and succeeds: describe --format json > /dev/full exited 0 (found by probing,
    // 2026-12-02). Each call's result and the stream's error flag say it.
    const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
    return written && std::fflush(stdout) == 0 && !std::ferror(stdout)
               ? 0
               : fail("stdout: write failed");
  }
  return write_outputs({{"-o/--output", output_path, text}});
}

int write_outputs(const std::vector<OutputText>& outputs) {
  std::vector<OutputFile> files;
  std::vector<const OutputText*> of;
  for (const OutputText& o : outputs) {
    if (o.path.empty()) continue;
    // Checked again now: the inputs the command has read are known (a preset by name, a
    // file a script sources).
    if (Status s = check_not_an_input(o.flag, o.path); !s.ok()) return fail(s.error().message);
    files.push_back({o.path, o.text});
    of.push_back(&o);
  }
  std::size_t failed = 0;
  if (Status s = write_files_atomic(files, &failed); !s.ok())
    return fail(
        fmt::format("{}: {}", failed < of.size() ? of[failed]->flag : "output", s.error().message));
  return 0;
}

Result<std::string> html_output(const std::string& path,
                                const std::function<html::Document()>& page) {
  if (path.empty()) return std::string();
  auto text = html::render(page());
  if (!text) return Error{"--html: " + text.error().message};
  return text;
}

int emit_with(const std::string& text, const std::string& output_path,
              std::vector<OutputText> others) {
  if (output_path.empty()) {
    if (int rc = write_outputs(others); rc != 0) return rc;
    return emit(text, "");
  }
  others.push_back({"-o/--output", output_path, text});
  return write_outputs(others);
}

namespace {
std::vector<std::string>& command_args() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

Status check_not_an_input(const std::string& flag, const std::string& path,
                          const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return {};
  // A word (or --flag=value's value) naming the same file is an input that writing the output
  // would replace, unless it is an output flag's value: outputs, this one's own or others'
  // (check_outputs compares outputs with each other).
  static const std::set<std::string> kOutputFlags = {"-o",      "--output",     "--html",
                                                     "--trace", "--diff-trace", "--network-output"};
  std::string input;
  const std::vector<std::string>& args = command_args();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // --flag=value, and the short -oFILE (CLI11 takes it; the word "-om.json" named no file,
    // so an input m.json was replaced, found by probing, 2026-12-02).
    std::size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    std::string flag = eq != std::string::npos ? arg.substr(0, eq) : std::string();
    if (eq == std::string::npos && arg.size() > 2 && arg[0] == '-' && arg[1] == 'o') {
      eq = 1;
      flag = "-o";
    }
    const bool output_value =
        (i > 0 && kOutputFlags.count(args[i - 1])) || (!flag.empty() && kOutputFlags.count(flag));
    for (const std::string& word :
         {arg, eq != std::string::npos ? arg.substr(eq + 1) : std::string()}) {
      if (word.empty() || !fs::is_regular_file(word, ec) || !fs::equivalent(word, path, ec))
        continue;
      // An output flag's value names an output, not an input: this one's own, or another
      // output naming the same file, which check_outputs refuses as such (`-o X --html X` was
      // said to be "the input 'X'" when X existed, found by probing, 2026-12-02).
      if (output_value) continue;
      input = word;
    }
  }
  for (const std::string& other : inputs)
    if (fs::is_regular_file(other, ec) && fs::equivalent(other, path, ec)) input = other;
  // Every file the command has read so far, named on its command line or not.
  if (input.empty()) input = input_read_as(path);
  if (!input.empty())
    return Error{fmt::format(
        "{}: expected a file other than the inputs, got '{}' (it is the input '{}', which "
        "writing would replace)",
        flag, path, input)};
  return {};
}

Status check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                     const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, fs::path>> files;  // (flag, the file it names)
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    if (Status s = check_output_path(path); !s.ok())
      return Error{fmt::format("{}: {}", flag, s.error().message)};
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!ec && fs::exists(st) && !fs::is_regular_file(st)) continue;  // a device or FIFO
    const fs::path same = fs::weakly_canonical(fs::absolute(path), ec);
    if (ec) continue;
    // the same path, or two names of one existing file (a hard link)
    for (const auto& [other_flag, other] : files)
      if (other == same || fs::equivalent(other, same, ec))
        return Error{
            fmt::format("{}: expected a file other than {}'s, got '{}' (both would be "
                        "written there, one lost)",
                        flag, other_flag, path)};
    files.emplace_back(flag, same);
  }
  // Then inputs: the outputs now name distinct files, so no output's word is taken for one.
  for (const auto& [flag, path] : outputs)
    if (Status s = check_not_an_input(flag, path, inputs); !s.ok()) return s;
  return {};
}

Verb add_presets(CLI::App& app) {
  auto kind = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("presets", "List the built-in presets: models, systems, networks.");
  cmd->add_option("kind", *kind, "models|systems|networks (all when omitted)");
  return {cmd, [kind]() -> int {
            std::vector<PresetKind> kinds;
            if (kind->empty() || *kind == "models") kinds.push_back(PresetKind::model);
            if (kind->empty() || *kind == "systems") kinds.push_back(PresetKind::system);
            if (kind->empty() || *kind == "networks") kinds.push_back(PresetKind::network);
            if (kinds.empty())
              return fail(
                  fmt::format("presets: expected one of models|systems|networks, got '{}'", *kind));
            std::string text;  // through emit: the Python module captures it
            for (auto k : kinds) {
              text += fmt::format("{}:\n", preset_folder(k));
              for (const auto& n : list_presets(k)) text += fmt::format("  {}\n", n);
            }
            return emit(text, "");
          }};
}

}  // namespace commscope::cli

namespace {
int run(int argc, char** argv) {
  using namespace commscope::cli;
  command_args().assign(argv + std::min(argc, 1), argv + argc);
  commscope::clear_inputs_read();  // this command's (the Python module runs many in one process)
  // An argument that is not UTF-8 (a file name of other bytes) ended in an internal error where
  // a JSON document echoed it (found by probing, 2026-12-02): one line, before anything runs.
  for (const std::string& a : command_args())
    if (commscope::util::first_invalid_utf8(a) != a.size())
      return fail(
          fmt::format("'{}': expected UTF-8 text (names and paths are written into JSON "
                      "documents as given), got other bytes; rename it",
                      a));
  CLI::App app{
      "commscope: where distributed LLM training time goes, what the network delivers, and what "
      "training "
      "will cost on another network or at another scale."};
  app.set_version_flag("--version", std::string("commscope ") + COMMSCOPE_VERSION);
  app.require_subcommand(1);
  std::vector<Verb> verbs = {add_describe(app),  add_predict(app), add_validate(app),
                             add_calibrate(app), add_analyze(app), add_bench(app),
                             add_train(app),     add_fit(app),     add_presets(app)};
  verbs.push_back(add_report(app));
  verbs.push_back(add_characterize(app));
  verbs.push_back(add_plan(app));
  // The verbs by name, for the messages below.
  std::string verb_list;
  for (const auto& v : verbs) verb_list += (verb_list.empty() ? "" : ", ") + v.command->get_name();
  // An unknown verb: CLI11 would say "A subcommand is required" or "not expected".
  if (argc > 1 && argv[1][0] != '-') {
    const std::string first = argv[1];
    bool known = false;
    for (const auto& v : verbs) known |= v.command->get_name() == first;
    if (!known) return fail(fmt::format("unknown verb '{}'; the verbs are {}", first, verb_list));
  }
  if (argc < 2)
    return fail(fmt::format("expected a verb; the verbs are {} (see --help)", verb_list));
  // --megatron-args FILE: the file's flags that the verb has, before the command line's.
  std::vector<std::string> expanded;
  std::vector<char*> expanded_argv;
  for (const auto& v : verbs)
    if (argc > 1 && v.command->get_name() == argv[1] &&
        v.command->get_option_no_throw("--megatron-args")) {
      auto args = expand_megatron_args(*v.command, std::vector<std::string>(argv + 2, argv + argc));
      if (!args) return fail(args.error().message);
      expanded.assign(argv, argv + 2);
      expanded.insert(expanded.end(), args->begin(), args->end());
      for (auto& a : expanded) expanded_argv.push_back(a.data());
      argc = static_cast<int>(expanded_argv.size());
      argv = expanded_argv.data();
    }
  // CLI11's own messages as one line, prefixed with the verb they concern.
  std::string where;
  for (const auto& v : verbs)
    if (argc > 1 && v.command->get_name() == argv[1]) where = v.command->get_name() + ": ";
  auto one_line = [](std::string msg) {
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    for (auto& c : msg)
      if (c == '\n') c = ' ';
    return msg;
  };
  // Values CLI11 would misread: `--zero=` (empty) takes the next argument as its value, and a
  // comma list's empty items ("0,,1") are dropped. Refused here, by the raw arguments.
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;  // what follows goes to another program (bench -- ...)
    if (a.rfind("--", 0) != 0) continue;
    const std::size_t eq = a.find('=');
    const std::string flag(a.substr(0, eq));
    const bool next_is_value =
        eq == std::string_view::npos && i + 1 < argc && argv[i + 1][0] != '-';
    if (eq == std::string_view::npos && !next_is_value) continue;
    const std::string_view value = eq != std::string_view::npos ? a.substr(eq + 1) : argv[i + 1];
    if (eq != std::string_view::npos && value.empty())
      return fail(fmt::format("{}: expected a value, got ''", flag));
    if (value.find(",,") != std::string_view::npos ||
        (value.size() > 1 && (value.front() == ',' || value.back() == ',')))
      return fail(
          fmt::format("{}: expected a comma list without empty items, got '{}'", flag, value));
  }
  // --help and --version print through CLI11 to std::cout: a stdout that cannot be written is
  // an error (`--help > /dev/full` exited 0, found by probing, 2026-12-02).
  auto printed = [&](const CLI::Error& e) {
    const int rc = app.exit(e);
    std::cout.flush();
    if (!std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout))
      return fail("stdout: write failed");
    return rc;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // The help of the verb asked about (through emit: the Python module captures it).
    if (current_capture()) {
      const CLI::App* asked = &app;
      for (const auto& v : verbs)
        if (v.command->parsed()) asked = v.command;
      return emit(asked->help(), "");
    }
    return printed(e);
  } catch (const CLI::CallForAllHelp& e) {
    return printed(e);
  } catch (const CLI::CallForVersion& e) {
    return printed(e);
  } catch (const CLI::ConversionError& e) {
    // CLI11 says "Could not convert: --top = abc"; say it the commscope way, with the type the
    // flag takes.
    std::string msg = one_line(e.what());
    const std::string prefix = "Could not convert: ";
    auto eq = msg.find(" = ");
    if (msg.rfind(prefix, 0) == 0 && eq != std::string::npos) {
      const std::string flag = msg.substr(prefix.size(), eq - prefix.size());
      std::string expected = "a number";
      const std::string value = msg.substr(eq + 3);
      for (const auto& v : verbs)
        if (const CLI::Option* o = v.command->get_option_no_throw(flag))
          if (auto words = commscope::util::expected_of(*o, value)) expected = *words;
      return fail(fmt::format("{}: expected {}, got '{}'", flag, expected, value));
    }
    return fail(where + msg);
  } catch (const CLI::ValidationError& e) {
    // Our own list parsing: "--tp: expected an integer, got 'x'", possibly prefixed by CLI11.
    std::string msg = one_line(e.what());
    auto dash = msg.find("--");
    return fail(dash == std::string::npos ? where + msg : msg.substr(dash));
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the arguments it did not expect last first ("3 --bar --foo 2 --tp"): in the
    // order given, from the verb's remaining arguments.
    std::vector<std::string> extra;
    for (const auto& v : verbs)
      if (v.command->parsed()) extra = v.command->remaining();
    if (extra.empty()) extra = app.remaining();
    if (extra.empty()) return fail(where + one_line(e.what()) + " (see --help)");
    // A switch's value after a space (`--fsdp-limit-all-gathers false`) is an argument of its
    // own: say how to give it (found by probing, 2026-12-02).
    for (int i = 2; i + 1 < argc; ++i)
      if (argv[i + 1] == extra.front()) {
        const std::string flag = argv[i];
        const CLI::Option* o = nullptr;
        for (const auto& v : verbs)
          if (v.command->parsed() && flag.rfind("--", 0) == 0)
            o = v.command->get_option_no_throw(flag);
        if (o && o->get_expected_max() == 0)
          return fail(fmt::format(
              "{}: a switch takes a value only after '=' ({}={}), got '{}' as an argument of "
              "its own",
              flag, flag, extra.front(), extra.front()));
        break;
      }
    return fail(fmt::format("{}expected flags this verb has (see --help), got '{}'", where,
                            fmt::join(extra, " ")));
  } catch (const CLI::ParseError& e) {
    // "--zero: 1 required TEXT missing" said as "--zero: expected a value, got nothing"
    const CLI::App* asked = &app;
    for (const auto& v : verbs)
      if (v.command->parsed()) asked = v.command;
    return fail(where + one_line(commscope::util::flag_error(*asked, e)) + " (see --help)");
  }
  for (const auto& v : verbs) {
    if (!v.command->parsed()) continue;
    // A value given empty (`--cp ''`) is a mistake, not "not given": say so for every option of
    // the verb that takes a value, whatever its own parsing would make of it.
    for (const CLI::Option* o : v.command->get_options()) {
      // (positionals are the verb's own to check: files, or arguments passed through after --)
      if (o->count() == 0 || o->get_expected_min() == 0 || !o->nonpositional()) continue;
      for (const std::string& r : o->results()) {
        if (r.empty())
          return fail(fmt::format("{}: expected a value, got ''",
                                  o->get_name().empty() ? where : o->get_name()));
        // `--html --format=json` took the next option as the file's name and wrote a file
        // called "--format=json" (found by probing, 2026-11-30): no value is a long option.
        if (r.rfind("--", 0) == 0)
          return fail(
              fmt::format("{}: expected a value, got the option '{}' (a value that "
                          "begins with -- is taken for a forgotten one)",
                          o->get_name(), r));
      }
    }
    return v.run();
  }
  return fail("expected a verb; see --help");
}
}  // namespace

// The parser and verbs, for the program's main() (main.cpp) and a host program (embed.h): the
// Python module.
int commscope::cli::run_command(int argc, char** argv) {
  set_note_sink([](const std::string& note) { print_notes({note}); });
  return run(argc, argv);
}
