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
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/spec/limits.h"
#include "commscope/workload/workload.h"

namespace commscope {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"') {
      if (quoted && i + 1 < line.size() && line[i + 1] == '"')
        cur += '"', ++i;  // RFC 4180: "" inside a quoted cell is one quote
      else
        quoted = !quoted;
    } else if (c == ',' && !quoted)
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

// The next CSV record (RFC 4180): physical lines joined while a quoted cell is open (an odd
// count of quotes so far; "" adds two), so a cell may hold line breaks. False at the end of the
// file; an error when a quote is still open there or a record passes 1 MiB. `physical`: the
// lines read so far; `lineno`: the record's first line, which errors name (a cell that spans
// lines was named by the record's last, found by probing, 2026-12-02).
Result<bool> next_record(std::istream& in, std::string& record, int& physical, int& lineno,
                         const std::string& path) {
  constexpr std::size_t kMaxRecord = std::size_t{1} << 20;
  if (!std::getline(in, record)) return false;
  lineno = ++physical;
  const int first = lineno;
  std::string more;
  while (std::count(record.begin(), record.end(), '"') % 2 == 1) {
    if (record.size() > kMaxRecord)
      return Error{
          fmt::format("{}: line {}: expected a record of at most 1 MiB, got more", path, first)};
    if (!std::getline(in, more))
      return Error{fmt::format("{}: line {}: a quoted cell is not closed by the end of the file",
                               path, first)};
    ++physical;
    record += '\n';
    record += more;
  }
  return true;
}

template <class T>
bool parse(const std::string& s, T& out) {
  if constexpr (std::is_same_v<T, double>) {
    // Decimal or exponent notation only (std::stod would also take hex, "0x10" = 16 seconds,
    // and "inf"); a finite number.
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, std::chars_format::general);
    return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
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
  m.head_dim = m.hidden / m.heads;  // (the heads divide hidden: checked by read_measured_csv)
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
  // Megatron-DeepSpeed runs its pipeline on DeepSpeed's PipelineEngine (GPTModelPipe), which
  // partitions the tensors it sends over TP by default (pipeline.pipe_partitioned and
  // grad_partitioned); the publishers' configurations do not turn it off.
  p.pipe_partitioned = true;
  r.measured_s = v.at("iteration time (ms)") / 1e3;
  return r;
}

// --- the communication-bound validation corpus (data/validation-comm/training.csv) ---

constexpr const char* kCorpusColumns[] = {
    "id",           "source_id", "model",         "parameters_b",
    "layers",       "hidden",    "heads",         "seq_length",
    "vocab",        "gpus",      "gpus_per_node", "gpu",
    "interconnect", "framework", "strategy",      "tp",
    "pp",           "dp",        "micro_batch",   "global_batch",
    "precision",    "recompute", "metric",        "value",
    "split",        "notes"};

// The columns after `notes`, each optional (docs/validate.md): a header naming any other is a
// typo or another tool's table, whose cells would be read past (found by probing, 2026-12-02).
constexpr const char* kCorpusOptionalColumns[] = {"cp",
                                                  "vp",
                                                  "ep",
                                                  "fp8",
                                                  "sequence_parallel",
                                                  "distributed_optimizer",
                                                  "attention",
                                                  "pipeline_layout",
                                                  "assumed",
                                                  "cpu_offloading_num_layers",
                                                  "tp_comm_overlap",
                                                  "expert_tp",
                                                  "moe_dispatcher",
                                                  "overlap_grad_reduce",
                                                  "overlap_param_gather",
                                                  "async_tp_allreduce",
                                                  "recompute_modules",
                                                  "precision_aware_optimizer",
                                                  "moe_a2a_overlap",
                                                  "delay_wgrad_compute",
                                                  "recompute_method",
                                                  "recompute_num_layers",
                                                  "grad_comm_dtype",
                                                  "fp8_param_gather",
                                                  "cross_entropy",
                                                  "attention_backend",
                                                  "unmodelled"};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The model presets whose architecture a corpus row names (Llama rows); others are GPT-shaped
// from the row's layers/hidden/heads. The key is the name lowercased without spaces, '-', '_'
// and a trailing "architecture".
std::string model_preset_for(const std::string& model) {
  std::string k;
  for (char c : lower(model))
    if (c != ' ' && c != '-' && c != '_') k += c;
  if (k.size() > 12 && k.ends_with("architecture")) k.resize(k.size() - 12);
  static const std::map<std::string, std::string> presets = {
      {"llama27b", "llama2-7b"},
      {"llama213b", "llama2-13b"},
      {"llama270b", "llama2-70b"},
      {"llama38b", "llama3-8b"},
      {"llama3.18b", "llama3-8b"},
      {"llama370b", "llama3-70b"},
      {"llama3.170b", "llama3-70b"},
      // issue 15's published large runs (NeMo performance tables, Meta's paper)
      {"gpt3175b", "gpt3-175b"},
      {"llama3405b", "llama3-405b"},
      {"llama3.1405b", "llama3-405b"},
      {"mixtral8x7b", "mixtral-8x7b"},
      {"mixtral8x22b", "mixtral-8x22b"},
      {"deepseekv3", "deepseek-v3"},
      {"qwen330ba3b", "qwen3-30b-a3b"},
      {"qwen3235ba22b", "qwen3-235b-a22b"}};
  auto it = presets.find(k);
  return it == presets.end() ? "" : it->second;
}

// A cell quoted in a skip reason, at most 40 characters: the reasons stay few and short.
std::string clip(const std::string& s) {
  return s.size() <= 40 ? s : s.substr(0, 40) + "…";
}

struct CorpusRow {
  const std::vector<std::string>& header;
  const std::vector<std::string>& cells;
  const std::string& path;
  int lineno;
  const std::string& get(const char* column) const {
    static const std::string none;
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c] == column) return cells[c];
    return none;
  }
  Error bad(const char* column, std::string_view expected) const {
    return Error{fmt::format("{}: line {}: column '{}': expected {}, got '{}'", path, lineno,
                             column, expected, get(column))};
  }
  // A cell a parser refused, with the parser's own message.
  Error bad_cell(const char* column, std::string_view message) const {
    return Error{fmt::format("{}: line {}: column '{}': {}", path, lineno, column, message)};
  }
  // An integer cell: nullopt when empty, an error when not a positive integer up to 2^31 - 1.
  Result<std::optional<std::int64_t>> count(const char* column) const {
    const std::string& x = get(column);
    if (x.empty()) return std::optional<std::int64_t>();
    std::int64_t i = 0;
    if (!parse(x, i) || i < 1 || i > std::numeric_limits<int>::max())
      return bad(column, "a positive integer up to 2147483647");
    return std::optional<std::int64_t>(i);
  }
  // A yes/no cell: nullopt when empty, an error unless 1/0, true/false or yes/no.
  Result<std::optional<bool>> flag(const char* column) const {
    const std::string x = lower(get(column));
    if (x.empty()) return std::optional<bool>();
    if (x == "1" || x == "true" || x == "yes") return std::optional<bool>(true);
    if (x == "0" || x == "false" || x == "no") return std::optional<bool>(false);
    return bad(column, "1, 0, true, false, yes, no or empty");
  }
};

// One corpus row as a run, or the reason it cannot be one (an empty run name and `reason`).
Result<MeasuredRun> corpus_run(const CorpusRow& row, std::string& reason) {
  MeasuredRun r;
  r.id = row.get("id");
  r.split = row.get("split");
  if (r.split != "fit" && r.split != "heldout") return row.bad("split", "fit or heldout");
  CS_ASSIGN_OR_RETURN(auto layers, row.count("layers"));
  CS_ASSIGN_OR_RETURN(auto hidden, row.count("hidden"));
  CS_ASSIGN_OR_RETURN(auto heads, row.count("heads"));
  CS_ASSIGN_OR_RETURN(auto seq, row.count("seq_length"));
  CS_ASSIGN_OR_RETURN(auto vocab, row.count("vocab"));
  CS_ASSIGN_OR_RETURN(auto gpus, row.count("gpus"));
  CS_ASSIGN_OR_RETURN(auto per_node, row.count("gpus_per_node"));
  CS_ASSIGN_OR_RETURN(auto tp, row.count("tp"));
  CS_ASSIGN_OR_RETURN(auto pp, row.count("pp"));
  CS_ASSIGN_OR_RETURN(auto dp, row.count("dp"));
  CS_ASSIGN_OR_RETURN(auto micro, row.count("micro_batch"));
  CS_ASSIGN_OR_RETURN(auto global, row.count("global_batch"));
  double value = 0;
  const std::string& vcell = row.get("value");
  if (!vcell.empty() && (!parse(vcell, value) || !(value > 0) || !std::isfinite(value)))
    return row.bad("value", "a positive finite number");
  // "deepspeed 0.3": the framework, then the release whose pattern the row is predicted with
  // (presets/frameworks/deepspeed.json; docs/validate.md).
  std::string framework = lower(row.get("framework"));
  std::string framework_version;
  if (auto sp = framework.find(' '); sp != std::string::npos) {
    framework_version = framework.substr(sp + 1);
    framework.resize(sp);
  }
  std::string strategy = lower(row.get("strategy"));
  const std::string metric = row.get("metric");
  // The first missing thing is the reason; the order is the order of the docs' list.
  if (vcell.empty()) return (reason = "no value", r);
  if (!gpus) return (reason = "no gpus", r);
  if (!seq) return (reason = "no seq_length", r);
  if (!micro) return (reason = "no micro_batch", r);
  if (!global) return (reason = "no global_batch", r);
  // The system: the shipped DGX-class preset of the GPU, with its GPUs per node.
  const std::string system = system_for_gpu(row.get("gpu"));
  if (system.empty())
    return (reason = fmt::format("no system preset for gpu '{}'", clip(row.get("gpu"))), r);
  auto sys = load_system(system);
  if (!sys) return sys.error();
  // gpus_per_node is the GPUs the job used per node of the preset (commscope's node: the GPUs
  // one NVLink domain joins): all of them, or fewer where the launcher placed the job so (Slurm's
  // --segment on GB200 NVL72 racks: 64 of a rack's 72 GPUs; docs/validate.md). More than the
  // preset's node holds is another system.
  if (per_node && *per_node > sys->node.gpus)
    return (
        reason = fmt::format("gpus_per_node {} exceeds {}'s {}", *per_node, system, sys->node.gpus),
        r);
  const std::int64_t used_per_node = per_node ? *per_node : sys->node.gpus;
  // A run spans whole nodes of that size, or part of one (gb200-nvl72's nodes are 72 GPUs:
  // 128 and 256 GB200s lie on them only as the row's gpus_per_node says).
  if (*gpus > used_per_node && *gpus % used_per_node != 0)
    return (reason = per_node ? fmt::format("gpus not a multiple of gpus_per_node")
                              : fmt::format("gpus not a multiple of {}'s {} per node", system,
                                            sys->node.gpus),
            r);
  const bool part_of_a_node = per_node && *per_node < sys->node.gpus;
  if (part_of_a_node && *gpus > *per_node) r.input.plan.nodes = static_cast<int>(*gpus / *per_node);
  r.input.system = system;
  // The model: a preset of the named architecture, else GPT-shaped from the row.
  const std::string preset = model_preset_for(row.get("model"));
  if (!preset.empty()) {
    r.input.model = preset;
  } else {
    if (!layers || !hidden || !heads) return (reason = "no layers/hidden/heads", r);
    ModelSpec& m = r.model;
    m.kind = ArchKind::gpt;
    m.hidden = *hidden;
    m.heads = *heads;
    m.decoder_layers = static_cast<int>(*layers);
    m.seq_length = m.max_positions = *seq;
    m.vocab = vocab ? *vocab : 50257;
    m.kv_heads = m.heads;
    if (m.hidden % m.heads != 0)  // (head_dim was floored: 3072 / 33 = 93)
      return row.bad("heads", fmt::format("a divisor of hidden ({})", m.hidden));
    m.head_dim = m.hidden / m.heads;
    m.ffn = 4 * m.hidden;
    m.name = row.get("model");
    m.sources = {fmt::format("{} row {} ({}), GPT-shaped from its layers/hidden/heads",
                             row.path.substr(row.path.find_last_of('/') + 1), r.id,
                             row.get("source_id"))};
  }
  // The row's decoder layers: its preset's, else its own (r.input.model is then the scenario's
  // default, not the row's: until 2026-12-01 the checks below read gpt2-large's 36 layers for
  // every GPT-shaped row, and skipped Narayanan's interleaved rows as "not divisible").
  auto decoder_layers = [&]() -> Result<std::int64_t> {
    if (preset.empty()) return std::int64_t{r.model.decoder_layers};
    CS_ASSIGN_OR_RETURN(auto model, load_model(preset));
    return std::int64_t{model.decoder_layers};
  };
  // The plan.
  PlanInput& p = r.input.plan;
  p.gpus = static_cast<int>(*gpus);
  p.seq_length = *seq;
  p.micro_batch = *micro;
  p.global_batch = *global;
  if (strategy.empty() && framework == "fsdp") strategy = "fsdp_full_shard";  // FSDP's default
  if (strategy == "fsdp_full_shard" || strategy == "zero3")
    p.zero = 3;
  else if (strategy == "zero2")
    p.zero = 2;
  else if (strategy == "zero1")
    p.zero = 1;
  else if (strategy == "ddp")
    p.zero = 0;
  else if (strategy == "3d" || strategy == "megatron") {
    if (!tp || !pp) return (reason = "no tp/pp for a 3d row", r);
    p.zero = 0;
  } else
    return (reason = strategy.empty() ? std::string("no strategy")
                                      : fmt::format("strategy '{}' not known", clip(strategy)),
            r);
  if (!framework_version.empty()) {
    if (framework != "deepspeed")
      return row.bad("framework", "a release only after deepspeed ('deepspeed 0.3')");
    p.framework = Framework::deepspeed;
    p.deepspeed_version = framework_version;
  }
  if (tp) p.tp = static_cast<int>(*tp);
  if (pp) p.pp = static_cast<int>(*pp);
  if (dp) p.dp = static_cast<int>(*dp);
  r.group = fmt::format("{}/{}", framework.empty() ? "-" : framework, strategy);
  // bf16 unless the row says fp16 or fp32 (amp_bf16, "mixed precision (16-bit)" and
  // "bf16 + Float8 nn.Linear" are bf16: FP8 GEMMs are not modelled).
  const std::string prec = lower(row.get("precision"));
  p.precision = prec.find("fp16") != std::string::npos ? Precision::fp16
                : prec.rfind("fp32", 0) == 0           ? Precision::fp32
                                                       : Precision::bf16;
  // none, selective, full or op; unknown or empty is none; anything else is the row's error
  // ("bogus" was read as none, found by probing, 2026-12-02).
  const std::string rc_name = lower(row.get("recompute"));
  auto rc = recompute_from_name(rc_name);
  if (!rc && !rc_name.empty() && rc_name != "unknown")
    return row.bad("recompute", "none, selective, full, op, unknown or empty");
  p.recompute = rc ? *rc : Recompute::none;
  // precision_aware_optimizer: Megatron-Core's --use-precision-aware-optimizer with both Adam
  // moments in the cell's dtype (--exp-avg-dtype, --exp-avg-sq-dtype; fp32 master weights).
  if (const std::string& pao = lower(row.get("precision_aware_optimizer")); !pao.empty()) {
    const auto d = grad_comm_dtype_from_name(pao);
    if (!d)
      return row.bad("precision_aware_optimizer",
                     "the Adam moments' dtype: fp32, fp16, bf16 or fp8, or empty");
    p.precision_aware_optimizer = true;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = *d;
  }
  // grad_comm_dtype: the type gradients are reduced in (--grad-comm-dtype; FSDP2's
  // MixedPrecisionPolicy reduce_dtype, torchtitan's mixed_precision_reduce); empty: the
  // framework's default as commscope models it, the training precision.
  if (const std::string& gd = lower(row.get("grad_comm_dtype")); !gd.empty()) {
    const auto d = grad_comm_dtype_from_name(gd);
    if (!d) return row.bad("grad_comm_dtype", "fp32, fp16, bf16 or fp8, or empty");
    p.grad_comm_dtype = *d;
  }
  // cross_entropy: the loss's (--cross-entropy); empty: Megatron-Core's vocab-parallel one.
  if (const std::string& ce = lower(row.get("cross_entropy")); !ce.empty()) {
    const auto c = cross_entropy_from_name(ce);
    if (!c) return row.bad("cross_entropy", "vocab-parallel, fused, torch or flash-attn, or empty");
    p.cross_entropy = *c;
  }
  // recompute_modules: Megatron-Core's --recompute-modules (names separated by spaces or
  // commas), with recompute selective.
  if (const std::string& mods = row.get("recompute_modules"); !mods.empty()) {
    auto bits = parse_recompute_modules(lower(mods));
    if (!bits) return row.bad_cell("recompute_modules", bits.error().message);
    p.recompute_modules = *bits;
  }
  // The plan dimensions of the columns after `notes` (issue 15; absent or empty: the
  // framework's default as commscope models it, docs/validate.md): cp, vp, ep, fp8,
  // sequence_parallel, attention; `assumed` names what a row takes from a documented default
  // rather than from its source.
  CS_ASSIGN_OR_RETURN(auto cp, row.count("cp"));
  CS_ASSIGN_OR_RETURN(auto vp, row.count("vp"));
  CS_ASSIGN_OR_RETURN(auto ep, row.count("ep"));
  CS_ASSIGN_OR_RETURN(auto expert_tp, row.count("expert_tp"));  // Megatron's, 1 or TP
  CS_ASSIGN_OR_RETURN(auto fp8, row.flag("fp8"));
  // Megatron-Core --fp8-param-gather (Megatron-Bridge's fp8_param_gather); empty: off.
  CS_ASSIGN_OR_RETURN(auto fp8_params, row.flag("fp8_param_gather"));
  CS_ASSIGN_OR_RETURN(auto sp, row.flag("sequence_parallel"));
  CS_ASSIGN_OR_RETURN(auto distopt, row.flag("distributed_optimizer"));
  CS_ASSIGN_OR_RETURN(auto tp_overlap, row.flag("tp_comm_overlap"));  // Megatron-Core's flag
  if (tp_overlap) p.tp_comm_overlap = *tp_overlap;
  // Megatron-Core's --overlap-moe-expert-parallel-comm (Megatron-Bridge's moe_a2a_overlap) and
  // --delay-wgrad-compute; empty: off.
  CS_ASSIGN_OR_RETURN(auto a2a_overlap, row.flag("moe_a2a_overlap"));
  if (a2a_overlap) p.overlap_moe_ep_comm = *a2a_overlap;
  CS_ASSIGN_OR_RETURN(auto delay_wgrad, row.flag("delay_wgrad_compute"));
  if (delay_wgrad) p.delay_wgrad_compute = *delay_wgrad;
  // Megatron-LM's asynchronous TP all-reduce; empty: the framework's default.
  CS_ASSIGN_OR_RETURN(auto async_ar, row.flag("async_tp_allreduce"));
  if (async_ar) p.tp_async_allreduce = *async_ar;
  // Megatron-LM's --overlap-grad-reduce and --overlap-param-gather (NeMo's distributed Adam:
  // overlap_grad_sync, overlap_param_sync); empty: the framework's default as commscope models
  // it (off under megatron, Megatron-LM's own defaults).
  CS_ASSIGN_OR_RETURN(auto grad_overlap, row.flag("overlap_grad_reduce"));
  CS_ASSIGN_OR_RETURN(auto param_overlap, row.flag("overlap_param_gather"));
  if (grad_overlap) p.overlap_grad_reduce = *grad_overlap;
  if (param_overlap) p.overlap_param_gather = *param_overlap;
  // Megatron-LM's --recompute-method and --recompute-num-layers, under recompute full;
  // empty: uniform, every block.
  if (const std::string& meth = lower(row.get("recompute_method")); !meth.empty()) {
    if (meth != "uniform" && meth != "block")
      return row.bad("recompute_method", "uniform or block, or empty");
    p.recompute_block = meth == "block";
  }
  CS_ASSIGN_OR_RETURN(auto recompute_layers, row.count("recompute_num_layers"));
  if (recompute_layers) p.recompute_num_layers = static_cast<int>(*recompute_layers);
  // Megatron-Core --cpu-offloading-num-layers (activations; docs/workload.md).
  CS_ASSIGN_OR_RETURN(auto offload, row.count("cpu_offloading_num_layers"));
  if (offload) p.cpu_offload_layers = static_cast<int>(*offload);
  if (cp) p.cp = static_cast<int>(*cp);
  // With CP, commscope derives DP from the GPU count (scenario.cpp refuses both): the row's
  // dp is checked against it instead.
  if (cp && *cp > 1) {
    if (dp && tp && pp && *dp * *tp * *pp * *cp != *gpus)
      return row.bad("dp", fmt::format("gpus / (tp x pp x cp) = {}", *gpus / (*tp * *pp * *cp)));
    p.dp.reset();
  }
  if (vp) p.virtual_stages = static_cast<int>(*vp);
  if (ep) p.ep = static_cast<int>(*ep);
  if (expert_tp) p.expert_tp = static_cast<int>(*expert_tp);
  if (fp8) p.fp8 = *fp8;
  if (fp8_params) p.fp8_param_gather = *fp8_params;
  if (sp) p.sequence_parallel = *sp;
  // Megatron's distributed optimizer is commscope's ZeRO-1 (docs/workload.md); on a sharded
  // (zero2/zero3) row it changes nothing.
  if (distopt && *distopt && p.zero.value_or(0) < 1) p.zero = 1;
  // moe_dispatcher: Megatron-LM's --moe-token-dispatcher-type (alltoall or flex; empty:
  // alltoall, commscope's default).
  if (const std::string& d = row.get("moe_dispatcher"); !d.empty()) {
    auto k = moe_dispatcher_from_name(lower(d));
    if (!k) return row.bad("moe_dispatcher", "alltoall, flex or empty");
    p.moe_dispatcher = *k;
  }
  if (const std::string& a = row.get("attention"); !a.empty()) {
    auto k = attention_kernel_from_name(lower(a));
    if (!k) return row.bad("attention", "flash, standard or empty");
    p.attention = *k;
  }
  // attention_backend: whose flash kernel (--attention-backend); empty: the framework's.
  if (const std::string& a = row.get("attention_backend"); !a.empty()) {
    auto k = attention_backend_from_name(lower(a));
    if (!k) return row.bad("attention_backend", "fused, flash or empty");
    p.attention_backend = *k;
  }
  // pipeline_layout: Megatron-Core's account_for_embedding_in_pipeline_split and
  // account_for_loss_in_pipeline_split (both set by NVIDIA's Llama 3.1 405B recipe): the
  // embedding and the loss each count as one layer when the layers are split over the
  // PP x VP model chunks, so the first and the last chunk hold one layer fewer.
  // Or Megatron-Core's --pipeline-model-parallel-layout string itself (E, t, L, '|', repeats),
  // checked where the plan is resolved.
  const std::string& layout_cell = row.get("pipeline_layout");
  if (!layout_cell.empty() && lower(layout_cell) != "embedding_and_loss") {
    auto parsed = parse_pipeline_layout(layout_cell);
    if (!parsed)
      return row.bad_cell("pipeline_layout", parsed.error().message + " (or embedding_and_loss)");
    p.pipeline_layout = layout_cell;
  } else if (!layout_cell.empty()) {
    // embedding_and_loss: split as Megatron-Core's two flags split it (spec/scenario.cpp); a
    // split that cannot be is this cell's error, not the scenario's.
    CS_ASSIGN_OR_RETURN(const std::int64_t row_layers, decoder_layers());
    const std::int64_t chunks = pp.value_or(1) * vp.value_or(1);
    const std::int64_t units = row_layers + 2;
    if (chunks < 2 || units % chunks != 0 || units / chunks < 2)
      return row.bad("pipeline_layout",
                     fmt::format("PP x VP ({}) dividing the layers + 2 ({}) into chunks of at "
                                 "least 2",
                                 chunks, units));
    p.account_embedding = true;
    p.account_loss = true;
  }
  // An interleaved row whose layers PP x VP does not divide needs a per-chunk layout the source
  // does not give (DeepSeek-V3's 61 layers on PP 8 x VP 4): skipped, not guessed.
  if (vp && *vp > 1 && !p.stage_layers && !p.pipeline_layout && !p.account_embedding) {
    CS_ASSIGN_OR_RETURN(const std::int64_t n, decoder_layers());
    const std::int64_t chunks = pp.value_or(1) * *vp;
    if (n > 0 && n % chunks != 0)
      return (reason = "layers not divisible by pp x vp (no layout stated)", r);
  }
  r.assumed = row.get("assumed");
  r.unmodelled = row.get("unmodelled");
  // The measured iteration time from the metric.
  const double tokens = static_cast<double>(*global) * static_cast<double>(*seq);
  if (metric == "tokens_per_s_per_gpu")
    r.measured_s = tokens / (value * static_cast<double>(*gpus));
  else if (metric == "iteration_time_s")
    r.measured_s = value;
  else if (metric == "samples_per_s")
    r.measured_s = static_cast<double>(*global) / value;
  else if (metric == "tflops_per_gpu") {
    // The source's own FLOP count, inverted: Narayanan et al. (SC'21) eq. (3),
    // F = 96 B s l h^2 (1 + s/6h + V/16lh) per iteration, which counts the recompute forward
    // whether or not the run recomputed; the value is F / (time x GPUs), so the time is
    // F / (value x GPUs) exactly (the model FLOPs without recompute would make it up to 25%
    // shorter than the run's).
    r.source = row.path;
    auto sc = resolve_run(r);
    if (!sc) return (reason = "scenario rejected: " + sc.error().message, r);
    const ModelSpec& m = r.model;
    const double B = static_cast<double>(*global), s = static_cast<double>(*seq);
    const double l = m.layers(), h = static_cast<double>(m.hidden);
    const double V = static_cast<double>(m.vocab);
    if (!(l > 0 && h > 0 && V > 0))
      return (reason = "no layers/hidden/vocab for a tflops_per_gpu row", r);
    const double flops = 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    r.measured_s = flops / (value * 1e12 * static_cast<double>(*gpus));
  } else
    return (reason = fmt::format("metric '{}' not known", clip(metric)), r);
  if (!(r.measured_s >= limits::kMinMeasuredIterationS) ||
      !(r.measured_s <= limits::kMaxMeasuredIterationS))
    return row.bad(
        "value",
        fmt::format("a value giving an iteration of 1e-6 to 1e6 s (it gives {} s)", r.measured_s));
  return r;
}

}  // namespace

std::string system_for_gpu(const std::string& gpu) {
  const std::string g = lower(gpu);
  if (g == "a100-40gb" || g == "a100-sxm4-40gb") return "dgx-a100-40gb";
  if (g == "a100-80gb" || g == "a100-sxm4-80gb") return "dgx-a100-80gb";
  // dgx-h100 is the SXM5 part (80 GB of HBM3, 700 W); an H100 with 96 GB of HBM2e (torchtitan's
  // 500 W Grand Teton GPUs) differs in memory, bandwidth and clock: no preset.
  if (g.rfind("h100", 0) == 0)
    return g.find("hbm2e") != std::string::npos || g.find("96gb") != std::string::npos ? ""
                                                                                       : "dgx-h100";
  if (g.rfind("h200", 0) == 0) return "dgx-h200";
  if (g.rfind("gb200", 0) == 0) return "gb200-nvl72";
  return "";
}

// vTrain's ground-truth columns (data/vtrain; "Parameters (billion)" only in the multi-node file).
constexpr std::string_view kVtrainColumns[] = {"Parameters (billion)",
                                               "# GPUs",
                                               "global batch",
                                               "micro batch",
                                               "hidden size",
                                               "attention heads",
                                               "# layers",
                                               "sequence length",
                                               "tensor parallelism",
                                               "data parallelism",
                                               "pipeline parallelism",
                                               "iteration time (ms)"};

// The columns of commscope's own CSV (docs/validate.md).
constexpr std::string_view kCommscopeColumns[] = {
    "model",       "system",       "network",
    "nodes",       "gpus",         "tp",
    "pp",          "dp",           "zero",
    "micro_batch", "global_batch", "seq_length",
    "precision",   "recompute",    "schedule",
    "attention",   "measured_s",   "measured_memory_gib",
    "outcome",     "notes",        "attention_backend"};

Result<std::vector<MeasuredRun>> read_measured_csv(const std::string& path,
                                                   const std::string& system, SkipCounts* skipped) {
  // A FIFO or a device would block or never end: only regular files.
  CS_RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("{}: cannot open", path)};
  note_input_read(path);  // no output may replace it
  std::string line;
  int physical = 0, lineno = 0;
  CS_ASSIGN_OR_RETURN(const bool has_header, next_record(in, line, physical, lineno, path));
  if (!has_header) return Error{fmt::format("{}: empty file, expected a header line", path)};
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
  // Line ends of a lone CR (classic Mac OS, some spreadsheet exports) make the file one line:
  // say so rather than naming the whole file as a header no reader knows.
  for (std::size_t cr = line.find('\r'); cr != std::string::npos; cr = line.find('\r', cr + 1))
    if (cr + 1 < line.size() && line[cr + 1] != '\n')
      return Error{fmt::format(
          "{}: line 1: expected LF or CRLF line ends, got a line ended by a lone CR (byte {})",
          path, cr + 1)};
  const std::vector<std::string> header = split(line);
  // A column twice would let one of its cells silently win over the other.
  for (std::size_t c = 0; c < header.size(); ++c)
    if (!header[c].empty() && std::find(header.begin(), header.begin() + static_cast<long>(c),
                                        header[c]) != header.begin() + static_cast<long>(c))
      return Error{fmt::format("{}: line {}: expected each column once, got '{}' twice", path,
                               lineno, header[c])};
  auto has = [&](const std::string& h) {
    return std::find(header.begin(), header.end(), h) != header.end();
  };
  const bool vtrain = has("iteration time (ms)");
  bool corpus = true;
  for (const char* c : kCorpusColumns) corpus = corpus && has(c);
  if (!vtrain && !corpus && !has("measured_s"))
    return Error{fmt::format(
        "{}: line 1: expected a vTrain header (… iteration time (ms)), a commscope header "
        "(model,…,measured_s) or the validation corpus header (id,source_id,…,split,notes), "
        "got '{}'",
        path, line.substr(0, 80))};
  // vTrain's files have these columns and no other: one more (a typo of one of them, another
  // tool's) was read past (found by probing, 2026-12-02).
  if (vtrain)
    for (const std::string& h : header)
      if (std::find(std::begin(kVtrainColumns), std::end(kVtrainColumns), h) ==
          std::end(kVtrainColumns))
        return Error{fmt::format("{}: line 1: unknown column '{}' in a vTrain file; expected {}",
                                 path, h, fmt::join(kVtrainColumns, ", "))};
  // A commscope header names only known columns: an unknown one (a typo, a column of another
  // tool) is an error before any row is read, whatever its cells hold.
  if (!vtrain && !corpus)
    for (const std::string& h : header)
      if (std::find(std::begin(kCommscopeColumns), std::end(kCommscopeColumns), h) ==
          std::end(kCommscopeColumns))
        return Error{fmt::format("{}: line 1: unknown column '{}'; expected {}", path, h,
                                 fmt::join(kCommscopeColumns, ", "))};
  if (corpus)
    for (const std::string& h : header)
      if (std::find(std::begin(kCorpusColumns), std::end(kCorpusColumns), h) ==
              std::end(kCorpusColumns) &&
          std::find(std::begin(kCorpusOptionalColumns), std::end(kCorpusOptionalColumns), h) ==
              std::end(kCorpusOptionalColumns))
        return Error{fmt::format(
            "{}: line 1: unknown column '{}'; expected the corpus's columns (id, ..., notes) and "
            "after them any of {}",
            path, h, fmt::join(kCorpusOptionalColumns, ", "))};
  // Every commscope row names its model: without the column every row would silently be the
  // default model.
  if (!vtrain && !corpus && !has("model"))
    return Error{fmt::format(
        "{}: line 1: expected a column 'model' (a preset name or model JSON per row), got the "
        "columns '{}'",
        path, line.substr(0, 120))};
  // The columns up to and including `notes` (the last required one) every corpus row has.
  const std::size_t notes_end =
      static_cast<std::size_t>(std::find(header.begin(), header.end(), "notes") - header.begin()) +
      1;
  std::vector<MeasuredRun> runs;
  std::map<std::string, int> corpus_ids;  // id -> its line
  std::int64_t data_rows = 0;
  while (true) {
    CS_ASSIGN_OR_RETURN(const bool more, next_record(in, line, physical, lineno, path));
    if (!more) break;
    if (line.empty() || line == "\r") continue;
    // Skipped corpus rows count too: the reasons kept for them are bounded by the same limit.
    if (data_rows++ >= limits::kMaxMeasuredRows)
      return Error{
          fmt::format("{}: line {}: expected at most {} measured runs per file "
                      "(commscope's limit), got more",
                      path, lineno, limits::kMaxMeasuredRows)};
    auto cells = split(line);
    // A corpus row may end at `notes`: the optional columns after it (cp, vp, ep, ...) are
    // then empty, so the rows written before those columns existed stay as they are.
    if (corpus && cells.size() < header.size() && cells.size() >= notes_end)
      cells.resize(header.size());
    if (cells.size() != header.size())
      return Error{fmt::format("{}: line {}: expected {} columns, got {}", path, lineno,
                               header.size(), cells.size())};
    MeasuredRun r;
    if (corpus) {
      // Each id once: validate's rows and calibrate's fit name rows by it (a second t005 was
      // read as another run, found by probing, 2026-12-02).
      const std::string& id = cells[static_cast<std::size_t>(
          std::find(header.begin(), header.end(), "id") - header.begin())];
      if (auto [at, fresh] = corpus_ids.emplace(id, lineno); !fresh)
        return Error{
            fmt::format("{}: line {}: column 'id': expected each row's id once, got '{}' "
                        "again (line {})",
                        path, lineno, id, at->second)};
      std::string reason;
      CS_ASSIGN_OR_RETURN(r, corpus_run(CorpusRow{header, cells, path, lineno}, reason));
      if (!reason.empty()) {
        if (skipped) ++(*skipped)[reason];
        continue;
      }
    } else if (vtrain) {
      std::map<std::string, double> v;
      for (std::size_t c = 0; c < header.size(); ++c) {
        double x = 0;
        // Sizes and counts become integers: at most 2^31.
        const bool time = header[c] == "iteration time (ms)";
        // Counts and sizes are whole (64.9 GPUs was read as 64): only the time and the model's
        // size in billions may have a fraction.
        const bool whole = !time && header[c] != "Parameters (billion)";
        if (!parse(cells[c], x) || !(x > 0) || !std::isfinite(x) || (whole && x != std::floor(x)) ||
            (!time && x > std::numeric_limits<int>::max()) ||
            (time && !(x >= 1e3 * limits::kMinMeasuredIterationS &&
                       x <= 1e3 * limits::kMaxMeasuredIterationS)))
          return Error{
              fmt::format("{}: line {}: column '{}': expected a positive finite number{}, got '{}'",
                          path, lineno, header[c],
                          time    ? " from 1e-3 to 1e9 (ms)"
                          : whole ? " (a whole number) up to 2147483647"
                                  : " up to 2147483647",
                          cells[c])};
        v[header[c]] = x;
      }
      for (std::string_view need : kVtrainColumns)
        if (need != "Parameters (billion)" && need != "iteration time (ms)" &&
            !v.count(std::string(need)))
          return Error{fmt::format("{}: line 1: expected a column '{}'", path, need)};
      if (std::fmod(v["hidden size"], v["attention heads"]) != 0)  // (head_dim was floored)
        return Error{fmt::format(
            "{}: line {}: column 'attention heads': expected a divisor of the hidden size ({}), "
            "got {}",
            path, lineno, v["hidden size"], v["attention heads"])};
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
          if (!parse(x, d) || !(d >= limits::kMinMeasuredIterationS) ||
              !(d <= limits::kMaxMeasuredIterationS))
            return bad("a number of seconds from 1e-6 to 1e6");
          r.measured_s = d;
        } else if (h == "precision") {
          auto p = precision_from_name(x);
          if (!p) return bad("fp32, fp16 or bf16");
          r.input.plan.precision = p;
        } else if (h == "recompute") {
          auto p = recompute_from_name(x);
          if (!p) return bad("none, selective, full or op");
          r.input.plan.recompute = p;
        } else if (h == "schedule") {
          auto p = schedule_from_name(x);
          if (!p) return bad("gpipe, 1f1b or interleaved");
          r.input.plan.schedule = p;
        } else if (h == "attention") {
          auto k = attention_kernel_from_name(x);
          if (!k) return bad("flash or standard");
          r.input.plan.attention = *k;
        } else if (h == "attention_backend") {
          auto k = attention_backend_from_name(x);
          if (!k) return bad("fused, flash or empty");
          r.input.plan.attention_backend = *k;
        } else if (h == "measured_memory_gib") {
          // Bounded like the GPUs' memories commscope knows of: a bad unit (bytes) is an error.
          if (!parse(x, d) || !(d >= limits::kMinMeasuredMemoryGiB) ||
              !(d <= limits::kMaxMeasuredMemoryGiB))
            return bad("a number of GiB from 1/1024 (1 MiB) to 1e6");
          r.measured_memory_gib = d;
        } else if (h == "outcome") {
          if (x == "oom")
            r.out_of_memory = true;
          else if (x != "ran")
            return bad("ran or oom (out of GPU memory)");
        } else if (h == "notes") {
          // Free text for the reader (how the run was measured); not read.
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
          else  // unreachable: the header was checked against kCommscopeColumns
            return Error{fmt::format("{}: line 1: unknown column '{}'", path, h)};
        }
      }
      if (r.input.model.empty())
        return Error{
            fmt::format("{}: line {}: column 'model': expected a model, got ''", path, lineno)};
      if (r.out_of_memory && (r.measured_s > 0 || r.measured_memory_gib > 0))
        return Error{fmt::format(
            "{}: line {}: column 'outcome': expected no measured_s and no measured_memory_gib "
            "for a run that ran out of memory, got {}",
            path, lineno, r.measured_s > 0 ? r.measured_s : r.measured_memory_gib)};
      if (r.measured_s <= 0 && !r.out_of_memory)
        return Error{fmt::format(
            "{}: line {}: column 'measured_s': expected a positive number, got ''", path, lineno)};
    }
    r.source = path;
    r.line = lineno;
    runs.push_back(std::move(r));
  }
  if (runs.empty() && !(corpus && lineno > 1))
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
