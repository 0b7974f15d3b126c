// SystemSpec: one cluster's GPU, node and NICs, and NetworkProtocol: what the NICs run
// (line rate, achievable fraction, per-message latency). Not the topology beyond a node.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/spec/vocabulary.h"
#include "commscope/util/result.h"
#include "commscope/util/units.h"

namespace commscope {

// Peak dense throughput per data type (0 where the GPU has none).
struct PeakFlops {
  FlopsPerSecond fp64, fp32, tf32, fp16, bf16, fp8;
  // The tensor-core rate a training step in this precision runs its GEMMs at.
  FlopsPerSecond for_dtype(DType d) const;
};

struct GpuSpec {
  std::string name;
  PeakFlops peak;
  Bytes memory;                     // device memory
  BytesPerSecond memory_bandwidth;  // HBM bandwidth
};

enum class IntraNodeTopology : std::uint8_t { nvswitch, nvlink_mesh, pcie };
std::string_view to_string(IntraNodeTopology t);

struct NodeSpec {
  int gpus = 0;
  IntraNodeTopology topology = IntraNodeTopology::nvswitch;
  BytesPerSecond link_bandwidth;      // per GPU, per direction, all NVLink links together
  BytesPerSecond p2p_bandwidth;       // measured GPU-to-GPU copy bandwidth
  BytesPerSecond host_copy_pinned;    // host<->device, pinned memory (measured)
  BytesPerSecond host_copy_pageable;  // host<->device, pageable memory (measured)
  // The host's DRAM bandwidth, all sockets of the node together: what a CPU optimizer step
  // streams its states at under ZeRO-Offload (ParallelPlan::offload_optimizer).
  BytesPerSecond host_memory_bandwidth;
  // The host's memory, all sockets of the node together (0: not stated): where ZeRO-Offload's
  // states live.
  Bytes host_memory;
};

struct NicSpec {
  int count = 0;             // compute NICs per node
  BytesPerSecond line_rate;  // per NIC, as built
  std::string model;
};

// Calibratable efficiencies of the cost models (docs/cost-model.md). Defaults are round
// numbers, not fits; a system preset that was fitted says on what data in its sources.
struct Calibration {
  double gemm_efficiency = 0.75;      // fraction of tensor-core peak a large GEMM reaches
  double gemm_half_flops = 2e9;       // GEMM FLOPs at which it reaches half that fraction
  double gemm_steepness = 1.0;        // Hill exponent of that curve (1: f / (f + half))
  double attention_efficiency = 0.5;  // fraction of peak for attention matmuls (unfused)
  // FlashAttention's own kernels (--attention-backend flash), where measured apart from the
  // fused (cuDNN) attention that attention_efficiency prices; 0: attention_efficiency.
  double flash_attention_efficiency = 0;
  double memory_efficiency = 0.75;            // fraction of HBM bandwidth for element-wise ops
  Seconds kernel_overhead = units::us(3);     // launch and tail per kernel
  double intra_node_efficiency = 0.75;        // fraction of NVLink bandwidth collectives reach
  Seconds intra_node_latency = units::us(6);  // per step of an intra-node collective
  Seconds iteration_overhead = Seconds(0);  // host-side time per iteration (framework, launch gaps)
  Seconds microbatch_overhead =
      Seconds(0);  // host-side time per micro-batch and chunk (schedule engine)
};

// NCCL's cost model for collectives priced without a measured curve (docs/cost-model.md,
// "Algorithms and protocols"). Index order: link kind {NVLink, PCIe, network}, algorithm
// {ring, tree}, protocol {LL, LL128, Simple}. The defaults are NCCL's own tuning constants,
// src/graph/tuning.cc of NCCL 2.9 (baseLat, hwLat, the protocol bandwidth factors of
// ncclTopoTuneModel) and src/include/devcomm.h (thread thresholds); a system preset may
// override any of them in its "nccl" object.
struct NcclTuning {
  // Per-call base latency, us (tuning.cc baseLat).
  double base_latency_us[2][3] = {{3.6, 10.0, 8.4}, {4.4, 4.4, 0.0}};
  // Per-hop latency, us, by link kind (tuning.cc hwLat). The model keeps the calibrated ring
  // Simple hop latency of each link (intra_node_latency_us, the network's latency_us) and
  // scales the other algorithms and protocols by these ratios.
  double hop_latency_us[3][2][3] = {{{0.47, 1.9, 3.4}, {0.52, 1.2, 28}},
                                    {{1.0, 2.5, 5.7}, {1.0, 1.9, 28}},
                                    {{2.7, 4.0, 9.6}, {5.0, 8.5, 50}}};
  // Fraction of the link's bus bandwidth each protocol reaches (tuning.cc: ring LL 1/4,
  // LL128 0.92 (120/128 of each line carries data), tree 0.9 x (LL 1/3.8, LL128 0.915)).
  double bandwidth_fraction[2][3] = {{0.25, 0.92, 1.0}, {0.9 / 3.8, 0.9 * 0.915, 0.9}};
  // Bytes one channel takes before NCCL adds another: threads x per-thread threshold
  // (devcomm.h: LL 8 x 512 threads, x ranks for the ring; LL128 8 x 640; Simple 64 x 512).
  double channel_bytes[3] = {4096, 5120, 32768};
  int max_channels = 16;  // channels at full bandwidth (NCCL's ring count on NVSwitch systems)
  bool ll128 = true;      // LL128 enabled (NCCL enables it on NVLink systems only)

  // NVLS and CollNet (docs/cost-model.md, "NVLS and CollNet"), after NCCL 2.30.7
  // src/graph/tuning.cc and src/transport/nvls.cc. NVLink SHARP needs an NVSwitch-3 node or
  // later (H100/H200 DGX, GB200 NVL72): NCCL's NVLS (inside a node) and NVLS_TREE (NVLS inside,
  // a tree across nodes).
  bool nvls = false;
  double nvls_efficiency = 0.85;  // tuning.cc nvlsEfficiency: Hopper 0.85, Blackwell 0.74
  int nvls_channels = 16;         // nvls.cc NVLS_NCHANNELS_SM90 (Blackwell 24 or 32)
  // tuning.cc perChMaxNVLSTreeBws, GB/s per channel, 2 nodes and more (Hopper).
  double nvls_tree_channel_gbs[2] = {57.7, 45.5};
  // The fabric has IB SHARP (NCCL's CollNet, Direct and Chain). NCCL runs CollNet only with
  // NCCL_COLLNET_ENABLE=1: commscope prices it only where --nccl-algo names it.
  bool collnet = false;
  double collnet_direct_efficiency = 0.85;  // tuning.cc: CollNet Direct busBw x 0.85 from sm90
  // tuning.cc hwLatencies, us, [CollNetDirect, CollNetChain, NVLS, NVLSTree] x [NVLink, network];
  // scaled as the ring and tree hops are, against 2.30.7's ring Simple hops (3.4 and 14.0 us).
  double sharp_hop_latency_us[4][2] = {{3.7, 31}, {2.8, 30}, {25, 18}, {25, 20.9}};
  // NCCL_ALGO (--nccl-algo): per function (NcclFunction) the enabled algorithms (bits of
  // NcclAlgo); every one by default, CollNet used only when named (collnet_enable).
  std::uint8_t algorithms[5] = {0x3f, 0x3f, 0x3f, 0x3f, 0x3f};
  bool collnet_enable = false;
};

// NCCL's algorithms, as NCCL_ALGO names them (Ring, Tree, CollNetDirect, CollNetChain, NVLS,
// NVLSTree): bit (1 << value) of NcclTuning::algorithms.
enum class NcclAlgo : std::uint8_t { ring, tree, collnet_direct, collnet_chain, nvls, nvls_tree };
// The functions NCCL_ALGO may name that commscope prices with NCCL's model (index of
// NcclTuning::algorithms): AllReduce, AllGather, ReduceScatter, Broadcast, Reduce; -1 for
// send/receive and all-to-all (point to point, no algorithm choice).
int nccl_function(Collective c);
// Applies NCCL_ALGO's syntax ("ring,tree", "^nvls", "allreduce:nvls,ring;allgather:ring";
// names case-insensitive, "collnet" both CollNet forms, "nvls_tree" for NVLSTree) to the
// system's NcclTuning. Refused with one line naming --nccl-algo: unknown names, PAT (not
// modelled), an algorithm the system lacks (NVLS without NVSwitch 3, CollNet without SHARP),
// and a function left with no algorithm NCCL could run it with.
Status apply_nccl_algo(std::string_view text, const std::string& system_name, NcclTuning& t);

// Scale effects (docs/cost-model.md, "Scale effects"): each one off at its neutral value.
struct ScaleEffects {
  // Coefficient of variation of a rank's compute time between two synchronising collectives;
  // every collective waits for the slowest of its group (0: off).
  double straggler_cv = 0.01;
  // Fabric oversubscription above a leaf switch (1: non-blocking fat tree).
  double oversubscription = 1.0;
  int leaf_nodes = 32;              // nodes under one leaf switch (the fabric's first level)
  double switch_latency_us = 0.13;  // per switch traversed by an inter-node hop
  bool nic_sharing = true;          // concurrent groups share a node's NICs (false: each has all)
  // NICs of a node one group's collective spreads its channels over (0: all of them). A ring
  // whose traffic leaves the node through fewer NICs than the node has gets that many NICs'
  // bandwidth, shared as above.
  int nics_per_group = 0;
};

struct SystemSpec {
  std::string name;
  GpuSpec gpu;
  NodeSpec node;
  NicSpec nics;
  std::string network;  // protocol preset the NICs run unless --network says otherwise
  int max_nodes = 0;    // nodes in the machine (0: unknown)
  Calibration calibration;
  NcclTuning nccl;
  ScaleEffects scale;
  std::vector<std::string> sources;
  // What a GPU-hour costs and draws (`commscope plan --objective cost|energy`); the preset's
  // optional "economics" object, with its own sources. 0: not known.
  double price_per_gpu_hour = 0;  // US dollars per GPU-hour
  double power_per_gpu_w = 0;     // watts per GPU, its share of the node included
  std::vector<std::string> economics_sources;
};

enum class Transport : std::uint8_t { tcp, ipoib, rdma, roce, slingshot };
std::string_view to_string(Transport t);

// Where a measured curve's ranks sat: all on one node, or across nodes.
enum class CurveScope : std::uint8_t { intra_node, inter_node };
std::string_view to_string(CurveScope s);

// One point of a measured bus-bandwidth curve: nccl-tests "size" and the busbw at that size.
struct CurvePoint {
  double bytes = 0;      // size, bytes (> 0)
  BytesPerSecond busbw;  // bus bandwidth, bytes/s (> 0)
};

// Measured bus bandwidth of one collective as a function of size, at one rank and node count
// (one nccl-tests or commscope-bench sweep). Points sorted by strictly increasing size.
struct BusBwCurve {
  Collective collective = Collective::all_reduce;
  CurveScope scope = CurveScope::inter_node;
  int ranks = 0;  // ranks of the measured group (>= 2; 2 for send/recv)
  int nodes = 0;  // nodes they spanned (1 for intra_node)
  std::vector<CurvePoint> points;
};

// Bounds on the curves a network profile may hold (docs/cost-model.md).
inline constexpr std::size_t kMaxCurves = 1024;
inline constexpr std::size_t kMaxCurvePoints = 4096;

// A profile's curves, shared and immutable: scenarios copy their network per plan (sweeps of
// thousands), and copying a pointer keeps that free. Reads like a const vector; assigning a
// vector replaces the whole set.
class CurveSet {
 public:
  CurveSet() = default;
  CurveSet(std::vector<BusBwCurve> v)  // NOLINT: implicit, so `net.curves = fitted` reads plainly
      : v_(v.empty() ? nullptr : std::make_shared<const std::vector<BusBwCurve>>(std::move(v))) {}
  std::size_t size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return size() == 0; }
  const BusBwCurve* begin() const { return v_ ? v_->data() : nullptr; }
  const BusBwCurve* end() const { return begin() + size(); }
  const BusBwCurve& operator[](std::size_t i) const { return (*v_)[i]; }
  const BusBwCurve& front() const { return v_->front(); }
  const BusBwCurve& back() const { return v_->back(); }
  std::span<const BusBwCurve> span() const { return {begin(), size()}; }
  std::vector<BusBwCurve> copy() const { return v_ ? *v_ : std::vector<BusBwCurve>{}; }
  void clear() { v_.reset(); }

 private:
  std::shared_ptr<const std::vector<BusBwCurve>> v_;
};

struct NetworkProtocol {
  std::string name;
  Transport transport = Transport::rdma;
  BytesPerSecond line_rate;   // per port (NIC) when the NICs run this protocol
  BytesPerSecond achievable;  // per port, the highest rate observed for this protocol
  Seconds latency;            // small-message one-way latency, software stack included
  std::vector<std::string> sources;
  // Measured bus-bandwidth curves (`commscope fit` of nccl-tests logs); empty: the model alone.
  CurveSet curves;
  double efficiency() const { return achievable / line_rate; }
};

Result<SystemSpec> system_from_json(const nlohmann::json& j, const std::string& where);
Result<SystemSpec> load_system(const std::string& name_or_path);
Result<NetworkProtocol> network_from_json(const nlohmann::json& j, const std::string& where);
Result<NetworkProtocol> load_network(const std::string& name_or_path);

nlohmann::json to_json(const SystemSpec& s);
nlohmann::json to_json(const NetworkProtocol& p);

}  // namespace commscope
