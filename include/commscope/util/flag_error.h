// A CLI11 parse error said as commscope says a bad flag: the flag as the user may have typed it,
// what it takes and what it got. Header-only: the programs link CLI11, the libraries do not.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

namespace commscope::util {

// What a flag of CLI11's type takes, for "expected ...": nothing for a type without a word
// here. A whole number CLI11 could not convert is out of the flag's range and says so.
inline std::optional<std::string> expected_of(const CLI::Option& o, std::string_view got) {
  const std::string type = o.get_type_name();
  const bool digits = !got.empty() && got.find_first_not_of("0123456789") == std::string::npos;
  if (type == "INT")
    return digits ? "a smaller integer (this one is out of the flag's range)" : "an integer";
  if (type == "UINT") return "a non-negative integer";
  if (type == "FLOAT") return "a number";
  if (type == "BOOLEAN") return "true or false";
  return std::nullopt;
}

// CLI11's message for a flag, said as commscope says it: the flag as the user may have typed it
// (-n/--iters), what it takes and what it got. CLI11 names the long form only ("Could not
// convert: --iters = 1.5", "--iters: 1 required INT missing"). Other messages pass unchanged.
inline std::string flag_error(const CLI::App& program, const CLI::ParseError& e) {
  std::string msg = e.what();
  // CLI11 lists what it did not expect last first, from the reversed vector it parses; the
  // program's remaining arguments are in the order given.
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !program.remaining().empty()) {
    const std::string& path = program.get_name();  // argv[0] where nothing named it
    const std::string name = path.substr(path.find_last_of('/') + 1);
    return fmt::format("expected flags {}has, got '{}'", name.empty() ? "it " : name + " ",
                       fmt::join(program.remaining(), " "));
  }
  // "files is required": the argument's name and what it takes, from its help
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    const auto is = msg.find(" is required");
    const CLI::Option* o =
        is == std::string::npos ? nullptr : program.get_option_no_throw(msg.substr(0, is));
    if (o != nullptr && !o->get_description().empty()) {
      const std::string& d = o->get_description();
      const std::string what = d.substr(0, std::min({d.find(" ("), d.find(';'), d.find(": ")}));
      return fmt::format("{}: expected {}, got none", msg.substr(0, is), what);
    }
    return msg;
  }
  // "--gpus: At Most 1 required but received 2": the flag given twice (it was said as "expected
  // a value, got nothing", found by probing, 2026-12-02).
  if (const auto at = msg.find(": At Most "); at != std::string::npos) {
    const auto req = msg.find(" required", at), received = msg.find("received ");
    const std::string most = msg.substr(at + 10, req == std::string::npos ? 0 : req - at - 10);
    return fmt::format("{}: expected {}, got {} (given more than once?)", msg.substr(0, at),
                       most == "1" ? std::string("one value") : most + " values",
                       received == std::string::npos ? "more" : msg.substr(received + 9));
  }
  std::string name, value, got;
  if (const std::string prefix = "Could not convert: "; msg.rfind(prefix, 0) == 0) {
    const auto eq = msg.find(" = ");
    if (eq == std::string::npos) return msg;
    name = msg.substr(prefix.size(), eq - prefix.size());
    value = msg.substr(eq + 3);
    got = fmt::format("'{}'", value);
  } else if (const auto colon = msg.find(": ");
             colon != std::string::npos && msg.find(" required ") != std::string::npos) {
    name = msg.substr(0, colon);
    got = "nothing";
  } else {
    return msg;
  }
  const CLI::Option* o = program.get_option_no_throw(name);
  if (o == nullptr) return msg;
  const std::string expected = expected_of(*o, value).value_or("a value");
  std::string shown = name;
  if (!o->get_snames().empty()) shown = fmt::format("-{}/{}", o->get_snames().front(), name);
  return fmt::format("{}: expected {}, got {}", shown, expected, got);
}

}  // namespace commscope::util
