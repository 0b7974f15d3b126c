// Output files (util/atomic_file.h): regular files and new paths are replaced whole, links are
// followed, devices and FIFOs are written into, folders and other things are refused.
#include "commscope/util/atomic_file.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace commscope {
namespace {

namespace fs = std::filesystem;
using commscope::testing::slurp;

class OutputFile : public commscope::testing::TestFolder {
 protected:
  // Names in the folder, to see that no temporary file is left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
};

TEST_F(OutputFile, RegularFileIsReplacedWholeAndKeepsItsMode) {
  const fs::path p = dir_ / "out.json";
  std::ofstream(p) << "old content that is longer than the new one\n";
  ASSERT_EQ(::chmod(p.c_str(), 0600), 0);
  ASSERT_TRUE(check_output_path(p).ok());
  Status s = write_file_atomic(p, "new\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(slurp(p), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(entries(), std::vector<std::string>{"out.json"});
}

// A replaced file keeps its owner and group (a root run rewriting a user's output made it
// root's, found by probing, 2026-12-02). As root the test gives the file to another owner first;
// as anyone else it can only check that its own file stays its own.
TEST_F(OutputFile, RegularFileKeepsItsOwner) {
  const fs::path p = dir_ / "owned.json";
  std::ofstream(p) << "old\n";
  const bool root = ::geteuid() == 0;
  const uid_t uid = root ? 4242 : ::geteuid();
  const gid_t gid = root ? 4343 : ::getegid();
  if (root) ASSERT_EQ(::chown(p.c_str(), uid, gid), 0);
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  Status s = write_file_atomic(p, "new\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(slurp(p), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // A new file is the writer's.
  const fs::path fresh = dir_ / "fresh.json";
  ASSERT_TRUE(write_file_atomic(fresh, "x\n").ok());
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

// Several outputs of one command, all or none: a device that fails (/dev/full) leaves every
// regular file as it was and no temporary file (-o /dev/full replaced --html and --trace, then
// failed, found by probing, 2026-12-02); without a failure each file is whole.
TEST_F(OutputFile, SeveralOutputsAreWrittenAllOrNone) {
  const fs::path a = dir_ / "a.html", b = dir_ / "b.json";
  std::ofstream(a) << "old a\n";
  std::ofstream(b) << "old b\n";
  if (fs::exists("/dev/full")) {
    std::size_t failed = 99;
    Status s = write_files_atomic({{a, "new a\n"}, {"/dev/full", "text"}, {b, "new b\n"}}, &failed);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(failed, 1u);
    EXPECT_EQ(s.error().message.rfind("/dev/full: write failed", 0), 0u) << s.error().message;
    EXPECT_EQ(slurp(a), "old a\n");
    EXPECT_EQ(slurp(b), "old b\n");
    EXPECT_EQ(entries(), (std::vector<std::string>{"a.html", "b.json"}));
  }
  // A path that cannot be written at all is named before anything is written.
  std::size_t failed = 99;
  Status bad = write_files_atomic({{a, "new a\n"}, {dir_.string(), "x"}}, &failed);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(slurp(a), "old a\n");
  ASSERT_TRUE(write_files_atomic({{a, "new a\n"}, {b, "new b\n"}}).ok());
  EXPECT_EQ(slurp(a), "new a\n");
  EXPECT_EQ(slurp(b), "new b\n");
  EXPECT_EQ(entries(), (std::vector<std::string>{"a.html", "b.json"}));
}

// A command killed while its outputs are being written leaves no temporary file (one was left
// beside its output, found by probing, 2026-12-02). A child stages a regular file, then waits
// for a reader of a FIFO that never comes; SIGTERM ends it there.
TEST_F(OutputFile, ASignalRemovesTheTemporaryFiles) {
  const fs::path out = dir_ / "out.json", fifo = dir_ / "fifo";
  std::ofstream(out) << "old\n";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    remove_temporary_files_on_signals();
    (void)write_files_atomic({{out.string(), "new\n"}, {fifo.string(), "x"}});
    ::_exit(0);
  }
  // Wait until the temporary file exists beside out.json, then end the child.
  bool staged = false;
  for (int i = 0; i < 500 && !staged; ++i) {
    for (const auto& e : fs::directory_iterator(dir_))
      staged = staged || e.path().filename().string().rfind("out.json.tmp.", 0) == 0;
    if (!staged) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(staged);
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(slurp(out), "old\n");
  EXPECT_EQ(entries(), (std::vector<std::string>{"fifo", "out.json"}));
}

TEST_F(OutputFile, NewPathIsCreated) {
  const fs::path p = dir_ / "new.csv";
  ASSERT_TRUE(check_output_path(p).ok());
  EXPECT_FALSE(fs::exists(p)) << "the check creates nothing";
  ASSERT_TRUE(write_file_atomic(p, "a,b\n").ok());
  EXPECT_EQ(slurp(p), "a,b\n");
  EXPECT_EQ(entries(), std::vector<std::string>{"new.csv"});
}

TEST_F(OutputFile, MissingParentFoldersAreCreated) {
  const fs::path p = dir_ / "presets-mine" / "networks" / "x.json";
  Status c = check_output_path(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(fs::exists(dir_ / "presets-mine")) << "the check creates nothing";
  Status s = write_file_atomic(p, "{}\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(slurp(p), "{}\n");
}

TEST_F(OutputFile, AFileWhereAFolderShouldBeIsRefused) {
  std::ofstream(dir_ / "plain") << "x";
  const fs::path p = dir_ / "plain" / "sub" / "x.json";
  Status c = check_output_path(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("is not a folder"), std::string::npos) << c.error().message;
  EXPECT_FALSE(write_file_atomic(p, "x").ok());
  EXPECT_EQ(slurp(dir_ / "plain"), "x");
}

TEST_F(OutputFile, SymlinkToRegularFileWritesTheTargetAndStaysALink) {
  const fs::path target = dir_ / "target.json";
  const fs::path link = dir_ / "link.json";
  std::ofstream(target) << "old\n";
  fs::create_symlink("target.json", link);  // relative, as users make them
  ASSERT_TRUE(check_output_path(link).ok());
  Status s = write_file_atomic(link, "new\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), fs::path("target.json"));
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_EQ(entries(), (std::vector<std::string>{"link.json", "target.json"}));
}

TEST_F(OutputFile, DanglingSymlinkIsRefusedAndLeftAlone) {
  const fs::path link = dir_ / "dangling.json";
  fs::create_symlink(dir_ / "missing.json", link);
  Status c = check_output_path(link);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("dangling"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find(link.string()), std::string::npos) << c.error().message;
  EXPECT_FALSE(write_file_atomic(link, "x").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_FALSE(fs::exists(dir_ / "missing.json"));
  EXPECT_EQ(entries(), std::vector<std::string>{"dangling.json"});
}

TEST_F(OutputFile, DirectoryIsRefusedWithOneLine) {
  const fs::path d = dir_ / "folder";
  fs::create_directories(d);
  for (const std::string& p : {d.string(), d.string() + "/"}) {
    Status c = check_output_path(p);
    ASSERT_FALSE(c.ok()) << p;
    EXPECT_NE(c.error().message.find("folder"), std::string::npos) << c.error().message;
    EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
    EXPECT_FALSE(write_file_atomic(p, "x").ok());
    EXPECT_TRUE(fs::is_directory(d));
    EXPECT_TRUE(fs::is_empty(d));
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"folder"});
  EXPECT_FALSE(check_output_path("").ok());
}

// A folder that passes access() for root but takes no new file (procfs) is refused by the
// check, so a long verb (train) fails before it starts, not after it has run.
TEST_F(OutputFile, FolderThatTakesNoNewFileIsRefusedByTheCheck) {
  struct stat st {};
  if (::stat("/proc/version", &st) != 0 || !S_ISREG(st.st_mode))
    GTEST_SKIP() << "no /proc/version here";
  for (const std::string p : {"/proc/version", "/proc/commscope-new.json"}) {
    Status c = check_output_path(p);
    ASSERT_FALSE(c.ok()) << p;
    EXPECT_NE(c.error().message.find("cannot create a file in folder /proc"), std::string::npos)
        << c.error().message;
    EXPECT_FALSE(write_file_atomic(p, "x").ok()) << "the check agrees with the write";
  }
  // The probe file the check makes in a writable folder does not stay.
  ASSERT_TRUE(check_output_path(dir_ / "sub" / "new.json").ok());
  EXPECT_TRUE(entries().empty());
}

TEST_F(OutputFile, DevNullStaysACharacterDevice) {
  // First a private copy of /dev/null (made with mknod, as root), so that a broken writer
  // replaces that and not the machine's /dev/null.
  const fs::path node = dir_ / "null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    ASSERT_TRUE(check_output_path(node).ok());
    Status s = write_file_atomic(node, "discarded\n");
    ASSERT_TRUE(s.ok()) << s.error().message;
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    ASSERT_TRUE(S_ISCHR(st.st_mode)) << "the private device node was replaced";
    EXPECT_EQ(entries(), std::vector<std::string>{"null"});
  }
  Status s = write_file_atomic("/dev/null", "discarded\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// A device that cannot be opened fails at once: /dev/tty in a process without a controlling
// terminal (a child in a session of its own) gives ENXIO, which was taken for a FIFO without a
// reader, waited on for 30 s and then called a FIFO (found by probing, 2026-12-02). The message
// says which; the old code's was the FIFO's.
TEST_F(OutputFile, DeviceWithoutItsDeviceFailsAtOnce) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    ::setsid();  // no controlling terminal from here
    Status s = write_file_atomic("/dev/tty", "x\n");
    const std::string out = s.ok() ? "ok" : s.error().message;
    if (::write(fds[1], out.data(), out.size()) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_NE(got.find("/dev/tty: cannot open: No such device or address (the process has no "
                     "controlling terminal)"),
            std::string::npos)
      << got;
}

TEST_F(OutputFile, FifoIsWrittenIntoWithAReader) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo);  // blocks until the writer opens
    std::stringstream s;
    s << in.rdbuf();
    received = s.str();
  });
  ASSERT_TRUE(check_output_path(fifo).ok());
  Status s = write_file_atomic(fifo, "through the pipe\n");
  reader.join();
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(received, "through the pipe\n");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(entries(), std::vector<std::string>{"pipe"});
}

// /dev/fd/N names a descriptor this process has open: written to it, nothing created.
TEST_F(OutputFile, OwnDescriptorIsWrittenTo) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string path = "/dev/fd/" + std::to_string(fds[1]);
  Status s = write_file_atomic(path, "via the descriptor\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ::close(fds[1]);
  char buf[64] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof(buf) - 1);
  ::close(fds[0]);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0), "via the descriptor\n");
  EXPECT_FALSE(check_output_path("/dev/fd/" + std::to_string(fds[0])).ok()) << "closed now";
}

// The CLI end to end: `commscope predict -o /dev/null` leaves /dev/null a character device
// (it had replaced it with a regular file when run as root). The private copy goes first.
TEST_F(OutputFile, PredictToDevNullKeepsTheDevice) {
  auto predict_to = [](const std::string& path) {
    const std::string cmd =
        std::string(COMMSCOPE_BIN) + " predict -o " + path + " >/dev/null 2>&1 </dev/null";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const fs::path node = dir_ / "null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    ASSERT_EQ(predict_to(node.string()), 0);
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    ASSERT_TRUE(S_ISCHR(st.st_mode)) << "predict -o replaced the device node";
  }
  ASSERT_EQ(predict_to("/dev/null"), 0);
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A folder is refused with one line and status 2.
  fs::create_directories(dir_ / "sub");
  const std::string cmd2 = std::string(COMMSCOPE_BIN) + " predict -o " + (dir_ / "sub").string() +
                           " 2>" + (dir_ / "err").string() + " >/dev/null </dev/null";
  // -o /dev/stdout with stdout appended to a file: the file keeps what it held.
  const fs::path log = dir_ / "log";
  std::ofstream(log) << "kept\n";
  const std::string append = std::string(COMMSCOPE_BIN) +
                             " predict --format csv -o /dev/stdout >>" + log.string() +
                             " 2>/dev/null </dev/null";
  ASSERT_EQ(std::system(append.c_str()), 0);
  const std::string logged = slurp(log);
  EXPECT_EQ(logged.rfind("kept\n", 0), 0u) << logged;
  EXPECT_GT(logged.size(), 10u) << logged;
  const int rc = std::system(cmd2.c_str());
  EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 2);
  const std::string err = slurp(dir_ / "err");
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find((dir_ / "sub").string()), std::string::npos) << err;
}

}  // namespace
}  // namespace commscope
