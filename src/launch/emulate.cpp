#include "commscope/launch/emulate.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "commscope/launch/process.h"
#include "commscope/spec/system.h"

namespace commscope::launch {

namespace {

constexpr const char* kEmulateTmpRoot = "/tmp";

// "200M", "1.5e9", "10G" (decimal multiples, bits/s).
bool parse_rate(const std::string& s, double& out) {
  if (s.empty()) return false;
  double mult = 1;
  std::string num = s;
  switch (s.back()) {
    case 'k':
    case 'K':
      mult = 1e3;
      break;
    case 'm':
    case 'M':
      mult = 1e6;
      break;
    case 'g':
    case 'G':
      mult = 1e9;
      break;
    default:
      break;
  }
  if (mult != 1) num.pop_back();
  try {
    std::size_t used = 0;
    const double v = std::stod(num, &used);
    if (used != num.size() || !(v > 0) || !std::isfinite(v)) return false;
    out = v * mult;
    return true;
  } catch (...) {
    return false;
  }
}

Status ok_or(const CommandResult& r, const std::vector<std::string>& argv) {
  if (r.status == 0) return ok_status();
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::string out = r.output;
  std::replace(out.begin(), out.end(), '\n', ' ');
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return Error{fmt::format("--emulate: `{}` failed (status {}): {}", cmd, r.status,
                           out.empty() ? "no output" : out)};
}

Status run(const std::vector<std::string>& argv) {
  return ok_or(run_command(argv), argv);
}

std::uint64_t read_counter(const std::string& iface, const char* which) {
  std::ifstream f("/sys/class/net/" + iface + "/statistics/" + which);
  std::uint64_t v = 0;
  f >> v;
  return v;
}

bool pid_alive(long pid) {
  return pid > 0 && std::filesystem::exists("/proc/" + std::to_string(pid));
}

}  // namespace

Result<EmulationSpec> parse_emulation(const std::string& spec) {
  EmulationSpec e;
  std::stringstream ss(spec);
  std::string part;
  bool first = true;
  while (std::getline(ss, part, ',')) {
    if (first) {
      first = false;
      if (part.rfind("rate=", 0) == 0) {
        e.profile = "rate";
        if (!parse_rate(part.substr(5), e.shaped_rate_bps))
          return Error{fmt::format(
              "--emulate: rate: expected bits per second such as 200M or 1.5e9, got '{}'",
              part.substr(5))};
        e.full_rate_bps = e.shaped_rate_bps;
        e.scale = 1;
        continue;
      }
      auto net = load_network(part);
      if (!net.ok())
        return Error{
            fmt::format("--emulate: expected tcp-10g, ipoib-100g, rdma-100g (a network preset) or "
                        "rate=<bits/s>, got '{}' ({})",
                        part, net.error().message)};
      e.profile = net->name;
      e.full_rate_bps = net->achievable.value() * 8;
      e.shaped_rate_bps = e.full_rate_bps / kEmulationScale;
      e.scale = kEmulationScale;
      continue;
    }
    if (part.rfind("nodes=", 0) == 0) {
      try {
        std::size_t used = 0;
        const int k = std::stoi(part.substr(6), &used);
        if (used != part.size() - 6 || k < 1 || k > kMaxEmulatedNodes)
          throw std::out_of_range("nodes");
        e.nodes = k;
      } catch (...) {
        return Error{fmt::format("--emulate: nodes: expected an integer from 1 to {}, got '{}'",
                                 kMaxEmulatedNodes, part.substr(6))};
      }
      continue;
    }
    return Error{
        fmt::format("--emulate: expected PROFILE[,nodes=K] or rate=<bits/s>[,nodes=K], got '{}' "
                    "in '{}'",
                    part, spec)};
  }
  if (first) return Error{"--emulate: expected tcp-10g, ipoib-100g, rdma-100g or rate=<bits/s>"};
  if (!(e.shaped_rate_bps >= kMinShapedRateBps && e.shaped_rate_bps <= kMaxShapedRateBps))
    return Error{fmt::format(
        "--emulate: {}: expected a shaped rate from 100k to 100G bits/s, got {:g} bits/s{}",
        e.profile == "rate" ? "rate" : e.profile, e.shaped_rate_bps,
        e.profile == "rate" ? "" : fmt::format(" (the profile's rate / {:g})", kEmulationScale))};
  return e;
}

Status check_network_privileges() {
  if (::geteuid() == 0) return ok_status();
  std::ifstream f("/proc/self/status");
  std::string line;
  unsigned long long caps = 0;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0) caps = std::strtoull(line.c_str() + 7, nullptr, 16);
  constexpr unsigned long long kNetAdmin = 1ull << 12, kSysAdmin = 1ull << 21;
  if ((caps & kNetAdmin) && (caps & kSysAdmin)) return ok_status();
  return Error{
      "--emulate: needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces, "
      "veth links and tc qdiscs; run as root, e.g. sudo commscope ..."};
}

std::string EmulatedCluster::node(int k) const {
  return fmt::format("{}n{}", prefix_, k);
}
std::string EmulatedCluster::host_if(int k) const {
  return fmt::format("{}h{}", prefix_, k);
}
std::string EmulatedCluster::node_if(int k) const {
  return fmt::format("{}e{}", prefix_, k);
}

Result<std::unique_ptr<EmulatedCluster>> EmulatedCluster::create(const EmulationSpec& spec,
                                                                 int ranks) {
  CS_RETURN_IF_ERROR(check_network_privileges());
  for (const char* tool : {"ip", "tc", "unshare"})
    if (!on_path(tool))
      return Error{
          fmt::format("--emulate: {}: not found on PATH: install iproute2 and util-linux "
                      "(scripts/install-deps.sh)",
                      tool)};
  const int nodes = spec.nodes > 0 ? spec.nodes : ranks;
  if (ranks % nodes != 0)
    return Error{fmt::format("--emulate: nodes: expected a divisor of the rank count {}, got {}",
                             ranks, nodes)};
  remove_stale_emulations();
  std::unique_ptr<EmulatedCluster> c(new EmulatedCluster());
  c->spec_ = spec;
  c->nodes_ = nodes;
  c->ranks_ = ranks;
  c->prefix_ = fmt::format("cs{}", static_cast<long>(::getpid()) % 10000000);
  Status s = c->setup();
  if (!s.ok()) return s.error();  // the destructor removes what was created
  return c;
}

Status EmulatedCluster::setup() {
  // A /24 no interface of this machine uses.
  const std::string addrs = run_command({"ip", "-4", "-o", "addr", "show"}).output;
  const long pid = ::getpid();
  for (int attempt = 0; attempt < 256 && subnet_.empty(); ++attempt) {
    std::string cand =
        fmt::format("10.{}.{}.", 200 + (pid + attempt) % 50, (pid / 50 + 7L * attempt) % 250 + 1);
    if (addrs.find(" " + cand) == std::string::npos) subnet_ = cand;
  }
  if (subnet_.empty()) return Error{"--emulate: no free 10.x.y.0/24 subnet for the bridge"};

  // The pid in the name lets the next run's stale cleanup remove it after a SIGKILL.
  std::string tmpl = fmt::format("{}/commscope-emulate-{}-XXXXXX", kEmulateTmpRoot, pid);
  if (!::mkdtemp(tmpl.data()))
    return Error{fmt::format("--emulate: cannot create a temporary folder in {}", kEmulateTmpRoot)};
  tmpdir_ = tmpl;

  const std::string br = prefix_ + "br";
  CS_RETURN_IF_ERROR(run({"ip", "link", "add", br, "type", "bridge"}));
  bridge_ = true;
  CS_RETURN_IF_ERROR(run({"ip", "addr", "add", subnet_ + "254/24", "dev", br}));
  CS_RETURN_IF_ERROR(run({"ip", "link", "set", br, "up"}));

  // tbf: a bucket of 64 KiB, one GSO segment (or 1 ms at the rate, if more): a message does
  // not pass much faster than the rate (a 128 KiB bucket made 64 KiB all-reduces look free),
  // while TCP still gets 90-95% of the rate through it; the queue holds 50 ms.
  const double rate = spec_.shaped_rate_bps;
  const auto burst = static_cast<long long>(std::max(65536.0, rate / 8 / 1000));
  for (int k = 0; k < nodes_; ++k) {
    const std::string ns = node(k);
    CS_RETURN_IF_ERROR(run({"ip", "netns", "add", ns}));
    namespaces_ = k + 1;
    CS_RETURN_IF_ERROR(run({"ip", "link", "add", host_if(k), "type", "veth", "peer", "name",
                            node_if(k), "netns", ns}));
    CS_RETURN_IF_ERROR(run({"ip", "link", "set", host_if(k), "master", br, "up"}));
    CS_RETURN_IF_ERROR(run({"ip", "-n", ns, "addr", "add", fmt::format("{}{}/24", subnet_, k + 1),
                            "dev", node_if(k)}));
    CS_RETURN_IF_ERROR(run({"ip", "-n", ns, "link", "set", node_if(k), "up"}));
    CS_RETURN_IF_ERROR(run({"ip", "-n", ns, "link", "set", "lo", "up"}));
    CS_RETURN_IF_ERROR(run({"tc", "-n", ns, "qdisc", "add", "dev", node_if(k), "root", "tbf",
                            "rate", fmt::format("{:.0f}bit", rate), "burst",
                            fmt::format("{}b", burst), "latency", "50ms"}));
  }

  // Open MPI starts its daemons through a "remote shell" agent: ours enters the node's
  // namespace and gives it its own host name, so that each node looks like another host.
  {
    std::ofstream hf(tmpdir_ + "/hostfile");
    for (int k = 0; k < nodes_; ++k) hf << node(k) << " slots=" << ranks_ / nodes_ << "\n";
    std::ofstream ag(tmpdir_ + "/agent");
    ag << "#!/bin/sh\n"
          "# commscope --emulate: runs an Open MPI daemon inside an emulated node's namespace\n"
          "node=\"$1\"; shift\n"
          "exec ip netns exec \"$node\" unshare --uts sh -c \"hostname $node && $*\"\n";
    if (!hf || !ag) return Error{fmt::format("--emulate: cannot write {}", tmpdir_)};
  }
  if (::chmod((tmpdir_ + "/agent").c_str(), 0755) != 0)
    return Error{fmt::format("--emulate: cannot make {}/agent executable", tmpdir_)};
  traffic_.resize(static_cast<std::size_t>(nodes_));
  for (int k = 0; k < nodes_; ++k) traffic_[static_cast<std::size_t>(k)].node = node(k);
  return ok_status();
}

std::vector<std::string> EmulatedCluster::mpirun_args() const {
  const std::string net = subnet_ + "0/24";
  return {"--hostfile", tmpdir_ + "/hostfile", "--mca", "plm_rsh_agent", tmpdir_ + "/agent",
          // Open MPI's session folders (/tmp/ompi.<host>.<uid> by default, one per emulated
          // host name) go into our own folder, which teardown and the stale cleanup remove.
          "--mca", "orte_tmpdir_base", tmpdir_, "--mca", "plm_rsh_no_tree_spawn", "1", "--mca",
          "oob_tcp_if_include", net,
          // TCP between nodes on the emulated links, shared memory within a node.
          "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include",
          net,
          // Full duplex: without "put", large messages go as a pipeline of 128 KiB send
          // fragments. With it (the default), a message's data is one fragment, and the TCP
          // BTL writes its fragments to a peer's one connection in order: the rendezvous
          // control messages of the other direction waited behind a whole message, so the two
          // directions took turns (4 MiB send/receive at 200 Mb/s: 96 Mb/s each way, 186
          // without "put"). The other flags are Open MPI 4.1's defaults.
          "--mca", "btl_tcp_flags", "send,inplace,need-ack,need-csum,hetero-rdma",
          // Each node has its own slots, so Open MPI does not see the oversubscription of the
          // real cores; busy-polling ranks then starve the kernel's network processing.
          "--mca", "mpi_yield_when_idle", "1"};
}

void EmulatedCluster::start_monitor() {
  stop_ = false;
  monitor_ = std::thread([this] {
    using clock = std::chrono::steady_clock;
    const double threshold = 0.01 * spec_.shaped_rate_bps;  // busy: above 1% of the rate
    std::vector<std::uint64_t> tx(traffic_.size()), rx(traffic_.size());
    std::vector<std::uint64_t> tx0(traffic_.size()), rx0(traffic_.size());
    std::vector<double> busy_bits(traffic_.size());
    for (std::size_t k = 0; k < traffic_.size(); ++k) {
      // The host end of node k's veth receives what node k sends.
      tx[k] = tx0[k] = read_counter(host_if(static_cast<int>(k)), "rx_bytes");
      rx[k] = rx0[k] = read_counter(host_if(static_cast<int>(k)), "tx_bytes");
    }
    auto last = clock::now();
    const auto first = last;
    bool done = false;
    while (!done) {
      for (int i = 0; i < 20 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      done = stop_;
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      last = now;
      if (dt <= 0) continue;
      for (std::size_t k = 0; k < traffic_.size(); ++k) {
        const std::uint64_t t = read_counter(host_if(static_cast<int>(k)), "rx_bytes");
        const std::uint64_t r = read_counter(host_if(static_cast<int>(k)), "tx_bytes");
        const double bps = static_cast<double>(t - tx[k]) * 8 / dt;
        const double rbps = static_cast<double>(r - rx[k]) * 8 / dt;
        NodeTraffic& nt = traffic_[k];
        if (bps > threshold || rbps > threshold) {
          nt.busy_s += dt;
          busy_bits[k] += static_cast<double>(t - tx[k]) * 8;
        }
        nt.peak_tx_bps = std::max(nt.peak_tx_bps, bps);
        if (nt.samples.size() < kMaxTrafficSamples)
          nt.samples.emplace_back(std::chrono::duration<double>(now - first).count(), bps);
        tx[k] = t, rx[k] = r;
        nt.tx_bytes = t - tx0[k];
        nt.rx_bytes = r - rx0[k];
        nt.mean_busy_bps = nt.busy_s > 0 ? busy_bits[k] / nt.busy_s : 0;
      }
    }
  });
}

std::vector<NodeTraffic> EmulatedCluster::stop_monitor() {
  if (monitor_.joinable()) {
    stop_ = true;
    monitor_.join();
  }
  return traffic_;
}

namespace {

// Names of the network namespaces, and of the links ("12: cs123h0@if11: <...>" gives cs123h0).
std::vector<std::string> namespace_names() {
  std::vector<std::string> out;
  std::stringstream in(run_command({"ip", "netns", "list"}).output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line.substr(0, line.find(' ')));  // "cs1n0 (id: 0)"
  return out;
}
std::vector<std::string> link_names() {
  std::vector<std::string> out;
  std::stringstream in(run_command({"ip", "-o", "link", "show"}).output);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(": ");
    if (a == std::string::npos) continue;
    const auto b = line.find_first_of(":@", a + 2);
    if (b != std::string::npos) out.push_back(line.substr(a + 2, b - a - 2));
  }
  return out;
}

// Kills whatever still runs in a namespace (a daemon of a failed job), then deletes it.
void remove_namespace(const std::string& name) {
  std::stringstream ps(run_command({"ip", "netns", "pids", name}).output);
  long p = 0;
  while (ps >> p)
    if (p > 1) ::kill(static_cast<pid_t>(p), SIGKILL);
  run_command({"ip", "netns", "del", name});
}

}  // namespace

void EmulatedCluster::teardown() {
  stop_monitor();
  for (int k = 0; k < namespaces_; ++k) {
    // Deleting one end of a veth pair deletes both at once; a namespace's own devices go
    // asynchronously after `ip netns del`, so the link goes first.
    run_command({"ip", "link", "del", host_if(k)});
    remove_namespace(node(k));
  }
  namespaces_ = 0;
  if (bridge_) run_command({"ip", "link", "del", prefix_ + "br"});
  bridge_ = false;
  if (!tmpdir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tmpdir_, ec);
    tmpdir_.clear();
  }
}

EmulatedCluster::~EmulatedCluster() {
  teardown();
}

namespace {
// Kills the processes outside the namespaces that a killed run left behind: its mpirun, whose
// command line names the run's folder (--hostfile <folder>/hostfile) and which waits forever for
// the daemons that died with the namespaces. Matched on that folder's path alone.
void kill_processes_naming(const std::string& folder) {
  const std::string needle = folder + "/";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd(4096, '\0');  // the first 4 KiB: mpirun names its hostfile early
    in.read(cmd.data(), static_cast<std::streamsize>(cmd.size()));
    cmd.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const long p = std::strtol(pid.c_str(), nullptr, 10);
    if (p > 1 && p != ::getpid() && cmd.find(needle) != std::string::npos)
      ::kill(static_cast<pid_t>(p), SIGKILL);
  }
}
}  // namespace

void remove_stale_emulations() {
  static const std::regex kNodeName(R"(^cs(\d{1,9})n\d+$)"), kLinkName(R"(^cs(\d{1,9})(br|h\d+)$)"),
      kTmpName(R"(^commscope-emulate-(\d{1,9})-\w{6}$)");
  std::smatch m;
  {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(kEmulateTmpRoot, ec)) {
      const std::string name = e.path().filename().string();
      std::error_code ec2;
      if (std::regex_match(name, m, kTmpName) && !pid_alive(std::stol(m[1])) &&
          e.is_directory(ec2) && !e.is_symlink(ec2)) {
        kill_processes_naming(e.path().string());
        std::filesystem::remove_all(e.path(), ec2);
      }
    }
  }
  for (const std::string& name : namespace_names())
    if (std::regex_match(name, m, kNodeName) && !pid_alive(std::stol(m[1]))) remove_namespace(name);
  // The host ends of the veth pairs (a namespace's own devices go asynchronously after
  // `ip netns del`, or not at all while something still holds it), then the bridges.
  for (const std::string& name : link_names())
    if (std::regex_match(name, m, kLinkName) && !pid_alive(std::stol(m[1])))
      run_command({"ip", "link", "del", name});
}

std::vector<std::string> emulation_leftovers(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& names : {namespace_names(), link_names()})
    for (const std::string& name : names)
      if (name.rfind(prefix, 0) == 0) out.push_back(name);
  // The run's temporary folder (prefix "cs<pid>": /tmp/commscope-emulate-<pid>-*) and Open
  // MPI's session folders of its hosts, had they gone to /tmp (/tmp/ompi.cs<pid>n<k>.<uid>).
  const std::string pid = prefix.size() > 2 ? prefix.substr(2) : prefix;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kEmulateTmpRoot, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("commscope-emulate-" + pid + "-", 0) == 0 ||
        name.rfind("ompi." + prefix + "n", 0) == 0)
      out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> traffic_lines(const EmulationSpec& spec,
                                       const std::vector<NodeTraffic>& traffic) {
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "# emulated network: {} shaped to {:.3g} Gb/s per node ({}; full-scale figures x{:g}); "
      "achieved per node, from the emulated NICs' byte counters:",
      spec.profile, spec.shaped_rate_bps / 1e9,
      spec.scale > 1 ? fmt::format("{} at {:.3g} Gb/s / {:g}", spec.profile,
                                   spec.full_rate_bps / 1e9, spec.scale)
                     : "rate as given",
      spec.scale));
  out.push_back(
      "# emulated: a bandwidth ceiling per node, shared by its ranks; not emulated: latency, "
      "RDMA's "
      "zero copy and CPU offload (every profile runs over TCP)");
  out.push_back(fmt::format("# {:>12} {:>12} {:>12} {:>14} {:>14} {:>16}", "node", "sent (MB)",
                            "recv (MB)", "peak (Gb/s)", "busy (Gb/s)", "full-scale peak"));
  for (const NodeTraffic& t : traffic)
    out.push_back(fmt::format("# {:>12} {:>12.1f} {:>12.1f} {:>14.4f} {:>14.4f} {:>11.2f} Gb/s",
                              t.node, static_cast<double>(t.tx_bytes) / 1e6,
                              static_cast<double>(t.rx_bytes) / 1e6, t.peak_tx_bps / 1e9,
                              t.mean_busy_bps / 1e9, t.peak_tx_bps * spec.scale / 1e9));
  return out;
}

}  // namespace commscope::launch
