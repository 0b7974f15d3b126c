// write, fsync, rename: a reader never sees half a file.
#include "commscope/util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace commscope {

Status write_file_atomic(const std::string& path, std::string_view content) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return Error{fmt::format("{}: cannot create a file beside it: {}", path, std::strerror(errno))};
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: {} failed: {}", path, what, std::strerror(err))};
  };
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail("chmod");
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: close failed: {}", path, std::strerror(errno))};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: rename failed: {}", path, std::strerror(err))};
  }
  return {};
}

}  // namespace commscope
