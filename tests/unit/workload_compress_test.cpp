// Compressed communication (docs/workload.md, "Compressed communication"), against closed
// forms computed here from the model's shapes and the wire types' sizes:
// - --grad-comm-dtype: every data-parallel gradient reduction carries the same elements in the
//   wire type, so its bytes are exactly the uncompressed bytes times the size ratio; nothing
//   else changes (DDP, ZeRO-1/2/3, TP/PP, the frameworks' patterns);
// - ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
//   Model Training", Sec. 3-4): ZeRO-3 moves 3M per iteration (M the model's bytes in 16 bits:
//   forward all-gather M, backward all-gather M, gradient reduce-scatter M); qwZ halves the
//   forward gather (int8, plus block scales), hpZ keeps the backward gather within a node, qgZ
//   sends a quarter of M across nodes (int4), 0.75M in all across nodes;
// - PowerSGD (Vogels et al. 2019): (n + m) r elements per n x m matrix; 1-bit Adam (Tang et al.
//   2021): one bit per element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/spec/plan.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// Bytes per element of each wire type (IEEE fp32/fp16, bfloat16, FP8 E4M3/E5M2), written
// here rather than read from the library.
double size_of(DType d) {
  switch (d) {
    case DType::fp32:
      return 4;
    case DType::fp16:
    case DType::bf16:
      return 2;
    case DType::fp8:
      return 1;
    default:
      return 0;
  }
}

template <class F>
void each_list(const Workload& w, F&& f) {
  for (std::size_t r = 0; r < w.roles.size(); ++r) {
    const Role& role = w.roles[r];
    for (std::size_t c = 0; c < role.chunks.size(); ++c) {
      f(r, role.chunks[c].forward,
        [&](const Workload& o) -> const OpList& { return o.roles[r].chunks[c].forward; });
      f(r, role.chunks[c].backward,
        [&](const Workload& o) -> const OpList& { return o.roles[r].chunks[c].backward; });
    }
    f(r, role.step, [&](const Workload& o) -> const OpList& { return o.roles[r].step; });
  }
}

// Dense gradients' reductions over DP and the experts' over the expert-data-parallel group.
bool grad_reduction(const Op& op) {
  return op.kind == OpKind::comm &&
         (op.group == CommGroup::data || op.group == CommGroup::expert_data) &&
         (op.collective == Collective::all_reduce || op.collective == Collective::reduce_scatter) &&
         op.name != std::string_view("grad_norm_all_reduce");
}

struct Case {
  const char* what;
  const char* model;
  const char* system;
  PlanInput p;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const char* what, const char* model, PlanInput p,
                 const char* system = "dgx-a100-80gb") {
    out.push_back({what, model, system, p});
  };
  for (int z = 0; z <= 3; ++z)
    for (Precision pr : {Precision::fp32, Precision::bf16}) {
      PlanInput p = plan(16, 1, 1, 2, 64);
      p.zero = z;
      p.precision = pr;
      add("zero", "gpt2-large", p);
    }
  {
    PlanInput p = plan(32, 2, 2, 1, 64);  // TP 2, PP 2, DP 8
    p.sequence_parallel = true;
    add("tp2 pp2 sp ddp", "gpt2-large", p);
    p.zero = 1;
    add("tp2 pp2 sp zero1", "gpt2-large", p);
    p.zero = 0;
    p.virtual_stages = 2;
    p.schedule = Schedule::interleaved;
    add("tp2 pp2 interleaved", "gpt2-large", p);
  }
  {
    PlanInput p = plan(16, 2, 1, 1, 32);
    p.framework = Framework::megatron;
    p.use_distributed_optimizer = true;
    p.overlap_grad_reduce = true;
    add("megatron distributed optimizer", "gpt2-large", p);
    PlanInput d = plan(16, 1, 1, 1, 32);
    d.framework = Framework::deepspeed;
    d.zero = 3;
    add("deepspeed zero3", "gpt2-large", d);
    PlanInput f = plan(16, 1, 1, 1, 32);
    f.framework = Framework::fsdp;
    f.fsdp_sharding = FsdpSharding::hybrid_shard;
    add("fsdp hybrid", "gpt2-large", f);
  }
  for (int z : {0, 1}) {  // experts: their buckets (DDP) or reduce-scatter (ZeRO-1) over DP / EP
    PlanInput p = plan(16, 1, 1, 1, 32);
    p.ep = 8;
    p.zero = z;
    add(z == 0 ? "moe ddp" : "moe zero1", "mixtral-8x7b", p, "dgx-h100");
  }
  return out;
}

// Bytes of every gradient reduction are exactly the uncompressed bytes times the wire type's
// size over the gradients' type's; every other op is unchanged; and per role the reduced
// elements add up to what the plan reduces.
TEST(GradCommDtype, BytesAreExactlyThePrecisionRatioPlanByPlan) {
  for (const Case& c : cases()) {
    const Workload base = build_workload(scenario(c.model, c.system, c.p));
    for (DType wire : {DType::fp32, DType::bf16, DType::fp16, DType::fp8}) {
      PlanInput q = c.p;
      q.grad_comm_dtype = wire;
      const Workload w = build_workload(scenario(c.model, c.system, q));
      ASSERT_EQ(w.roles.size(), base.roles.size());
      int reductions = 0;
      each_list(base, [&](std::size_t, const OpList& a, auto other) {
        const OpList& b = other(w);
        ASSERT_EQ(a.size(), b.size()) << c.what;
        for (std::size_t i = 0; i < a.size(); ++i) {
          const Op& x = a[i];
          const Op& y = b[i];
          ASSERT_EQ(x.elements, y.elements) << c.what << " " << x.name;
          if (grad_reduction(x)) {
            ++reductions;
            const double ratio = size_of(wire) / size_of(x.dtype);
            ASSERT_GT(ratio, 0) << c.what << " " << x.name;
            EXPECT_EQ(y.bytes, x.bytes * ratio) << c.what << " " << x.name;
            EXPECT_EQ(y.dtype, wire);
            EXPECT_EQ(y.collective, x.collective);
          } else {
            EXPECT_EQ(y.bytes, x.bytes) << c.what << " " << x.name;
            EXPECT_EQ(y.dtype, x.dtype) << c.what << " " << x.name;
          }
        }
      });
      EXPECT_GT(reductions, 0) << c.what;
    }
  }
}

// DDP in fp32 (the plan's gradients in fp32): the role's all-reduced bytes per iteration are
// its parameters times the wire type's size, whatever the bucketing.
TEST(GradCommDtype, DdpAllReducesEveryParameterOnceInTheWireType) {
  PlanInput p = plan(32, 2, 2, 1, 64);
  p.precision = Precision::fp32;
  for (DType wire : {DType::bf16, DType::fp8}) {
    p.grad_comm_dtype = wire;
    const Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    for (const Role& r : w.roles) {
      double bytes = 0;
      for (const Chunk& c : r.chunks)
        for (const Op& op : c.backward.ops())
          if (op.tag == OpTag::grad_bucket) bytes += op.bytes;
      EXPECT_EQ(bytes, static_cast<double>(r.params) * size_of(wire)) << "stage " << r.stage;
    }
  }
}

TEST(GradCommDtype, UnsetKeepsThePlanJsonAsBefore) {
  const Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", plan(16));
  const auto j = to_json(sc.plan);
  for (const char* k : {"grad_comm_dtype", "zero_quantized_weights", "zero_hpz_partition_size",
                        "zero_quantized_gradients", "grad_compression"})
    EXPECT_FALSE(j.contains(k)) << k;
  PlanInput p = plan(16);
  p.grad_comm_dtype = DType::bf16;
  EXPECT_EQ(to_json(scenario("gpt2-large", "dgx-a100-80gb", p).plan).at("grad_comm_dtype"),
            "bfloat16");
}

// ---- ZeRO++ ----

struct Sums {
  double fwd_gather = 0, bwd_gather = 0, bwd_gather_inter = 0, rs = 0;
  double qgz_intra = 0, qgz_inter = 0;
  std::int64_t fwd_gather_elems = 0, rs_elems = 0;
};
Sums sums(const Role& r) {
  Sums s;
  for (const Chunk& c : r.chunks)
    for (const OpList* l : {&c.forward, &c.backward})
      for (const Op& op : l->ops()) {
        if (op.kind != OpKind::comm || op.group != CommGroup::data) continue;
        if (op.collective == Collective::all_gather && op.tag == OpTag::param_gather) {
          if (op.phase == Phase::forward) {
            s.fwd_gather += op.bytes;
            s.fwd_gather_elems += op.elements;
          } else {
            s.bwd_gather += op.bytes;
            if (op.span != GroupSpan::intra_node) s.bwd_gather_inter += op.bytes;
          }
        }
        if (op.collective == Collective::reduce_scatter) {
          s.rs += op.bytes;
          s.rs_elems += op.elements;
        }
        if (op.name == std::string_view("qgz_intra_node_all_to_all")) s.qgz_intra += op.bytes;
        if (op.name == std::string_view("qgz_inter_node_all_to_all")) s.qgz_inter += op.bytes;
      }
  return s;
}

// 4 nodes of 8 GPUs, ZeRO-3 over all 32, bf16: M = 2 bytes x parameters.
PlanInput zeropp_plan() {
  PlanInput p = plan(32, 1, 1, 1, 32);
  p.zero = 3;
  p.precision = Precision::bf16;
  return p;
}

TEST(ZeroPlusPlus, ZeroThreeMovesThreeMAndZeroPlusPlusPointSevenFiveMAcrossNodes) {
  const Scenario base_sc = scenario("gpt2-large", "dgx-a100-80gb", zeropp_plan());
  const Workload base = build_workload(base_sc);
  const Role& br = base.roles[0];
  const double P = static_cast<double>(br.params), M = 2 * P;
  const Sums b = sums(br);
  // ZeRO-3 (the paper's baseline): M forward, M backward, M reduce-scatter.
  EXPECT_EQ(b.fwd_gather, M);
  EXPECT_EQ(b.bwd_gather, M);
  EXPECT_EQ(b.rs, M);

  PlanInput p = zeropp_plan();
  p.zeropp_qwz = true;
  p.zeropp_hpz = 8;
  p.zeropp_qgz = true;
  const Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  const Workload w = build_workload(sc);
  const Sums s = sums(w.roles[0]);
  // qwZ: int8 values (M / 2) plus one fp32 scale per block of 8000 of each rank's shard.
  double scales = 0;
  for (const Chunk& c : w.roles[0].chunks)
    for (const Op& op : c.forward.ops())
      if (op.tag == OpTag::param_gather) {
        const std::int64_t shard = (op.elements + 31) / 32;
        scales += 32.0 * 4 * static_cast<double>((shard + 7999) / 8000);
      }
  EXPECT_EQ(s.fwd_gather_elems, b.fwd_gather_elems);
  EXPECT_EQ(s.fwd_gather, M / 2 + scales);
  EXPECT_LT(scales, 0.001 * M);
  // hpZ: the backward gathers stay within a node (8 ranks), unquantized.
  EXPECT_EQ(s.bwd_gather, M);
  EXPECT_EQ(s.bwd_gather_inter, 0);
  for (const Chunk& c : w.roles[0].chunks)
    for (const Op& op : c.backward.ops())
      if (op.tag == OpTag::param_gather) {
        EXPECT_EQ(op.group_size, 8);
      }
  // qgZ: no reduce-scatter left; the intra-node all-to-all carries the gradients in int4 (M/4
  // plus scales), the inter-node one 1/8 of them; across nodes a node's 8 ranks send M/4.
  EXPECT_EQ(s.rs, 0);
  EXPECT_GE(s.qgz_intra, M / 4);
  EXPECT_LT(s.qgz_intra, M / 4 * (1 + 4.0 / 1024 + 1e-6));
  const double node_cross = 8 * s.qgz_inter;
  EXPECT_GE(node_cross, M / 4);
  EXPECT_LT(node_cross, M / 4 * (1 + 4.0 / 1024 + 1e-3));
  // Across nodes per node: forward M/2 (qwZ), backward 0 (hpZ), gradients M/4 (qgZ): 0.75M,
  // against ZeRO-3's 3M (the paper's 4x).
  const double cross = s.fwd_gather + s.bwd_gather_inter + node_cross;
  EXPECT_NEAR(cross / M, 0.75, 0.01);

  // Memory: the secondary shard adds 2 bytes x P / hpZ to the weights.
  const auto mb = memory_per_rank(base, br);
  const auto mw = memory_per_rank(w, w.roles[0]);
  EXPECT_EQ(mw.weights.value(), mb.weights.value() + M / 8);
  EXPECT_EQ(mw.gradients.value(), mb.gradients.value());
}

TEST(ZeroPlusPlus, FromDeepSpeedConfig) {
  const nlohmann::json j = {{"communication_data_type", "bf16"},
                            {"zero_optimization",
                             {{"stage", 3},
                              {"zero_quantized_weights", true},
                              {"zero_hpz_partition_size", 8},
                              {"zero_quantized_gradients", true}}}};
  auto p = plan_from_deepspeed(j, "ds.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p.value().grad_comm_dtype, DType::bf16);
  EXPECT_EQ(p.value().zeropp_qwz, true);
  EXPECT_EQ(p.value().zeropp_hpz, 8);
  EXPECT_EQ(p.value().zeropp_qgz, true);

  auto bad = plan_from_deepspeed({{"communication_data_type", "int3"}}, "ds.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("communication_data_type"), std::string::npos);
  EXPECT_NE(bad.error().message.find("int3"), std::string::npos);
  auto bad_hpz =  // (0 is off, as 1: DeepSpeed's Field(1, ge=0))
      plan_from_deepspeed({{"zero_optimization", {{"zero_hpz_partition_size", -1}}}}, "ds.json");
  ASSERT_FALSE(bad_hpz.ok());
  EXPECT_NE(bad_hpz.error().message.find("zero_hpz_partition_size"), std::string::npos);
}

TEST(ZeroPlusPlus, RefusedOutsideZeroThreeAndAcrossNodes) {
  PlanInput p = zeropp_plan();
  p.zero = 2;
  p.zeropp_qwz = true;
  EXPECT_NE(testing::scenario_error("gpt2-large", "dgx-a100-80gb", p).find("ZeRO stage 3"),
            std::string::npos);
  PlanInput h = zeropp_plan();
  h.zeropp_hpz = 16;  // more than a node's 8 GPUs
  EXPECT_NE(
      testing::scenario_error("gpt2-large", "dgx-a100-80gb", h).find("--zero-hpz-partition-size"),
      std::string::npos);
  PlanInput c = plan(16);
  c.zero = 1;
  c.grad_compression = GradCompression::onebit;
  EXPECT_NE(testing::scenario_error("gpt2-large", "dgx-a100-80gb", c).find("--grad-compression"),
            std::string::npos);
}

// ---- PowerSGD and 1-bit Adam ----

// DDP's buckets (commscope's own pattern) and Megatron-LM's one reduction in the step
// (without --overlap-grad-reduce) both carry the closed form.
TEST(GradCompressionTest, PowerSgdSendsNPlusMTimesRPerMatrix) {
  const int r = 4;
  for (bool megatron : {false, true}) {
    PlanInput p = plan(16, 1, 1, 1, 32);
    p.precision = Precision::fp32;
    p.grad_compression = GradCompression::powersgd;
    p.powersgd_rank = r;
    if (megatron) p.framework = Framework::megatron;
    const Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
    const ModelSpec& m = sc.model;
    const Workload w = build_workload(sc);
    const Role& role = w.roles[0];
    // GPT-2's matrices: per block c_attn h x 3h, attn c_proj h x h, c_fc h x 4h, mlp c_proj
    // 4h x h; the tied embedding V x h. Every other parameter is a vector, sent whole.
    const std::int64_t h = m.hidden, V = m.vocab, L = m.layers();
    const std::int64_t mats = L * (3 * h * h + h * h + 4 * h * h + 4 * h * h) + V * h;
    const std::int64_t low = L * ((h + 3 * h) + (h + h) + 2 * (h + 4 * h)) * r + (V + h) * r;
    const std::int64_t expect = low + (role.params - mats);
    std::int64_t sent = 0;
    double bytes = 0;
    for (const OpList* l : {&role.chunks[0].backward, &role.step})
      for (const Op& op : l->ops())
        if (op.tag == OpTag::grad_bucket) {
          EXPECT_EQ(op.name, std::string_view("powersgd_bucket"));
          sent += op.elements;
          bytes += op.bytes;
        }
    EXPECT_EQ(sent, expect) << megatron;
    EXPECT_EQ(bytes, 4.0 * static_cast<double>(expect)) << megatron;
    // The compression's compute: P = M Q, Q = M^T P and the error feedback's P Q^T, 2 n m r
    // each, and the orthogonalization (a little more).
    double flops = 0;
    for (const Op& op : role.step.ops())
      if (op.name == std::string_view("powersgd_compress")) flops += op.flops;
    EXPECT_GE(flops, 6.0 * static_cast<double>(mats) * r) << megatron;
    EXPECT_LT(flops, 6.1 * static_cast<double>(mats) * r) << megatron;
  }
}

TEST(GradCompressionTest, OneBitSendsOneBitPerElement) {
  PlanInput p = plan(16, 1, 1, 1, 32);
  p.grad_compression = GradCompression::onebit;
  const Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
  const Role& role = w.roles[0];
  std::int64_t sent = 0;
  for (const Op& op : role.chunks[0].backward.ops())
    if (op.tag == OpTag::grad_bucket) sent += op.elements;
  EXPECT_EQ(sent, (role.params + 7) / 8);
}

// ---- the CLI ----

TEST(CompressCli, BadValuesAreOneLineAndStatusTwo) {
  for (const char* args :
       {"--grad-comm-dtype int3", "--grad-compression powersgd:rank=0", "--grad-compression gzip",
        "--zero 3 --zero-hpz-partition-size 0", "--zero 1 --zero-quantized-weights",
        "--grad-reduce-in-bf16 --grad-comm-dtype fp16"}) {
    auto o = testing::run_shell(std::string(COMMSCOPE_BIN) + " describe " + args);
    EXPECT_EQ(o.status, 2) << args;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << args << ": " << o.err;
    EXPECT_TRUE(o.out.empty()) << args;
  }
}

TEST(CompressCli, DescribeShowsTheChangedCollectives) {
  auto o = testing::run_shell(std::string(COMMSCOPE_BIN) +
                              " describe --gpus 32 --zero 3 --zero-quantized-weights "
                              "--zero-hpz-partition-size 4 --zero-quantized-gradients "
                              "--grad-comm-dtype bf16 --system dgx-a100-80gb");
  ASSERT_EQ(o.status, 0) << o.err;
  // qgZ: all-to-alls over the node's 8 ranks and over the 4 nodes, no reduce-scatter; qwZ:
  // int8 gathers over 32; hpZ: bf16 gathers over 4.
  auto row = [&](const std::string& collective, int ranks, const std::string& dtype) {
    const std::string pat = " " + collective + " ";
    for (std::size_t at = o.out.find(pat); at != std::string::npos; at = o.out.find(pat, at + 1)) {
      const std::size_t eol = o.out.find('\n', at);
      std::istringstream line(o.out.substr(at, eol - at));
      std::string c, d;
      int n = 0;
      line >> c >> n >> d;
      if (n == ranks && d == dtype) return true;
    }
    return false;
  };
  EXPECT_TRUE(row("all_to_all", 8, "int8")) << o.out;
  EXPECT_TRUE(row("all_to_all", 4, "int8")) << o.out;
  EXPECT_TRUE(row("all_gather", 32, "int8")) << o.out;
  EXPECT_TRUE(row("all_gather", 4, "bfloat16")) << o.out;
  EXPECT_EQ(o.out.find(" reduce_scatter "), std::string::npos) << o.out;
}

}  // namespace
}  // namespace commscope
