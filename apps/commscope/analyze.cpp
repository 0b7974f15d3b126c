// `commscope analyze`: where the time went in PyTorch profiler (Kineto) and Chrome traces.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "commscope/report/analyze.h"
#include "verbs.h"

namespace commscope::cli {

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

Verb add_analyze(CLI::App& app) {
  struct State {
    std::vector<std::string> inputs;
    OutputOptions out;
    int rank = -1, jobs = 0, top = 15;
    bool strict = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Where the time went in PyTorch profiler (Kineto) or commscope Chrome traces, one file per "
      "rank (.json or "
      ".json.gz) or a directory of them: compute, exposed and overlapped communication, memory "
      "copies, idle; "
      "per ProfilerStep; per collective with algbw/busbw; stragglers across ranks; top kernels.");
  cmd->add_option("traces", st->inputs, "trace files or directories")->required();
  add_output_options(*cmd, st->out);
  cmd->add_option("--rank", st->rank,
                  "rank of a single trace without distributedInfo or rank in its name");
  cmd->add_option("-j,--jobs", st->jobs, "files read in parallel [all cores]");
  cmd->add_option("--top", st->top, "kernels listed [15]");
  cmd->add_flag("--strict", st->strict,
                "any unreadable file is fatal (by default it is reported and skipped)");
  return {cmd, [st]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            std::vector<std::string> paths;
            for (const auto& in : st->inputs) {
              std::error_code ec;
              if (fs::is_directory(in, ec)) {
                std::vector<std::string> found;
                for (const auto& e : fs::directory_iterator(in, ec))
                  if (e.is_regular_file() && is_trace_name(e.path()))
                    found.push_back(e.path().string());
                std::sort(found.begin(), found.end());
                if (found.empty())
                  return fail(fmt::format(
                      "{}: expected .json or .json.gz traces in the directory, found none", in));
                paths.insert(paths.end(), found.begin(), found.end());
              } else {
                paths.push_back(in);
              }
            }
            // Read in parallel: one file per task.
            std::vector<Result<TraceFile>> results(paths.size(), Error{""});
            std::atomic<std::size_t> next{0};
            const unsigned threads = std::max(
                1u, std::min<unsigned>(static_cast<unsigned>(paths.size()),
                                       st->jobs > 0 ? static_cast<unsigned>(st->jobs)
                                                    : std::thread::hardware_concurrency()));
            std::vector<std::thread> pool;
            for (unsigned t = 0; t < threads; ++t)
              pool.emplace_back([&] {
                for (std::size_t i; (i = next.fetch_add(1)) < paths.size();)
                  results[i] = read_trace(paths[i]);
              });
            for (auto& t : pool) t.join();

            std::vector<TraceFile> files;
            std::vector<std::string> bad;
            for (auto& r : results) {
              if (r.ok())
                files.push_back(std::move(r).value());
              else
                bad.push_back(r.error().message);
            }
            if (!bad.empty() && (st->strict || files.empty())) {
              for (std::size_t i = 1; i < bad.size(); ++i)
                std::fprintf(stderr, "commscope: %s\n", bad[i].c_str());
              return fail(bad.front());
            }
            for (const auto& b : bad) print_warnings({"skipped " + b});
            // Ranks: distributedInfo, the file name, --rank, else the first free numbers.
            std::set<int> used;
            for (const auto& f : files)
              if (f.rank >= 0 && !used.insert(f.rank).second)
                print_warnings({fmt::format(
                    "{}: rank {} is claimed by another trace too (traces of different jobs?)",
                    f.path, f.rank)});
            if (st->rank >= 0) {
              if (files.size() != 1)
                return fail("--rank: expected a single trace file, got " +
                            std::to_string(files.size()));
              if (files[0].rank < 0) files[0].rank = st->rank;
            }
            int free_rank = 0;
            for (auto& f : files)
              if (f.rank < 0 && !f.own_format) {
                while (used.count(free_rank)) ++free_rank;
                f.rank = free_rank;
                used.insert(free_rank);
                print_warnings({fmt::format(
                    "{}: no rank in the trace or its name; taken as rank {}", f.path, f.rank)});
                for (auto& e : f.timeline.events) e.rank = f.rank;
              }
            Analysis a = analyze(files, static_cast<std::size_t>(std::max(1, st->top)));
            a.bad_files = bad;
            return emit(render_analysis(a, *format), st->out.path);
          }};
}

}  // namespace commscope::cli
