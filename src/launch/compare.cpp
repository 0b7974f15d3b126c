// One run per emulated profile and the comparison table (compare.h).
#include "commscope/launch/compare.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace commscope::launch {

Result<std::vector<ProfileRun>> run_per_profile(const std::string& program,
                                                const std::vector<std::string>& args,
                                                JobOptions job,
                                                const std::vector<std::string>& profiles,
                                                std::FILE* out) {
  std::vector<ProfileRun> runs;
  for (const std::string& profile : profiles) {
    char tmpl[] = "/tmp/commscope-train-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) return Error{"cannot create a temporary file in /tmp"};
    ::close(fd);
    std::vector<std::string> a = args;
    a.push_back("--output");
    a.push_back(tmpl);
    std::fprintf(out, "# ---- --emulate %s ----\n", profile.c_str());
    std::fflush(out);
    job.emulate = profile;
    std::vector<NodeTraffic> traffic;
    auto rc = run_mpi_job(program, a, job, out, &traffic);
    nlohmann::json summary;
    {
      std::ifstream f(tmpl);
      if (f) summary = nlohmann::json::parse(f, nullptr, false);
    }
    std::remove(tmpl);
    if (!rc.ok()) return rc.error();
    if (*rc != 0 || summary.is_discarded() || !summary.is_object())
      return Error{fmt::format("--emulate {}: the MPI job ended with status {}", profile, *rc)};
    ProfileRun run{profile, std::move(summary)};
    auto spec = parse_emulation(profile);
    const double scale = spec.ok() ? spec->scale : 1.0;
    for (const auto& t : traffic) {
      run.peak_gbps = std::max(run.peak_gbps, t.peak_tx_bps * scale / 1e9);
      run.busy_gbps = std::max(run.busy_gbps, t.mean_busy_bps * scale / 1e9);
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

std::string render_profile_comparison(const std::vector<ProfileRun>& runs) {
  std::string s =
      "# comparison (averages after warm-up, rank 0; Gb/s per node at full scale, from the "
      "emulated NICs' byte counters):\n";
  s += fmt::format("# {:<24} {:>12} {:>12} {:>10} {:>12} {:>12}\n", "profile", "step (ms)",
                   "tokens/s", "comm %", "peak Gb/s", "busy Gb/s");
  for (const ProfileRun& r : runs) {
    const auto& a = r.summary.value("average", nlohmann::json::object());
    s += fmt::format("# {:<24} {:>12.2f} {:>12.0f} {:>9.1f}% {:>12.2f} {:>12.2f}\n", r.profile,
                     a.value("time_s", 0.0) * 1e3, a.value("tokens_per_s", 0.0),
                     a.value("comm_share", 0.0) * 100, r.peak_gbps, r.busy_gbps);
  }
  return s;
}

}  // namespace commscope::launch
