// The `commscope` program: the verbs of cli.cpp (the library commscope_cli, which the Python
// module links too), behind a guard that turns anything thrown into one line and status 2.
#include <exception>
#include <string>

#include "commscope/util/atomic_file.h"
#include "embed.h"
#include "verbs.h"

int main(int argc, char** argv) {
  // Out of memory and the like: one line and status 2, not a crash.
  try {
    commscope::remove_temporary_files_on_signals();
    return commscope::cli::run_command(argc, argv);
  } catch (const std::exception& e) {
    return commscope::cli::fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return commscope::cli::fail("internal error: unexpected exception");
  }
}
