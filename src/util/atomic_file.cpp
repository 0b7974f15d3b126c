// Output files: what the path names decides how it is written (atomic_file.h).
#include "commscope/util/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace commscope {
namespace {

namespace fs = std::filesystem;

enum class Kind { file, stream, descriptor };

// How a path is to be written: `target` is the regular file (after following links) that is
// replaced, or the path of the device or FIFO that is written straight into.
struct Plan {
  Kind kind = Kind::file;
  std::string target;
  bool exists = false;
  mode_t mode = 0644;
  // The replaced file's owner and group, given to its replacement where the process may (as root:
  // a user's output rewritten by a root run became root's, found by probing, 2026-12-02).
  std::optional<std::pair<uid_t, gid_t>> owner;
  int fd = -1;  // Kind::descriptor: the open descriptor the path names
};

// /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the descriptor this process already has
// open (-1 for other paths). Writing to it keeps what the shell set up (`>> log` appends; a
// rename would replace the file, an open would start at offset 0).
int own_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p = prefix;
    if (path.rfind(p, 0) != 0 || path.size() == p.size() || path.size() > p.size() + 6) continue;
    int fd = 0;
    for (std::size_t i = p.size(); i < path.size(); ++i) {
      if (path[i] < '0' || path[i] > '9') return -1;
      fd = fd * 10 + (path[i] - '0');
    }
    return fd;
  }
  return -1;
}

const char* type_name(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

Error refused(const std::string& path, mode_t m) {
  return Error{
      fmt::format("{}: is {}; expected a regular file, a new path, a character device or a FIFO",
                  path, type_name(m))};
}

std::string parent_of(const std::string& target) {
  fs::path p = fs::path(target).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

// The folder `dir` either exists and is writable, or can be created: its nearest existing
// ancestor is a writable folder.
Status check_folder(const std::string& path, const std::string& dir) {
  fs::path d = dir;
  for (;;) {
    struct stat st {};
    if (::stat(d.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return Error{fmt::format("{}: {} is not a folder", path, d.string())};
      if (::access(d.c_str(), W_OK | X_OK) != 0)
        return Error{fmt::format("{}: cannot write in folder {}: {}", path, d.string(),
                                 std::strerror(errno))};
      return {};
    }
    if (errno != ENOENT && errno != ENOTDIR)
      return Error{fmt::format("{}: {}: {}", path, d.string(), std::strerror(errno))};
    struct stat lst {};
    if (::lstat(d.c_str(), &lst) == 0)  // a dangling link where a folder should be
      return Error{fmt::format("{}: {} is a symbolic link to a missing folder", path, d.string())};
    if (!d.has_parent_path() || d.parent_path() == d) {
      d = ".";
      continue;
    }
    d = d.parent_path();
  }
}

Result<Plan> plan_for(const std::string& path) {
  if (path.empty()) return Error{"output path: expected a file path, got ''"};
  Plan plan;
  if (const int fd = own_descriptor(path); fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Error{fmt::format("{}: descriptor {} is not open", path, fd)};
    if (S_ISDIR(st.st_mode)) return refused(path, st.st_mode);
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
      return Error{fmt::format("{}: descriptor {} is not open for writing", path, fd)};
    plan.kind = Kind::descriptor;
    plan.target = path;
    plan.fd = fd;
    plan.exists = true;
    return plan;
  }
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      return Error{fmt::format("{}: {}", path, std::strerror(errno))};
    if (path.back() == '/')
      return Error{fmt::format("{}: names a folder; expected a file path", path)};
    plan.target = path;
    CS_RETURN_IF_ERROR(check_folder(path, parent_of(path)));
    return plan;
  }
  struct stat st = lst;
  if (S_ISLNK(lst.st_mode)) {
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT)
        return Error{fmt::format(
            "{}: is a symbolic link to a missing file; not writing through a dangling link", path)};
      return Error{fmt::format("{}: {}", path, std::strerror(errno))};
    }
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    plan.kind = Kind::stream;
    plan.target = path;
    plan.exists = true;
    if (::access(path.c_str(), W_OK) != 0)
      return Error{fmt::format("{}: {}", path, std::strerror(errno))};
    return plan;
  }
  if (!S_ISREG(st.st_mode)) return refused(path, st.st_mode);
  plan.exists = true;
  plan.mode = st.st_mode & 07777;
  plan.owner = std::pair{st.st_uid, st.st_gid};
  if (S_ISLNK(lst.st_mode)) {
    char buf[PATH_MAX];
    if (!::realpath(path.c_str(), buf))
      return Error{fmt::format("{}: cannot follow the link: {}", path, std::strerror(errno))};
    plan.target = buf;
  } else {
    plan.target = path;
  }
  CS_RETURN_IF_ERROR(check_folder(path, parent_of(plan.target)));
  return plan;
}

Status write_all(int fd, std::string_view content) {
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{std::strerror(errno)};
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// A character device or FIFO: opened for writing as it is (no O_CREAT, no O_TRUNC). O_NONBLOCK
// makes the open of a FIFO without a reader fail at once instead of blocking; it is retried
// until a reader comes or the wait is over, then cleared for the writes.
Status write_stream(const std::string& path, std::string_view content) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(kFifoReaderWaitSeconds);
  int fd = -1;
  for (;;) {
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) break;
    if (errno == EINTR) continue;
    // ENXIO is "no reader yet" for a FIFO only; from a device it is final (/dev/tty without a
    // controlling terminal was waited on for 30 s and then called a FIFO, found by probing,
    // 2026-12-02).
    struct stat st {};
    const int err = errno;
    if (err != ENXIO || ::stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode))
      return Error{fmt::format(
          "{}: cannot open: {}{}", path, std::strerror(err),
          err == ENXIO && path == "/dev/tty" ? " (the process has no controlling terminal)" : "")};
    if (std::chrono::steady_clock::now() >= deadline)
      return Error{
          fmt::format("{}: no reader opened the FIFO within {} s", path, kFifoReaderWaitSeconds)};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  Status s = write_all(fd, content);
  const int close_rc = ::close(fd);
  if (!s.ok()) return Error{fmt::format("{}: write failed: {}", path, s.error().message)};
  if (close_rc != 0) return Error{fmt::format("{}: close failed: {}", path, std::strerror(errno))};
  return {};
}

// Temporary files being written, for the signal handler to remove (a run killed between the
// write and the rename left "o.json.tmp.IIE7sz" beside its output, found by probing,
// 2026-12-02). Fixed slots: the handler may only touch memory that is already there.
constexpr int kTempSlots = 16;
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a path
  char path[PATH_MAX] = {};
};
TempSlot g_temps[kTempSlots];

int hold_temp(const std::string& tmp) {
  if (tmp.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int free = 0;
    if (!g_temps[i].state.compare_exchange_strong(free, 1)) continue;
    std::memcpy(g_temps[i].path, tmp.c_str(), tmp.size() + 1);
    g_temps[i].state.store(2);
    return i;
  }
  return -1;  // more at once than slots: written all the same, not removed on a signal
}

void release_temp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0);
}

extern "C" void remove_temps_and_reraise(int sig) {
  for (TempSlot& t : g_temps)
    if (t.state.load() == 2) ::unlink(t.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// A regular file's new content, written beside it and flushed to disk, not yet in its place.
struct Staged {
  std::string path, tmp, target;
  int slot = -1;
};

void discard(Staged& s) {
  ::unlink(s.tmp.c_str());
  release_temp(s.slot);
  s.slot = -1;
}

Result<Staged> stage(const std::string& path, const Plan& plan, std::string_view content) {
  const std::string dir = parent_of(plan.target);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{fmt::format("{}: cannot create folder {}: {}", path, dir, ec.message())};
  Staged st{path, plan.target + ".tmp.XXXXXX", plan.target};
  int fd = ::mkstemp(st.tmp.data());
  if (fd < 0)
    return Error{fmt::format("{}: cannot create a file beside it: {}", path, std::strerror(errno))};
  st.slot = hold_temp(st.tmp);
  auto fail = [&](const std::string& what) {
    ::close(fd);
    discard(st);
    return Error{fmt::format("{}: {}", path, what)};
  };
  if (Status s = write_all(fd, content); !s.ok()) return fail("write failed: " + s.error().message);
  // The owner first (chown may clear set-id bits), then the mode. Not being allowed to give
  // the file away (an ordinary user replacing another's file in a folder it may write) is no
  // error: the file is then the writer's, as any editor would leave it.
  if (plan.owner && (plan.owner->first != ::geteuid() || plan.owner->second != ::getegid()) &&
      ::fchown(fd, plan.owner->first, plan.owner->second) != 0 && errno != EPERM)
    return fail(fmt::format("chown failed: {}", std::strerror(errno)));
  if (::fchmod(fd, plan.mode) != 0)
    return fail(fmt::format("chmod failed: {}", std::strerror(errno)));
  if (::fsync(fd) != 0) return fail(fmt::format("fsync failed: {}", std::strerror(errno)));
  if (::close(fd) != 0) {
    const int err = errno;
    discard(st);
    return Error{fmt::format("{}: close failed: {}", path, std::strerror(err))};
  }
  return st;
}

// Renames the staged file over its target; a reader never sees half a file.
Status commit(Staged& s) {
  if (std::rename(s.tmp.c_str(), s.target.c_str()) != 0) {
    const int err = errno;
    discard(s);
    return Error{fmt::format("{}: rename failed: {}", s.path, std::strerror(err))};
  }
  release_temp(s.slot);
  s.slot = -1;
  return {};
}

// A descriptor this process holds open (/dev/stdout, /dev/fd/N).
Status write_descriptor(const std::string& path, const Plan& plan, std::string_view content) {
  // stdout may hold buffered text of this process: it goes first.
  if (plan.fd == 1) std::fflush(stdout);
  if (plan.fd == 2) std::fflush(stderr);
  if (Status s = write_all(plan.fd, content); !s.ok())
    return Error{fmt::format("{}: write failed: {}", path, s.error().message)};
  return {};
}

// A folder can pass access() and still refuse new files: root passes every permission check,
// and /proc or /sys take no new files. So a file is made and removed in the nearest folder that
// exists (the one the temporary file, or the first missing folder, will be made in).
Status probe_folder(const std::string& path, const std::string& dir) {
  fs::path d = dir;
  struct stat st {};
  while (::stat(d.c_str(), &st) != 0 && d.has_parent_path() && d.parent_path() != d)
    d = d.parent_path();
  if (::stat(d.c_str(), &st) != 0) d = ".";
  std::string probe = (d / ".commscope-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    return Error{fmt::format("{}: cannot create a file in folder {}: {}", path, d.string(),
                             std::strerror(errno))};
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

Status check_output_path(const std::string& path) {
  CS_ASSIGN_OR_RETURN(Plan plan, plan_for(path));
  if (plan.kind == Kind::file) return probe_folder(path, parent_of(plan.target));
  return {};
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  return write_files_atomic({{path, content}});
}

Status write_files_atomic(const std::vector<OutputFile>& files, std::size_t* failed) {
  std::vector<Plan> plans;
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto plan = plan_for(files[i].path);
    if (!plan) {
      if (failed) *failed = i;
      return plan.error();
    }
    plans.push_back(std::move(plan).value());
  }
  // The regular files first, each whole beside its target; then the devices and FIFOs, which
  // cannot be taken back; the renames last. A failure before the renames leaves every file as
  // it was (-o /dev/full replaced --html and --trace and then failed, found by probing,
  // 2026-12-02).
  std::vector<Staged> staged;
  auto give_up = [&](std::size_t i, Error e) {
    for (Staged& s : staged) discard(s);
    if (failed) *failed = i;
    return e;
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (plans[i].kind != Kind::file) continue;
    auto st = stage(files[i].path, plans[i], files[i].content);
    if (!st) return give_up(i, st.error());
    staged.push_back(std::move(st).value());
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    Status s = plans[i].kind == Kind::stream ? write_stream(files[i].path, files[i].content)
               : plans[i].kind == Kind::descriptor
                   ? write_descriptor(files[i].path, plans[i], files[i].content)
                   : Status{};
    if (!s.ok()) return give_up(i, s.error());
  }
  std::size_t k = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (plans[i].kind != Kind::file) continue;
    if (Status s = commit(staged[k++]); !s.ok()) {
      staged.erase(staged.begin(), staged.begin() + static_cast<std::ptrdiff_t>(k));
      return give_up(i, s.error());
    }
  }
  return {};
}

void remove_temporary_files_on_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) continue;  // nohup
    sa = {};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace commscope
