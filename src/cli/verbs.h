// The verbs of the `commscope` command. Each verb file adds its subcommand and options to
// the app and returns the function that runs it; all logic lives in the library.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace commscope::cli {

struct Verb {
  CLI::App* command = nullptr;
  std::function<int()> run;
};

Verb add_describe(CLI::App& app);
Verb add_presets(CLI::App& app);
Verb add_predict(CLI::App& app);
Verb add_validate(CLI::App& app);
Verb add_calibrate(CLI::App& app);

// Prints "commscope: <message>" on stderr and returns exit status 2.
int fail(const std::string& message);
// Prints each warning as "commscope: warning: <text>" on stderr.
void print_warnings(const std::vector<std::string>& warnings);
// Writes text to --output (atomically) or stdout. Returns an exit status.
int emit(const std::string& text, const std::string& output_path);

}  // namespace commscope::cli
