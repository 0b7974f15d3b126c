// Safe opening of input files and the memory a reader may take.
#include "commscope/util/input_file.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

namespace commscope {

namespace {
struct InputsRead {
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, std::string> files;
};
InputsRead& inputs_read() {
  static InputsRead r;
  return r;
}
}  // namespace

void note_input_read(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  InputsRead& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.files.emplace(std::pair{st.st_dev, st.st_ino}, path);
}

void forget_input_read(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  InputsRead& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.files.erase(std::pair{st.st_dev, st.st_ino});
}

void clear_inputs_read() {
  InputsRead& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.files.clear();
}

std::string input_read_as(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  InputsRead& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.files.find(std::pair{st.st_dev, st.st_ino});
  return it == r.files.end() ? std::string() : it->second;
}

Status check_distinct_files(const std::vector<std::string>& paths, std::string_view what) {
  // One stat a path: a folder of thousands of traces stays linear.
  std::map<std::pair<dev_t, ino_t>, std::size_t> seen;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    struct stat st {};
    if (::stat(paths[i].c_str(), &st) != 0) continue;  // its reader names what is wrong
    if (auto [at, fresh] = seen.emplace(std::pair{st.st_dev, st.st_ino}, i); !fresh)
      return Error{fmt::format("{}: expected each {} once, got the file '{}' names again", paths[i],
                               what, paths[at->second])};
  }
  return {};
}

Status check_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  if (S_ISDIR(st.st_mode)) return Error{path + ": is a directory, expected a file"};
  if (!S_ISREG(st.st_mode))
    return Error{path + ": not a regular file (a FIFO, socket or device), expected a file"};
  return {};
}

Status check_flag_file(std::string_view flag, const std::string& path) {
  if (Status st = check_regular_file(path); !st.ok())
    return Error{fmt::format("{}: {}", flag, st.error().message)};
  return {};
}

Result<std::string> read_small_file(const std::string& path, std::uintmax_t max_bytes,
                                    std::string_view what) {
  CS_RETURN_IF_ERROR(check_regular_file(path));
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes)
    return Error{fmt::format("{}: {} bytes; expected {} of at most {} MiB", path, size, what,
                             max_bytes >> 20)};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  note_input_read(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::uint64_t available_memory_bytes() {
  std::uint64_t avail = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      unsigned long long kb = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        avail = kb * 1024;
        break;
      }
    }
    std::fclose(f);
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    avail = avail == 0 ? rl.rlim_cur : std::min<std::uint64_t>(avail, rl.rlim_cur);
  return avail;
}

}  // namespace commscope
