// Trace reading speed and memory: generates a Kineto-shaped synthetic trace of about 1 GB
// (CPU ops, runtime calls, flows, compute kernels, NCCL kernels with their profiler args,
// memory copies) and its gzip, then reads them with the trace reader on one thread and on all
// cores. Prints MB/s beside a memchr pass over the same file (the physical limit, in the same
// process), the .json.gz rate beside zlib's own inflate of the same file, and the peak resident
// memory over the file size. Usage: bench_trace [size_MB=1024] [file] [repetitions=3]
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "commscope/timeline/trace_reader.h"

namespace {

// Appends one training-step-like group of events at time t (microseconds).
void step_events(std::string& out, std::int64_t& id, double t) {
  for (int k = 0; k < 8; ++k, ++id) {
    const double ts = t + k * 120.0;
    fmt::format_to(
        std::back_inserter(out),
        R"J(  {{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 4242, "tid": 4242, "ts": {:.3f}, "dur": 35.125, "args": {{"External id": {}, "Ev Idx": {}, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"], "Input Dims": [[8, 2048, 4096], [12288, 4096], [12288]]}}}},
  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": {:.3f}, "dur": 5.250, "args": {{"External id": {}, "cbid": 211, "correlation": {}}}}},
  {{"ph": "s", "id": {}, "pid": 4242, "tid": 4242, "ts": {:.3f}, "cat": "ac2g", "name": "ac2g"}},
  {{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", "pid": 0, "tid": 7, "ts": {:.3f}, "dur": 98.750, "args": {{"External id": {}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {}, "registers per thread": 168, "shared memory": 213248, "blocks per SM": 1.0, "warps per SM": 12.0, "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 19}}}},
  {{"ph": "f", "id": {}, "pid": 0, "tid": 7, "ts": {:.3f}, "cat": "ac2g", "name": "ac2g", "bp": "e"}},
)J",
        ts, id, id, ts + 36, id, id, id, ts + 36, ts + 40, id, id, id, ts + 40);
  }
  fmt::format_to(
      std::back_inserter(out),
      R"J(  {{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 21, "ts": {:.3f}, "dur": 812.500, "args": {{"External id": {}, "queued": 0, "device": 0, "context": 1, "stream": 21, "correlation": {}, "registers per thread": 96, "shared memory": 87568, "grid": [16, 1, 1], "block": [640, 1, 1], "Collective name": "allreduce", "In msg nelems": 12582912, "Out msg nelems": 12582912, "Group size": 8, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}}}},
  {{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": {:.3f}, "dur": 12.250, "args": {{"External id": {}, "device": 0, "context": 1, "stream": 7, "correlation": {}, "bytes": 50331648, "memory bandwidth (GB/s)": 2054.6}}}},
)J",
      t + 200, id, id, t + 1000, id + 1, id + 1);
  id += 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const double size_mb = argc > 1 ? std::stod(argv[1]) : 1024;
  const int reps = argc > 3 ? std::max(1, std::stoi(argv[3])) : 3;
  const std::string path =
      argc > 2 ? argv[2] : (fs::temp_directory_path() / "commscope_bench_trace.json").string();
  const auto target = static_cast<std::uintmax_t>(size_mb * 1e6);
  std::error_code ec;
  if (!fs::exists(path, ec) || fs::file_size(path, ec) < target * 9 / 10) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return std::fprintf(stderr, "bench: cannot write %s\n", path.c_str()), 2;
    std::fputs(
        R"({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": [
)",
        f);
    std::string chunk;
    std::int64_t id = 1;
    std::uintmax_t written = 0;
    double t = 1e9;
    while (written < target) {
      chunk.clear();
      for (int i = 0; i < 200; ++i, t += 1200) step_events(chunk, id, t);
      std::fwrite(chunk.data(), 1, chunk.size(), f);
      written += chunk.size();
    }
    std::fputs(
        R"(  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 4242, "tid": 4242, "ts": 1000000000.0, "dur": 1.0}
], "displayTimeUnit": "ms"})",
        f);
    std::fclose(f);
  }
  // The same JSON gzipped (zlib's default level, as Python's and PyTorch's gzip write it).
  const std::string gz_path = path + ".gz";
  if (!fs::exists(gz_path, ec) ||
      fs::last_write_time(gz_path, ec) < fs::last_write_time(path, ec)) {
    std::FILE* in = std::fopen(path.c_str(), "rb");
    gzFile out = gzopen(gz_path.c_str(), "wb6");
    if (!in || !out) return std::fprintf(stderr, "bench: cannot write %s\n", gz_path.c_str()), 2;
    std::string block(4 << 20, '\0');
    for (std::size_t n; (n = std::fread(block.data(), 1, block.size(), in)) > 0;)
      gzwrite(out, block.data(), static_cast<unsigned>(n));
    std::fclose(in);
    gzclose(out);
  }
  const double bytes = static_cast<double>(fs::file_size(path));
  // Best of `reps` runs of f (seconds); each run in this process, one after the other, so that
  // every figure is taken under the same load as the baseline beside it.
  auto best_of = [&](auto&& f) {
    double best = 1e300;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      if (!f()) std::exit(2);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  std::size_t events = 0;
  auto reader = [&](const std::string& file, bool hta, int threads) {
    return [&, file, hta, threads] {
      auto r = commscope::read_trace(file, {}, hta, threads);
      if (!r.ok()) return std::fprintf(stderr, "bench: %s\n", r.error().message.c_str()), false;
      events = r->timeline.events.size();
      return true;
    };
  };
  // Baseline: the same file read in the reader's 4 MB blocks with one memchr pass for quotes
  // over every byte, the least any reader of the text pays.
  std::size_t quotes = 0;
  const double memchr_s = best_of([&] {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return std::fprintf(stderr, "bench: cannot open %s\n", path.c_str()), false;
    std::string block(4 << 20, '\0');
    quotes = 0;
    for (std::size_t n; (n = std::fread(block.data(), 1, block.size(), f)) > 0;)
      for (const char* p = block.data();
           (p = static_cast<const char*>(std::memchr(p, '"', block.data() + n - p))); ++p)
        ++quotes;
    std::fclose(f);
    return true;
  });
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double one_s = best_of(reader(path, false, 1));
  const double all_s = best_of(reader(path, false, 0));
  const double hta_s = best_of(reader(path, true, 0));
  // gzip: zlib's own single-thread inflate of the same file (gzread into 4 MB blocks, nothing
  // else) is the most the reader can reach on .json.gz; the reader inflates in its reading
  // thread while the parsing threads parse.
  const double gz_bytes = static_cast<double>(fs::file_size(gz_path));
  const double inflate_s = best_of([&] {
    gzFile f = gzopen(gz_path.c_str(), "rb");
    if (!f) return std::fprintf(stderr, "bench: cannot open %s\n", gz_path.c_str()), false;
    gzbuffer(f, 1 << 20);
    std::string block(4 << 20, '\0');
    while (gzread(f, block.data(), static_cast<unsigned>(block.size())) > 0) {
    }
    gzclose(f);
    return true;
  });
  const double gz_one_s = best_of(reader(gz_path, false, 1));
  const double gz_all_s = best_of(reader(gz_path, false, 0));
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak = static_cast<double>(ru.ru_maxrss) * 1024.0;
  auto rate = [&](double s) { return bytes / 1e6 / s; };
  std::printf("trace %s: %.0f MB, %zu GPU events kept; best of %d runs each, %u cores\n",
              path.c_str(), bytes / 1e6, events, reps, cores);
  std::printf("memchr pass (read + one memchr over every byte, %zu quotes): %.0f MB/s\n", quotes,
              rate(memchr_s));
  std::printf("read, 1 thread:        %.0f MB/s = %.2fx the memchr pass\n", rate(one_s),
              memchr_s / one_s);
  std::printf(
      "read, %u threads:       %.0f MB/s = %.2fx the memchr pass, %.2fx 1 thread (target "
      ">= 1000 MB/s)\n",
      cores, rate(all_s), memchr_s / all_s, one_s / all_s);
  std::printf("read with HTA's view (--convention hta), %u threads: %.0f MB/s\n", cores,
              rate(hta_s));
  std::printf(
      "gzip (%.0f MB, %.1fx): zlib inflate alone %.0f MB/s of JSON; the reader %.0f MB/s "
      "(1 thread), %.0f MB/s (%u threads) = %.2fx zlib's inflate\n",
      gz_bytes / 1e6, bytes / gz_bytes, rate(inflate_s), rate(gz_one_s), rate(gz_all_s), cores,
      inflate_s / gz_all_s);
  std::printf("peak resident memory: %.0f MB = %.3fx the file (target <= 1.5x)\n", peak / 1e6,
              peak / bytes);
  return 0;
}
