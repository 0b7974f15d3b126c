// CSV readers for measured runs.
#include "commscope/calib/measured.h"

#include "commscope/util/input_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "commscope/spec/limits.h"

namespace commscope {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted)
      out.push_back(cur), cur.clear();
    else if (c != '\r')
      cur += c;
  }
  out.push_back(cur);
  for (auto& s : out) {
    while (!s.empty() && s.front() == ' ') s.erase(s.begin());
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return out;
}

template <class T>
bool parse(const std::string& s, T& out) {
  if constexpr (std::is_same_v<T, double>) {
    try {
      std::size_t used = 0;
      out = std::stod(s, &used);
      return used == s.size();
    } catch (...) {
      return false;
    }
  } else {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }
}

// The publishers' stated settings for the vTrain measurements (data/vtrain/README.md):
// GPT with vocabulary 50,257, 1F1B, activation checkpointing (full recompute), data-parallel
// gradients reduced after the last backward without bucketing; Megatron-DeepSpeed trains in fp16.
MeasuredRun vtrain_run(const std::map<std::string, double>& v, const std::string& system) {
  MeasuredRun r;
  ModelSpec& m = r.model;
  m.kind = ArchKind::gpt;
  m.hidden = static_cast<std::int64_t>(v.at("hidden size"));
  m.heads = static_cast<std::int64_t>(v.at("attention heads"));
  m.decoder_layers = static_cast<int>(v.at("# layers"));
  m.seq_length = m.max_positions = static_cast<std::int64_t>(v.at("sequence length"));
  // Megatron pads the vocabulary to a multiple of 128 x TP (--make-vocab-size-divisible-by 128).
  const std::int64_t unit = 128 * static_cast<std::int64_t>(v.at("tensor parallelism"));
  m.vocab = (50257 + unit - 1) / unit * unit;
  m.kv_heads = m.heads;
  m.head_dim = m.hidden / m.heads;
  m.ffn = 4 * m.hidden;
  m.name = fmt::format("gpt-h{}-l{}", m.hidden, m.decoder_layers);
  m.sources = {"vTrain ground truth (MICRO 2024), publishers' model settings"};
  r.input.system = system;
  PlanInput& p = r.input.plan;
  p.gpus = static_cast<int>(v.at("# GPUs"));
  p.tp = static_cast<int>(v.at("tensor parallelism"));
  p.pp = static_cast<int>(v.at("pipeline parallelism"));
  p.dp = static_cast<int>(v.at("data parallelism"));
  p.micro_batch = static_cast<std::int64_t>(v.at("micro batch"));
  p.global_batch = static_cast<std::int64_t>(v.at("global batch"));
  p.recompute = Recompute::full;
  p.schedule = Schedule::one_f_one_b;
  p.precision = Precision::fp16;
  p.overlap_grad_reduce = false;
  p.ddp_bucket_mb = 1e9;  // one bucket: no bucketing
  r.measured_s = v.at("iteration time (ms)") / 1e3;
  return r;
}

}  // namespace

Result<std::vector<MeasuredRun>> read_measured_csv(const std::string& path,
                                                   const std::string& system) {
  // A FIFO or a device would block or never end: only regular files.
  CS_RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("{}: cannot open", path)};
  std::string line;
  if (!std::getline(in, line))
    return Error{fmt::format("{}: empty file, expected a header line", path)};
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
  const std::vector<std::string> header = split(line);
  auto has = [&](const std::string& h) {
    return std::find(header.begin(), header.end(), h) != header.end();
  };
  const bool vtrain = has("iteration time (ms)");
  if (!vtrain && !has("measured_s"))
    return Error{fmt::format(
        "{}: line 1: expected a vTrain header (… iteration time (ms)) or a commscope header "
        "(model,…,measured_s), got '{}'",
        path, line.substr(0, 80))};
  // Every commscope row names its model: without the column every row would silently be the
  // default model.
  if (!vtrain && !has("model"))
    return Error{fmt::format(
        "{}: line 1: expected a column 'model' (a preset name or model JSON per row), got the "
        "columns '{}'",
        path, line.substr(0, 120))};
  std::vector<MeasuredRun> runs;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    if (static_cast<std::int64_t>(runs.size()) >= limits::kMaxMeasuredRows)
      return Error{
          fmt::format("{}: line {}: expected at most {} measured runs per file "
                      "(commscope's limit), got more",
                      path, lineno, limits::kMaxMeasuredRows)};
    auto cells = split(line);
    if (cells.size() != header.size())
      return Error{fmt::format("{}: line {}: expected {} columns, got {}", path, lineno,
                               header.size(), cells.size())};
    MeasuredRun r;
    if (vtrain) {
      std::map<std::string, double> v;
      for (std::size_t c = 0; c < header.size(); ++c) {
        double x = 0;
        // Sizes and counts become integers: at most 2^31.
        if (!parse(cells[c], x) || !(x > 0) || !std::isfinite(x) ||
            (header[c] != "iteration time (ms)" && x > std::numeric_limits<int>::max()))
          return Error{
              fmt::format("{}: line {}: column '{}': expected a positive finite number{}, got '{}'",
                          path, lineno, header[c],
                          header[c] != "iteration time (ms)" ? " up to 2147483647" : "", cells[c])};
        v[header[c]] = x;
      }
      for (const char* need :
           {"# GPUs", "global batch", "micro batch", "hidden size", "attention heads", "# layers",
            "sequence length", "tensor parallelism", "data parallelism", "pipeline parallelism"})
        if (!v.count(need))
          return Error{fmt::format("{}: line 1: expected a column '{}'", path, need)};
      r = vtrain_run(v, system);
    } else {
      r.input.system = system;
      r.input.model.clear();  // no default: each row names its model
      for (std::size_t c = 0; c < header.size(); ++c) {
        const std::string& h = header[c];
        const std::string& x = cells[c];
        if (x.empty()) continue;
        auto bad = [&](std::string_view expected) {
          return Error{fmt::format("{}: line {}: column '{}': expected {}, got '{}'", path, lineno,
                                   h, expected, x)};
        };
        std::int64_t i = 0;
        double d = 0;
        if (h == "model")
          r.input.model = x;
        else if (h == "system")
          r.input.system = x;
        else if (h == "network")
          r.input.network = x;
        else if (h == "measured_s") {
          if (!parse(x, d) || !(d > 0) || !std::isfinite(d))
            return bad("a positive, finite number of seconds");
          r.measured_s = d;
        } else if (h == "precision") {
          auto p = precision_from_name(x);
          if (!p) return bad("fp32, fp16 or bf16");
          r.input.plan.precision = p;
        } else if (h == "recompute") {
          auto p = recompute_from_name(x);
          if (!p) return bad("none, selective or full");
          r.input.plan.recompute = p;
        } else if (h == "schedule") {
          auto p = schedule_from_name(x);
          if (!p) return bad("gpipe, 1f1b or interleaved");
          r.input.plan.schedule = p;
        } else {
          if (!parse(x, i) || i < 0 || i > std::numeric_limits<int>::max())
            return bad("a non-negative integer up to 2147483647");
          auto& p = r.input.plan;
          if (h == "nodes")
            p.nodes = static_cast<int>(i);
          else if (h == "gpus")
            p.gpus = static_cast<int>(i);
          else if (h == "tp")
            p.tp = static_cast<int>(i);
          else if (h == "pp")
            p.pp = static_cast<int>(i);
          else if (h == "dp")
            p.dp = static_cast<int>(i);
          else if (h == "zero")
            p.zero = static_cast<int>(i);
          else if (h == "micro_batch")
            p.micro_batch = i;
          else if (h == "global_batch")
            p.global_batch = i;
          else if (h == "seq_length")
            p.seq_length = i;
          else
            return Error{fmt::format(
                "{}: line 1: unknown column '{}'; expected model, system, network, nodes, "
                "gpus, tp, pp, dp, zero, micro_batch, global_batch, seq_length, precision, "
                "recompute, schedule, measured_s",
                path, h)};
        }
      }
      if (r.input.model.empty())
        return Error{
            fmt::format("{}: line {}: column 'model': expected a model, got ''", path, lineno)};
      if (r.measured_s <= 0)
        return Error{fmt::format(
            "{}: line {}: column 'measured_s': expected a positive number, got ''", path, lineno)};
    }
    r.source = path;
    r.line = lineno;
    runs.push_back(std::move(r));
  }
  if (runs.empty())
    return Error{fmt::format("{}: expected at least one measured run, got none", path)};
  return runs;
}

Result<Scenario> resolve_run(const MeasuredRun& run) {
  if (run.model.name.empty()) return resolve_scenario(run.input);
  CS_ASSIGN_OR_RETURN(auto system, load_system(run.input.system));
  CS_ASSIGN_OR_RETURN(auto network,
                      load_network(run.input.network.empty() ? system.network : run.input.network));
  return resolve_scenario(run.model, system, network, run.input.plan);
}

}  // namespace commscope
