// The seeds' comparison: the same MPI program (commscope-train) run once per emulated network
// profile, each run's json summary (written through its --output flag) with the busiest node's
// achieved rate, and the table that sets them side by side.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/launch/mpirun.h"
#include "commscope/util/result.h"

namespace commscope::launch {

struct ProfileRun {
  std::string profile;     // the --emulate spec
  nlohmann::json summary;  // the program's json document
  double peak_gbps = 0;    // the busiest node's highest sending rate, at full scale
  double busy_gbps = 0;    // its sending rate over busy windows, at full scale
};

// Runs `program args --output TMP` once per profile in `profiles` (each an --emulate spec),
// printing each run's output to `out` under a "# ---- --emulate P ----" line. Stops at the first
// run that fails or writes no summary, with one line naming the profile.
Result<std::vector<ProfileRun>> run_per_profile(const std::string& program,
                                                const std::vector<std::string>& args,
                                                JobOptions job,
                                                const std::vector<std::string>& profiles,
                                                std::FILE* out);

// The comparison table (step time, tokens/s, communication share from each summary's
// "average"; peak and busy Gb/s per node), as '#'-prefixed lines.
std::string render_profile_comparison(const std::vector<ProfileRun>& runs);

}  // namespace commscope::launch
