// torchtitan's TOML job file as commscope's model and plan flags (docs/predict.md, "torchtitan
// job files"). TOML is parsed by toml++ (Debian's libtomlplusplus-dev; docs/DEPENDENCIES.md).
#include "commscope/spec/torchtitan_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "commscope/spec/limits.h"
#include "commscope/spec/model.h"
#include "commscope/spec/scenario.h"
#include "commscope/util/input_file.h"

namespace commscope {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string describe(const toml::node& n) {
  if (auto s = n.value<std::string>(); s && n.is_string()) return fmt::format("\"{}\"", *s);
  if (n.is_integer()) return std::to_string(*n.value<std::int64_t>());
  if (n.is_floating_point()) {  // 8.0 as written, not 8 (which reads as a valid integer)
    const double v = *n.value<double>();
    return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{:.1f}", v)
                                                                         : fmt::format("{}", v);
  }
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date or time";
}

// Reads fields by name from the first of several tables that has them: torchtitan moved its
// parallelism keys from [training] (2024) to [parallelism] (2025).
class Fields {
 public:
  Fields(const toml::table& t, const std::string& path) : t_(t), path_(path) {}

  Error bad(std::string_view where, std::string_view expected, std::string_view got) const {
    return Error{fmt::format("{}: {}: expected {}, got {}", path_, where, expected, got)};
  }

  struct Found {
    const toml::node* node = nullptr;
    std::string where;  // "[training] seq_len"
  };
  Found find(std::initializer_list<const char*> tables, const char* key) const {
    for (const char* table : tables)
      // a dotted name is a nested table ([quantize.linear.float8])
      if (const toml::table* sub = t_.at_path(table).as_table())
        if (const toml::node* n = sub->get(key)) return {n, fmt::format("[{}] {}", table, key)};
    return {nullptr, fmt::format("[{}] {}", *tables.begin(), key)};
  }

  // An integer of at least `min` (or exactly `also`, torchtitan's -1 for "the rest"), and at
  // most `max` (commscope's limits, docs/limits.md: products of such fields stay in range).
  Result<std::optional<std::int64_t>> integer(std::initializer_list<const char*> tables,
                                              const char* key, std::int64_t min,
                                              std::optional<std::int64_t> also = {},
                                              std::int64_t max = limits::kMaxGlobalBatch) const {
    const Found f = find(tables, key);
    if (!f.node) return std::optional<std::int64_t>{};
    const std::string expected = also ? fmt::format("an integer of at least {} or {}", min, *also)
                                      : fmt::format("an integer of at least {}", min);
    if (!f.node->is_integer()) return bad(f.where, expected, describe(*f.node));
    const std::int64_t v = *f.node->value<std::int64_t>();
    if (v < min && v != also) return bad(f.where, expected, std::to_string(v));
    if (v > max)
      return bad(f.where, fmt::format("an integer of at most {} (commscope's limit)", max),
                 std::to_string(v));
    return std::optional<std::int64_t>{v};
  }
  Result<std::optional<std::string>> string(std::initializer_list<const char*> tables,
                                            const char* key) const {
    const Found f = find(tables, key);
    if (!f.node) return std::optional<std::string>{};
    if (!f.node->is_string()) return bad(f.where, "a string", describe(*f.node));
    return std::optional<std::string>{*f.node->value<std::string>()};
  }
  Result<std::optional<bool>> boolean(std::initializer_list<const char*> tables,
                                      const char* key) const {
    const Found f = find(tables, key);
    if (!f.node) return std::optional<bool>{};
    if (!f.node->is_boolean()) return bad(f.where, "true or false", describe(*f.node));
    return std::optional<bool>{*f.node->value<bool>()};
  }
  Result<std::vector<std::string>> strings(std::initializer_list<const char*> tables,
                                           const char* key) const {
    const Found f = find(tables, key);
    std::vector<std::string> out;
    if (!f.node) return out;
    const toml::array* a = f.node->as_array();
    if (!a) return bad(f.where, "an array of strings", describe(*f.node));
    for (const toml::node& n : *a) {
      if (!n.is_string()) return bad(f.where, "an array of strings", describe(n) + " in it");
      out.push_back(*n.value<std::string>());
    }
    return out;
  }

 private:
  const toml::table& t_;
  const std::string& path_;
};

// The tables torchtitan has kept its parallelism keys in, newest first.
constexpr std::initializer_list<const char*> kParallel = {"parallelism", "training",
                                                          "experimental"};

// The keys of those tables that set commscope's plan: a key one or two letters from one of them
// that is none of them is a misspelling, which torchtitan refuses and which would otherwise
// leave the plan at its default (a misspelt tensor_parallel_degree gave TP 1).
constexpr std::array<std::string_view, 16> kPlanKeys = {"data_parallel_degree",
                                                        "data_parallel_replicate_degree",
                                                        "data_parallel_shard_degree",
                                                        "tensor_parallel_degree",
                                                        "pipeline_parallel_degree",
                                                        "context_parallel_degree",
                                                        "expert_parallel_degree",
                                                        "expert_tensor_parallel_degree",
                                                        "pipeline_parallel_schedule",
                                                        "pipeline_parallel_microbatch_size",
                                                        "pipeline_parallel_microbatches",
                                                        "pipeline_parallel_layers_per_stage",
                                                        "local_batch_size",
                                                        "global_batch_size",
                                                        "seq_len",
                                                        "batch_size"};

// torchtitan's other [parallelism] fields (torchtitan/config/job_config.py, class Parallelism,
// 2025, with later additions): read by torchtitan, not by commscope.
constexpr std::array<std::string_view, 13> kOtherParallelismKeys = {
    "enable_compiled_autograd",
    "fsdp_reshard_after_forward",
    "disable_loss_parallel",
    "enable_async_tensor_parallel",
    "pipeline_parallel_split_points",
    "pipeline_parallel_schedule_csv",
    "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers",
    "module_fqns_per_model_part",
    "context_parallel_rotate_method",
    "expert_parallel_comm_backend",
    "context_parallel_load_balancer",
    "pipeline_parallel_expert_parallel_overlap"};

// Levenshtein distance, stopping at `cap` (enough to tell "one or two letters" apart).
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t cap) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > cap) return cap + 1;
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Refuses a key of [parallelism], [training] or [experimental] that misspells a plan key, and
// notes the [parallelism] keys that are neither commscope's nor torchtitan's.
Status check_parallel_keys(const toml::table& t, const std::string& path,
                           std::vector<std::string>& notes) {
  auto in = [](const auto& list, std::string_view key) {
    return std::find(list.begin(), list.end(), key) != list.end();
  };
  for (const char* table : kParallel) {
    const toml::table* sub = t[table].as_table();
    if (!sub) continue;
    for (const auto& [k, node] : *sub) {
      const std::string_view key = k.str();
      if (in(kPlanKeys, key) || in(kOtherParallelismKeys, key)) continue;
      for (std::string_view plan_key : kPlanKeys)
        if (edit_distance(key, plan_key, 2) <= 2)
          return Error{fmt::format(
              "{}: [{}] {}: expected a torchtitan field (did you mean {}?), got an unknown key "
              "(torchtitan refuses it; read as written, the plan would keep {}'s default)",
              path, table, key, plan_key, plan_key)};
      if (std::string_view(table) == "parallelism")
        notes.push_back(fmt::format("[parallelism] {}: not a field commscope knows; ignored", key));
    }
  }
  return {};
}

// The model chunks a pipeline rank holds and the layers of each stage, as torchtitan's
// pipeline_llm splits them (torchtitan/distributed/pipeline_parallel.py, 2025):
// `pipeline_parallel_layers_per_stage` k gives ceil((layers + first weight + last weight) / k)
// stages, which PP must divide, one a rank for 1F1B and GPipe, two or more for Interleaved1F1B
// (two without k); the stages take the layers in model order, the embedding weighing
// `pipeline_parallel_first_stage_less_layers` layers (default 1) on the first and the norm and
// output `pipeline_parallel_last_stage_less_layers` (default 1) on the last, the remainder one
// more layer to each of the first stages (generate_llm_fqn_per_model_part). Explicit
// `module_fqns_per_model_part` or `pipeline_parallel_split_points` ("layers.N") give the split
// themselves. A 2024 file (no [parallelism] table) is split evenly, as torchtitan did then.
// Returns the stages a rank holds; sets plan.stage_layers where the split is uneven.
Result<int> torchtitan_stages(const Fields& f, const toml::table& t, int layers, std::int64_t pp,
                              bool single, PlanInput& plan) {
  const bool layout_2025 = t["parallelism"].as_table() != nullptr;
  CS_ASSIGN_OR_RETURN(auto per_stage,
                      f.integer(kParallel, "pipeline_parallel_layers_per_stage", 1, {}, layers));
  CS_ASSIGN_OR_RETURN(
      auto first_weight,
      f.integer(kParallel, "pipeline_parallel_first_stage_less_layers", 0, {}, layers));
  CS_ASSIGN_OR_RETURN(
      auto last_weight,
      f.integer(kParallel, "pipeline_parallel_last_stage_less_layers", 0, {}, layers));
  CS_ASSIGN_OR_RETURN(auto points, f.strings(kParallel, "pipeline_parallel_split_points"));
  const std::int64_t in = first_weight.value_or(1), out = last_weight.value_or(1);
  const std::string schedule = single ? "a single-stage schedule (1F1B, GPipe)" : "Interleaved1F1B";
  std::int64_t total = pp * (single ? 1 : 2);
  if (per_stage) {
    const std::int64_t n = (layers + in + out + *per_stage - 1) / *per_stage;
    const std::string where = f.find(kParallel, "pipeline_parallel_layers_per_stage").where;
    if (n % pp != 0)
      return f.bad(where,
                   fmt::format("a stage size giving a number of stages that PP {} divides "
                               "(ceil(({} layers + {} + {}) / {}) = {} stages)",
                               pp, layers, in, out, *per_stage, n),
                   std::to_string(*per_stage));
    if (single ? n != pp : n < 2 * pp)
      return f.bad(where,
                   fmt::format("{} a pipeline rank with {} (ceil(({} layers + {} + {}) / "
                               "{}) = {} stages on PP {})",
                               single ? "one stage" : "two or more stages", schedule, layers, in,
                               out, *per_stage, n, pp),
                   std::to_string(*per_stage));
    total = n;
  }
  // Explicit splits: the layers of each part.
  const toml::node* fqns = nullptr;
  for (const char* table : kParallel)
    if (const toml::table* sub = t[table].as_table(); sub && !fqns)
      fqns = sub->get("module_fqns_per_model_part");
  std::vector<int> counts;
  auto layer_index = [&](std::string_view name) -> std::optional<int> {
    if (name.rfind("layers.", 0) != 0) return std::nullopt;
    const std::string_view digits = name.substr(7);
    int v = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size() || v < 0 || v >= layers)
      return std::nullopt;
    return v;
  };
  if (fqns) {
    const std::string where = f.find(kParallel, "module_fqns_per_model_part").where;
    const toml::array* parts = fqns->as_array();
    if (!parts) return f.bad(where, "an array of arrays of module names", describe(*fqns));
    if (!per_stage && !single && parts->size() % static_cast<std::size_t>(pp) == 0 &&
        parts->size() >= 2 * static_cast<std::size_t>(pp))
      total = static_cast<std::int64_t>(parts->size());
    if (static_cast<std::int64_t>(parts->size()) != total)
      return f.bad(where, fmt::format("{} model parts (PP {} x {} a rank)", total, pp, total / pp),
                   fmt::format("{} parts", parts->size()));
    std::vector<char> seen(static_cast<std::size_t>(layers), 0);
    for (const toml::node& part : *parts) {
      const toml::array* names = part.as_array();
      if (!names) return f.bad(where, "an array of arrays of module names", describe(part));
      int count = 0;
      for (const toml::node& name : *names) {
        if (!name.is_string()) return f.bad(where, "module names (strings)", describe(name));
        const std::string text = *name.value<std::string>();
        if (text.rfind("layers", 0) != 0) continue;  // tok_embeddings, norm, output
        const auto i = layer_index(text);
        if (!i || seen[static_cast<std::size_t>(*i)])
          return f.bad(where, fmt::format("each of layers.0 .. layers.{} in one part", layers - 1),
                       fmt::format("\"{}\"", text));
        seen[static_cast<std::size_t>(*i)] = 1;
        ++count;
      }
      counts.push_back(count);
    }
    if (const auto missing = std::find(seen.begin(), seen.end(), 0); missing != seen.end())
      return f.bad(where, fmt::format("every one of layers.0 .. layers.{} in a part", layers - 1),
                   fmt::format("no part with layers.{}", missing - seen.begin()));
  } else if (!points.empty()) {
    const std::string where = f.find(kParallel, "pipeline_parallel_split_points").where;
    if (!per_stage && !single && (points.size() + 1) % static_cast<std::size_t>(pp) == 0 &&
        points.size() + 1 >= 2 * static_cast<std::size_t>(pp))
      total = static_cast<std::int64_t>(points.size()) + 1;
    if (static_cast<std::int64_t>(points.size()) + 1 != total)
      return f.bad(where,
                   fmt::format("{} split points (PP {} x {} stages a rank, less one)", total - 1,
                               pp, total / pp),
                   fmt::format("{} points", points.size()));
    int previous = 0;
    for (const std::string& point : points) {
      const auto i = layer_index(point);
      if (!i || *i <= previous)
        return f.bad(where,
                     fmt::format("increasing points from layers.1 to layers.{} after layers.{}",
                                 layers - 1, previous),
                     fmt::format("\"{}\"", point));
      counts.push_back(*i - previous);
      previous = *i;
    }
    counts.push_back(layers - previous);
  } else if (layout_2025) {
    const std::int64_t effective = layers + in + out, base = effective / total,
                       extra = effective % total;
    const std::string where =
        f.find(kParallel, in > out ? "pipeline_parallel_first_stage_less_layers"
                                   : "pipeline_parallel_last_stage_less_layers")
            .where;
    if (base < 1 || in > base || out > base)
      return f.bad(where,
                   fmt::format("weights of the embedding and the output of at most {} layers "
                               "({} layers + {} + {} over {} stages)",
                               base, layers, in, out, total),
                   fmt::format("{} and {}", in, out));
    int left = layers;
    for (std::int64_t i = 0; i < total; ++i) {
      std::int64_t c = base + (i < extra ? 1 : 0);
      if (i == 0) c -= in;
      if (i == total - 1) c -= out;
      const int take = static_cast<int>(std::min<std::int64_t>(c, left));
      counts.push_back(take);
      left -= take;
    }
    if (left != 0)  // cannot happen: the counts sum to the effective layers less the weights
      return f.bad(where, "a split that places every layer", fmt::format("{} left", left));
  }
  if (!counts.empty() &&
      std::any_of(counts.begin(), counts.end(), [&](int c) { return c != counts.front(); }))
    plan.stage_layers = counts;
  return static_cast<int>(total / pp);
}
}  // namespace

Result<TorchtitanJob> torchtitan_from_toml(std::string_view text, const std::string& path) {
  toml::table t;
  try {
    t = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return Error{fmt::format("{}: line {}, column {}: {}", path, e.source().begin.line,
                             e.source().begin.column, e.description())};
  }
  const Fields f(t, path);
  TorchtitanJob job;
  CS_RETURN_IF_ERROR(check_parallel_keys(t, path, job.notes));
  PlanInput& p = job.plan;
  // "[experimental] key" where a 2024 file has it, else "[parallelism] key".
  auto where = [&](const char* key) { return f.find(kParallel, key).where; };

  // ---- [model]: the preset of the same architecture ----
  CS_ASSIGN_OR_RETURN(auto name, f.string({"model"}, "name"));
  CS_ASSIGN_OR_RETURN(auto flavor, f.string({"model"}, "flavor"));
  struct Preset {
    const char *name, *flavor, *preset;
  };
  static constexpr Preset kPresets[] = {{"llama2", "7b", "llama2-7b"},
                                        {"llama2", "13b", "llama2-13b"},
                                        {"llama2", "70b", "llama2-70b"},
                                        {"llama3", "8b", "llama3-8b"},
                                        {"llama3", "70b", "llama3-70b"},
                                        {"llama3", "405b", "llama3-405b"},
                                        {"llama4", "17bx16e", "llama4-scout"},
                                        {"llama4", "17bx128e", "llama4-maverick"},
                                        {"llama4", "17bx16e_irope", "llama4-scout"},
                                        {"llama4", "17bx128e_irope", "llama4-maverick"},
                                        {"deepseek_v3", "16b", "deepseek-v2-lite"},
                                        {"deepseek_v3", "671b", "deepseek-v3"},
                                        {"qwen3", "0.6b", "qwen3-0.6b"},
                                        {"qwen3", "1.7b", "qwen3-1.7b"},
                                        {"qwen3", "4b", "qwen3-4b"},
                                        {"qwen3", "8b", "qwen3-8b"},
                                        {"qwen3", "14b", "qwen3-14b"},
                                        {"qwen3", "32b", "qwen3-32b"},
                                        {"qwen3", "30b-a3b", "qwen3-30b-a3b"},
                                        {"qwen3", "235b-a22b", "qwen3-235b-a22b"}};
  const std::string n = lower(name.value_or("")), fl = lower(flavor.value_or(""));
  for (const Preset& pr : kPresets)
    if (n == pr.name && fl == pr.flavor) job.model = pr.preset;
  if (job.model.empty())
    return f.bad("[model] name and flavor",
                 "a torchtitan model commscope has a preset for: llama2 7B, 13B or 70B; llama3 "
                 "8B, 70B or 405B; llama4 17bx16e or 17bx128e (or their _irope flavors); "
                 "deepseek_v3 16B or 671B; qwen3 "
                 "0.6B, 1.7B, 4B, 8B, 14B, 32B, "
                 "30B-A3B or 235B-A22B",
                 fmt::format("{} {}", name.value_or("(no name)"), flavor.value_or("(no flavor)")));
  // Llama 4's iRoPE flavors (v0.2.2 models/llama4: NoPE on every fourth layer, chunked
  // attention in blocks of fixed_attn_block_size 8192 on the others, block_causal document
  // masks through FlexAttention) cost what the plain flavors do where a sequence is one document
  // of at most 8192 tokens; otherwise full causal attention is an upper bound.
  if (fl.ends_with("_irope"))
    job.notes.push_back(fmt::format(
        "[model] flavor {}: iRoPE's chunked attention (blocks of 8192 tokens) and block_causal "
        "document masks are priced as full causal attention over the sequence: the same cost "
        "for one document of at most 8192 tokens, an upper bound otherwise",
        flavor.value_or("")));
  // torchtitan's DeepSeek-V3 has no multi-token-prediction module (v0.2.2
  // models/deepseek_v3/model/model.py), which the deepseek-v3 preset, from the Hugging Face
  // config's num_nextn_predict_layers, has.
  p.mtp_layers = 0;
  CS_ASSIGN_OR_RETURN(auto converters, f.strings({"model"}, "converters"));
  for (const std::string& c : converters) {
    // "quantize.linear.float8": torchtitan's spelling since its quantize section (2025; the
    // Float8 section [quantize.linear.float8]); "float8" before. (The newer one was refused,
    // found by probing, 2026-12-02.)
    if (c == "float8" || c == "quantize.linear.float8")
      p.fp8 = true;
    else
      return f.bad("[model] converters",
                   "float8, quantize.linear.float8 or nothing (the converters commscope models)",
                   fmt::format("\"{}\"", c));
  }
  CS_ASSIGN_OR_RETURN(auto float8_linear, f.boolean({"float8"}, "enable_float8_linear"));
  if (float8_linear.value_or(false)) p.fp8 = true;  // the 2024 spelling
  // torchtitan's Llama runs F.scaled_dot_product_attention (FlashAttention on the GPUs commscope
  // models); FlexAttention, where asked for, is priced the same way.
  p.attention = AttentionKernel::flash;
  CS_ASSIGN_OR_RETURN(auto flex, f.boolean({"model"}, "use_flex_attn"));
  if (flex.value_or(false))
    job.notes.push_back("[model] use_flex_attn: FlexAttention is priced as FlashAttention");

  // torchtitan's FSDP2 CPU offload (apply_fsdp: CPUOffloadPolicy(), pinned): --fsdp-cpu-offload.
  CS_ASSIGN_OR_RETURN(auto cpu_offload, f.boolean({"training"}, "enable_cpu_offload"));
  if (cpu_offload.value_or(false)) p.fsdp_cpu_offload = true;

  // ---- [training]: batch, sequence, precision ----
  CS_ASSIGN_OR_RETURN(auto local, f.integer({"training"}, "local_batch_size", 1));
  const char* local_key = "local_batch_size";
  if (!local) {
    CS_ASSIGN_OR_RETURN(local, f.integer({"training"}, "batch_size", 1));  // 2024
    if (local) local_key = "batch_size";
  }
  // torchtitan's defaults where the file says nothing (JobConfig: local_batch_size 8, seq_len
  // 2048; the 2024 batch_size 8 too): commscope used 1 and the model's sequence length.
  if (!local) local = 8;
  CS_ASSIGN_OR_RETURN(auto global, f.integer({"training"}, "global_batch_size", 1, -1));
  CS_ASSIGN_OR_RETURN(auto seq, f.integer({"training"}, "seq_len", 1, {}, limits::kMaxSeqLength));
  p.seq_length = seq.value_or(2048);
  p.local_batch = *local;
  p.amp_needs_fsdp = true;  // (resolve_scenario: no FSDP, no mixed precision)
  CS_ASSIGN_OR_RETURN(auto param_dtype, f.string({"training"}, "mixed_precision_param"));
  const std::string pd = param_dtype.value_or("bfloat16");  // torchtitan's default
  if (pd == "bfloat16")
    p.precision = Precision::bf16;
  else if (pd == "float32")
    p.precision = Precision::fp32;
  else
    return f.bad("[training] mixed_precision_param", "bfloat16 or float32",
                 fmt::format("\"{}\"", pd));
  // FSDP2's reduce dtype: torchtitan's default float32, the gradients' reduce-scatter in fp32.
  CS_ASSIGN_OR_RETURN(auto reduce_dtype, f.string({"training"}, "mixed_precision_reduce"));
  const std::string rd = reduce_dtype.value_or("float32");
  if (rd == "float32")
    p.grad_comm_dtype = DType::fp32;
  else if (rd == "bfloat16")
    p.grad_comm_dtype = DType::bf16;
  else
    return f.bad("[training] mixed_precision_reduce", "float32 or bfloat16",
                 fmt::format("\"{}\"", rd));

  // torchtitan's loss is torch.nn.functional.cross_entropy on the logits cast to fp32 (its
  // train.py loss_fn in 2024, torchtitan/components/loss.py cross_entropy_loss since; under TP,
  // PyTorch's loss_parallel over the vocabulary shard).
  p.cross_entropy = CrossEntropy::torch;

  // ---- [parallelism] (or [training] / [experimental] in 2024's files) ----
  p.framework = Framework::fsdp;  // FSDP2 (fully_shard) over the data-parallel shard dimension
  CS_ASSIGN_OR_RETURN(auto shard,
                      f.integer(kParallel, "data_parallel_shard_degree", 1, -1, limits::kMaxGpus));
  if (!shard) {
    CS_ASSIGN_OR_RETURN(
        shard, f.integer(kParallel, "data_parallel_degree", 1, -1, limits::kMaxGpus));  // 2024
  }
  CS_ASSIGN_OR_RETURN(auto replicate, f.integer(kParallel, "data_parallel_replicate_degree", 1, {},
                                                limits::kMaxGpus));
  CS_ASSIGN_OR_RETURN(auto tp,
                      f.integer(kParallel, "tensor_parallel_degree", 1, {}, limits::kMaxGpus));
  CS_ASSIGN_OR_RETURN(auto pp,
                      f.integer(kParallel, "pipeline_parallel_degree", 1, {}, limits::kMaxGpus));
  CS_ASSIGN_OR_RETURN(auto cp,
                      f.integer(kParallel, "context_parallel_degree", 1, {}, limits::kMaxGpus));
  const std::int64_t sh = shard.value_or(-1), rep = replicate.value_or(1);
  if (sh * rep > limits::kMaxGpus)  // each at most kMaxGpus: no overflow
    return f.bad(where("data_parallel_replicate_degree"),
                 fmt::format("shard x replicate degrees of at most {} GPUs", limits::kMaxGpus),
                 fmt::format("{} x {}", sh, rep));
  if (tp) p.tp = static_cast<int>(*tp);
  if (pp) p.pp = static_cast<int>(*pp);
  if (cp) p.cp = static_cast<int>(*cp);
  if (sh >= 1) p.dp = static_cast<int>(sh * rep);  // -1: the GPUs the other degrees leave
  if (sh == 1) {
    p.fsdp_sharding = FsdpSharding::no_shard;  // replicate only: DDP
  } else if (rep > 1) {
    // HSDP: sharded over the shard degree's ranks (-1: the GPUs the other degrees leave, over
    // the replicas), replicated over the replicate degree's
    p.fsdp_sharding = FsdpSharding::hybrid_shard;
    if (sh > 1)
      p.fsdp_shard_size = static_cast<int>(sh);
    else
      p.fsdp_replicate_size = static_cast<int>(rep);
  }
  // Whether FSDP frees the gathered parameters after forward (fsdp_reshard_after_forward,
  // 2025; torchtitan's code since July 2024 before that): "default" does unless the plan
  // pipelines (each micro-batch's backward would gather them again), "always", "never". Not
  // resharding is FSDP's SHARD_GRAD_OP.
  CS_ASSIGN_OR_RETURN(auto reshard, f.string(kParallel, "fsdp_reshard_after_forward"));
  const std::string ra = reshard.value_or("default");
  if (ra != "default" && ra != "always" && ra != "never")
    return f.bad(where("fsdp_reshard_after_forward"), "default, always or never",
                 fmt::format("\"{}\"", ra));
  const bool reshards = ra == "always" || (ra == "default" && p.pp.value_or(1) == 1);
  // PyTorch's pipelining runtime keeps FSDP's gradients unsharded from one micro-batch to the
  // next and reduces them after the last backward (PipelineStage: set_requires_gradient_sync
  // and set_reshard_after_backward(False) in each backward, then one post-backward pass), and
  // with them the parameters: after forward where forward keeps them, after each backward in
  // any case ("always": gathered again for each backward, kept until the next forward ends;
  // ParallelPlan::fsdp_unsharded_after_backward).
  if (p.pp.value_or(1) > 1 && sh != 1) p.fsdp_grad_sync = FsdpGradSync::step;
  if (!reshards && sh != 1)
    p.fsdp_sharding = rep > 1 ? FsdpSharding::hybrid_shard_zero2 : FsdpSharding::shard_grad_op;
  // torchtitan's tensor parallelism shards the norms' sequence (SequenceParallel) and, with
  // enable_async_tensor_parallel, overlaps the gathers and reduce-scatters with the matmuls.
  CS_ASSIGN_OR_RETURN(auto async_tp, f.boolean(kParallel, "enable_async_tensor_parallel"));
  // torch.compile: [compile] enable (2025), [training] compile (2024); read once, for async TP
  // here and for its note below.
  CS_ASSIGN_OR_RETURN(auto compile, f.boolean({"compile", "training"}, "enable"));
  CS_ASSIGN_OR_RETURN(auto compile_2024, f.boolean({"training"}, "compile"));
  const bool compiled = compile.value_or(false) || compile_2024.value_or(false);
  if (async_tp.value_or(false)) {
    // Async TP is an inductor pass: torchtitan (v0.2.0 on, maybe_enable_async_tp) raises
    // "Async TP requires --training.compile" without it (v0.1.0 ran the eager kernels).
    if (!compiled)
      return f.bad(where("enable_async_tensor_parallel"),
                   "[compile] enable = true beside it (torchtitan raises \"Async TP requires "
                   "--training.compile\")",
                   "true without compile");
  }
  if (p.tp.value_or(1) > 1) {
    p.sequence_parallel = true;
    if (async_tp.value_or(false)) p.tp_comm_overlap = true;
  }
  // Context parallelism: PyTorch's context_parallel all-gathers K and V ("allgather", the
  // default) or passes them round the ring ("alltoall").
  CS_ASSIGN_OR_RETURN(auto rotate, f.string(kParallel, "context_parallel_rotate_method"));
  if (p.cp.value_or(1) > 1) {
    const std::string r = rotate.value_or("allgather");
    if (r == "allgather")
      p.cp_comm_type = CpCommType::all_gather;
    else if (r == "alltoall")
      p.cp_comm_type = CpCommType::p2p;
    else
      return f.bad(where("context_parallel_rotate_method"), "allgather or alltoall",
                   fmt::format("\"{}\"", r));
  }

  // The model's layers, for what torchtitan states per stage or per block.
  CS_ASSIGN_OR_RETURN(ModelSpec model, load_model(job.model));
  const int layers = model.layers();

  // Expert parallelism (torchtitan's MoE models; "no effect for non-MoE models"): the routed
  // experts split over EP ranks, with tensor parallelism of their own (ETP, 1 or TP) where EP
  // is above 1 and the dense layers' otherwise; the tokens dispatched by all-to-all, or by
  // DeepEP (Megatron-Core's flex dispatcher runs the same kernels).
  CS_ASSIGN_OR_RETURN(auto ep,
                      f.integer(kParallel, "expert_parallel_degree", 1, {}, limits::kMaxGpus));
  CS_ASSIGN_OR_RETURN(
      auto etp, f.integer(kParallel, "expert_tensor_parallel_degree", 1, {}, limits::kMaxGpus));
  CS_ASSIGN_OR_RETURN(auto ep_backend, f.string(kParallel, "expert_parallel_comm_backend"));
  if (model.moe() && ep.value_or(1) > 1) {
    p.ep = static_cast<int>(*ep);
    p.expert_tp = static_cast<int>(etp.value_or(1));  // torchtitan's default
    const std::string b = ep_backend.value_or("standard");
    if (b == "deepep")
      p.moe_dispatcher = MoeDispatcher::flex;
    else if (b != "standard")
      return f.bad(where("expert_parallel_comm_backend"), "standard or deepep",
                   fmt::format("\"{}\"", b));
  }

  // Replicate-only data parallelism (shard degree 1) is DDP in torchtitan, whose parallelize
  // functions raise "DDP has not supported > 1D parallelism" beside tensor or pipeline
  // parallelism (v0.2.2 models/*/infra/parallelize.py; with CP or EP they take the FSDP path).
  if (sh == 1 && rep > 1 && p.cp.value_or(1) == 1 && p.ep.value_or(1) == 1 &&
      (p.tp.value_or(1) > 1 || p.pp.value_or(1) > 1))
    return f.bad(where("data_parallel_replicate_degree"),
                 "a shard degree above 1 beside tensor or pipeline parallelism (torchtitan runs "
                 "replicate-only data parallelism as DDP, which raises \"DDP has not supported > "
                 "1D parallelism\")",
                 fmt::format("replicate {} with shard 1, TP {}, PP {}", rep, p.tp.value_or(1),
                             p.pp.value_or(1)));

  // ---- pipeline: schedule and micro-batches ----
  const std::int64_t stages = p.pp.value_or(1);
  std::int64_t micro = local.value_or(1);
  std::string micro_field = f.find({"training"}, local_key).where;  // where the micro-batch is
  int virtual_stages = 1;
  if (stages > 1) {
    CS_ASSIGN_OR_RETURN(auto schedule, f.string(kParallel, "pipeline_parallel_schedule"));
    // torchtitan's default 1F1B; PyTorch's get_schedule_class compares lower-cased names
    const std::string written = schedule.value_or("1F1B");
    std::string sc = written;
    std::transform(sc.begin(), sc.end(), sc.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (sc == "1f1b") {
      p.schedule = Schedule::one_f_one_b;
    } else if (sc == "gpipe") {
      p.schedule = Schedule::gpipe;
    } else if (sc == "interleaved1f1b") {
      p.schedule = Schedule::interleaved;
    } else {
      return f.bad(where("pipeline_parallel_schedule"),
                   "1F1B, GPipe or Interleaved1F1B (the schedules commscope models)",
                   fmt::format("\"{}\"", written));
    }
    CS_ASSIGN_OR_RETURN(virtual_stages,
                        torchtitan_stages(f, t, layers, stages, sc != "interleaved1f1b", p));
    if (virtual_stages > 1) p.virtual_stages = virtual_stages;
    // A micro-batch: pipeline_parallel_microbatch_size samples (default 1), or in 2024's files
    // the local batch over pipeline_parallel_microbatches.
    CS_ASSIGN_OR_RETURN(auto size, f.integer(kParallel, "pipeline_parallel_microbatch_size", 1));
    CS_ASSIGN_OR_RETURN(auto count, f.integer(kParallel, "pipeline_parallel_microbatches", 1));
    if (size) {
      micro = *size;
      micro_field = where("pipeline_parallel_microbatch_size");
    } else if (count) {
      micro = local.value_or(1) / *count;
    } else {
      micro = 1;
    }
    if (size && local.value_or(1) % *size != 0)
      return f.bad(where("pipeline_parallel_microbatch_size"),
                   fmt::format("a divisor of the local batch of {}", local.value_or(1)),
                   std::to_string(*size));
    if (!size && count && local.value_or(1) % *count != 0)
      return f.bad(where("pipeline_parallel_microbatches"),
                   fmt::format("a divisor of the local batch of {}", local.value_or(1)),
                   std::to_string(*count));
  }
  if (micro > limits::kMaxMicroBatch)
    return f.bad(micro_field,
                 fmt::format("a micro-batch of at most {} samples (commscope's limit)",
                             limits::kMaxMicroBatch),
                 std::to_string(micro));
  p.micro_batch = micro;
  // The global batch: stated, or the local batch on every data-parallel rank (torchtitan's -1).
  if (global && *global > 0)
    p.global_batch = *global;
  else
    p.grad_accum = local.value_or(1) / micro;

  // ---- [activation_checkpoint] ----
  CS_ASSIGN_OR_RETURN(auto mode, f.string({"activation_checkpoint"}, "mode"));
  CS_ASSIGN_OR_RETURN(auto option, f.string({"activation_checkpoint"}, "selective_ac_option"));
  const std::string m = mode.value_or("selective");  // torchtitan's default: selective, "2"
  if (m == "none") {
    p.recompute = Recompute::none;
  } else if (m == "full") {
    p.recompute = Recompute::full;
  } else if (m == "selective") {
    const std::string o = option.value_or("2");
    if (o == "op") {
      if (auto gap = op_recompute_model_gap(model))
        return f.bad("[activation_checkpoint] selective_ac_option",
                     fmt::format("a layer interval, or mode full or none (op-level "
                                 "checkpointing is modelled with {}, not {})",
                                 gap->first, gap->second),
                     "\"op\"");
      p.recompute = Recompute::op;
      CS_ASSIGN_OR_RETURN(auto early, f.boolean({"activation_checkpoint"}, "early_stop"));
      if (early.value_or(false) && (model.moe() || model.mla()))
        job.notes.push_back(
            "[activation_checkpoint] early_stop: a MoE or latent-attention model's replay is "
            "priced to the block's end (torchtitan's default, early_stop false); stopping early "
            "skips the last output projection where nothing after it is needed");
    } else if (!o.empty() &&
               std::all_of(o.begin(), o.end(), [](unsigned char c) { return std::isdigit(c); }) &&
               o.size() < 6 && std::stoi(o) == 0) {
      // "0": every block (torchtitan's _apply_layer_sac: `not ac_freq or count % ac_freq == 0`)
      p.recompute = Recompute::full;
    } else if (!o.empty() &&
               std::all_of(o.begin(), o.end(), [](unsigned char c) { return std::isdigit(c); }) &&
               o.size() < 6 && std::stoi(o) >= 1) {
      // Every k-th block of a model part fully checkpointed: Megatron's block method with the
      // chunk's layers / k blocks (the same time and memory; only which blocks differs). Under
      // Interleaved1F1B a rank's chunks share torchtitan's count (_apply_layer_sac._count runs
      // on over the model parts), so each chunk has its share within one block; it was refused
      // (torchtitan's default "2" too, named as if the file set it; 2026-11-30). The interval is
      // kept, not the count: resolve_scenario counts it against the plan's PP and VP, which
      // flags may change (the file's count was kept: 20 of Llama 2 13B's 40 blocks at PP 4,
      // where each stage has 10, replayed all of them; 2026-12-01).
      p.recompute = Recompute::full;
      p.recompute_layer_interval = std::stoi(o);
    } else {
      return f.bad("[activation_checkpoint] selective_ac_option",
                   "op or a layer interval (0: every block)", fmt::format("\"{}\"", o));
    }
  } else {
    return f.bad("[activation_checkpoint] mode", "none, full or selective",
                 fmt::format("\"{}\"", m));
  }

  // ---- read, not modelled ----
  if (compiled)
    job.notes.push_back(
        "[compile] enable: torch.compile's fused kernels are not modelled (commscope prices the "
        "eager kernels)");
  CS_ASSIGN_OR_RETURN(auto fp8_gather, f.boolean({"float8"}, "enable_fsdp_float8_all_gather"));
  CS_ASSIGN_OR_RETURN(auto fp8_gather_q,
                      f.boolean({"quantize.linear.float8"}, "enable_fsdp_float8_all_gather"));
  if (fp8_gather.value_or(false) || fp8_gather_q.value_or(false))
    job.notes.push_back(fmt::format(
        "[{}] enable_fsdp_float8_all_gather: FSDP's all-gathers are priced in the parameters' "
        "type, not in float8",
        fp8_gather.value_or(false) ? "float8" : "quantize.linear.float8"));
  return job;
}

Result<TorchtitanJob> load_torchtitan_config(const std::string& path) {
  // Job files are kilobytes; a larger file is a mistake, not one to read into memory.
  CS_ASSIGN_OR_RETURN(const std::string text,
                      read_small_file(path, 1ull << 20, "a torchtitan job file"));
  if (text.empty())
    return Error{fmt::format("{}: empty file, expected a torchtitan job file", path)};
  return torchtitan_from_toml(text, path);
}

}  // namespace commscope
