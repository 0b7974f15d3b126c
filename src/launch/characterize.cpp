// `commscope characterize` (characterize.h, docs/characterize.md).
#include "commscope/launch/characterize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "commscope/calib/alpha_beta.h"
#include "commscope/launch/emulate.h"
#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "commscope/report/predict.h"
#include "commscope/report/table.h"
#include "commscope/spec/system.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/input_file.h"

namespace commscope::launch {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
std::optional<json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}
}  // namespace

// ---- pure parts ----

double error_pct(double measured, double predicted) {
  return measured != 0 ? (predicted - measured) / measured * 100.0 : 0.0;
}

json breakdown_terms(double iteration_s, const Breakdown& b) {
  return {{"iteration_s", iteration_s},  {"compute_s", b.compute},
          {"exposed_comm_s", b.exposed}, {"overlapped_comm_s", b.overlapped},
          {"bubble_s", b.bubble},        {"profiler_comm_s", b.profiler_comm}};
}

json collective_rows(const Breakdown& measured, const Breakdown& predicted,
                     const std::string& group) {
  json rows = json::array();
  // A point-to-point transfer is one row, "send_recv" (nccl-tests' sendrecv): the simulator
  // prices it on the send, while the trainer's sends are MPI_Isend posts (microseconds) and its
  // transfer shows in the blocking receive.
  auto p2p = [](const Breakdown& b) {
    CommShare s = b.by_collective[Collective::send];
    const CommShare& r = b.by_collective[Collective::recv];
    s.total += r.total, s.exposed += r.exposed, s.profiler += r.profiler;
    return s;
  };
  for (std::size_t i = 0; i < kCollectiveCount; ++i) {
    const auto c = static_cast<Collective>(i);
    if (c == Collective::recv) continue;
    const bool is_p2p = c == Collective::send;
    const CommShare m = is_p2p ? p2p(measured) : measured.by_collective[c];
    const CommShare p = is_p2p ? p2p(predicted) : predicted.by_collective[c];
    if (m.total <= 0 && p.total <= 0) continue;
    rows.push_back({{"collective", is_p2p ? std::string("send_recv") : std::string(to_string(c))},
                    {"group", group},
                    {"measured_s", m.total},
                    {"predicted_s", p.total},
                    {"measured_profiler_s", m.profiler},
                    {"predicted_profiler_s", p.profiler},
                    {"error_pct", error_pct(m.total, p.total)},
                    {"profiler_error_pct", error_pct(m.profiler, p.profiler)}});
  }
  return rows;
}

Result<std::pair<double, Breakdown>> mean_over_ranks(const json& per_rank,
                                                     const std::string& where) {
  if (!per_rank.is_array() || per_rank.empty())
    return Error{fmt::format("{}: per_rank: expected an array of every rank's averages, got {}",
                             where, per_rank.is_array() ? "an empty array" : per_rank.type_name())};
  Breakdown sum;
  double time = 0;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const json& e = per_rank[r];
    const std::string at = fmt::format("{}: per_rank[{}]", where, r);
    if (!e.is_object() || !e.contains("time_s") || !e["time_s"].is_number())
      return Error{at + ": time_s: expected a number"};
    CS_ASSIGN_OR_RETURN(Breakdown b, breakdown_from_json(e, at));
    sum.add(b);
    time += e["time_s"].get<double>();
  }
  const double k = 1.0 / static_cast<double>(per_rank.size());
  sum.scale(k);
  return std::pair<double, Breakdown>{time * k, sum};
}

double project_iteration(double base_iteration_s, double base_exposed_s, double work_ratio,
                         double base_model_comm_s, double model_comm_s) {
  const double eff = model_comm_s > 0 ? base_model_comm_s / model_comm_s : 1.0;
  return (base_iteration_s - base_exposed_s) * work_ratio +
         (eff > 0 ? base_exposed_s / eff : base_exposed_s);
}

json summarize(const json& runs) {
  double sum = 0, mx = 0, csum = 0, psum = 0, s2sum = 0, wabs = 0, wmeas = 0;
  int n = 0, cn = 0, pn = 0, s2n = 0;
  for (const json& r : runs) {
    if (!r.contains("iteration_error_pct")) continue;
    const double e = std::fabs(r["iteration_error_pct"].get<double>());
    sum += e;
    mx = std::max(mx, e);
    ++n;
    if (r.contains("run_kernels_iteration_error_pct")) {
      s2sum += std::fabs(r["run_kernels_iteration_error_pct"].get<double>());
      ++s2n;
    }
    for (const json& c : r.value("collectives", json::array())) {
      if (c.value("measured_s", 0.0) <= 0) continue;
      csum += std::fabs(c["error_pct"].get<double>());
      ++cn;
      wabs += std::fabs(c.value("predicted_s", 0.0) - c["measured_s"].get<double>());
      wmeas += c["measured_s"].get<double>();
      if (c.value("measured_profiler_s", 0.0) > 0 && c.contains("profiler_error_pct")) {
        psum += std::fabs(c["profiler_error_pct"].get<double>());
        ++pn;
      }
    }
  }
  return {{"runs", n},
          {"iteration_mape_pct", n ? sum / n : 0.0},
          {"iteration_max_error_pct", mx},
          {"collective_mape_pct", cn ? csum / cn : 0.0},
          {"collective_profiler_mape_pct", pn ? psum / pn : 0.0},
          {"run_kernels_iteration_mape_pct", s2n ? s2sum / s2n : 0.0},
          {"collective_weighted_error_pct", wmeas > 0 ? wabs / wmeas * 100 : 0.0}};
}

json throughput_series(const std::vector<NodeTraffic>& traffic, double scale) {
  json out = json::array();
  if (traffic.empty()) return out;
  std::size_t windows = traffic.front().samples.size();
  for (const auto& t : traffic) windows = std::min(windows, t.samples.size());
  for (std::size_t w = 0; w < windows; ++w) {
    double sum = 0;
    for (const auto& t : traffic) sum += t.samples[w].second;
    out.push_back({{"t_s", traffic.front().samples[w].first},
                   {"gbps", sum / static_cast<double>(traffic.size()) * scale / 1e9}});
  }
  return out;
}

std::optional<Strategy> parse_strategy(const std::string& name) {
  Strategy st{name};
  if (name == "ddp") return st;
  if (name.size() == 5 && name.rfind("zero", 0) == 0 && name[4] >= '1' && name[4] <= '3') {
    st.zero = name[4] - '0';
    return st;
  }
  // tp<N>, pp<M> or tp<N>pp<M>, N and M from 2 to 64 without leading zeros.
  std::size_t i = 0;
  auto take = [&](const char* key, int* v) {
    if (name.compare(i, 2, key) != 0) return true;
    std::size_t j = i + 2;
    int x = 0;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j])) && x <= 64)
      x = x * 10 + (name[j++] - '0');
    if (j == i + 2 || name[i + 2] == '0' || x < 2 || x > 64) return false;
    *v = x;
    i = j;
    return true;
  };
  if (!take("tp", &st.tp) || !take("pp", &st.pp)) return std::nullopt;
  if (i != name.size() || i == 0) return std::nullopt;
  return st;
}

std::string profile_label(const std::string& spec) {
  std::string s = spec.substr(0, spec.find(','));
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) c = '-';
  return s;
}

// ---- the pipeline ----

namespace {

struct Settings {
  std::vector<int> ranks;
  std::vector<Strategy> strategies;
  int steps, warmup, micro_batch, bench_iters, bench_warmup, compute_reps;
  int run_compute_reps;  // the kernels' repetitions before each run
};

Settings settings_of(const CharacterizeOptions& o) {
  Settings s;
  s.ranks = o.ranks.empty() ? std::vector<int>{2, 4} : o.ranks;
  for (const std::string& name : o.strategies.empty() ? kDefaultStrategies : o.strategies)
    if (auto st = parse_strategy(name)) s.strategies.push_back(*st);
  // The default mode's figures keep it under 30 minutes on a 2-core host shared with other
  // work (docs/characterize.md, "Time").
  s.steps = o.steps.value_or(o.quick ? 5 : 8);
  s.warmup = o.warmup.value_or(o.quick ? 2 : 3);
  s.micro_batch = o.micro_batch.value_or(4);
  s.bench_iters = o.quick ? 8 : 10;
  s.bench_warmup = o.quick ? 1 : 2;
  s.compute_reps = o.quick ? 10 : 20;
  s.run_compute_reps = 5;
  return s;
}

// Output of child jobs to files: stdout to `out_path` (or the log), stderr to the log.
class Redirect {
 public:
  Redirect(const std::string& out_path, const std::string& log_path) {
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = ::dup(1);
    saved_err_ = ::dup(2);
    const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int out = out_path.empty() ? ::dup(log)
                                     : ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0 && out >= 0) {
      ::dup2(out, 1);
      ::dup2(log, 2);
    }
    if (log >= 0) ::close(log);
    if (out >= 0) ::close(out);
  }
  ~Redirect() {
    std::fflush(stdout);
    std::fflush(stderr);
    ::dup2(saved_out_, 1);
    ::dup2(saved_err_, 2);
    ::close(saved_out_);
    ::close(saved_err_);
  }
  Redirect(const Redirect&) = delete;
  Redirect& operator=(const Redirect&) = delete;

 private:
  int saved_out_ = -1, saved_err_ = -1;
};

struct Progress {
  std::FILE* f = nullptr;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void show(const std::string& what) {
    if (!f) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(f, "\r\033[Kcommscope characterize [%4.0fs]: %s", s, what.c_str());
    std::fflush(f);
  }
  void done() {
    if (!f) return;
    std::fprintf(f, "\r\033[K");
    std::fflush(f);
  }
};

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

struct Profile {
  std::string spec, label;
  int nodes = 1;
};

// One MPI job of a program of ours, locally (emulated or not) or on the hostfile's nodes.
Result<int> run_job_here(const CharacterizeOptions& o, const Profile& p, const std::string& prog,
                         const std::vector<std::string>& args, int ranks, std::FILE* report,
                         std::vector<NodeTraffic>* traffic) {
  if (!o.hostfile.empty()) {
    std::vector<std::string> argv = {"mpirun",
                                     "--hostfile",
                                     o.hostfile,
                                     "-np",
                                     std::to_string(ranks),
                                     "--map-by",
                                     fmt::format("ppr:{}:node", ranks / std::max(1, p.nodes))};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.push_back(prog);
    argv.insert(argv.end(), args.begin(), args.end());
    return run_job(argv);
  }
  JobOptions job;
  job.ranks = ranks;
  job.emulate = p.spec;
  return run_mpi_job(prog, args, job, report, traffic);
}

// The largest sweep size: the power of two at or below the largest message the runs send (the
// whole gradient, one DDP bucket here), at least 64 KiB and at most kMaxSweepBytes; above it
// the curve's largest point's busbw holds (docs/cost-model.md), and the top size is what the
// sweep spends its time on (16 MiB over an emulated tcp-10g link: 11 minutes a sweep).
constexpr std::uint64_t kMaxSweepBytes = 4ull << 20;
std::uint64_t top_size(double bytes) {
  std::uint64_t v = 65536;
  while (static_cast<double>(2 * v) <= bytes && v < kMaxSweepBytes) v <<= 1;
  return v;
}

// Step 1 for one profile: the sweeps (cached in OUT/bench/), their fit, the profile file.
Result<json> measure_network(const CharacterizeOptions& o, const Settings& s, const Profile& p,
                             double grad_bytes, Progress& prog) {
  const std::string bench = o.bin_dir + "/commscope-bench";
  const std::string dir = o.out + "/bench";
  fs::create_directories(dir);
  const int rmax = *std::max_element(s.ranks.begin(), s.ranks.end());
  // Sweeps: the world at every rank count (its nodes are the profile's), and within and across
  // nodes at the largest (--split node) when a node holds several ranks.
  struct Sweep {
    int ranks;
    bool split;
  };
  std::vector<Sweep> sweeps;
  for (int r : s.ranks)
    if (r >= 2) sweeps.push_back({r, false});
  if (rmax > p.nodes) sweeps.push_back({rmax, true});
  const std::string top = std::to_string(top_size(grad_bytes));
  std::vector<MeasuredCollective> measured;
  for (const Sweep& sw : sweeps) {
    const std::string name = fmt::format("{}-r{}{}", p.label, sw.ranks, sw.split ? "-split" : "");
    const std::string path = dir + "/" + name + ".json";
    std::vector<std::string> args = {"-b",
                                     "4K",
                                     "-e",
                                     top,
                                     "-f",
                                     "2",
                                     "-w",
                                     std::to_string(s.bench_warmup),
                                     "-n",
                                     std::to_string(s.bench_iters),
                                     "--collectives",
                                     "all_reduce,all_gather,reduce_scatter",
                                     "--format",
                                     "json"};
    if (sw.split) {
      args.push_back("--split");
      args.push_back("node");
    }
    // The sweep is kept with its arguments beside it; other arguments measure it again.
    auto cached = read_json_file(path);
    auto cached_args = read_json_file(path + ".args");
    if (!cached || !cached->contains("results") || !cached_args || *cached_args != json(args)) {
      prog.show(fmt::format("network {}: sweep {} ranks{}", p.label, sw.ranks,
                            sw.split ? " within and across nodes" : ""));
      const std::string tmp = path + ".partial";
      Result<int> rc = 0;
      {
        Redirect r(tmp, o.out + "/logs/bench-" + name + ".log");
        rc = run_job_here(o, p, bench, args, sw.ranks, stderr, nullptr);
      }
      if (!rc.ok() || *rc != 0 || !read_json_file(tmp)) {
        std::error_code gone;
        fs::remove(tmp, gone);  // a failed sweep's partial output is not kept
        if (!rc.ok()) return rc.error();
        return Error{
            fmt::format("network {}: the sweep over {} ranks ended with status {} "
                        "(see {}/logs/bench-{}.log)",
                        p.label, sw.ranks, *rc, o.out, name)};
      }
      CS_RETURN_IF_ERROR(write_file_atomic(path + ".args", json(args).dump() + "\n"));
      fs::rename(tmp, path);
    }
    CS_ASSIGN_OR_RETURN(auto rows, read_bench_json(path));
    for (auto& m : rows) {
      if (m.group == "world") {  // the ranks spanned the profile's nodes
        m.nodes = std::min(p.nodes, m.ranks);
        m.group = m.nodes > 1 ? "inter-node" : "intra-node";
      }
      measured.push_back(std::move(m));
    }
  }
  BenchFits fits = fit_bench(measured);
  ProfileOptions po;
  po.name = p.label + "-measured";
  po.source = fmt::format("commscope characterize: commscope-bench sweeps on {}", p.spec);
  CS_ASSIGN_OR_RETURN(json profile, network_profile(fits, po));
  const std::string file = "network-" + p.label + ".json";
  CS_RETURN_IF_ERROR(write_file_atomic(o.out + "/" + file, profile.dump(2) + "\n"));
  // The document's curves: measured busbw and the alpha-beta model's at each size.
  json curves = json::array();
  for (const BusBwCurve& c : fits.curves) {
    const std::string group = c.scope == CurveScope::inter_node ? "inter" : "intra";
    const AlphaBetaFit* ab = nullptr;
    for (const FitRow& row : fits.rows)
      if (row.measured.collective == c.collective && row.measured.ranks == c.ranks &&
          (row.measured.group == "inter-node") == (c.scope == CurveScope::inter_node))
        ab = &row.fit;
    json pts = json::array();
    for (const CurvePoint& pt : c.points) {
      double model = 0;
      if (ab) {
        const double t = ab->alpha + ab->beta * pt.bytes;
        model = t > 0 ? pt.bytes * bus_factor(c.collective, c.ranks) / t * 8 / 1e9 : 0;
      }
      pts.push_back({{"bytes", pt.bytes},
                     {"measured_busbw_gbps", pt.busbw.value() * 8 / 1e9},
                     {"model_busbw_gbps", model}});
    }
    curves.push_back({{"collective", std::string(to_string(c.collective))},
                      {"group", group},
                      {"ranks", c.ranks},
                      {"nodes", c.nodes},
                      {"points", pts}});
  }
  return json{{"profile", p.label}, {"spec", p.spec},
              {"nodes", p.nodes},   {"ranks_per_node", std::max(1, rmax / p.nodes)},
              {"file", file},       {"curves", curves}};
}

// The kernels' fit as a cpu-host system preset named `name`, written to OUT/`file` (read back
// through predict's loader first: a file written here is one predict accepts).
Result<ComputeFit> write_fitted_system(const CharacterizeOptions& o, const ModelSpec& model,
                                       const SystemSpec& base, const ComputeMeasurement& m,
                                       int max_per_node, const std::string& name,
                                       const std::string& file) {
  SystemSpec b = base;
  b.name = name;
  CS_ASSIGN_OR_RETURN(ComputeFit fit, fit_compute(m, model, b));
  fit.system.node.gpus = max_per_node;
  json sys = to_json(fit.system);
  if (auto back = system_from_json(sys, file); !back.ok()) return back.error();
  // Rewritten only when it changed: a resumed folder's completed runs stay untouched.
  const std::string text = sys.dump(2) + "\n";
  std::ifstream old(o.out + "/" + file, std::ios::binary);
  const std::string was((std::istreambuf_iterator<char>(old)), {});
  if (was != text) CS_RETURN_IF_ERROR(write_file_atomic(o.out + "/" + file, text));
  return fit;
}

// Step 2: the kernels at each concurrency a run puts on one host; the fitted system files.
Result<json> measure_compute_all(const CharacterizeOptions& o, const Settings& s,
                                 const ModelSpec& model, const std::set<int>& concurrencies,
                                 int max_per_node, Progress& prog) {
  json doc = {{"file", "system-cpu-host.json"}, {"systems", json::object()}};
  CS_ASSIGN_OR_RETURN(SystemSpec base, load_system("cpu-host"));
  for (int c : concurrencies) {
    const std::string mpath = fmt::format("{}/compute/kernels-x{}.json", o.out, c);
    ComputeMeasurement m;
    auto cached = read_json_file(mpath);
    auto parsed = cached ? compute_measurement_from_json(*cached, mpath)
                         : Result<ComputeMeasurement>(Error{"absent"});
    if (parsed.ok() && parsed->batch == s.micro_batch && parsed->concurrency == c) {
      m = *parsed;
    } else {
      if (!o.measure_compute) return Error{"compute measurement: not available in this build"};
      prog.show(fmt::format("compute: the model's kernels, {} process(es) at once", c));
      CS_ASSIGN_OR_RETURN(m, o.measure_compute(model, s.micro_batch, s.compute_reps, c));
      CS_RETURN_IF_ERROR(write_file_atomic(mpath, to_json(m).dump(1) + "\n"));
    }
    const std::string file =
        c == 1 ? "system-cpu-host.json" : fmt::format("system-cpu-host-x{}.json", c);
    CS_ASSIGN_OR_RETURN(
        ComputeFit fit,
        write_fitted_system(o, model, base, m, max_per_node,
                            c == 1 ? "cpu-host-measured" : fmt::format("cpu-host-measured-x{}", c),
                            file));
    json pts = json::array();
    for (const GemmPoint& p : fit.points)
      pts.push_back({{"op", p.op}, {"m", p.m}, {"n", p.n}, {"k", p.k}, {"tflops", p.tflops}});
    doc["systems"][std::to_string(c)] = {{"file", file},
                                         {"concurrency", c},
                                         {"gemm_tflops", fit.gemm_tflops},
                                         {"measured_compute_s", fit.measured_compute_s},
                                         {"predicted_compute_s", fit.predicted_compute_s},
                                         {"points", pts}};
    if (c == 1) {
      doc["gemm_tflops"] = fit.gemm_tflops;
      doc["points"] = pts;
    }
  }
  return doc;
}

// The processes whose compute shares this host's cores at once in a run of `ranks`: the ranks
// on one host (all of them when emulating: the emulated nodes share this machine), one per core
// up to the cores (each rank computes on a core of its own), so ceil(ranks per host / cores).
// Measuring all of the ranks at once instead (x<ranks per host>) priced their compute 2 to 4
// times what the runs measured: the kernel measurement computes back to back, while the ranks
// compute in bursts between communication, yielding the cores while they wait.
int compute_concurrency(const CharacterizeOptions& o, const Profile& p, int ranks) {
  const int per_host = o.hostfile.empty() ? ranks : ranks / std::max(1, p.nodes);
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  return std::max(1, (per_host + cores - 1) / cores);
}

// commscope-train's arguments for one run.
std::vector<std::string> train_args(const std::string& model_file, const Settings& s,
                                    const Strategy& strategy, const std::string& trace_dir,
                                    const std::string& run_dir) {
  std::vector<std::string> a = {"--model",
                                model_file,
                                "--zero",
                                std::to_string(strategy.zero),
                                "--micro-batch-size",
                                std::to_string(s.micro_batch),
                                "--steps",
                                std::to_string(s.steps),
                                "--warmup",
                                std::to_string(s.warmup),
                                "--trace",
                                trace_dir + "/",
                                "--output",
                                run_dir + "/train.json",
                                "--no-progress"};
  // Model parallelism (only then: the data-parallel runs' arguments, and so their completed
  // runs in a folder, stay as they were).
  if (strategy.tp > 1) a.insert(a.end(), {"--tp", std::to_string(strategy.tp)});
  if (strategy.pp > 1)
    a.insert(a.end(), {"--pp", std::to_string(strategy.pp), "--schedule", "1f1b",
                       "--gradient-accumulation-steps", std::to_string(strategy.micro_batches())});
  return a;
}

// Whether a strategy runs on `ranks` ranks: TP x PP divides them.
bool applies(const Strategy& st, int ranks) {
  return ranks % st.model_parallel() == 0;
}

Status write_csvs(const std::string& out, const json& runs) {
  std::string r =
      "id,network,strategy,ranks,nodes,measured_iteration_s,predicted_iteration_s,"
      "iteration_error_pct,measured_compute_s,predicted_compute_s,measured_exposed_comm_s,"
      "predicted_exposed_comm_s,measured_overlapped_comm_s,predicted_overlapped_comm_s,"
      "measured_profiler_comm_s,predicted_profiler_comm_s\n";
  std::string c =
      "id,network,strategy,ranks,collective,group,measured_s,predicted_s,measured_profiler_s,"
      "predicted_profiler_s,error_pct,profiler_error_pct\n";
  for (const json& run : runs) {
    const json& m = run["measured"];
    const json& p = run["predicted"];
    r += fmt::format(
        "{},{},{},{},{},{:.6g},{:.6g},{:.3f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},"
        "{:.6g},{:.6g}\n",
        run["id"].get<std::string>(), run["network"].get<std::string>(),
        run["strategy"].get<std::string>(), run["ranks"].get<int>(), run["nodes"].get<int>(),
        m["iteration_s"].get<double>(), p["iteration_s"].get<double>(),
        run["iteration_error_pct"].get<double>(), m["compute_s"].get<double>(),
        p["compute_s"].get<double>(), m["exposed_comm_s"].get<double>(),
        p["exposed_comm_s"].get<double>(), m["overlapped_comm_s"].get<double>(),
        p["overlapped_comm_s"].get<double>(), m["profiler_comm_s"].get<double>(),
        p["profiler_comm_s"].get<double>());
    for (const json& k : run["collectives"])
      c += fmt::format("{},{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.3f},{:.3f}\n",
                       run["id"].get<std::string>(), run["network"].get<std::string>(),
                       run["strategy"].get<std::string>(), run["ranks"].get<int>(),
                       k["collective"].get<std::string>(), k["group"].get<std::string>(),
                       k["measured_s"].get<double>(), k["predicted_s"].get<double>(),
                       k["measured_profiler_s"].get<double>(),
                       k["predicted_profiler_s"].get<double>(), k["error_pct"].get<double>(),
                       k.value("profiler_error_pct", 0.0));
  }
  CS_RETURN_IF_ERROR(write_file_atomic(out + "/runs.csv", r));
  return write_file_atomic(out + "/collectives.csv", c);
}

}  // namespace

Status check_characterize_options(const CharacterizeOptions& o) {
  if (o.out.empty()) return Error{"-o/--output: expected a folder, got ''"};
  std::error_code ec;
  if (fs::exists(o.out, ec) && !fs::is_directory(o.out, ec))
    return Error{fmt::format("-o/--output: expected a folder, got '{}' (not a folder)", o.out)};
  if (o.compute_only && (!o.emulate.empty() || !o.hostfile.empty()))
    return Error{
        fmt::format("--compute-only: expected no --emulate/--hostfile (it measures this "
                    "host's kernels alone), got '{}'",
                    o.emulate.empty() ? o.hostfile : o.emulate.front())};
  // The folder's model.json is written from --model: naming it as the model replaced the
  // user's file with the model characterize made of it (--quick's smaller one; found by
  // probing, 2026-12-02).
  if (fs::is_regular_file(o.model, ec) &&
      fs::equivalent(o.model, fs::path(o.out) / "model.json", ec))
    return Error{fmt::format(
        "--model: expected a file outside the -o folder's model.json (characterize writes it), "
        "got '{}'",
        o.model)};
  // It runs no training: flags of the training runs would be ignored in silence (found by
  // probing, 2026-12-02).
  if (o.compute_only && (!o.strategies.empty() || o.steps || o.warmup))
    return Error{fmt::format(
        "--compute-only: expected no --strategies/--steps/--warmup (it measures kernels and runs "
        "no training), got {}",
        !o.strategies.empty() ? "--strategies"
        : o.steps             ? "--steps"
                              : "--warmup")};
  if (!o.compute_only && o.emulate.empty() == o.hostfile.empty())
    return Error{o.emulate.empty()
                     ? "--emulate/--hostfile: expected one of them (emulated nodes on this "
                       "machine, or the cluster's hostfile), got neither"
                     : "--emulate/--hostfile: expected one of them, got both"};
  if (!o.hostfile.empty()) {
    CS_RETURN_IF_ERROR(check_flag_file("--hostfile", o.hostfile));
    // A hostfile that names no host (empty, or comments alone) reached mpirun (found by
    // probing, 2026-12-02).
    std::ifstream in(o.hostfile);
    bool host = false;
    for (std::string line; !host && std::getline(in, line);) {
      const auto b = line.find_first_not_of(" \t\r");
      host = b != std::string::npos && line[b] != '#';
    }
    if (!host)
      return Error{
          fmt::format("--hostfile: expected a file naming the nodes (one host a line, "
                      "mpirun's format), got '{}' with none",
                      o.hostfile)};
  }
  const Settings s = settings_of(o);
  for (int r : s.ranks)
    if (r < 1 || r > kMaxLocalRanks)
      return Error{
          fmt::format("--ranks: expected integers from 1 to {}, got {}", kMaxLocalRanks, r)};
  // Each rank count once, as each strategy and profile (2,2 ran every run twice into one
  // folder; found by probing, 2026-12-02).
  for (std::size_t i = 0; i < s.ranks.size(); ++i)
    if (std::find(s.ranks.begin(), s.ranks.begin() + static_cast<std::ptrdiff_t>(i), s.ranks[i]) !=
        s.ranks.begin() + static_cast<std::ptrdiff_t>(i))
      return Error{fmt::format("--ranks: expected distinct rank counts, got {} twice", s.ranks[i])};
  for (const auto& st : o.strategies)
    if (!parse_strategy(st))
      return Error{fmt::format(
          "--strategies: expected ddp|zero1|zero2|zero3|tp<N>|pp<M>|tp<N>pp<M> (N, M from 2 to "
          "64), got '{}'",
          st)};
  {
    std::set<std::string> seen;
    for (const auto& st : s.strategies)
      if (!seen.insert(st.name).second)
        return Error{
            fmt::format("--strategies: expected distinct strategies, got '{}' twice", st.name)};
  }
  // A strategy asked for must run somewhere; the default matrix's run where the ranks allow.
  for (const auto& st : o.strategies.empty() ? std::vector<Strategy>{} : s.strategies)
    if (std::none_of(s.ranks.begin(), s.ranks.end(), [&](int r) { return applies(st, r); }))
      return Error{fmt::format(
          "--strategies: expected a strategy whose TP x PP divides some rank count of --ranks, "
          "got '{}' (TP x PP = {})",
          st.name, st.model_parallel())};
  if (s.steps < 2 || s.steps > 10000)
    return Error{fmt::format("--steps: expected 2 to 10000, got {}", s.steps)};
  if (s.warmup < 0)
    return Error{fmt::format("--warmup: expected a non-negative integer, got {}", s.warmup)};
  if (s.warmup >= s.steps)
    return Error{
        fmt::format("--warmup: expected at most --steps - 1 = {}, got {}", s.steps - 1, s.warmup)};
  if (s.micro_batch < 1 || s.micro_batch > 4096)
    return Error{fmt::format("--micro-batch-size: expected 1 to 4096, got {}", s.micro_batch)};
  std::set<std::string> labels;
  for (const auto& e : o.emulate) {
    auto spec = parse_emulation(e);
    // parse_emulation's message names --emulate already (it said "--emulate: --emulate:")
    if (!spec.ok()) {
      const std::string& m = spec.error().message;
      return Error{m.rfind("--emulate: ", 0) == 0 ? m : "--emulate: " + m};
    }
    const int k = spec->nodes > 0 ? spec->nodes : 2;
    for (int r : s.ranks)
      if (r % k != 0)
        return Error{
            fmt::format("--emulate: expected nodes=K dividing every rank count, got "
                        "nodes={} with --ranks {}",
                        k, r)};
    if (!labels.insert(profile_label(e)).second)
      return Error{
          fmt::format("--emulate: expected distinct profiles, got '{}' twice", profile_label(e))};
  }
  // --nodes counts the hostfile's nodes; emulated profiles say theirs (nodes=K) and
  // --compute-only runs on this host alone: there it would be ignored.
  if (o.hostfile.empty() && o.nodes != 0)
    return Error{fmt::format(
        "--nodes: expected it only with --hostfile (emulated profiles say nodes=K, --compute-only "
        "uses this host), got {}",
        o.nodes)};
  if (!o.hostfile.empty()) {
    if (o.nodes < 1) return Error{fmt::format("--nodes: expected at least 1, got {}", o.nodes)};
    for (int r : s.ranks)
      if (r % o.nodes != 0)
        return Error{fmt::format("--ranks: expected multiples of --nodes {}, got {}", o.nodes, r)};
  }
  return Status{};
}

Result<json> characterize(const CharacterizeOptions& o, std::FILE* progress_to) {
  CS_RETURN_IF_ERROR(check_characterize_options(o));
  if (!o.emulate.empty()) CS_RETURN_IF_ERROR(check_network_privileges());
  for (const char* p : {"/commscope-bench", "/commscope-train"})
    if (!o.compute_only && ::access((o.bin_dir + p).c_str(), X_OK) != 0)
      return Error{fmt::format("{}{}: not found (built without MPI or OpenBLAS?)", o.bin_dir, p)};
  // mpirun before any folder is made, as train and bench check it (it made the folders, then
  // said "ended with status 127" beside an empty log, found by probing, 2026-11-30).
  if (!o.compute_only) CS_RETURN_IF_ERROR(require_mpirun());
  const Settings s = settings_of(o);
  // The model, before any folder is made: an unknown one leaves nothing behind.
  CS_ASSIGN_OR_RETURN(ModelSpec model, load_model(o.model));
  std::error_code ec;
  // A folder this call creates is removed again when the trainer's check refuses a run, so
  // that a refused invocation leaves nothing behind.
  const bool out_existed = fs::exists(o.out, ec);
  // The folder is new, empty, or one characterize wrote before (its marker, or the
  // characterize.json of a finished run): it writes model.json, report.html and CSVs into it,
  // which in any other folder would replace a user's files (until 2026-12-02 any existing
  // folder was written into).
  const std::string marker = o.out + "/" + std::string(kCharacterizeMarker);
  const bool marked = out_existed && fs::exists(marker, ec);
  // (a file there is refused by check_characterize_options)
  if (out_existed && !marked && !fs::exists(o.out + "/characterize.json", ec) &&
      !fs::is_empty(o.out, ec))
    return Error{fmt::format(
        "-o/--output: expected a new or empty folder, or one characterize wrote before (it holds "
        "{}), got '{}', which holds other files",
        kCharacterizeMarker, o.out)};
  for (const char* d : {"", "/logs", "/runs", "/traces", "/compute"}) {
    fs::create_directories(o.out + d, ec);
    if (ec)
      return Error{fmt::format("-o/--output: cannot create '{}{}': {}", o.out, d, ec.message())};
  }
  Progress prog;
  std::FILE* tty = nullptr;
  if (o.progress && progress_to) {
    const int fd = ::dup(::fileno(progress_to));
    if (fd >= 0) tty = ::fdopen(fd, "w");
    prog.f = tty;
  }
  struct CloseTty {
    std::FILE* f;
    ~CloseTty() {
      if (f) std::fclose(f);
    }
  } close_tty{tty};

  // The model: the preset, smaller in --quick; written to the folder for predict and train.
  if (o.quick) {
    model.decoder_layers = std::min(model.decoder_layers, 2);
    model.hidden = std::min<std::int64_t>(model.hidden, 128);
    model.ffn = 4 * model.hidden;
    model.head_dim = model.hidden / model.heads;
    model.vocab = std::min<std::int64_t>(model.vocab, 1024);
    model.seq_length = std::min<std::int64_t>(model.seq_length, 64);
    model.max_positions = model.seq_length;
    model.name += "-quick";
    model.sources.push_back(
        "commscope characterize --quick: 2 layers, hidden 128, vocab 1024, "
        "64 tokens (at most), to finish in minutes");
  }
  const std::string model_file = o.out + "/model.json";
  // What a refused run must put back: the folder's model.json as it was (a refused run wrote
  // its own over the completed steps' model, found by probing, 2026-12-02).
  std::optional<std::string> model_before;
  if (out_existed && fs::is_regular_file(model_file, ec)) {
    std::ifstream in(model_file, std::ios::binary);
    model_before = std::string(std::istreambuf_iterator<char>(in), {});
  }
  CS_RETURN_IF_ERROR(write_file_atomic(model_file, to_json(model).dump(2) + "\n"));
  if (!marked)
    CS_RETURN_IF_ERROR(write_file_atomic(
        marker,
        "This folder is commscope characterize's output: a later characterize may write "
        "into it again.\n"));
  CS_ASSIGN_OR_RETURN(model, load_model(model_file));
  // --compute-only: step 2 at one process, into OUT/system-cpu-host.json and OUT/compute.json.
  if (o.compute_only) {
    CS_ASSIGN_OR_RETURN(const SystemSpec host, load_system("cpu-host"));  // its GPUs per node
    // With --ranks: also k = ceil(ranks / cores) processes at once (system-cpu-host-x<k>.json)
    std::set<int> conc = {1};
    for (int r : o.ranks) conc.insert(compute_concurrency(o, Profile{"", "local", 1}, r));
    CS_ASSIGN_OR_RETURN(json compute, measure_compute_all(o, s, model, conc, host.node.gpus, prog));
    json doc = {{"schema", kCharacterizeSchema},
                {"model", model.name},
                {"micro_batch", s.micro_batch},
                {"compute", compute}};
    CS_RETURN_IF_ERROR(write_file_atomic(o.out + "/compute.json", doc.dump(1) + "\n"));
    return doc;
  }
  const double params = static_cast<double>(
      model.vocab * model.hidden + model.max_positions * model.hidden +
      model.decoder_layers * (12 * model.hidden * model.hidden + 13 * model.hidden) +
      2 * model.hidden);

  std::vector<Profile> profiles;
  for (const auto& e : o.emulate) {
    auto spec = parse_emulation(e);
    Profile p{e, profile_label(e), spec->nodes > 0 ? spec->nodes : 2};
    if (spec->nodes == 0) p.spec += ",nodes=2";
    profiles.push_back(p);
  }
  if (!o.hostfile.empty()) profiles.push_back({"", "cluster", o.nodes});

  // Every run's arguments checked by the trainer's own code before anything is measured.
  std::vector<std::string> made;  // run folders this call made
  if (o.check_train)
    for (const Profile& p : profiles)
      for (int r : s.ranks)
        for (const Strategy& st : s.strategies) {
          if (!applies(st, r)) continue;
          const std::string id = fmt::format("{}-{}-r{}", p.label, st.name, r);
          // where its summary will go; made by this call, removed again on a refusal
          if (fs::create_directories(o.out + "/runs/" + id, ec))
            made.push_back(o.out + "/runs/" + id);
          Status checked = o.check_train(
              train_args(model_file, s, st, o.out + "/traces/" + id, o.out + "/runs/" + id), r);
          if (!checked.ok()) {
            if (!out_existed) {
              fs::remove_all(o.out, ec);
            } else {
              for (const std::string& d : made) fs::remove_all(d, ec);
              if (!marked) fs::remove(marker, ec);
              if (model_before)
                (void)write_file_atomic(model_file, *model_before);
              else
                fs::remove(model_file, ec);
            }
            // Which run it was: the flag it names may be one the user never gave (pp8's
            // --pipeline-model-parallel-size, T5's --zero from the default strategies; found
            // by probing, 2026-12-02).
            return Error{fmt::format("--strategies {} at --ranks {}: {}", st.name, r,
                                     checked.error().message)};
          }
        }

  // 1. the network
  json network = json::array();
  for (const Profile& p : profiles) {
    CS_ASSIGN_OR_RETURN(json n, measure_network(o, s, p, params * 4, prog));
    network.push_back(n);
  }
  // 2. the compute, at each number of ranks one host runs
  std::set<int> conc = {1};  // the host alone: system-cpu-host.json
  for (int r : s.ranks)
    for (const Profile& p : profiles) conc.insert(compute_concurrency(o, p, r));
  int max_per_node = 1;  // ranks per (emulated) node: the system's GPUs per node
  for (int r : s.ranks)
    for (const Profile& p : profiles) max_per_node = std::max(max_per_node, r / p.nodes);
  CS_ASSIGN_OR_RETURN(json compute, measure_compute_all(o, s, model, conc, max_per_node, prog));
  CS_ASSIGN_OR_RETURN(const SystemSpec base_system, load_system("cpu-host"));

  // 3. training runs, each kept under runs/<id>/ once complete
  const std::string train = o.bin_dir + "/commscope-train";
  json runs = json::array();
  std::size_t total = 0;
  for (int r : s.ranks)
    for (const Strategy& st : s.strategies) total += applies(st, r) ? profiles.size() : 0;
  std::size_t done = 0;
  std::map<std::string, std::vector<std::size_t>> by_series;  // profile/strategy -> runs
  for (const Profile& p : profiles) {
    for (int r : s.ranks) {
      for (const Strategy& st : s.strategies) {
        if (!applies(st, r)) continue;
        ++done;
        const std::string id = fmt::format("{}-{}-r{}", p.label, st.name, r);
        const std::string rdir = o.out + "/runs/" + id;
        const std::string tdir = o.out + "/traces/" + id;
        const std::vector<std::string> args = train_args(model_file, s, st, tdir, rdir);
        json record;
        auto cached = read_json_file(rdir + "/run.json");
        if (cached && cached->value("schema", "") == kRunSchema &&
            cached->value("args", json()) == json(args) && cached->contains("summary")) {
          record = *cached;
        } else {
          // Step 2 again, just before the run: the kernels at the run's concurrency, for a
          // second prediction that prices the compute at the load the run meets (a shared
          // host's load changes within minutes). Not the run's own measurement: its kernels.
          fs::remove(rdir + "/kernels.json", ec);
          if (o.measure_compute) {
            prog.show(fmt::format("compute {}/{}: the kernels before {} {} on {} ranks", done,
                                  total, p.label, st.name, r));
            CS_ASSIGN_OR_RETURN(ComputeMeasurement km,
                                o.measure_compute(model, s.micro_batch, s.run_compute_reps,
                                                  compute_concurrency(o, p, r)));
            CS_RETURN_IF_ERROR(
                write_file_atomic(rdir + "/kernels.json", to_json(km).dump(1) + "\n"));
          }
          prog.show(
              fmt::format("train {}/{}: {} {} on {} ranks", done, total, p.label, st.name, r));
          fs::remove_all(tdir, ec);
          fs::create_directories(tdir, ec);
          fs::create_directories(rdir, ec);
          fs::remove(rdir + "/train.json", ec);
          std::vector<NodeTraffic> traffic;
          Result<int> rc = 0;
          {
            Redirect red("", o.out + "/logs/train-" + id + ".log");
            rc = run_job_here(o, p, train, args, r, stderr, &traffic);
          }
          if (!rc.ok()) return rc.error();
          auto summary = read_json_file(rdir + "/train.json");
          if (*rc != 0 || !summary)
            return Error{
                fmt::format("train {}: the MPI job ended with status {} (see "
                            "{}/logs/train-{}.log)",
                            id, *rc, o.out, id)};
          double peak = 0, busy = 0;
          auto spec = p.spec.empty() ? Result<EmulationSpec>(Error{""}) : parse_emulation(p.spec);
          const double scale = spec.ok() ? spec->scale : 1.0;
          for (const auto& t : traffic) {
            peak = std::max(peak, t.peak_tx_bps * scale / 1e9);
            busy = std::max(busy, t.mean_busy_bps * scale / 1e9);
          }
          record = {{"schema", kRunSchema},
                    {"id", id},
                    {"args", args},
                    {"summary", *summary},
                    {"peak_gbps", peak},
                    {"busy_gbps", busy},
                    {"throughput_gbps_per_node", throughput_series(traffic, scale)}};
          CS_RETURN_IF_ERROR(write_file_atomic(rdir + "/run.json", record.dump(1) + "\n"));
        }
        // 4. the prediction from steps 1-2 alone
        // The measurement: the mean over every rank of its averages after the warm-up (rank
        // 0's alone would carry the other ranks' skew in its waits; a pipeline's stages
        // differ, and predict gives the mean over stages).
        CS_ASSIGN_OR_RETURN(auto mean, mean_over_ranks(record["summary"].value("per_rank", json()),
                                                       rdir + "/run.json: summary"));
        const auto& [measured_iter, mb] = mean;
        const int per_host = compute_concurrency(o, p, r);
        ScenarioInput in;
        in.model = model_file;
        // Predicted with step 2's system (the kernels timed before all runs, 10 or 20
        // repetitions). The run's own kernels, timed just before it with 5 repetitions, give
        // a second prediction beside it (run_kernels_*): tried as the prediction first, it
        // was the worse of the two in both invocations measured (docs/characterize.md).
        const std::string system_file =
            compute["systems"][std::to_string(per_host)]["file"].get<std::string>();
        std::string run_system_file;
        if (auto kj = read_json_file(rdir + "/kernels.json")) {
          auto km = compute_measurement_from_json(*kj, rdir + "/kernels.json");
          if (km.ok() && km->batch == s.micro_batch && km->concurrency == per_host) {
            run_system_file = "runs/" + id + "/system.json";
            CS_ASSIGN_OR_RETURN(ComputeFit fit,
                                write_fitted_system(o, model, base_system, *km, max_per_node,
                                                    "cpu-host-measured-" + id, run_system_file));
            (void)fit;
          }
        }
        in.system = o.out + "/" + system_file;
        in.network = o.out + "/network-" + p.label + ".json";
        in.plan.gpus = r;
        in.plan.nodes = p.nodes;
        in.plan.zero = st.zero;
        in.plan.micro_batch = s.micro_batch;
        in.plan.precision = Precision::fp32;
        if (st.tp > 1) in.plan.tp = st.tp;
        if (st.pp > 1) {
          in.plan.pp = st.pp;
          in.plan.schedule = Schedule::one_f_one_b;
          in.plan.grad_accum = st.micro_batches();
        }
        CS_ASSIGN_OR_RETURN(SweepResult pr, predict_sweep({in}, SweepOptions{}));
        if (pr.rows.empty()) return Error{fmt::format("predict {}: no prediction", id)};
        const PredictRow& row = pr.rows.front();
        const Breakdown& pb = row.breakdown;
        // Beside it, the prediction with the run's own kernels: the same run and network, so
        // the two errors differ by the compute calibration alone.
        double run_kernels_iter = row.iteration_time;
        if (!run_system_file.empty()) {
          ScenarioInput in2 = in;
          in2.system = o.out + "/" + run_system_file;
          CS_ASSIGN_OR_RETURN(SweepResult pr2, predict_sweep({in2}, SweepOptions{}));
          if (pr2.rows.empty()) return Error{fmt::format("predict {}: no prediction", id)};
          run_kernels_iter = pr2.rows.front().iteration_time;
        }
        json run = {
            {"id", id},
            {"strategy", st.name},
            {"tp", st.tp},
            {"pp", st.pp},
            {"micro_batches", st.micro_batches()},
            {"ranks", r},
            {"nodes", p.nodes},
            {"network", p.label},
            {"trace_dir", "traces/" + id},
            {"system_file", system_file},
            {"run_kernels_system_file", run_system_file.empty() ? system_file : run_system_file},
            {"run_kernels_predicted_iteration_s", run_kernels_iter},
            {"run_kernels_iteration_error_pct", error_pct(measured_iter, run_kernels_iter)},
            {"network_file", "network-" + p.label + ".json"},
            {"measured", breakdown_terms(measured_iter, mb)},
            {"predicted", breakdown_terms(row.iteration_time, pb)},
            {"iteration_error_pct", error_pct(measured_iter, row.iteration_time)},
            {"collectives", collective_rows(mb, pb, st.model_parallel() > 1 ? "all" : "data")},
            {"throughput_gbps_per_node", record.value("throughput_gbps_per_node", json::array())},
            {"peak_gbps_per_node", record.value("peak_gbps", 0.0)},
            {"busy_gbps_per_node", record.value("busy_gbps", 0.0)},
            // The modelled communication the projection scales by: all of it (a data-parallel
            // run's is its data group's; a model-parallel run adds its tensor and pipeline
            // groups', which a larger data-parallel size keeps).
            {"predicted_model_comm_s", pb.comm}};
        by_series[p.label + "/" + st.name].push_back(runs.size());
        runs.push_back(std::move(run));
      }
    }
  }

  // 5. the seeds' projection from the smallest run of each series
  json projection = json::array();
  for (const auto& [key, idx] : by_series) {
    std::size_t base = idx.front();
    for (std::size_t i : idx)
      if (runs[i]["ranks"].get<int>() < runs[base]["ranks"].get<int>()) base = i;
    const json& b = runs[base];
    for (std::size_t i : idx) {
      if (i == base) continue;
      const json& n = runs[i];
      // Same micro-batch per rank: the work per rank is the same (ratio 1).
      const double t = project_iteration(b["measured"]["iteration_s"].get<double>(),
                                         b["measured"]["exposed_comm_s"].get<double>(), 1.0,
                                         b["predicted_model_comm_s"].get<double>(),
                                         n["predicted_model_comm_s"].get<double>());
      const double meas = n["measured"]["iteration_s"].get<double>();
      projection.push_back({{"run", n["id"]},
                            {"base_run", b["id"]},
                            {"measured_iteration_s", meas},
                            {"projected_iteration_s", t},
                            {"projection_error_pct", error_pct(meas, t)},
                            {"simulation_error_pct", n["iteration_error_pct"]}});
    }
  }

  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  json doc = {{"schema", kCharacterizeSchema},
              {"created", iso_now()},
              {"host",
               {{"hostname", std::string(host)},
                {"cores", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))},
                {"mode", o.hostfile.empty() ? "emulate" : "cluster"}}},
              {"model", model.name},
              {"model_file", "model.json"},
              {"quick", o.quick},
              {"network", network},
              {"compute", compute},
              {"runs", runs},
              {"projection", projection},
              {"summary", summarize(runs)}};
  CS_RETURN_IF_ERROR(write_csvs(o.out, runs));
  CS_RETURN_IF_ERROR(write_file_atomic(o.out + "/characterize.json", doc.dump(2) + "\n"));
  prog.done();
  return doc;
}

}  // namespace commscope::launch
