// Emulated nodes on one machine, so that the seeds' TCP/IP vs IPoIB vs RDMA experiment runs
// without a cluster: each node is a network namespace joined to a bridge by a veth pair, its
// egress shaped with `tc ... tbf` to the profile's achievable rate (scaled down by one factor,
// kEmulationScale, so that all three profiles fit one machine with their ratios kept). MPI runs
// over TCP on those interfaces; ranks of one node share its link (and shared memory).
//
// What is emulated: a bandwidth ceiling per node and direction (full duplex: each direction
// gets its rate while the other is busy), and NIC sharing between a node's ranks. What is not:
// latency (this kernel has no netem, fq or etf qdisc: nothing here can delay a packet), RDMA's
// zero copy and CPU offload (every profile runs over TCP), switch contention beyond the per-node
// ceiling.
//
// Needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN. Everything created (namespaces, links, qdiscs,
// the launcher's temporary files) is removed by the destructor, also when the job fails or is
// interrupted; leftovers of a process that was killed outright are removed by the next run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commscope/util/result.h"

namespace commscope::launch {

// Full-scale rates are divided by this to get the shaped rate: tcp-10g's 9 Gb/s becomes
// 90 Mb/s, rdma-100g's 60 Gb/s 600 Mb/s, which veth pairs on a 2-core machine sustain.
inline constexpr double kEmulationScale = 100;

// Documented ranges (docs/bench.md): the shaped rate per node, and the node count. Outside
// them tc's burst arithmetic overflows or the machine cannot hold the namespaces.
inline constexpr double kMinShapedRateBps = 1e5;   // 100 kbit/s
inline constexpr double kMaxShapedRateBps = 1e11;  // 100 Gbit/s
inline constexpr int kMaxEmulatedNodes = 64;

struct EmulationSpec {
  std::string profile;         // network preset name, or "rate" for rate=<bits/s>
  double full_rate_bps = 0;    // the profile's achievable rate at full scale (bits/s)
  double shaped_rate_bps = 0;  // what tbf enforces: full / kEmulationScale, or rate= as given
  double scale = 1;            // full_rate / shaped_rate
  int nodes = 0;               // emulated nodes (0: one per rank)
};

// "tcp-10g", "ipoib-100g", "rdma-100g" (any network preset: its achievable_gbps),
// "rate=200M" or "rate=1.5e9" (bits/s, k/M/G decimal), optionally ",nodes=K". The shaped rate
// must lie in [kMinShapedRateBps, kMaxShapedRateBps], K in [1, kMaxEmulatedNodes].
Result<EmulationSpec> parse_emulation(const std::string& spec);

// Root, or both CAP_NET_ADMIN and CAP_SYS_ADMIN in the effective set.
Status check_network_privileges();

// Bytes each node sent and received while the job ran, sampled from the veth counters.
struct NodeTraffic {
  std::string node;
  std::uint64_t tx_bytes = 0, rx_bytes = 0;
  double busy_s = 0;         // sampling windows in which the node sent or received
  double peak_tx_bps = 0;    // highest sending rate over one window (bits/s)
  double mean_busy_bps = 0;  // sending rate averaged over busy windows (bits/s)
  // (seconds since sampling started, sending rate in bits/s) per window, at most
  // kMaxTrafficSamples (the first ones kept)
  std::vector<std::pair<double, double>> samples;
};
inline constexpr std::size_t kMaxTrafficSamples = 1 << 20;

class EmulatedCluster {
 public:
  // Creates spec.nodes namespaces (one per rank when 0) on a bridge, each shaped to
  // spec.shaped_rate_bps, for `ranks` ranks spread evenly over them.
  static Result<std::unique_ptr<EmulatedCluster>> create(const EmulationSpec& spec, int ranks);
  ~EmulatedCluster();
  EmulatedCluster(const EmulatedCluster&) = delete;
  EmulatedCluster& operator=(const EmulatedCluster&) = delete;

  // mpirun arguments that run the ranks in the nodes: hostfile, the launch agent that enters
  // a node's namespace, TCP on the bridge's subnet only, the TCP BTL without its "put"
  // protocol (with it, the two directions of a link took turns).
  std::vector<std::string> mpirun_args() const;
  // Starts and stops sampling the byte counters (every 200 ms).
  void start_monitor();
  std::vector<NodeTraffic> stop_monitor();
  const std::string& prefix() const { return prefix_; }
  const EmulationSpec& spec() const { return spec_; }
  int nodes() const { return nodes_; }

 private:
  EmulatedCluster() = default;
  Status setup();
  void teardown();
  std::string node(int k) const;  // namespace and host name of node k
  std::string host_if(int k) const;
  std::string node_if(int k) const;

  EmulationSpec spec_;
  int nodes_ = 0;
  int ranks_ = 0;
  std::string prefix_;   // "cs<pid>": every name created starts with it
  std::string subnet_;   // "10.a.b." (a /24)
  std::string tmpdir_;   // hostfile and launch agent
  bool bridge_ = false;  // what exists, for teardown
  int namespaces_ = 0;
  std::thread monitor_;
  std::atomic<bool> stop_{false};
  std::vector<NodeTraffic> traffic_;
};

// Removes namespaces and bridges named cs<pid>..., and temporary folders
// /tmp/commscope-emulate-<pid>-*, whose process no longer exists.
void remove_stale_emulations();
// Names of the namespaces and links whose names start with `prefix` ("cs<pid>"), and the
// run's temporary and Open MPI session folders still in /tmp (for tests).
std::vector<std::string> emulation_leftovers(const std::string& prefix);

// One-line descriptions of per-node traffic, for printing after a run.
std::vector<std::string> traffic_lines(const EmulationSpec& spec,
                                       const std::vector<NodeTraffic>& traffic);

}  // namespace commscope::launch
