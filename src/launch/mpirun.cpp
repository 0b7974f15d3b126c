#include "commscope/launch/mpirun.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "commscope/launch/emulate.h"
#include "commscope/launch/process.h"

namespace commscope::launch {

namespace {
bool has_rdma_device() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// A folder of this job's own for Open MPI's session folders, removed when the job ends.
// mpirun otherwise shares $TMPDIR/ompi.<host>.<uid> with every other job of the same user on
// the machine, and Open MPI 4.1 creates it with a mkdir-then-stat that fails ("A call to mkdir
// was unable to create the desired directory ... File exists", orte_init failed) when another
// job ending at that moment removes it. Seen with two jobs started side by side.
class SessionFolder {
 public:
  SessionFolder() {
    const char* env = std::getenv("TMPDIR");
    std::string tmpl =
        fmt::format("{}/commscope-mpi-{}-XXXXXX", env && *env ? env : "/tmp", ::getpid());
    if (::mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~SessionFolder() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  SessionFolder(const SessionFolder&) = delete;
  SessionFolder& operator=(const SessionFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};
}  // namespace

Result<std::vector<std::string>> transport_args(const std::string& transport) {
  if (transport.empty()) return std::vector<std::string>{};
  if (transport == "tcp")
    return std::vector<std::string>{"--mca", "pml", "ob1", "--mca", "btl", "self,tcp"};
  if (transport == "shm")
    return std::vector<std::string>{"--mca", "pml", "ob1", "--mca", "btl", "self,vader"};
  if (transport == "rdma") {
    if (!has_rdma_device())
      return Error{
          "--transport rdma: this machine has no RDMA device (/sys/class/infiniband is empty); "
          "use tcp or shm here, or --emulate rdma-100g for its bandwidth over TCP"};
    return std::vector<std::string>{"--mca", "pml", "ucx", "--mca", "osc", "ucx"};
  }
  return Error{fmt::format("--transport: expected tcp, shm or rdma, got '{}'", transport)};
}

Status check_job_options(const JobOptions& o) {
  if (o.ranks < 1 || o.ranks > kMaxLocalRanks)
    return Error{
        fmt::format("--ranks: expected an integer from 1 to {} (ranks on this machine; "
                    "for more, run commscope-bench under your cluster's launcher), "
                    "got {}",
                    kMaxLocalRanks, o.ranks)};
  if (!o.emulate.empty()) {
    if (!o.transport.empty() && o.transport != "tcp")
      return Error{fmt::format(
          "--transport {}: --emulate runs MPI over TCP on the emulated links (rdma-100g emulates "
          "RDMA's bandwidth, not its transport); drop --transport",
          o.transport)};
    CS_ASSIGN_OR_RETURN(EmulationSpec spec, parse_emulation(o.emulate));
    const int nodes = spec.nodes > 0 ? spec.nodes : o.ranks;
    if (nodes > kMaxEmulatedNodes)
      return Error{
          fmt::format("--emulate: expected at most {} nodes (one per rank without "
                      "nodes=), got {}",
                      kMaxEmulatedNodes, nodes)};
    if (o.ranks % nodes != 0)
      return Error{fmt::format("--emulate: nodes: expected a divisor of the rank count {}, got {}",
                               o.ranks, nodes)};
    return {};
  }
  CS_ASSIGN_OR_RETURN(std::vector<std::string> t, transport_args(o.transport));
  (void)t;
  return {};
}

Status require_mpirun() {
  if (!on_path("mpirun"))
    return Error{"mpirun: not found on PATH: install openmpi-bin (scripts/install-deps.sh)"};
  return Status{};
}

Result<int> run_mpi_job(const std::string& program, const std::vector<std::string>& args,
                        const JobOptions& o, std::FILE* report,
                        std::vector<NodeTraffic>* traffic_out) {
  CS_RETURN_IF_ERROR(check_job_options(o));
  if (::access(program.c_str(), X_OK) != 0)
    return Error{fmt::format(
        "{}: not found: commscope was built without MPI (install libopenmpi-dev openmpi-bin with "
        "scripts/install-deps.sh and rebuild)",
        program)};
  CS_RETURN_IF_ERROR(require_mpirun());
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(o.ranks)};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");

  std::unique_ptr<EmulatedCluster> cluster;
  std::unique_ptr<SessionFolder> session;
  if (!o.emulate.empty()) {
    // check_job_options above refused a transport other than TCP and a bad spec.
    CS_ASSIGN_OR_RETURN(EmulationSpec spec, parse_emulation(o.emulate));
    {
      // Ctrl-C while the nodes are being created: finish (or fail), remove them, stop.
      SignalGuard guard;
      CS_ASSIGN_OR_RETURN(cluster, EmulatedCluster::create(spec, o.ranks));
      if (guard.caught()) {
        cluster.reset();
        return Error{"interrupted while creating the emulated network; it was removed"};
      }
    }
    for (auto& a : cluster->mpirun_args()) argv.push_back(a);
    // The emulated cluster's own folder holds the session folders (emulate.cpp).
  } else if (!std::getenv("OMPI_MCA_orte_tmpdir_base")) {  // the user's choice stays
    session = std::make_unique<SessionFolder>();
    if (!session->path().empty()) {  // else Open MPI's default, as before
      argv.push_back("--mca");
      argv.push_back("orte_tmpdir_base");
      argv.push_back(session->path());
    }
  }
  if (!cluster) {
    argv.push_back("--oversubscribe");
    CS_ASSIGN_OR_RETURN(std::vector<std::string> t, transport_args(o.transport));
    for (auto& a : t) argv.push_back(a);
  }
  argv.push_back(program);
  for (const auto& a : args) argv.push_back(a);

  if (cluster) cluster->start_monitor();
  bool interrupted = false;
  const int rc = run_job(argv, &interrupted);
  if (cluster) {
    const auto traffic = cluster->stop_monitor();
    if (traffic_out) *traffic_out = traffic;
    if (report && !interrupted)
      for (const auto& line : traffic_lines(cluster->spec(), traffic))
        std::fprintf(report, "%s\n", line.c_str());
    cluster.reset();  // namespaces, links and qdiscs go now
  }
  if (interrupted)
    return Error{fmt::format("interrupted: the MPI job was stopped{}",
                             o.emulate.empty() ? "" : " and the emulated network removed")};
  if (rc == 127) return Error{"mpirun: could not be started"};
  return rc;
}

}  // namespace commscope::launch
