// The flags of commscope's MPI programs (commscope-bench, commscope-train): every rank parses
// them, and only rank 0 speaks. Header-only: the programs link CLI11, the comm library does not.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "commscope/comm/mpi.h"
#include "commscope/util/flag_error.h"

namespace commscope::comm {

// Parses argv into `app`. An exit status when the program must stop now: 0 after --help
// (printed by rank 0), 2 after a bad flag (one line, see Session::fail); nothing otherwise.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv, const Session& mpi) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& ex) {
    return mpi.rank() == 0 ? app.exit(ex) : 0;
  } catch (const CLI::ParseError& ex) {
    return mpi.fail(util::flag_error(app, ex) + " (see --help)");
  }
  return std::nullopt;
}

}  // namespace commscope::comm
