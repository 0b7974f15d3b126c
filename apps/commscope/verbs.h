// The verbs of the `commscope` command. Each verb file adds its subcommand and options to
// the app and returns the function that runs it; all logic lives in the library.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "commscope/report/html.h"
#include "commscope/report/table.h"
#include "commscope/util/result.h"

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
Verb add_analyze(CLI::App& app);
Verb add_bench(CLI::App& app);
Verb add_train(CLI::App& app);
Verb add_fit(CLI::App& app);
Verb add_report(CLI::App& app);
Verb add_characterize(CLI::App& app);
Verb add_plan(CLI::App& app);  // `commscope plan` (apps/commscope/plan.cpp)

// --format and -o/--output, for the verbs that print documents.
struct OutputOptions {
  std::string format = "table";
  std::string path;  // empty: stdout
};
void add_output_options(CLI::App& cmd, OutputOptions& o);
// The parsed --format, or "--format: expected one of table|json|csv|md, got 'x'"; -o checked
// as check_outputs checks it (so a bad or input-naming -o fails before the work).
Result<Format> output_format(const OutputOptions& o);

// Prints "commscope: <message>" on stderr and returns exit status 2.
int fail(const std::string& message);
// Prints each warning as "commscope: warning: <text>" on stderr.
void print_warnings(const std::vector<std::string>& warnings);
// Prints "commscope: note: <note>" for each (or hands them to the capture as "note: ...").
void print_notes(const std::vector<std::string>& notes);
// Writes text to --output (atomically) or stdout. Returns an exit status.
int emit(const std::string& text, const std::string& output_path);
// One output file of a verb: its flag (which errors name), path (empty: none) and content.
struct OutputText {
  std::string flag, path, text;
};
// Writes a verb's output files all or none (write_files_atomic), each checked again against
// every input the command has read. Returns an exit status.
int write_outputs(const std::vector<OutputText>& outputs);
// The HTML of `page` for --html `path` (empty, and the page not built, without one); a render
// error is one line after "--html: ".
Result<std::string> html_output(const std::string& path,
                                const std::function<html::Document()>& page);
// emit's text to -o (or stdout) together with the verb's other outputs (--html, --trace):
// the files all or none, stdout after them.
int emit_with(const std::string& text, const std::string& output_path,
              std::vector<OutputText> others);

// A verb's output files, checked before any work and before any of them is written: each as
// check_output_path says (the error prefixed by its flag), and no two naming the same file
// (-o x --trace x kept one of them; a device or FIFO may take several). `outputs`: (flag, path)
// pairs; empty paths are left out.
// `inputs`: files the verb reads that its command line does not name (report's folder's
// characterize.json), refused as outputs as check_not_an_input refuses the named ones.
Status check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                     const std::vector<std::string>& inputs = {});
// An output that is also one of the command's inputs (a word of its command line, or the
// value of --flag=value, naming the same existing file) is refused: writing it would replace
// the trace, log or table read. check_outputs and emit check it; `flag` leads the error.
Status check_not_an_input(const std::string& flag, const std::string& path,
                          const std::vector<std::string>& inputs = {});

}  // namespace commscope::cli
