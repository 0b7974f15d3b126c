// Running the `commscope` command inside another program (the Python module, python/): the same
// flags, verbs and messages as the CLI, with the document, the error line and the warnings
// captured instead of printed, and a hook that lets the host interrupt a long verb.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace commscope::cli {

// What a verb would have printed. While a Capture is installed on a thread (CaptureScope),
// fail(), print_warnings() and emit() without --output fill it instead of stderr/stdout.
struct Capture {
  std::string out;                    // the document emit() would have written to stdout
  std::vector<std::string> errors;    // fail()'s lines, without the "commscope: " prefix
  std::vector<std::string> warnings;  // print_warnings()'s lines, without the prefix
  // Called between units of work (each plan of a sweep, each validated row, each fit
  // evaluation); throws Interrupted to stop the verb. May be empty.
  std::function<void()> poll;
};

// Thrown by Capture::poll to abandon a verb (Ctrl-C in Python); nothing is written.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// The capture of the calling thread, or null (the CLI).
Capture* current_capture();

// Installs a capture on the calling thread for the scope's lifetime.
class CaptureScope {
 public:
  explicit CaptureScope(Capture& c);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  Capture* previous_;
};

// Calls the current capture's poll, if any (may throw Interrupted).
void check_interrupt();

// A progress callback that first checks for an interrupt, then calls `inner` (when set).
// Without a capture it returns `inner` unchanged.
std::function<void(std::size_t, std::size_t)> with_interrupt_check(
    std::function<void(std::size_t, std::size_t)> inner);

// Parses argv exactly as the `commscope` program does ("commscope", verb, flags...) and runs the
// verb; returns its exit status (0, or 2 with the error in the capture / on stderr). Defined in
// cli.cpp; the `commscope` program's main() (main.cpp) calls it too.
int run_command(int argc, char** argv);

}  // namespace commscope::cli
