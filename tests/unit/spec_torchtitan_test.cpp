// torchtitan job files (--torchtitan-config / --job.config_file): the fields read, the plan they
// make, and the errors (docs/predict.md, "torchtitan job files").
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "commscope/calib/validate.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/framework_config.h"
#include "commscope/spec/scenario.h"
#include "commscope/spec/torchtitan_config.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace commscope {
namespace {

const std::string kDir = COMMSCOPE_SOURCE_DIR "/tests/data/torchtitan/";

TorchtitanJob parse(const std::string& toml) {
  auto j = torchtitan_from_toml(toml, "job.toml");
  EXPECT_TRUE(j.ok()) << j.error().message;
  return j.ok() ? *j : TorchtitanJob{};
}

std::string error_of(const std::string& toml) {
  auto j = torchtitan_from_toml(toml, "job.toml");
  EXPECT_FALSE(j.ok());
  const std::string e = j.ok() ? std::string() : j.error().message;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  return e;
}

const std::string kModel = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n";

// The 2024 layout, the plan of torchtitan's published A100 row t076 (Llama 2 13B, local batch
// 2, every other block checkpointed): the file gives the plan the corpus row states in its own
// columns, and the same prediction on 64 A100s (gradients reduced in fp32: torchtitan's
// default, which the row's grad_comm_dtype states). selective_ac_option "2" is Megatron's block
// method with 40 / 2 = 20 blocks.
TEST(TorchtitanConfig, LayerCheckpointingFileGivesTheCorpusRowsPlan) {
  auto job = load_torchtitan_config(kDir + "llama2_13b_layer_ac.toml");
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->model, "llama2-13b");
  EXPECT_EQ(job->plan.recompute, Recompute::full);
  EXPECT_EQ(job->plan.recompute_layer_interval, 2);  // counted by resolve_scenario: 40 / 2
  EXPECT_FALSE(job->plan.recompute_block.has_value());
  EXPECT_EQ(job->plan.micro_batch, 2);
  EXPECT_EQ(job->plan.seq_length, 4096);
  EXPECT_FALSE(job->plan.dp.has_value());  // -1: what the GPUs leave
  EXPECT_EQ(job->plan.framework, Framework::fsdp);
  EXPECT_EQ(job->plan.attention, AttentionKernel::flash);
  EXPECT_EQ(job->plan.grad_comm_dtype, DType::fp32);
  EXPECT_TRUE(job->notes.empty());

  ScenarioInput in;
  in.model = job->model;
  in.system = "dgx-a100-80gb";
  in.plan = job->plan;
  in.plan.gpus = 64;
  auto sc = resolve_scenario(in);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->plan.global_batch, 128);
  EXPECT_EQ(sc->plan.recompute_block_layers, 20);

  // The corpus row as `validate --framework row` predicts it: its own columns, FSDP's pattern.
  auto runs =
      read_measured_csv(COMMSCOPE_SOURCE_DIR "/data/validation-comm/training.csv", "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  auto t076 =
      std::find_if(runs->begin(), runs->end(), [](const MeasuredRun& r) { return r.id == "t076"; });
  ASSERT_NE(t076, runs->end());
  ScenarioInput row = t076->input;
  ASSERT_TRUE(apply_framework(Framework::fsdp, row.plan).ok());
  auto want = resolve_scenario(row);
  ASSERT_TRUE(want.ok()) << want.error().message;
  EXPECT_EQ(want->model.name, sc->model.name);
  EXPECT_EQ(sc->plan.recompute_block_layers, want->plan.recompute_block_layers);
  EXPECT_EQ(sc->plan.global_batch, want->plan.global_batch);
  EXPECT_EQ(sc->plan.dp, want->plan.dp);
  EXPECT_EQ(sc->plan.grad_comm_dtype, want->plan.grad_comm_dtype);
  EXPECT_DOUBLE_EQ(simulate(build_workload(*sc)).iteration_time,
                   simulate(build_workload(*want)).iteration_time);
}

// The 2025 layout: op-level checkpointing, and what is read but not modelled as a note.
TEST(TorchtitanConfig, OpCheckpointingFileAndItsNotes) {
  auto job = load_torchtitan_config(kDir + "llama3_8b_op_ac.toml");
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->model, "llama3-8b");
  EXPECT_EQ(job->plan.recompute, Recompute::op);
  EXPECT_EQ(job->plan.micro_batch, 1);
  EXPECT_EQ(job->plan.grad_accum, 1);
  EXPECT_EQ(job->plan.seq_length, 8192);
  EXPECT_EQ(job->plan.grad_comm_dtype, DType::fp32);  // torchtitan's default reduce dtype
  EXPECT_EQ(job->plan.precision, Precision::bf16);
  // A bf16 reduce where the file asks for one.
  auto bf16 = torchtitan_from_toml(
      kModel + "[training]\nlocal_batch_size = 1\nmixed_precision_reduce = \"bfloat16\"\n",
      "job.toml");
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  EXPECT_EQ(bf16->plan.grad_comm_dtype, DType::bf16);
  ASSERT_EQ(job->notes.size(), 1u);
  EXPECT_NE(job->notes[0].find("[compile] enable"), std::string::npos);
}

// Parallelism: TP with sequence parallelism (async TP as the gathers' overlap), HSDP, DDP,
// context parallelism's rotate method, the interleaved schedule's stages, micro-batches.
TEST(TorchtitanConfig, ParallelismFields) {
  TorchtitanJob j = parse(kModel +
                          "[training]\nlocal_batch_size = 8\nglobal_batch_size = 256\n"
                          "[parallelism]\ndata_parallel_shard_degree = 4\n"
                          "data_parallel_replicate_degree = 2\ntensor_parallel_degree = 2\n"
                          "enable_async_tensor_parallel = true\npipeline_parallel_degree = 4\n"
                          "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                          "pipeline_parallel_layers_per_stage = 3\n"
                          "pipeline_parallel_microbatch_size = 2\n"
                          "context_parallel_degree = 2\n"
                          "context_parallel_rotate_method = \"alltoall\"\n"
                          "[activation_checkpoint]\nmode = \"full\"\n[compile]\nenable = true\n");
  EXPECT_EQ(j.plan.dp, 8);
  // HSDP that keeps the parameters after forward under PP (FSDP's _HYBRID_SHARD_ZERO2), its
  // gradients reduced once a step, after the last backward (PyTorch's pipelining), sharded over
  // the shard degree's ranks
  EXPECT_EQ(j.plan.fsdp_sharding, FsdpSharding::hybrid_shard_zero2);
  EXPECT_EQ(j.plan.fsdp_grad_sync, FsdpGradSync::step);
  EXPECT_EQ(j.plan.fsdp_shard_size, 4);
  EXPECT_FALSE(j.plan.fsdp_replicate_size.has_value());
  ASSERT_EQ(j.notes.size(), 1u);  // torch.compile (async TP needs it) is not modelled
  EXPECT_EQ(j.notes[0].rfind("[compile] enable", 0), 0u) << j.notes[0];
  EXPECT_EQ(j.plan.tp, 2);
  EXPECT_EQ(j.plan.sequence_parallel, true);
  EXPECT_EQ(j.plan.tp_comm_overlap, true);
  EXPECT_EQ(j.plan.pp, 4);
  EXPECT_EQ(j.plan.schedule, Schedule::interleaved);
  // torchtitan's pipeline_llm: ceil((32 layers + 1 for the embedding + 1 for the output) / 3)
  // = 12 stages, 3 a rank; 34 = 12 x 2 + 10, so the first 10 stages weigh 3, the embedding
  // and the output each taking one of their stage's.
  EXPECT_EQ(j.plan.virtual_stages, 3);
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1}));
  EXPECT_EQ(j.plan.micro_batch, 2);
  EXPECT_EQ(j.plan.global_batch, 256);
  EXPECT_FALSE(j.plan.grad_accum.has_value());
  EXPECT_EQ(j.plan.cp, 2);
  EXPECT_EQ(j.plan.cp_comm_type, CpCommType::p2p);
  EXPECT_EQ(j.plan.recompute, Recompute::full);

  // Replication alone is DDP; the 2024 key for micro-batches; float8 as a converter.
  j = parse(
      "[model]\nname = \"llama3\"\nflavor = \"70B\"\nconverters = [\"float8\"]\n"
      "[training]\nbatch_size = 8\ndata_parallel_degree = 1\npipeline_parallel_degree = 2\n"
      "[experimental]\npipeline_parallel_microbatches = 4\n[activation_checkpoint]\nmode = "
      "\"none\"\n");
  EXPECT_EQ(j.plan.fsdp_sharding, FsdpSharding::no_shard);
  EXPECT_FALSE(j.plan.fsdp_grad_sync.has_value());  // DDP: as the framework reduces
  EXPECT_EQ(j.plan.micro_batch, 2);
  EXPECT_EQ(j.plan.grad_accum, 4);
  EXPECT_EQ(j.plan.schedule, Schedule::one_f_one_b);
  EXPECT_EQ(j.plan.fp8, true);
  EXPECT_EQ(j.plan.recompute, Recompute::none);
  // torchtitan's spelling since its quantize section, with its nested table (it was refused,
  // found by probing, 2026-12-02).
  j = parse(kModel +
            "converters = [\"quantize.linear.float8\"]\n[quantize.linear.float8]\n"
            "enable_fsdp_float8_all_gather = true\n");
  EXPECT_EQ(j.plan.fp8, true);
  ASSERT_EQ(j.notes.size(), 1u);
  EXPECT_EQ(j.notes[0].rfind("[quantize.linear.float8] enable_fsdp_float8_all_gather", 0), 0u)
      << j.notes[0];
  // FSDP2's CPU offload is --fsdp-cpu-offload (it was ignored without a word until 2026-12-02).
  j = parse(kModel + "[training]\nenable_cpu_offload = true\n");
  EXPECT_EQ(j.plan.fsdp_cpu_offload, true);
  EXPECT_TRUE(j.notes.empty());
  EXPECT_FALSE(parse(kModel + "[training]\nenable_cpu_offload = false\n")
                   .plan.fsdp_cpu_offload.value_or(false));
  // fsdp_reshard_after_forward: "default" keeps the gathered parameters under PP (FSDP's
  // SHARD_GRAD_OP), frees them without; "always" and "never" say so whatever the PP. Under PP
  // the gradients are reduced once a step (and "always" keeps the parameters after each
  // backward: Fsdp.FullShardUnderStepSync); no note.
  for (auto [pp, policy, want] :
       {std::tuple{1, "", FsdpSharding::full_shard}, std::tuple{2, "", FsdpSharding::shard_grad_op},
        std::tuple{2, "always", FsdpSharding::full_shard},
        std::tuple{1, "never", FsdpSharding::shard_grad_op},
        std::tuple{2, "default", FsdpSharding::shard_grad_op}}) {
    SCOPED_TRACE(std::string(policy) + " with PP " + std::to_string(pp));
    std::string toml =
        kModel + "[parallelism]\npipeline_parallel_degree = " + std::to_string(pp) + "\n";
    if (*policy) toml += std::string("fsdp_reshard_after_forward = \"") + policy + "\"\n";
    j = parse(toml);
    EXPECT_EQ(j.plan.fsdp_sharding.value_or(FsdpSharding::full_shard), want);
    EXPECT_EQ(j.plan.fsdp_grad_sync.value_or(FsdpGradSync::micro_batch),
              pp > 1 ? FsdpGradSync::step : FsdpGradSync::micro_batch);
    EXPECT_TRUE(j.notes.empty());
  }
  // HSDP: "never" keeps the parameters (_HYBRID_SHARD_ZERO2), the default without PP frees them.
  for (auto [policy, want] : {std::pair{"never", FsdpSharding::hybrid_shard_zero2},
                              std::pair{"default", FsdpSharding::hybrid_shard}}) {
    j = parse(kModel +
              "[parallelism]\ndata_parallel_shard_degree = 4\ndata_parallel_replicate_degree = 2\n"
              "fsdp_reshard_after_forward = \"" +
              policy + "\"\n");
    EXPECT_EQ(j.plan.fsdp_sharding, want) << policy;
  }
  // HSDP with the shard degree left to the launcher (-1): the replicas as given
  j = parse(kModel + "[parallelism]\ndata_parallel_replicate_degree = 4\n");
  EXPECT_EQ(j.plan.fsdp_sharding, FsdpSharding::hybrid_shard);
  EXPECT_EQ(j.plan.fsdp_replicate_size, 4);
  EXPECT_FALSE(j.plan.fsdp_shard_size.has_value());
  // No [activation_checkpoint]: torchtitan's default, selective every second block.
  j = parse(kModel + "[training]\nlocal_batch_size = 1\n");
  EXPECT_EQ(j.plan.recompute, Recompute::full);
  EXPECT_EQ(j.plan.recompute_layer_interval, 2);  // 16 of Llama 3 8B's 32 blocks, once resolved
}

// MoE models: expert_parallel_degree and expert_tensor_parallel_degree (torchtitan's default
// ETP 1) where EP is above 1; the DeepEP backend as the flex dispatcher; EP on a dense model has
// no effect, as torchtitan says. The file predicts what the same plan does as flags.
TEST(TorchtitanConfig, ExpertParallelFields) {
  TorchtitanJob j = parse(
      "[model]\nname = \"qwen3\"\nflavor = \"235B-A22B\"\n[parallelism]\n"
      "tensor_parallel_degree = 4\nexpert_parallel_degree = 8\n"
      "expert_tensor_parallel_degree = 4\nexpert_parallel_comm_backend = \"standard\"\n");
  EXPECT_EQ(j.model, "qwen3-235b-a22b");
  EXPECT_EQ(j.plan.ep, 8);
  EXPECT_EQ(j.plan.expert_tp, 4);
  EXPECT_FALSE(j.plan.moe_dispatcher.has_value());
  j = parse(
      "[model]\nname = \"deepseek_v3\"\nflavor = \"671B\"\n[parallelism]\n"
      "expert_parallel_degree = 32\nexpert_parallel_comm_backend = \"deepep\"\n"
      "[activation_checkpoint]\nmode = \"full\"\n");
  EXPECT_EQ(j.model, "deepseek-v3");
  EXPECT_EQ(j.plan.ep, 32);
  EXPECT_EQ(j.plan.expert_tp, 1);
  EXPECT_EQ(j.plan.moe_dispatcher, MoeDispatcher::flex);
  j = parse(
      "[model]\nname = \"qwen3\"\nflavor = \"30B-A3B\"\n[parallelism]\n"
      "expert_parallel_degree = 1\nexpert_tensor_parallel_degree = 2\n");
  EXPECT_FALSE(j.plan.ep.has_value());
  EXPECT_FALSE(j.plan.expert_tp.has_value());
  j = parse(kModel + "[parallelism]\nexpert_parallel_degree = 8\n");
  EXPECT_FALSE(j.plan.ep.has_value());
  // torchtitan's dense Qwen3 flavors (models/qwen3/__init__.py at v0.2.2) and Llama 4's
  for (const auto& [name, flavor, preset] :
       {std::tuple{"qwen3", "0.6B", "qwen3-0.6b"}, std::tuple{"qwen3", "1.7B", "qwen3-1.7b"},
        std::tuple{"qwen3", "4B", "qwen3-4b"}, std::tuple{"qwen3", "8B", "qwen3-8b"},
        std::tuple{"qwen3", "14B", "qwen3-14b"}, std::tuple{"qwen3", "32B", "qwen3-32b"},
        std::tuple{"llama4", "17bx16e", "llama4-scout"},
        std::tuple{"llama4", "17bx128e", "llama4-maverick"},
        std::tuple{"llama4", "17bx128e_irope", "llama4-maverick"}}) {
    j = parse(fmt::format("[model]\nname = \"{}\"\nflavor = \"{}\"\n", name, flavor));
    EXPECT_EQ(j.model, preset);
    // the iRoPE flavors: chunked attention and document masks priced as causal, with a note
    const bool irope = std::string_view(flavor).ends_with("_irope");
    ASSERT_EQ(j.notes.size(), irope ? 1u : 0u);
    if (irope) {
      EXPECT_NE(j.notes[0].find("[model] flavor 17bx128e_irope: iRoPE's chunked attention"),
                std::string::npos)
          << j.notes[0];
    }
  }
  // op-level checkpointing of a MoE model with grouped-query attention: torchtitan's MoE policy;
  // early_stop true (priced as without it) gets a note
  const std::string qwen_op =
      "[model]\nname = \"qwen3\"\nflavor = \"30B-A3B\"\n[activation_checkpoint]\n"
      "mode = \"selective\"\nselective_ac_option = \"op\"\n";
  j = parse(qwen_op);
  EXPECT_EQ(j.plan.recompute, Recompute::op);
  EXPECT_TRUE(j.notes.empty());
  j = parse(qwen_op + "early_stop = true\n");
  ASSERT_EQ(j.notes.size(), 1u);
  EXPECT_NE(j.notes[0].find(
                "[activation_checkpoint] early_stop: a MoE or latent-attention model's replay"),
            std::string::npos)
      << j.notes[0];

  // A job file predicts what the same plan does as flags (the model's row named).
  auto same_as_flags = [](const std::string& toml, const std::string& model,
                          const std::string& flags) {
    SCOPED_TRACE(toml);
    const std::string bin = COMMSCOPE_BIN;
    const std::string h100 = " --system dgx-h100 --gpus 64 --format csv";
    auto file = testing::run_shell(bin + " predict --torchtitan-config " + kDir + toml + h100);
    ASSERT_EQ(file.status, 0) << file.err;
    auto given = testing::run_shell(bin + " predict --model " + model + flags + h100);
    ASSERT_EQ(given.status, 0) << given.err;
    EXPECT_EQ(file.out, given.out);
    EXPECT_NE(file.out.find(model + ","), std::string::npos) << file.out;
  };
  same_as_flags("qwen3_30b_a3b_ep.toml", "qwen3-30b-a3b",
                " --framework fsdp --attention flash --cross-entropy torch --micro-batch-size 4 "
                "--seq-length 4096 "
                "--grad-comm-dtype fp32 --ep 8 --expert-tensor-parallel-size 1 "
                "--recompute-granularity full");

  // Latent attention under op-level checkpointing (DeepSeek-V3's files' default), without the
  // multi-token-prediction module torchtitan's DeepSeek-V3 does not have (the preset's, from the
  // Hugging Face config).
  j = parse(
      "[model]\nname = \"deepseek_v3\"\nflavor = \"671B\"\n[activation_checkpoint]\n"
      "mode = \"selective\"\nselective_ac_option = \"op\"\n");
  EXPECT_EQ(j.plan.recompute, Recompute::op);
  EXPECT_EQ(j.plan.mtp_layers, 0);
  // Llama 4 Maverick: dense and MoE blocks in turn
  same_as_flags("llama4_17bx128e_ep.toml", "llama4-maverick",
                " --framework fsdp --attention flash --cross-entropy torch --micro-batch-size 1 "
                "--seq-length 8192 "
                "--grad-comm-dtype fp32 --ep 8 --expert-tensor-parallel-size 1 "
                "--recompute-granularity full");
  same_as_flags("deepseek_v3_16b_op.toml", "deepseek-v2-lite",
                " --framework fsdp --attention flash --cross-entropy torch --micro-batch-size 2 "
                "--seq-length 4096 "
                "--grad-comm-dtype fp32 --ep 8 --expert-tensor-parallel-size 1 "
                "--recompute-granularity op");
  // HSDP with experts: two replicas, the experts sharded over efsdp = 32 / 8 within each
  same_as_flags("qwen3_30b_a3b_hsdp_ep.toml", "qwen3-30b-a3b",
                " --framework fsdp --attention flash --cross-entropy torch --micro-batch-size 4 "
                "--seq-length 4096 "
                "--grad-comm-dtype fp32 --ep 8 --expert-tensor-parallel-size 1 "
                "--recompute-granularity full --fsdp-sharding hybrid_shard "
                "--fsdp-replicate-size 2");
}

// Errors: one line naming the file, the field, what was expected and what it got.
TEST(TorchtitanConfig, ErrorsNameTheField) {
  EXPECT_EQ(error_of(kModel + "[training]\nseq_len = \"8k\"\n"),
            "job.toml: [training] seq_len: expected an integer of at least 1, got \"8k\"");
  const std::pair<std::string, std::string> cases[] = {
      {kModel + "[training]\nlocal_batch_size = 0\n",
       "[training] local_batch_size: expected an integer of at least 1, got 0"},
      {"[model]\nname = \"deepseek_v3\"\nflavor = \"236B\"\n",
       "[model] name and flavor: expected a torchtitan model commscope has a preset for"},
      {"[model]\nname = \"llama4\"\nflavor = \"debugmodel\"\n", "got llama4 debugmodel"},
      {"[model]\nname = \"qwen3\"\nflavor = \"30B-A3B\"\n[parallelism]\n"
       "expert_parallel_degree = 8\nexpert_parallel_comm_backend = \"nvshmem\"\n",
       "[parallelism] expert_parallel_comm_backend: expected standard or deepep, got "
       "\"nvshmem\""},
      {kModel + "[parallelism]\npipeline_parallel_degree = 2\n"
                "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n",
       "[parallelism] pipeline_parallel_schedule: expected 1F1B, GPipe or Interleaved1F1B"},
      {kModel + "[activation_checkpoint]\nmode = \"selective\"\n"
                "selective_ac_option = \"sometimes\"\n",
       "selective_ac_option: expected op or a layer interval (0: every block), got \"sometimes\""},
      {kModel + "[activation_checkpoint]\nmode = \"memory_budget\"\n",
       "[activation_checkpoint] mode: expected none, full or selective"},
      {kModel + "[parallelism]\ntensor_parallel_degree = true\n",
       "tensor_parallel_degree: expected an integer of at least 1, got true"},
      // a float as written (it read "got 8", a valid-looking integer)
      {kModel + "[parallelism]\ntensor_parallel_degree = 8.0\n",
       "tensor_parallel_degree: expected an integer of at least 1, got 8.0"},
      {kModel + "[parallelism]\ndata_parallel_replicate_degree = 8\n"
                "data_parallel_shard_degree = 1\npipeline_parallel_degree = 2\n",
       "[parallelism] data_parallel_replicate_degree: expected a shard degree above 1 beside "
       "tensor or pipeline parallelism (torchtitan runs replicate-only data parallelism as DDP, "
       "which raises \"DDP has not supported > 1D parallelism\"), got replicate 8 with shard 1, "
       "TP 1, PP 2"},
      {kModel + "[training]\nbatch_size = 8\npipeline_parallel_degree = 2\n"
                "[experimental]\npipeline_parallel_microbatches = 3\n",
       "[experimental] pipeline_parallel_microbatches: expected a divisor of the local batch of 8, "
       "got 3"},
      // commscope's limits, named at the field (a product of such fields never overflows)
      {kModel + "[training]\nlocal_batch_size = 4611686018427387904\n",
       "[training] local_batch_size: expected an integer of at most 4294967296"},
      {kModel + "[training]\nbatch_size = 2000000\n",
       "[training] batch_size: expected a micro-batch of at most 1048576 samples"},
      {kModel + "[training]\nseq_len = 100000000\n",
       "[training] seq_len: expected an integer of at most 16777216"},
      {kModel + "[parallelism]\ndata_parallel_shard_degree = 1048576\n"
                "data_parallel_replicate_degree = 1048576\n",
       "data_parallel_replicate_degree: expected shard x replicate degrees of at most 1048576"},
      {kModel + "[parallelism]\ntensor_parallel_degree = 4294967296\n",
       "tensor_parallel_degree: expected an integer of at most 1048576"},
      {kModel + "[parallelism]\nfsdp_reshard_after_forward = \"sometimes\"\n",
       "[parallelism] fsdp_reshard_after_forward: expected default, always or never, got "
       "\"sometimes\""}};
  for (const auto& [toml, fragment] : cases) {
    const std::string e = error_of(toml);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  }
  // Malformed TOML: the parser's line and column.
  const std::string e = error_of("[model\nname = \"llama3\"\n");
  EXPECT_EQ(e.rfind("job.toml: line 1, column ", 0), 0u) << e;
}

// The layers of each pipeline stage as torchtitan's pipeline_llm places them (2025 layout):
// the embedding and the output weigh one layer each on the first and last stage, the remainder
// goes one layer more to the first stages; explicit split points and model parts are taken as
// written; a 2024 file is split evenly. Each expectation is worked by hand from that rule.
TEST(TorchtitanConfig, PipelineStagesSplitAsTorchtitanSplitsThem) {
  const std::string head = kModel +
                           "[activation_checkpoint]\nmode = \"full\"\n[parallelism]\n"
                           "pipeline_parallel_degree = 4\n";
  // 32 + 1 + 1 = 34 over 4 stages: 9, 9, 8, 8 less the weights
  TorchtitanJob j = parse(head);
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{8, 9, 8, 7}));
  EXPECT_FALSE(j.plan.virtual_stages.has_value());
  // Interleaved1F1B without a stage size: two stages a rank, 34 over 8: 5, 5, 4 x 6 less
  j = parse(head + "pipeline_parallel_schedule = \"Interleaved1F1B\"\n");
  EXPECT_EQ(j.plan.virtual_stages, 2);
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{4, 5, 4, 4, 4, 4, 4, 3}));
  // weights 0: an even split, no list
  j = parse(head +
            "pipeline_parallel_first_stage_less_layers = 0\n"
            "pipeline_parallel_last_stage_less_layers = 0\n");
  EXPECT_FALSE(j.plan.stage_layers.has_value());
  // weights 2 and 0: 34 over 4 is 9, 9, 8, 8; the first stage gives two to the embedding
  j = parse(head +
            "pipeline_parallel_first_stage_less_layers = 2\n"
            "pipeline_parallel_last_stage_less_layers = 0\n");
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{7, 9, 8, 8}));
  j = parse(head +
            "pipeline_parallel_split_points = [\"layers.10\", \"layers.20\", \"layers.25\"]\n");
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{10, 10, 5, 7}));
  // model parts: layers 0-11, 12-19, 20-27, 28-31 with the embedding, norm and output
  std::string parts = "module_fqns_per_model_part = [[\"tok_embeddings\"";
  for (int layer = 0; layer < 32; ++layer)
    parts += (layer == 12 || layer == 20 || layer == 28 ? "], [" : ", ") +
             ("\"layers." + std::to_string(layer) + "\"");
  parts += ", \"norm\", \"output\"]]\n";
  j = parse(head + parts);
  EXPECT_EQ(j.plan.stage_layers, (std::vector<int>{12, 8, 8, 4}));
  // the 2024 layout: an even split
  j = parse(kModel +
            "[training]\nbatch_size = 8\npipeline_parallel_degree = 4\n"
            "[activation_checkpoint]\nmode = \"full\"\n");
  EXPECT_FALSE(j.plan.stage_layers.has_value());
}

TEST(TorchtitanConfig, PipelineStageErrorsNameTheField) {
  const std::string head = kModel +
                           "[activation_checkpoint]\nmode = \"full\"\n[parallelism]\n"
                           "pipeline_parallel_degree = 4\n";
  for (const auto& [toml, fragment] :
       {std::pair<std::string, std::string>{
            head + "pipeline_parallel_layers_per_stage = 4\n",
            "[parallelism] pipeline_parallel_layers_per_stage: expected a stage size giving a "
            "number of stages that PP 4 divides (ceil((32 layers + 1 + 1) / 4) = 9 stages), "
            "got 4"},
        {head + "pipeline_parallel_layers_per_stage = 3\n",
         "expected one stage a pipeline rank with a single-stage schedule"},
        {head + "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                "pipeline_parallel_layers_per_stage = 9\n",
         "expected two or more stages a pipeline rank with Interleaved1F1B"},
        {head + "pipeline_parallel_split_points = [\"layers.10\", \"layers.5\", \"layers.25\"]\n",
         "[parallelism] pipeline_parallel_split_points: expected increasing points from "
         "layers.1 to layers.31 after layers.10, got \"layers.5\""},
        {head + "pipeline_parallel_split_points = [\"layers.10\"]\n",
         "pipeline_parallel_split_points: expected 3 split points"},
        {head + "module_fqns_per_model_part = [[\"layers.0\"], [\"layers.1\"], [\"layers.2\"], "
                "[\"layers.3\"]]\n",
         "module_fqns_per_model_part: expected every one of layers.0 .. layers.31 in a part, "
         "got no part with layers.4"},
        {head + "pipeline_parallel_first_stage_less_layers = 12\n",  // 45 = 4 x 11 + 1
         "pipeline_parallel_first_stage_less_layers: expected weights of the embedding and "
         "the output of at most 11 layers"}}) {
    const std::string e = error_of(toml);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  }
}

// torchtitan's own defaults and rules where its code has them (found by reading
// torchtitan/config/job_config.py, train.py, distributed/utils.py at v0.2.x, 2026-11-30):
// local_batch_size 8 and seq_len 2048 where the file has none; async TP needs compile
// (maybe_enable_async_tp raises); selective_ac_option "0" checkpoints every block.
TEST(TorchtitanConfig, TorchtitansDefaultsAndRules) {
  TorchtitanJob j = parse(kModel);
  EXPECT_EQ(j.plan.micro_batch, 8);
  EXPECT_EQ(j.plan.local_batch, 8);
  EXPECT_EQ(j.plan.seq_length, 2048);
  j = parse(kModel + "[training]\nlocal_batch_size = 2\nseq_len = 8192\n");
  EXPECT_EQ(j.plan.micro_batch, 2);
  EXPECT_EQ(j.plan.seq_length, 8192);
  const std::string e = error_of(kModel +
                                 "[parallelism]\ntensor_parallel_degree = 2\n"
                                 "enable_async_tensor_parallel = true\n");
  EXPECT_NE(e.find("[parallelism] enable_async_tensor_parallel: expected [compile] enable = true "
                   "beside it"),
            std::string::npos)
      << e;
  j = parse(kModel +
            "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"0\"\n");
  EXPECT_EQ(j.plan.recompute, Recompute::full);
  EXPECT_FALSE(j.plan.recompute_block.has_value());
  // Interleaved1F1B with a layer interval (torchtitan's default "2" here): every k-th block of
  // each of the rank's chunks, 32 layers on 4 x 2 chunks of 4 (it was refused, naming the
  // default "2" as if the file set it).
  auto blocks = [](const TorchtitanJob& job) {
    PlanInput p = job.plan;
    p.gpus = 16;
    auto sc = resolve_scenario(*load_model(job.model), *load_system("dgx-h100"),
                               *load_network("ib-ndr-400"), p);
    EXPECT_TRUE(sc.ok()) << sc.error().message;
    return sc.ok() ? std::pair{sc->plan.recompute, sc->plan.recompute_block_layers}
                   : std::pair{Recompute::none, -1};
  };
  j = parse(kModel +
            "[parallelism]\npipeline_parallel_degree = 4\n"
            "pipeline_parallel_schedule = \"Interleaved1F1B\"\n");
  EXPECT_EQ(j.plan.virtual_stages, 2);
  EXPECT_EQ(j.plan.recompute, Recompute::full);
  EXPECT_EQ(j.plan.recompute_layer_interval, 2);
  EXPECT_EQ(blocks(j), std::pair(Recompute::full, 2));  // 4 / 2
  const std::string interleaved = kModel +
                                  "[parallelism]\npipeline_parallel_degree = 4\n"
                                  "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                                  "[activation_checkpoint]\nmode = \"selective\"\n";
  EXPECT_EQ(blocks(parse(interleaved + "selective_ac_option = \"3\"\n")),
            std::pair(Recompute::full, 1));  // 4 / 3
  // 1F1B on PP 4, 8 blocks a rank: an interval above 8 checkpoints none (torchtitan's count on
  // the rank never reaches it), 8 one block, and 1 every block (the full recompute of "0")
  const std::string one_f_one_b = kModel +
                                  "[parallelism]\npipeline_parallel_degree = 4\n"
                                  "[activation_checkpoint]\nmode = \"selective\"\n";
  EXPECT_EQ(blocks(parse(one_f_one_b + "selective_ac_option = \"9\"\n")),
            std::pair(Recompute::none, 0));
  EXPECT_EQ(blocks(parse(one_f_one_b + "selective_ac_option = \"8\"\n")),
            std::pair(Recompute::full, 1));
  EXPECT_EQ(blocks(parse(one_f_one_b + "selective_ac_option = \"1\"\n")),
            std::pair(Recompute::full, 0));
}

// The local batch against DP, through resolve_scenario: torchtitan's assertion (the global
// batch a multiple of local x DP), and under PP the accumulation steps, each its own pipeline
// schedule in torchtitan, named in a warning.
TEST(TorchtitanConfig, LocalBatchAgainstDataParallel) {
  const std::string pp4 = kModel +
                          "[activation_checkpoint]\nmode = \"full\"\n[parallelism]\n"
                          "pipeline_parallel_degree = 4\n[training]\nlocal_batch_size = 8\n";
  auto resolve = [](const TorchtitanJob& job, int gpus) {
    PlanInput p = job.plan;
    p.gpus = gpus;
    auto model = load_model(job.model);
    EXPECT_TRUE(model.ok());
    return resolve_scenario(*model, *load_system("dgx-h100"), *load_network("ib-ndr-400"), p);
  };
  // 16 GPUs, PP 4: DP 4; global 128 = 4 steps of local 8 x DP 4
  auto sc = resolve(parse(pp4 + "global_batch_size = 128\n"), 16);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->plan.grad_accum, 32);
  // each step its own schedule of 8 micro-batches (pp_schedule.step() per step)
  EXPECT_EQ(sc->plan.pipeline_rounds, 4);
  EXPECT_EQ(sc->plan.microbatches_per_round(), 8);
  // global 40: not a multiple of 8 x 4
  auto bad = resolve(parse(pp4 + "global_batch_size = 40\n"), 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("--global-batch-size: expected a multiple of "
                                      "local_batch_size x data-parallel size = 8 x 4 = 32",
                                      0),
            0u)
      << bad.error().message;
  // one step (global = local x DP): no warning of it
  auto one = resolve(parse(pp4), 16);
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->plan.pipeline_rounds, 1);
  // a micro-batch flag that does not divide the local batch: torchtitan could not split it
  PlanInput odd = parse(pp4 + "global_batch_size = 128\n").plan;
  odd.micro_batch = 16;
  odd.gpus = 16;
  auto split = resolve_scenario(*load_model("llama3-8b"), *load_system("dgx-h100"),
                                *load_network("ib-ndr-400"), odd);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.error().message.rfind(
                "--micro-batch-size: expected a divisor of the local batch of 8", 0),
            0u)
      << split.error().message;
  // the interleaved schedule is PyTorch's ScheduleInterleaved1F1B: of a schedule's n micro-
  // batches, max(1, n / PP) rounds of n / rounds each, n a multiple of the rounds. 6 on PP 4:
  // one round of 6 (Megatron's rule, a multiple of PP, refused it); 9: two rounds do not divide.
  auto interleaved = [&](int local) {
    return resolve(
        parse(kModel +
              "[activation_checkpoint]\nmode = \"full\"\n[parallelism]\n"
              "pipeline_parallel_degree = 4\npipeline_parallel_schedule = "
              "\"Interleaved1F1B\"\n[training]\nlocal_batch_size = " +
              std::to_string(local) + "\nglobal_batch_size = " + std::to_string(local * 8) + "\n"),
        16);
  };
  auto six = interleaved(6);
  ASSERT_TRUE(six.ok()) << six.error().message;
  EXPECT_EQ(six->plan.interleave_group, 6);
  EXPECT_EQ(six->plan.pipeline_rounds, 2);
  auto eight = interleaved(8);  // two rounds of 4 = PP: Megatron's order
  ASSERT_TRUE(eight.ok()) << eight.error().message;
  EXPECT_EQ(eight->plan.interleave_group, 0);
  auto inter = interleaved(9);
  ASSERT_FALSE(inter.ok());
  EXPECT_EQ(inter.error().message.rfind("local_batch_size: expected micro-batches per pipeline "
                                        "schedule a multiple of their round count max(1, n / PP) "
                                        "= 2",
                                        0),
            0u)
      << inter.error().message;
}

// torchtitan's mixed precision is FSDP's (maybe_enable_amp): TP alone on 8 GPUs trains in fp32,
// with a warning; with a shard degree above 1 (16 GPUs: DP 2) in bf16; a --precision flag (the
// CLI resets the rule) is the user's word.
TEST(TorchtitanConfig, MixedPrecisionNeedsFsdp) {
  const TorchtitanJob job =
      parse(kModel +
            "[activation_checkpoint]\nmode = \"full\"\n[training]\n"
            "local_batch_size = 1\n[parallelism]\ntensor_parallel_degree = 8\n");
  auto resolve = [&](int gpus, bool flag) {
    PlanInput p = job.plan;
    p.gpus = gpus;
    if (flag) p.amp_needs_fsdp.reset();
    return resolve_scenario(*load_model(job.model), *load_system("dgx-h100"),
                            *load_network("ib-ndr-400"), p);
  };
  auto alone = resolve(8, false);
  ASSERT_TRUE(alone.ok()) << alone.error().message;
  EXPECT_EQ(alone->plan.precision, Precision::fp32);
  EXPECT_TRUE(std::any_of(alone->warnings.begin(), alone->warnings.end(), [](const auto& w) {
    return w.rfind("torchtitan trains this plan in fp32", 0) == 0;
  }));
  EXPECT_EQ(resolve(16, false)->plan.precision, Precision::bf16);
  EXPECT_EQ(resolve(8, true)->plan.precision, Precision::bf16);
}

// A misspelt plan key is refused (torchtitan refuses unknown keys; read past, the plan kept TP
// 1), naming the key meant; another unknown [parallelism] key is a note; torchtitan's own
// fields that commscope does not read pass in silence.
TEST(TorchtitanConfig, MisspeltPlanKeysAreRefused) {
  for (const auto& [toml, fragment] :
       {std::pair<std::string, std::string>{
            kModel + "[parallelism]\ntensor_paralel_degree = 8\n",
            "job.toml: [parallelism] tensor_paralel_degree: expected a torchtitan field (did "
            "you mean tensor_parallel_degree?)"},
        {kModel + "[training]\nlocal_batchsize = 2\n",
         "[training] local_batchsize: expected a torchtitan field (did you mean "
         "local_batch_size?)"},
        {kModel + "[experimental]\npipeline_paralel_degree = 2\n",
         "did you mean pipeline_parallel_degree?"}}) {
    const std::string e = error_of(toml);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  }
  const TorchtitanJob job =
      parse(kModel +
            "[parallelism]\ntensor_parallel_degree = 2\ndisable_loss_parallel = false\n"
            "fsdp_reshard_after_forward = \"default\"\nmy_own_switch = 1\n"
            "[training]\nsteps = 100\nseed = 1\ndataset = \"c4\"\n");
  EXPECT_EQ(job.plan.tp, 2);
  EXPECT_EQ(std::count_if(job.notes.begin(), job.notes.end(),
                          [](const std::string& n) {
                            return n ==
                                   "[parallelism] my_own_switch: not a field commscope knows; "
                                   "ignored";
                          }),
            1);
  EXPECT_EQ(job.notes.size(), 1u);
}

// The CLI: the file's model and plan, --model and flags win, not with --deepspeed-config, and
// a FIFO or a missing file is refused with one line.
TEST(TorchtitanConfig, Cli) {
  using testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  const std::string file = kDir + "llama3_8b_op_ac.toml";
  auto r = run_shell(bin + " predict --torchtitan-config " + file +
                     " --system dgx-h100 --gpus 8 --format csv");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("llama3-8b,"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("note: " + file + ": [compile] enable"), std::string::npos) << r.err;
  r = run_shell(bin + " describe --job.config_file " + file +
                " --model llama2-7b --system dgx-h100 --gpus 8 --global-batch-size 32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("llama2-7b on dgx-h100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute op"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("global batch 32"), std::string::npos) << r.out;
  r = run_shell(bin + " predict --torchtitan-config " + file +
                " --deepspeed-config x.json --system dgx-h100 --gpus 8");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--torchtitan-config: expected it or --deepspeed-config, got both"),
            std::string::npos)
      << r.err;
  // --recompute-granularity replaces a file's every-k-th-block checkpointing (not an error
  // about the block method the file implied): the same as the same plan without the file's
  // checkpointing at all.
  const std::string layer = kDir + "llama2_13b_layer_ac.toml";
  const std::string a100 = " --system dgx-a100-80gb --gpus 64 --format csv";
  for (const char* g : {"none", "full"}) {
    SCOPED_TRACE(g);
    auto with = run_shell(bin + " predict --torchtitan-config " + layer + a100 +
                          " --recompute-granularity " + g);
    ASSERT_EQ(with.status, 0) << with.err;
    auto flags = run_shell(
        bin +
        " predict --model llama2-13b --framework fsdp --attention flash --cross-entropy torch "
        "--micro-batch-size 2 --seq-length 4096 --grad-comm-dtype fp32" +
        a100 + " --recompute-granularity " + g);
    ASSERT_EQ(flags.status, 0) << flags.err;
    EXPECT_EQ(with.out, flags.out);
  }
  // A PP flag counts the file's layer interval (every 2nd block) against its own stages: 10 of
  // 20 blocks at PP 2 and 5 of 10 at PP 4, each row the plan written as Megatron's flags. The
  // file's count of 20 was kept, and replayed every block of a stage.
  const std::string layer_flags =
      " predict --model llama2-13b --framework fsdp --attention flash --cross-entropy torch "
      "--micro-batch-size 2 --seq-length 4096 --grad-comm-dtype fp32" +
      a100 + " --recompute-granularity full --recompute-method block";
  auto split_lines = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  auto swept = run_shell(bin + " predict --torchtitan-config " + layer + a100 + " --pp 2,4");
  ASSERT_EQ(swept.status, 0) << swept.err;
  const auto rows = split_lines(swept.out);
  ASSERT_EQ(rows.size(), 3u) << swept.out;
  for (auto [pp, blocks, row] : {std::tuple{2, 10, 1}, std::tuple{4, 5, 2}}) {
    SCOPED_TRACE(pp);
    const std::string plan = " --pp " + std::to_string(pp) + " --recompute-num-layers ";
    auto want = run_shell(bin + layer_flags + plan + std::to_string(blocks));
    ASSERT_EQ(want.status, 0) << want.err;
    EXPECT_EQ(split_lines(want.out).back(), rows[row]);
    auto all = run_shell(bin + layer_flags + plan + "20");
    ASSERT_EQ(all.status, 0) << all.err;
    EXPECT_NE(split_lines(all.out).back(), rows[row]);
  }
  // Under PP the file's FSDP keeps its parameters and reduces once a step: the same as the
  // plan written as flags with --fsdp-grad-sync step, and not the per-micro-batch pricing.
  const std::string pp = testing::scratch() + "pp.toml";
  {
    std::ofstream out(pp);
    out << "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n"
           "seq_len = 8192\n[parallelism]\npipeline_parallel_degree = 2\n"
           "pipeline_parallel_microbatch_size = 1\n[activation_checkpoint]\nmode = \"full\"\n";
  }
  const std::string h100 = " --system dgx-h100 --gpus 16 --format csv";
  auto file_pp = run_shell(bin + " predict --torchtitan-config " + pp + h100);
  ASSERT_EQ(file_pp.status, 0) << file_pp.err;
  const std::string as_flags =
      " predict --model llama3-8b --framework fsdp --attention flash --cross-entropy torch "
      "--micro-batch-size 1 "
      "--seq-length 8192 --grad-comm-dtype fp32 --pp 2 --global-batch-size 64 "
      "--recompute-granularity full --fsdp-sharding shard_grad_op" +
      h100;
  auto once = run_shell(bin + as_flags + " --fsdp-grad-sync step");
  auto every = run_shell(bin + as_flags);
  ASSERT_EQ(once.status, 0) << once.err;
  ASSERT_EQ(every.status, 0) << every.err;
  EXPECT_EQ(file_pp.out, once.out);
  EXPECT_NE(file_pp.out, every.out);
  // A global batch flag keeps the file's local batch, as torchtitan's --training.global_batch_size
  // does: the file's own global batch (8 x DP 8 = 64) is the file alone; 128 is two steps, two
  // schedules of 8 micro-batches (describe says so), not the one schedule of 16 the flags alone
  // give (--fsdp-grad-sync step, as above).
  auto same =
      run_shell(bin + " predict --torchtitan-config " + pp + h100 + " --global-batch-size 64");
  EXPECT_EQ(same.out, file_pp.out);
  const std::string json = " --system dgx-h100 --gpus 16 --format json";
  const std::string csv = " --format csv";
  const std::string flags_json =
      as_flags.substr(0, as_flags.size() - csv.size()) + " --format json";
  auto two =
      run_shell(bin + " predict --torchtitan-config " + pp + json + " --global-batch-size 128");
  std::string flags_128 = flags_json;
  flags_128.replace(flags_128.find("--global-batch-size 64"), 22, "--global-batch-size 128");
  auto one_schedule = run_shell(bin + flags_128 + " --fsdp-grad-sync step");
  ASSERT_EQ(two.status, 0) << two.err;
  ASSERT_EQ(one_schedule.status, 0) << one_schedule.err;
  const auto two_j = nlohmann::json::parse(two.out)["predictions"][0];
  EXPECT_EQ(two_j["plan"]["pipeline_schedules"], 2);
  EXPECT_GT(
      two_j["iteration_time_s"].get<double>(),
      nlohmann::json::parse(one_schedule.out)["predictions"][0]["iteration_time_s"].get<double>());
  auto two_d = run_shell(bin + " describe --torchtitan-config " + pp +
                         " --system dgx-h100 --gpus 16 --global-batch-size 128");
  EXPECT_NE(two_d.out.find("(16 micro-batches per iteration, as 2 pipeline schedules of 8)"),
            std::string::npos)
      << two_d.out;
  // The rule's error names the file's field where the file set the global batch, the flag
  // where the flag did (local 8 x DP 8 = 64).
  auto flag_72 =
      run_shell(bin + " predict --torchtitan-config " + pp + h100 + " --global-batch-size 72");
  EXPECT_EQ(flag_72.err.rfind("commscope: --global-batch-size: expected a multiple of "
                              "local_batch_size x data-parallel size = 8 x 8 = 64",
                              0),
            0u)
      << flag_72.err;
  const std::string pp72 = testing::scratch() + "pp72.toml";
  {
    std::ofstream out(pp72);
    out << "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n"
           "global_batch_size = 72\n[parallelism]\npipeline_parallel_degree = 2\n"
           "[activation_checkpoint]\nmode = \"full\"\n";
  }
  auto file_72 = run_shell(bin + " predict --torchtitan-config " + pp72 + h100);
  EXPECT_EQ(file_72.err.rfind("commscope: " + pp72 +
                                  ": [training] global_batch_size (--global-batch-size): expected "
                                  "a multiple of local_batch_size",
                              0),
            0u)
      << file_72.err;
  // A pipeline flag replaces the file's stage split (Llama 3 8B on PP 4: 8, 9, 8, 7), with a
  // note: --pp 2 predicts (it was refused, blaming --pipeline-stage-layers, which no one gave);
  // a lower-case schedule name is read as PyTorch reads it; a micro-batch flag that does not
  // divide the local batch is named before the global batch is checked against it.
  const std::string pp4 = testing::scratch() + "pp4.toml";
  {
    std::ofstream out(pp4);
    out << "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n"
           "[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = \"1f1b\"\n"
           "[activation_checkpoint]\nmode = \"full\"\n";
  }
  auto four =
      run_shell(bin + " describe --torchtitan-config " + pp4 + " --system dgx-h100 --gpus 16");
  ASSERT_EQ(four.status, 0) << four.err;
  EXPECT_NE(four.out.find("layers per stage 8, 9, 8, 7"), std::string::npos) << four.out;
  auto two_stages = run_shell(bin + " describe --torchtitan-config " + pp4 +
                              " --system dgx-h100 --gpus 16 --pp 2");
  ASSERT_EQ(two_stages.status, 0) << two_stages.err;
  EXPECT_NE(two_stages.err.find("its pipeline stage split"), std::string::npos) << two_stages.err;
  // --schedule interleaved beside the file takes torchtitan's 2 stages per rank (it asked for
  // --vp); --vp still says otherwise.
  auto inter = run_shell(bin + " describe --torchtitan-config " + pp4 +
                         " --system dgx-h100 --gpus 16 --schedule interleaved");
  ASSERT_EQ(inter.status, 0) << inter.err;
  EXPECT_NE(inter.out.find("PP 4 (x2 virtual)"), std::string::npos) << inter.out;
  EXPECT_NE(inter.err.find("2 virtual stages per pipeline rank"), std::string::npos) << inter.err;
  auto inter4 = run_shell(bin + " describe --torchtitan-config " + pp4 +
                          " --system dgx-h100 --gpus 16 --schedule interleaved --vp 4");
  ASSERT_EQ(inter4.status, 0) << inter4.err;
  EXPECT_NE(inter4.out.find("PP 4 (x4 virtual)"), std::string::npos) << inter4.out;
  auto micro3 = run_shell(bin + " describe --torchtitan-config " + pp4 +
                          " --system dgx-h100 --gpus 16 --micro-batch-size 3");
  EXPECT_EQ(micro3.err.rfind("commscope: --micro-batch-size: expected a divisor of the local "
                             "batch of 8",
                             0),
            0u)
      << micro3.err;
  const std::string fifo = testing::scratch() + "job.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = run_shell(bin + " predict --torchtitan-config " + fifo + " --system dgx-h100 --gpus 8");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(fifo), std::string::npos) << r.err;
}

}  // namespace
}  // namespace commscope
