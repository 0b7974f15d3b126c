// Sets of traces: the directory walk, the parallel reading, the ranks of the files.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/timeline/trace_reader.h"
#include "commscope/util/input_file.h"

namespace commscope {

namespace fs = std::filesystem;

namespace {
bool is_trace_name(const fs::path& p) {
  const std::string n = p.filename().string();
  auto ends = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".json") || ends(".json.gz");
}
}  // namespace

Result<std::vector<std::string>> list_traces(const std::vector<std::string>& inputs) {
  std::vector<std::string> paths;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      if (auto st = check_regular_file(in); !st.ok()) return st.error();
      paths.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    fs::directory_iterator it(in, ec);
    if (ec) return Error{fmt::format("{}: cannot open the directory: {}", in, ec.message())};
    for (const auto& e : it) {
      // Every entry with a trace's name: the reader refuses what is no regular file (a FIFO
      // named x.json would block it, a dangling link has nothing to read, a folder named
      // x.json is not read into), and that refusal is reported as any unreadable trace is (a
      // warning, or fatal under --strict), not dropped in silence (a folder was, found by
      // probing, 2026-12-02).
      if (is_trace_name(e.path())) found.push_back(e.path().string());
    }
    std::sort(found.begin(), found.end());
    if (found.empty())
      return Error{fmt::format("{}: a directory with no .json or .json.gz traces", in)};
    paths.insert(paths.end(), found.begin(), found.end());
  }
  return paths;
}

std::vector<std::string> read_paths(const TraceSet& a, const TraceSet* b) {
  std::vector<std::string> out;
  for (const TraceSet* s : {&a, b})
    if (s)
      for (const TraceFile& f : s->files) out.push_back(f.path);
  return out;
}

Result<TraceSet> read_traces(const std::vector<std::string>& inputs,
                             const TraceReadOptions& options) {
  CS_ASSIGN_OR_RETURN(std::vector<std::string> paths, list_traces(inputs));
  CS_RETURN_IF_ERROR(check_distinct_files(paths, "trace"));
  if (options.rank >= 0 && paths.size() != 1)
    return Error{fmt::format("--rank: expected a single trace file, got {}", paths.size())};
  const unsigned threads = std::max(
      1u, std::min<unsigned>(static_cast<unsigned>(paths.size()),
                             options.jobs > 0 ? static_cast<unsigned>(options.jobs)
                                              : std::max(1u, std::thread::hardware_concurrency())));
  // Threads left over when there are fewer files than threads parse within each file.
  const unsigned all_threads = options.jobs > 0 ? static_cast<unsigned>(options.jobs)
                                                : std::max(1u, std::thread::hardware_concurrency());
  const int per_file = static_cast<int>(std::max(1u, all_threads / threads));
  ReadLimits limits = options.limits;
  if (limits.max_kept_bytes == 0 && limits.max_events == 0) {
    // An eighth of what is available, shared by the files read at once: a vector growing
    // holds its old and new storage for a moment, and the analysis copies a rank's events.
    const std::uint64_t avail = available_memory_bytes();
    if (avail > 0) limits.max_kept_bytes = std::max<std::uint64_t>(avail / 8 / threads, 16 << 20);
  }
  // Read in parallel: one file per task.
  std::vector<Result<TraceFile>> results(paths.size(), Error{""});
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < paths.size();) {
        try {
          results[i] = read_trace(paths[i], limits, options.hta_view, per_file);
        } catch (const std::bad_alloc&) {
          results[i] =
              Error{fmt::format("{}: out of memory while reading; split the trace or "
                                "read fewer files at once (-j)",
                                paths[i])};
        }
      }
    });
  for (auto& t : pool) t.join();

  TraceSet set;
  for (auto& r : results) {
    if (r.ok())
      set.files.push_back(std::move(r).value());
    else
      set.bad.push_back(r.error().message);
  }
  // The first file's error, and how many others failed (a folder of bad files named only its
  // first, found by probing, 2026-11-30).
  if (!set.bad.empty() && (options.strict || set.files.empty()))
    return Error{set.bad.size() == 1
                     ? set.bad.front()
                     : fmt::format("{} (and {} other trace{} could not be read either)",
                                   set.bad.front(), set.bad.size() - 1,
                                   set.bad.size() == 2 ? "" : "s")};

  // Ranks: distributedInfo, the file name, --rank, else the first free numbers.
  for (const auto& f : set.files) {
    if (!f.bad_rank.empty())
      set.warnings.push_back(
          fmt::format("{}: distributedInfo.rank: expected an integer from 0 to {}, got {}; ignored",
                      f.path, (1 << 24) - 1, f.bad_rank));
    if (!f.bad_world_size.empty())
      set.warnings.push_back(fmt::format(
          "{}: distributedInfo.world_size: expected an integer from 1 to {}, got {}; ignored",
          f.path, (1 << 24) - 1, f.bad_world_size));
  }
  std::set<int> used;
  for (const auto& f : set.files)
    if (f.rank >= 0 && !used.insert(f.rank).second)
      set.warnings.push_back(
          fmt::format("{}: rank {} is claimed by another trace too (traces of different jobs?)",
                      f.path, f.rank));
  // Files of one job state one world size (a 2-rank and a 128-rank trace were aligned as
  // ranks of one run, found by probing, 2026-11-30).
  for (const auto& f : set.files)
    if (f.world_size > 0 && set.files.front().world_size > 0 &&
        f.world_size != set.files.front().world_size) {
      set.warnings.push_back(fmt::format(
          "{}: distributedInfo.world_size {} differs from {}'s {} (traces of different jobs?)",
          f.path, f.world_size, set.files.front().path, set.files.front().world_size));
      break;
    }
  if (options.rank >= 0 && set.files.size() == 1 && set.files[0].rank >= 0 &&
      set.files[0].rank != options.rank && !set.files[0].own_format)
    set.warnings.push_back(fmt::format("--rank {}: ignored; {} states rank {}", options.rank,
                                       set.files[0].path, set.files[0].rank));
  for (const auto& f : set.files)
    if (f.timeline.events.empty())
      set.warnings.push_back(fmt::format(
          "{}: no GPU kernels or memory copies (a CPU-only capture?): every figure is zero",
          f.path));
  if (options.rank >= 0 && set.files.size() == 1 && set.files[0].rank < 0 &&
      !set.files[0].own_format) {
    set_rank(set.files[0], options.rank);
    used.insert(options.rank);
  }
  int free_rank = 0;
  for (auto& f : set.files)
    if (f.rank < 0 && !f.own_format) {
      while (used.count(free_rank)) ++free_rank;
      set_rank(f, free_rank);
      used.insert(free_rank);
      set.warnings.push_back(
          fmt::format("{}: no rank in the trace or its name; taken as rank {}", f.path, f.rank));
    }
  for (const auto& f : set.files)
    if (f.world_size > 0 && f.rank >= f.world_size)
      set.warnings.push_back(
          fmt::format("{}: rank {} is not below its distributedInfo.world_size {}", f.path, f.rank,
                      f.world_size));
  // One process driving several GPUs: their events are merged into the file's one rank (found
  // by probing, 2026-12-02: two GPUs' steps read as one rank's, no word said).
  for (const auto& f : set.files)
    if (f.devices.size() > 1)
      set.warnings.push_back(fmt::format(
          "{}: GPU events of {}{} devices ({}{}) in one trace, read as one rank: their compute "
          "and communication are merged (analyze expects one trace per GPU process, as "
          "torchrun runs them)",
          f.path, f.devices.size() >= 64 ? "at least " : "", f.devices.size(),
          fmt::join(f.devices.begin(),
                    f.devices.begin() + std::min<std::size_t>(f.devices.size(), 8), ", "),
          f.devices.size() > 8 ? ", ..." : ""));
  for (const auto& f : set.files)
    if (f.unknown_comm_names > 0) {
      std::string names;
      for (std::size_t i = 0; i < f.unknown_comm_kernels.size() && i < 3; ++i)
        names += (i ? "', '" : "") + f.unknown_comm_kernels[i].substr(0, 120);
      set.warnings.push_back(fmt::format(
          "{}: {} kernel name{} that look{} like communication but match{} no NCCL/RCCL "
          "release's kernel names ('{}'{}); counted as communication",
          f.path, f.unknown_comm_names, f.unknown_comm_names == 1 ? "" : "s",
          f.unknown_comm_names == 1 ? "s" : "", f.unknown_comm_names == 1 ? "es" : "", names,
          f.unknown_comm_names > 3 ? ", ..." : ""));
    }
  return set;
}

}  // namespace commscope
