// `commscope <verb>`: parses the command line, runs the verb, turns errors into one line on
// stderr and exit status 2.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "commscope/spec/preset.h"
#include "commscope/util/atomic_file.h"
#include "verbs.h"

namespace commscope::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "commscope: %s\n", message.c_str());
  return 2;
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) std::fprintf(stderr, "commscope: warning: %s\n", w.c_str());
}

void add_output_options(CLI::App& cmd, OutputOptions& o) {
  cmd.add_option("--format", o.format, "output: table|json|csv|md [table]");
  cmd.add_option("-o,--output", o.path, "write the output to this file (whole or not at all)");
}

Result<Format> output_format(const OutputOptions& o) {
  auto f = format_from_name(o.format);
  if (!f)
    return Error{fmt::format("--format: expected one of {}, got '{}'", format_choices(), o.format)};
  return *f;
}

int emit(const std::string& text, const std::string& output_path) {
  if (output_path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : fail("stdout: write failed");
  }
  Status s = write_file_atomic(output_path, text);
  return s.ok() ? 0 : fail(s.error().message);
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
            for (auto k : kinds) {
              fmt::print("{}:\n", preset_folder(k));
              for (const auto& n : list_presets(k)) fmt::print("  {}\n", n);
            }
            return 0;
          }};
}

}  // namespace commscope::cli

namespace {
int run(int argc, char** argv) {
  using namespace commscope::cli;
  CLI::App app{
      "commscope: where distributed LLM training time goes, what the network delivers, and what "
      "training "
      "will cost on another network or at another scale."};
  app.set_version_flag("--version", std::string("commscope ") + COMMSCOPE_VERSION);
  app.require_subcommand(1);
  std::vector<Verb> verbs = {add_describe(app),  add_predict(app), add_validate(app),
                             add_calibrate(app), add_analyze(app), add_bench(app),
                             add_train(app),     add_fit(app),     add_presets(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    // CLI11 says "Could not convert: --tp = abc"; say it the commscope way.
    std::string msg = e.what();
    const std::string prefix = "Could not convert: ";
    auto eq = msg.find(" = ");
    if (msg.rfind(prefix, 0) == 0 && eq != std::string::npos)
      return fail(fmt::format("{}: expected a number, got '{}'",
                              msg.substr(prefix.size(), eq - prefix.size()), msg.substr(eq + 3)));
    return fail(msg);
  } catch (const CLI::ValidationError& e) {
    // Our own list parsing: "--tp: expected an integer, got 'x'", possibly prefixed by CLI11.
    std::string msg = e.what();
    auto dash = msg.find("--");
    return fail(dash == std::string::npos ? msg : msg.substr(dash));
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    for (auto& c : msg)
      if (c == '\n') c = ' ';
    return fail(msg + " (see --help)");
  }
  for (const auto& v : verbs)
    if (v.command->parsed()) return v.run();
  return fail("expected a verb; see --help");
}
}  // namespace

int main(int argc, char** argv) {
  // Out of memory and the like: one line and status 2, not a crash.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return commscope::cli::fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return commscope::cli::fail("internal error: unexpected exception");
  }
}
