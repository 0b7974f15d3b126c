// Kineto / Chrome trace reader. One forward pass with simdjson On-Demand; events are copied
// into plain records as they are met; everything but the GPU timeline is skipped unread.
#include "commscope/timeline/trace_reader.h"

#include "commscope/util/input_file.h"
#include "commscope/util/text.h"

#include <zlib.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <simdjson.h>

namespace commscope {

namespace od = simdjson::ondemand;
using namespace std::string_view_literals;

namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool contains(std::string_view s, std::string_view p) {
  return s.find(p) != std::string_view::npos;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// A growable byte buffer that is not zero-filled when it grows (std::string::resize is: 4% of
// the reader's instructions went to that), with 64 spare bytes at the end.
class ByteBuffer {
 public:
  char* data() { return p_.get(); }
  const char* data() const { return p_.get(); }
  std::size_t size() const { return size_; }
  char operator[](std::size_t i) const { return p_[i]; }
  // Room for n more bytes at the end; commit(k) then keeps k of them.
  char* tail(std::size_t n) {
    if (size_ + n > cap_) {
      const std::size_t cap = std::max(size_ + n, 2 * cap_);
      std::unique_ptr<char[]> q(new char[cap + 64]);
      if (size_ > 0) std::memcpy(q.get(), p_.get(), size_);
      p_ = std::move(q);
      cap_ = cap;
    }
    return p_.get() + size_;
  }
  void commit(std::size_t k) { size_ += k; }
  void clear() { size_ = 0; }
  void erase_front(std::size_t k) {
    if (k == 0) return;
    std::memmove(p_.get(), p_.get() + k, size_ - k);
    size_ -= k;
  }

 private:
  std::unique_ptr<char[]> p_;
  std::size_t size_ = 0, cap_ = 0;
};

// Where the JSON text comes from, in blocks: a plain file, a gzip file, or memory.
class Source {
 public:
  virtual ~Source() = default;
  // Appends up to n bytes to out; 0 at the end. Errors are values.
  virtual Result<std::size_t> read(ByteBuffer& out, std::size_t n) = 0;
};

class FileSource : public Source {
 public:
  explicit FileSource(std::FILE* f) : f_(f) {}
  ~FileSource() override { std::fclose(f_); }
  Result<std::size_t> read(ByteBuffer& out, std::size_t n) override {
    const std::size_t got = std::fread(out.tail(n), 1, n, f_);
    out.commit(got);
    if (got == 0 && std::ferror(f_)) return Error{"read failed"};
    return got;
  }

 private:
  std::FILE* f_;
};

class GzSource : public Source {
 public:
  explicit GzSource(gzFile f) : f_(f) {}
  ~GzSource() override { gzclose(f_); }
  Result<std::size_t> read(ByteBuffer& out, std::size_t n) override {
    const int got = gzread(f_, out.tail(n), static_cast<unsigned>(n));
    out.commit(static_cast<std::size_t>(std::max(got, 0)));
    int code = Z_OK;
    std::string_view msg = gzerror(f_, &code);
    // zlib writes "<path>: <what>"; the reader's error names the path already.
    if (const auto colon = msg.rfind(": "); colon != std::string_view::npos)
      msg.remove_prefix(colon + 2);
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END && code != Z_BUF_ERROR))
      return Error{fmt::format("corrupt gzip stream after {} uncompressed bytes: {}", total_, msg)};
    total_ += static_cast<std::size_t>(std::max(got, 0));
    if (got == 0 && !gzeof(f_))
      return Error{fmt::format("corrupt gzip stream after {} uncompressed bytes", total_)};
    // gzread ends a truncated stream quietly: zlib then reports Z_BUF_ERROR.
    if (got == 0 && code == Z_BUF_ERROR)
      return Error{fmt::format("truncated gzip stream after {} uncompressed bytes", total_)};
    return static_cast<std::size_t>(got);
  }

 private:
  gzFile f_;
  std::size_t total_ = 0;
};

// A gzip file inflated in a thread of its own, a few blocks ahead of the reader: the reading
// thread scans and cuts while zlib inflates, so a .json.gz is read about as fast as zlib alone
// inflates it (zlib's inflate is single-threaded). At most kAhead blocks are held.
class InflatingSource : public Source {
 public:
  explicit InflatingSource(gzFile f) : source_(f), thread_([this] { run(); }) {}
  ~InflatingSource() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Result<std::size_t> read(ByteBuffer& out, std::size_t) override {
    if (ended_) return std::size_t{0};  // (the inflating thread has stopped)
    Block b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return !ready_.empty(); });
      b = std::move(ready_.front());
      ready_.pop_front();
    }
    changed_.notify_all();
    ended_ = !b.error.empty() || b.size == 0;
    if (!b.error.empty()) return Error{b.error};
    if (b.size > 0) std::memcpy(out.tail(b.size), b.data.data(), b.size);
    out.commit(b.size);
    std::lock_guard<std::mutex> lock(mu_);
    if (b.size > 0) spare_.push_back(std::move(b.data));
    return b.size;
  }

 private:
  struct Block {
    ByteBuffer data;
    std::size_t size = 0;
    std::string error;
  };
  static constexpr std::size_t kAhead = 4, kBlockBytes = 4 << 20;

  void run() {
    for (;;) {
      Block b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [&] { return stop_ || ready_.size() < kAhead; });
        if (stop_) return;
        if (!spare_.empty()) {
          b.data = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      b.data.clear();
      auto got = source_.read(b.data, kBlockBytes);
      const bool last = !got || *got == 0;
      if (!got)
        b.error = got.error().message;
      else
        b.size = *got;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(b));
      }
      changed_.notify_all();
      if (last) return;
    }
  }

  GzSource source_;  // (its reads append: each block's buffer is emptied first)
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Block> ready_;
  std::vector<ByteBuffer> spare_;
  bool stop_ = false;
  bool ended_ = false;  // the last block was read (the reading thread's)
  std::thread thread_;
};

class StringSource : public Source {
 public:
  explicit StringSource(std::string text) : text_(std::move(text)) {}
  Result<std::size_t> read(ByteBuffer& out, std::size_t n) override {
    const std::size_t k = std::min(n, text_.size() - at_);
    if (k > 0) std::memcpy(out.tail(k), text_.data() + at_, k);
    out.commit(k);
    at_ += k;
    return k;
  }

 private:
  std::string text_;
  std::size_t at_ = 0;
};

}  // namespace

// The categories the reader tells apart (Kineto's, and commscope's own), decided once per event.
enum class Cat : std::uint8_t {
  other,
  kernel,           // kernel, Kernel
  copy,             // gpu_memcpy, gpu_memset, Memcpy, Memset
  gpu_annotation,   // gpu_user_annotation
  user_annotation,  // user_annotation
  own_compute,      // commscope's own: compute, comm, memcpy
  own_comm,
  own_memcpy,
  cpu_op,   // read only for HTA's view (a ProfilerStep#N name)
  runtime,  // cuda_runtime, cuda_driver: read only for HTA's view
};

static Cat category(std::string_view c) {
  if (c.empty()) return Cat::other;
  switch (c[0]) {  // most events are cpu_op, cuda_runtime, ac2g: told apart by the first letter
    case 'k':
    case 'K':
      return c == "kernel"sv || c == "Kernel"sv ? Cat::kernel : Cat::other;
    case 'g':
      return c == "gpu_memcpy"sv || c == "gpu_memset"sv ? Cat::copy
             : c == "gpu_user_annotation"sv             ? Cat::gpu_annotation
                                                        : Cat::other;
    case 'M':
      return c == "Memcpy"sv || c == "Memset"sv ? Cat::copy : Cat::other;
    case 'u':
      return c == "user_annotation"sv ? Cat::user_annotation : Cat::other;
    case 'c':
      return c == "compute"sv        ? Cat::own_compute
             : c == "comm"sv         ? Cat::own_comm
             : c == "cpu_op"sv       ? Cat::cpu_op
             : c == "cuda_runtime"sv ? Cat::runtime
             : c == "cuda_driver"sv  ? Cat::runtime
                                     : Cat::other;
    case 'm':
      return c == "memcpy"sv ? Cat::own_memcpy : Cat::other;
    default:
      return Cat::other;
  }
}

// Categories of the events the reader keeps.
static bool kept_category(Cat c) {
  return c != Cat::other && c != Cat::cpu_op && c != Cat::runtime;
}

// Host-side categories read only for what HTA's conventions need (report/hta.h): runtime and
// driver calls (their correlation ids and stream) and CPU ops (only a ProfilerStep#N name).
static bool light_category(Cat c) {
  return c == Cat::cpu_op || c == Cat::runtime;
}

const std::vector<CommKernelFamily>& comm_kernel_families() {
  // Sources: NVIDIA/nccl src/device/symmetric/generate.py (2.27: ncclSymDevKernel, 2.28:
  // ncclSymkDevKernel), src/device/generate.py (2.19+: ncclDevKernel_<coll>_<op>_<type>_<algo>_
  // <proto>, ncclDevKernel_Generic), src/include/collectives.h NCCL_KERN_NAME (2.8-2.18:
  // ncclKernel_<func>_<algo>_<proto>_<op>_<type>; 2.3-2.7: <coll><algo><proto>Kernel_<op>_<type>
  // with coll = ncclAllReduce ...; 2.3: ncclMultiOpKernel), v1.3.4 src/*.cu (<Coll>Kernel<...>
  // (KernelArgs<T>)); ROCm/rccl at rocm-3.3.0 .. rocm-6.2.0 (the same macros; MSCCL_KERNEL_
  // ENTRY_NAME mscclKernel_<op>_<type>_<proto> from ROCm 5.7).
  static const std::vector<CommKernelFamily> rows = {
      {"NCCL", "NCCL 2.28+ (symmetric kernels)", "ncclSymkDevKernel", "", true,
       "ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_bf16"},
      {"NCCL", "NCCL 2.27 (symmetric kernels)", "ncclSymDevKernel", "", true,
       "ncclSymDevKernel_AllGather_LL"},
      {"NCCL/RCCL", "NCCL 2.19+, RCCL ROCm 6.2+", "ncclDevKernel", "", true,
       "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
      {"NCCL/RCCL", "NCCL 2.8-2.18, RCCL ROCm 5.0-6.1", "ncclKernel_", "", true,
       "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"},
      {"NCCL/RCCL", "NCCL 2.0-2.7, RCCL ROCm 3.x-4.x", "nccl", "Kernel", false,
       "ncclAllReduceRingLLKernel_sum_f32(ncclColl)"},
      {"RCCL", "RCCL ROCm 5.7+ (MSCCL)", "mscclKernel_", "", true, "mscclKernel_Sum_bf16_LL"},
      {"RCCL", "RCCL (other kernels)", "rccl", "", false, "rcclKernel"},
      {"NCCL", "NCCL 1.x", "AllReduceKernel<", "KernelArgs<", false,
       "void AllReduceKernel<256, 8, FuncSum<float>, float>(KernelArgs<float>)"},
      {"NCCL", "NCCL 1.x", "AllGatherKernel<", "KernelArgs<", false,
       "void AllGatherKernel<256, 8, float>(KernelArgs<float>)"},
      {"NCCL", "NCCL 1.x", "ReduceScatterKernel<", "KernelArgs<", false,
       "void ReduceScatterKernel<256, 8, FuncSum<float>, float>(KernelArgs<float>)"},
      {"NCCL", "NCCL 1.x", "BroadcastKernel<", "KernelArgs<", false,
       "void BroadcastKernel<256, 8, float>(KernelArgs<float>)"},
      {"NCCL", "NCCL 1.x", "ReduceKernel<", "KernelArgs<", false,
       "void ReduceKernel<256, 8, FuncSum<float>, float>(KernelArgs<float>)"},
  };
  return rows;
}

int comm_kernel_family(std::string_view n) {
  if (n.size() < 4) return -1;
  // Most kernels are not NCCL's: a quick test of the letters every row needs.
  if (!contains(n, "ccl") && !contains(n, "Kernel<")) return -1;
  std::string_view b = starts_with(n, "void ") ? n.substr(5) : n;
  const auto& rows = comm_kernel_families();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CommKernelFamily& r = rows[i];
    if (!(r.anywhere ? contains(n, r.prefix) : starts_with(b, r.prefix))) continue;
    if (!r.also.empty() && !contains(b, r.also)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

bool is_comm_kernel(std::string_view n) {
  return comm_kernel_family(n) >= 0;
}

bool looks_like_comm_kernel(std::string_view n) {
  const std::string l = lower(n);
  for (std::string_view p :
       {"nccl", "rccl", "msccl", "hccl", "userbuffers", "allreduce", "all_reduce", "allgather",
        "all_gather", "reducescatter", "reduce_scatter", "alltoall", "all_to_all", "sendrecv",
        "cross_device_reduce"})
    if (contains(l, p)) return true;
  return false;
}

int profiler_dtype_bytes(std::string_view dtype) {
  const std::string d = lower(dtype);
  if (d == "float"sv || d == "float32"sv || d == "int"sv || d == "int32"sv || d == "uint32"sv)
    return 4;
  if (d == "half"sv || d == "float16"sv || d == "bfloat16"sv || d == "short"sv || d == "int16"sv)
    return 2;
  if (d == "double"sv || d == "float64"sv || d == "long"sv || d == "int64"sv || d == "uint64"sv)
    return 8;
  if (d == "byte"sv || d == "char"sv || d == "int8"sv || d == "uint8"sv || d == "bool"sv ||
      d == "float8_e4m3fn"sv || d == "float8_e5m2"sv)
    return 1;
  return 0;
}

int rank_from_file_name(const std::string& path) {
  static const std::regex re(R"(rank[-_]?(\d+))", std::regex::icase);
  std::smatch m;
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (std::regex_search(base, m, re)) return std::stoi(m[1].str());
  return -1;
}

namespace {

// One event as read; strings point into the document (or a chunk's arena) until copied.
struct RawEvent {
  std::string_view name, collective_name, dtype, group_name;
  Cat cat = Cat::other;
  bool ph_x = false;  // "ph": "X" (a complete event)
  double ts = NAN, dur = NAN;
  std::int64_t pid = 0, tid = 0;
  std::int64_t in_nelems = 0, out_nelems = 0, group_size = 0;
  double bytes = 0;
  double wait_us = 0;  // own format: the part of the slice spent waiting for peers
  bool has_dur = false;
  bool light = false;             // a host event read only for HTA's view
  std::int64_t correlation = -1;  // args.correlation
  double stream = NAN;            // args.stream as HTA's pandas reads it (NaN: not numeric)
  std::int64_t external_id = -1;  // args["External id"]: a kernel's CPU op
  bool param_comms = false;       // a record_param_comms CPU op (its args are a collective's)
};

// A stream id as pandas' to_numeric reads it: a number, or a string of a decimal number; else
// NaN (HTA then takes -1).
double numeric_stream(od::value& v) {
  od::json_type t;
  if (v.type().get(t)) return NAN;
  double d = NAN;
  if (t == od::json_type::number) {
    if (v.get_double().get(d)) return NAN;
    return d;
  }
  std::string_view s;
  if (t != od::json_type::string || v.get_string().get(s) || s.empty() || s.size() > 18) return NAN;
  std::size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i == s.size()) return NAN;
  double x = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return NAN;
    x = x * 10 + (s[i] - '0');
  }
  return s[0] == '-' ? -x : x;
}

// The keys the reader looks at, matched on the raw key text (no copy, no unescaping: the
// profiler writes its keys plainly; a key spelled with escapes is not recognised).
enum class Key : std::uint8_t {
  other,
  ph,
  cat,
  name,
  ts,
  dur,
  pid,
  tid,
  args,
  // args
  correlation,
  stream,
  collective,
  in_nelems,
  out_nelems,
  group_size,
  dtype,
  group,
  bytes,
  wait_us,
  external_id
};

Key event_key(const od::raw_json_string& k) {
  const char* s = k.raw();
  switch (s[0]) {
    case 'p':
      return k.unsafe_is_equal("ph"sv)    ? Key::ph
             : k.unsafe_is_equal("pid"sv) ? Key::pid
                                          : Key::other;
    case 'c':
      return k.unsafe_is_equal("cat"sv) ? Key::cat : Key::other;
    case 'n':
      return k.unsafe_is_equal("name"sv) ? Key::name : Key::other;
    case 't':
      return k.unsafe_is_equal("ts"sv)    ? Key::ts
             : k.unsafe_is_equal("tid"sv) ? Key::tid
                                          : Key::other;
    case 'd':
      return k.unsafe_is_equal("dur"sv) ? Key::dur : Key::other;
    case 'a':
      return k.unsafe_is_equal("args"sv) ? Key::args : Key::other;
    default:
      return Key::other;
  }
}

Key args_key(const od::raw_json_string& k) {
  const char* s = k.raw();
  switch (s[0]) {
    case 'c':
      return k.unsafe_is_equal("correlation"sv)  ? Key::correlation
             : k.unsafe_is_equal("collective"sv) ? Key::collective
                                                 : Key::other;
    case 'C':
      return k.unsafe_is_equal("Collective name"sv) ? Key::collective : Key::other;
    case 'E':
      return k.unsafe_is_equal("External id"sv) ? Key::external_id : Key::other;
    case 's':
      return k.unsafe_is_equal("stream"sv) ? Key::stream : Key::other;
    case 'I':
      return k.unsafe_is_equal("In msg nelems"sv) ? Key::in_nelems : Key::other;
    case 'O':
      return k.unsafe_is_equal("Out msg nelems"sv) ? Key::out_nelems : Key::other;
    case 'G':
      return k.unsafe_is_equal("Group size"sv) ? Key::group_size : Key::other;
    case 'g':
      return k.unsafe_is_equal("group_size"sv) ? Key::group_size
             : k.unsafe_is_equal("group"sv)    ? Key::group
                                               : Key::other;
    case 'd':
      return k.unsafe_is_equal("dtype"sv) ? Key::dtype : Key::other;
    case 'b':
      return k.unsafe_is_equal("bytes"sv) ? Key::bytes : Key::other;
    case 'w':
      return k.unsafe_is_equal("wait_us"sv) ? Key::wait_us : Key::other;
    default:
      return Key::other;
  }
}

// A raw key's text up to its closing quote (for messages).
std::string_view key_text(const od::raw_json_string& k) {
  const char* s = k.raw();
  std::size_t n = 0;
  while (n < 256 && s[n] != '"') n += s[n] == '\\' ? 2 : 1;
  return {s, n};
}

// The 64-byte masks of a block: quotes, backslashes, opening and closing brackets.
struct BlockMasks {
  std::uint64_t quote = 0, backslash = 0, open = 0, close = 0;
};

inline BlockMasks block_masks(const char* p) {
  BlockMasks m;
#if defined(__AVX2__)
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  auto eq = [](__m256i a, __m256i b, char c) {
    const __m256i v = _mm256_set1_epi8(c);
    return static_cast<std::uint64_t>(
               static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, v)))) |
           static_cast<std::uint64_t>(
               static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, v))))
               << 32;
  };
  m.quote = eq(lo, hi, '"');
  m.backslash = eq(lo, hi, '\\');
  // '{' 0x7B and '[' 0x5B differ only in bit 0x20, as do '}' 0x7D and ']' 0x5D.
  const __m256i b20 = _mm256_set1_epi8(0x20);
  const __m256i lo20 = _mm256_or_si256(lo, b20), hi20 = _mm256_or_si256(hi, b20);
  m.open = eq(lo20, hi20, '{');
  m.close = eq(lo20, hi20, '}');
#elif defined(__SSE2__)
  for (int part = 0; part < 4; ++part) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * part));
    const __m128i x20 = _mm_or_si128(x, _mm_set1_epi8(0x20));
    auto eq = [&](__m128i a, char c) {
      return static_cast<std::uint64_t>(
                 static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(a, _mm_set1_epi8(c)))))
             << (16 * part);
    };
    m.quote |= eq(x, '"');
    m.backslash |= eq(x, '\\');
    m.open |= eq(x20, '{');
    m.close |= eq(x20, '}');
  }
#else
  for (int k = 0; k < 64; ++k) {
    const std::uint64_t bit = std::uint64_t{1} << k;
    const char c = p[k];
    if (c == '"') m.quote |= bit;
    if (c == '\\') m.backslash |= bit;
    if (c == '{' || c == '[') m.open |= bit;
    if (c == '}' || c == ']') m.close |= bit;
  }
#endif
  return m;
}

// The bits of the characters escaped by a backslash, carrying a trailing escape to the next
// block (simdjson's escape scanner, json_escape_scanner in its stage 1).
inline std::uint64_t escaped_bits(std::uint64_t backslash, bool& next_escaped) {
  const std::uint64_t carry = next_escaped ? 1 : 0;
  if (backslash == 0) {
    next_escaped = false;
    return carry;
  }
  const std::uint64_t potential = backslash & ~carry;
  const std::uint64_t odd = 0xAAAAAAAAAAAAAAAAull;
  const std::uint64_t escape_and_terminal = (((potential << 1) | odd) - potential) ^ odd;
  const std::uint64_t escaped = escape_and_terminal ^ (backslash | carry);
  next_escaped = ((escape_and_terminal & backslash) >> 63) != 0;
  return escaped;
}

// Bit i set when an odd number of bits at or below i are set.
inline std::uint64_t prefix_xor(std::uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

// A chunk of whole events, parsed by a worker thread (or in line with one thread), merged into
// the TraceFile in file order by the reading thread.
struct Chunk {
  std::string text;  // "[" events "]", with simdjson's padding reserved
  // Per event: its offset in text and in the file (for the byte offsets of messages).
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t first_index = 0;     // index of its first event in traceEvents
  std::vector<RawEvent> events;    // the events that may be kept, in order
  std::vector<std::size_t> index;  // their indexes in traceEvents
  std::string arena;               // their strings (reserved to the text's size: never moves)
  std::size_t count = 0;           // events parsed
  std::string error;               // the first parse error, after `events`
  bool done = false;
};

class Reader {
 public:
  Reader(const std::string& name, Source& source, const ReadLimits& limits, bool hta, int threads)
      : name_(name), source_(source), limits_(limits), hta_(hta), threads_(threads) {}

  ~Reader() { stop_workers(); }

  // One forward pass: a small lexical scanner walks the top-level object and cuts the
  // traceEvents array into chunks of whole events (64 bytes at a time inside the array, from
  // bit masks of quotes and brackets); each chunk is parsed by simdjson On-Demand, in `threads`
  // worker threads when more than one, and merged into the TraceFile in file order, so the
  // result does not depend on the threads. At most a few chunks are in memory at a time.
  Result<TraceFile> run() {
    TraceFile tf;
    tf.path = name_;
    auto r = scan(tf);
    if (!r.ok()) {
      // Chunks cut before the scanner's error are parsed first: their errors come first. An
      // error that is a chunk's own (merged in file order, threads or not) is the first already:
      // draining then named a later chunk's (--max-events 1000 said event 9615 on two threads,
      // found by probing, 2026-12-02).
      if (merge_failed_) return r.error();
      if (auto st = drain(0, tf); !st.ok()) return st.error();
      return r.error();
    }
    if (auto st = drain(0, tf); !st.ok()) return st.error();
    if (!info_.empty()) read_info(info_, tf);
    finish(tf);
    return tf;
  }

 private:
  Status scan(TraceFile& tf) {
    enum class Mode { start, key, colon, value, events, done } mode = Mode::start;
    std::string key;  // current top-level key
    bool capture_info = false, saw_events = false;
    int depth = 0;
    bool in_string = false, escape = false;
    std::size_t value_start = 0, event_start = 0, chunk_start = std::string::npos, chunk_end = 0;
    std::size_t i = 0;
    for (;;) {
      if (i == buf_.size()) {
        // Keep what is still needed (the current event or value; events are copied into their chunk
        // as they end).
        std::size_t keep = std::min({i, mode == Mode::events && depth > 2 ? event_start : i,
                                     mode == Mode::value && capture_info ? value_start : i});
        if (mode == Mode::key && in_string) keep = std::min(keep, key_start_);
        // Memory stays bounded: one event, value or key may not grow past the limit.
        if (auto st = check_held(mode == Mode::events && depth > 2     ? i - event_start
                                 : mode == Mode::value && capture_info ? i - value_start
                                 : mode == Mode::key && in_string      ? i - key_start_
                                                                       : 0,
                                 mode == Mode::events  ? fmt::format("event {}", cut_ + pending_)
                                 : mode == Mode::value ? std::string("field 'distributedInfo'")
                                                       : std::string("a top-level key"));
            !st.ok())
          return st.error();
        shift(keep, i, value_start, event_start, chunk_start, chunk_end);
        auto got = source_.read(buf_, kBlock);
        if (!got) return Error{fmt::format("{}: {}", name_, got.error().message)};
        if (*got == 0) break;
      }
      if (mode == Mode::events && events_open_ && depth >= 2 && buf_.size() - i >= 64) {
        // Inside the array: whole 64-byte blocks at a time.
        bool closed = false;
        if (auto st = scan_blocks(i, depth, in_string, escape, event_start, chunk_start, chunk_end,
                                  closed, tf);
            !st.ok())
          return st;
        if (closed) mode = Mode::key;
        continue;
      }
      if (in_string && !escape) {
        // Jump to the next quote; most of a trace's bytes are inside strings.
        const void* q = std::memchr(buf_.data() + i, '"', buf_.size() - i);
        const std::size_t stop =
            q ? static_cast<std::size_t>(static_cast<const char*>(q) - buf_.data()) : buf_.size();
        std::size_t slashes = 0;
        while (stop - slashes > i && buf_[stop - slashes - 1] == '\\') ++slashes;
        if (!q) {
          escape = slashes % 2 == 1;  // a backslash ends the block: the next byte is escaped
          i = buf_.size();
          continue;
        }
        if (slashes % 2 == 1) {  // an escaped quote: still inside the string
          i = stop + 1;
          continue;
        }
        i = stop;  // the closing quote, handled below
      }
      if (!in_string && mode == Mode::events && depth > 2) {
        // Inside an event only quotes and brackets matter: skip numbers and punctuation fast.
        const char* p = buf_.data() + i;
        const char* end = buf_.data() + buf_.size();
        while (p < end && !kStructural[static_cast<unsigned char>(*p)]) ++p;
        i = static_cast<std::size_t>(p - buf_.data());
        if (i == buf_.size()) continue;
      }
      const char c = buf_[i];
      const std::size_t at = i++;
      if (in_string) {
        if (escape)
          escape = false;
        else if (c == '\\')
          escape = true;
        else if (c == '"') {
          in_string = false;
          if (mode == Mode::key) {
            key.assign(buf_.data() + key_start_ + 1, at - key_start_ - 1);
            // JSON forbids raw control characters in a string; simdjson checks the events'.
            for (std::size_t k = 0; k < key.size(); ++k)
              if (static_cast<unsigned char>(key[k]) < 0x20)
                return bad(key_start_ + 1 + k,
                           "a raw control character in a top-level key (JSON requires it "
                           "escaped)");
            mode = Mode::colon;
          }
        }
        continue;
      }
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        if (mode == Mode::events && depth == 2) gap_from_ = i;
        continue;
      }
      switch (mode) {
        case Mode::start:
          // A UTF-8 byte-order mark (Windows editors write one) is skipped, as the CSV and
          // config readers skip it.
          if (consumed_ + at == 0 && buf_.size() - at >= 3 &&
              std::memcmp(buf_.data() + at, "\xEF\xBB\xBF", 3) == 0) {
            i = at + 3;
            break;
          }
          if (c != '{')
            return bad(at, static_cast<unsigned char>(c) == 0x1f
                               ? "expected a JSON object at the top level, got gzip's magic "
                                 "bytes (a compressed trace is read when its name ends in .gz)"
                               : "expected a JSON object at the top level");
          depth = 1;
          mode = Mode::key;
          break;
        case Mode::key:
          if (c == '"') {
            in_string = true;
            key_start_ = at;
          } else if (c == '}') {
            depth = 0;
            mode = Mode::done;
          } else if (c != ',') {
            return bad(at, "expected a key in the top-level object");
          }
          break;
        case Mode::colon:
          if (c != ':') return bad(at, fmt::format("expected ':' after \"{}\"", key));
          mode = Mode::value;
          value_start = i;
          capture_info = key == "distributedInfo"sv;
          if (key == "traceEvents"sv) {
            // the array starts with the next non-blank character
            saw_events = true;
            mode = Mode::events;
            events_open_ = false;
          }
          break;
        case Mode::value:
          if (c == '"') {
            in_string = true;
          } else if (c == '{' || c == '[') {
            ++depth;
          } else if (c == '}' || c == ']') {
            if (depth == 1) {  // the end of the root object
              if (c != '}') return bad(at, "unbalanced ']'");
              if (capture_info) info_.assign(buf_.data() + value_start, at - value_start);
              depth = 0;
              mode = Mode::done;
              break;
            }
            --depth;
          } else if (c == ',' && depth == 1) {
            if (capture_info) info_.assign(buf_.data() + value_start, at - value_start);
            capture_info = false;
            mode = Mode::key;
          }
          break;
        case Mode::events:
          if (!events_open_) {
            if (c != '[') return bad(at, "field 'traceEvents': expected an array");
            events_open_ = true;
            depth = 2;
            gap_from_ = i;
            break;
          }
          if (c == '"') {
            in_string = true;
          } else if (c == '{' || c == '[') {
            if (depth == 2) {
              if (c != '{')
                return bad(at, fmt::format("event {}: expected an object", cut_ + pending_));
              event_start = at;
            }
            ++depth;
          } else if (c == '}' || c == ']') {
            if (depth == 2) {
              if (c != ']') return bad(at, "unbalanced '}' in traceEvents");
              if (auto st = flush(tf); !st.ok()) return st;
              chunk_start = std::string::npos;
              depth = 1;
              mode = Mode::key;
              break;
            }
            --depth;
            if (depth == 2) {  // an event ends
              if (auto st = event_end(i, event_start, chunk_start, chunk_end, tf); !st.ok())
                return st;
            }
          } else if (depth == 2 && c != ',') {
            return bad(at, fmt::format("event {}: expected an object", cut_ + pending_));
          } else if (depth == 2) {
            gap_from_ = i;
          }
          break;
        case Mode::done:
          return bad(at, "content after the end of the top-level object");
      }
    }
    if (consumed_ + buf_.size() == 0 || (mode == Mode::start))
      return Error{fmt::format("{}: empty file, expected a JSON object with 'traceEvents'", name_)};
    if (mode != Mode::done || in_string)
      return Error{
          fmt::format("{}: byte {}: truncated JSON: the document ends before its last '}}' or ']'",
                      name_, consumed_ + buf_.size())};
    if (!saw_events)
      return Error{fmt::format("{}: missing 'traceEvents': not a Chrome or Kineto trace", name_)};
    tf.json_bytes = consumed_ + buf_.size();
    return {};
  }

  // An event ended at i (one past its '}'): its size checked, the chunk cut when big enough.
  // An event ended at i (one past its '}'): its size checked, its text added to the chunk
  // being cut (or "{}" when it is certainly not kept), the chunk handed on when big enough.
  Status event_end(std::size_t i, std::size_t event_start, std::size_t& chunk_start,
                   std::size_t& chunk_end, TraceFile& tf) {
    if (i - event_start > limits_.max_event_bytes)  // (formatted only when over)
      return check_held(i - event_start, fmt::format("event {}", cut_ + pending_));
    chunk_end = i;
    chunk_start = std::string::npos;
    gap_from_ = i;
    if (!cut_chunk_) {
      cut_chunk_ = take_free_chunk();
      cut_chunk_->text.assign(1, '[');
      cut_chunk_->spans.clear();
    }
    std::string& text = cut_chunk_->text;
    if (pending_ > 0) text.push_back(',');
    cut_chunk_->spans.emplace_back(text.size(), consumed_ + event_start);
    if (skippable(event_start, i))
      text.append("{}");
    else
      text.append(buf_.data() + event_start, i - event_start);
    ++pending_;
    if (text.size() >= kChunk) return flush(tf);
    return {};
  }

  // Whether an event is certainly not kept from its first fields as Kineto writes them: "ph"
  // first, a plain string, not "X" (a flow, a counter, an instant) and no "cat" next; or "ph"
  // then "cat", plain strings, and the category one the reader skips (a CPU op, a runtime call,
  // a Python function; with HTA's view only those HTA's conventions do not read). Such an event
  // is parsed as "{}": simdjson never sees its bytes. Anything else is left to the parser.
  bool skippable(std::size_t from, std::size_t to) const {
    const char* p = buf_.data() + from + 1;
    const char* const end = buf_.data() + to;
    auto blanks = [&] {
      while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    };
    auto punct = [&](char c) {
      blanks();
      if (p == end || *p != c) return false;
      ++p;
      return true;
    };
    auto string = [&](const char*& begin, std::size_t& n) {  // a string without escapes
      blanks();
      if (p == end || *p != '"') return false;
      begin = ++p;
      while (p < end && *p != '"' && *p != '\\') ++p;
      if (p == end || *p != '"') return false;
      n = static_cast<std::size_t>(p - begin);
      ++p;
      return true;
    };
    const char *ph = nullptr, *key = nullptr, *cat = nullptr;
    std::size_t ph_n = 0, key_n = 0, cat_n = 0;
    if (!string(key, key_n) || key_n != 2 || key[0] != 'p' || key[1] != 'h' || !punct(':') ||
        !string(ph, ph_n) || !punct(',') || !string(key, key_n))
      return false;
    const bool x = ph_n == 1 && ph[0] == 'X';
    if (key_n != 3 || key[0] != 'c' || key[1] != 'a' || key[2] != 't') return !x;
    if (!punct(':') || !string(cat, cat_n)) return false;
    if (!x) return true;
    const Cat c = category(std::string_view(cat, cat_n));
    if (c == Cat::cpu_op && !hta_) {
      // record_param_comms (its name next, as Kineto writes it) holds a collective's arguments,
      // which older PyTorch did not copy onto the NCCL kernel: parsed.
      const char* name = nullptr;
      std::size_t name_n = 0;
      return !(punct(',') && string(key, key_n) && std::string_view(key, key_n) == "name"sv &&
               punct(':') && string(name, name_n) &&
               std::string_view(name, name_n) == "record_param_comms"sv);
    }
    return !kept_category(c) && !(hta_ && light_category(c));
  }

  // Bytes between two events (or the array's bracket and an event) may only be blanks and
  // commas; anything else is not an event.
  Status check_gap(std::size_t to) {
    for (std::size_t k = gap_from_; k < to; ++k) {
      const char c = buf_[k];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t' && c != ',')
        return bad(k, fmt::format("event {}: expected an object", cut_ + pending_));
    }
    return {};
  }

  // The traceEvents array from i (depth >= 2), whole 64-byte blocks at a time: bit masks of
  // quotes (less the escaped ones), of the bytes inside strings (a prefix XOR of the quotes) and
  // of the brackets outside strings; only the brackets are visited one by one. Stops before the
  // last partial block, or after the array's ']' (closed).
  Status scan_blocks(std::size_t& i, int& depth, bool& in_string, bool& escape,
                     std::size_t& event_start, std::size_t& chunk_start, std::size_t& chunk_end,
                     bool& closed, TraceFile& tf) {
    while (buf_.size() - i >= 64) {
      const BlockMasks m = block_masks(buf_.data() + i);
      const std::uint64_t quotes = m.quote & ~escaped_bits(m.backslash, escape);
      const std::uint64_t inside = prefix_xor(quotes) ^ (in_string ? ~std::uint64_t{0} : 0);
      in_string = (inside >> 63) != 0;
      std::uint64_t brackets = (m.open | m.close) & ~inside;
      while (brackets != 0) {
        const std::size_t at = i + static_cast<std::size_t>(__builtin_ctzll(brackets));
        brackets &= brackets - 1;
        const char c = buf_[at];
        if (c == '{' || c == '[') {
          if (depth == 2) {
            if (c != '{')
              return bad(at, fmt::format("event {}: expected an object", cut_ + pending_));
            if (auto st = check_gap(at); !st.ok()) return st;
            event_start = at;
          }
          ++depth;
        } else if (depth == 2) {  // the array ends
          if (c != ']') return bad(at, "unbalanced '}' in traceEvents");
          if (auto st = check_gap(at); !st.ok()) return st;
          if (auto st = flush(tf); !st.ok()) return st;
          chunk_start = std::string::npos;
          depth = 1;
          in_string = false;
          escape = false;
          i = at + 1;
          closed = true;
          return {};
        } else if (--depth == 2) {  // an event ends
          if (auto st = event_end(at + 1, event_start, chunk_start, chunk_end, tf); !st.ok())
            return st;
        }
      }
      i += 64;
    }
    return {};
  }

  static constexpr std::size_t kBlock = 4 << 20;  // bytes read at a time
  // The characters the scanner must see inside an event.
  static constexpr std::array<bool, 256> kStructural = [] {
    std::array<bool, 256> t{};
    for (unsigned char c : {'"', '{', '}', '[', ']'}) t[c] = true;
    return t;
  }();
  // Events parsed at a time, in bytes: small enough for a chunk and simdjson's index of it to
  // stay in the core's cache between its two stages, large enough to share out to threads.
  static constexpr std::size_t kChunk = 1 << 20;

  // Drops the first `keep` bytes of the buffer (already scanned and no longer needed).
  void shift(std::size_t keep, std::size_t& i, std::size_t& value_start, std::size_t& event_start,
             std::size_t& chunk_start, std::size_t& chunk_end) {
    if (keep == 0) return;
    buf_.erase_front(keep);
    consumed_ += keep;
    i -= keep;
    auto move = [&](std::size_t& x) {
      if (x != std::string::npos) x = x >= keep ? x - keep : 0;
    };
    move(value_start), move(event_start), move(chunk_start), move(chunk_end), move(key_start_);
    move(gap_from_);
  }

  Error bad(std::size_t at, const std::string& what) {
    return Error{fmt::format("{}: byte {}: {}", name_, consumed_ + at, what)};
  }

  // Hands the chunk being cut on: parsed here (one thread) or by a worker, and merges what is
  // done, in file order.
  Status flush(TraceFile& tf) {
    if (!cut_chunk_ || pending_ == 0) return {};
    std::unique_ptr<Chunk> c = std::move(cut_chunk_);
    c->text.reserve(c->text.size() + 1 + simdjson::SIMDJSON_PADDING);
    c->text.push_back(']');
    c->first_index = cut_;
    cut_ += pending_;
    pending_ = 0;
    if (threads_ <= 1) {
      parse(*c, parser_);
      Status st = merge(*c, tf);
      free_.push_back(std::move(c));
      return st;
    }
    if (workers_.empty())  // this thread is one of the parsing threads (drain)
      for (int t = 1; t < threads_; ++t) workers_.emplace_back([this] { work(); });
    c->done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.push_back(c.get());
      queue_.push_back(c.get());
      owned_.push_back(std::move(c));
    }
    job_.notify_one();
    // Memory stays bounded: at most four chunks per thread in flight (a few, so that a thread
    // the scheduler holds back does not stall the others at once).
    return drain(4 * static_cast<std::size_t>(threads_), tf);
  }

  std::unique_ptr<Chunk> take_free_chunk() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<Chunk>();
    auto c = std::move(free_.back());
    free_.pop_back();
    return c;
  }

  // Merges the chunks parsed, in file order, until at most `keep` are in flight (waiting for
  // the oldest when more are); those done are merged anyway.
  Status drain(std::size_t keep, TraceFile& tf) {
    for (;;) {
      Chunk* c = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (inflight_.empty()) return {};
        if (!inflight_.front()->done) {
          if (inflight_.size() <= keep) return {};
          if (!queue_.empty()) {
            // Rather than wait, this thread parses the oldest chunk no worker has started.
            Chunk* own = queue_.front();
            queue_.pop_front();
            lock.unlock();
            parse(*own, parser_);
            lock.lock();
            own->done = true;
            continue;
          }
          done_.wait(lock, [&] { return inflight_.front()->done; });
        }
        c = inflight_.front();
        inflight_.pop_front();
      }
      Status st = merge(*c, tf);
      merge_failed_ = merge_failed_ || !st.ok();
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = std::find_if(owned_.begin(), owned_.end(),
                               [&](const std::unique_ptr<Chunk>& p) { return p.get() == c; });
        free_.push_back(std::move(*it));
        owned_.erase(it);
      }
      if (!st.ok()) return st;
    }
  }

  void work() {
    od::parser parser;
    for (;;) {
      Chunk* c = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        job_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        c = queue_.front();
        queue_.pop_front();
      }
      parse(*c, parser);
      {
        std::lock_guard<std::mutex> lock(mu_);
        c->done = true;
      }
      done_.notify_one();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    job_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Parses a chunk: the events that may be kept, their strings copied into the chunk's arena.
  void parse(Chunk& c, od::parser& parser) const {
    c.events.clear();
    c.index.clear();
    c.arena.clear();
    c.arena.reserve(c.text.size());
    c.error.clear();
    c.count = 0;
    od::document doc;
    simdjson::padded_string_view view(c.text.data(), c.text.size(), c.text.capacity());
    // The file's byte at an offset of the chunk's text.
    auto file_byte = [&](std::size_t off) {
      auto it = std::upper_bound(
          c.spans.begin(), c.spans.end(), off,
          [](std::size_t o, const std::pair<std::size_t, std::size_t>& s) { return o < s.first; });
      if (it == c.spans.begin()) return c.spans.empty() ? 0 : c.spans.front().second;
      --it;
      return it->second + (off - it->first);
    };
    auto location = [&] {
      const char* p = nullptr;
      return file_byte(doc.current_location().get(p) || !p
                           ? c.text.size() - 1
                           : static_cast<std::size_t>(p - c.text.data()));
    };
    std::size_t index = c.first_index;
    if (auto e = parser.iterate(view).get(doc)) {
      if (e == simdjson::UTF8_ERROR)
        c.error = fmt::format("{}: byte {}: invalid UTF-8", name_,
                              file_byte(util::first_invalid_utf8(c.text)));
      else if (e == simdjson::CAPACITY)
        c.error = fmt::format(
            "{}: byte {}: event {} is over simdjson's 4 GiB document limit; split the trace "
            "(one file per rank, fewer active steps in torch.profiler's schedule)",
            name_, file_byte(0), index);
      else
        c.error = fmt::format("{}: byte {}: {}", name_, file_byte(0), simdjson::error_message(e));
      return;
    }
    od::array arr;
    if (auto e = doc.get_array().get(arr)) {
      c.error = fmt::format("{}: byte {}: event {}: {}", name_, location(), index,
                            simdjson::error_message(e));
      return;
    }
    auto keep = [&](std::string_view& s) {
      if (s.empty()) return;
      const std::size_t at = c.arena.size();
      c.arena.append(s);
      s = std::string_view(c.arena.data() + at, s.size());
    };
    for (auto item : arr) {
      od::object obj;
      if (item.get_object().get(obj)) {
        c.error =
            fmt::format("{}: byte {}: event {}: expected an object", name_, location(), index);
        return;
      }
      RawEvent ev;
      if (auto err = read_event(obj, ev, index); !err.empty()) {
        c.error = fmt::format("{}: byte {}: {}", name_, location(), err);
        return;
      }
      if (wanted(ev)) {
        keep(ev.name), keep(ev.collective_name), keep(ev.dtype), keep(ev.group_name);
        c.events.push_back(ev);
        c.index.push_back(index);
      }
      ++index;
      ++c.count;
    }
  }

  // Whether take() may do anything with an event (else it is dropped in the worker).
  static bool wanted(const RawEvent& ev) {
    return ev.ph_x && (kept_category(ev.cat) || ev.cat == Cat::cpu_op || ev.light);
  }

  // The events of a parsed chunk into the TraceFile, then the chunk's parse error if any.
  Status merge(const Chunk& c, TraceFile& tf) {
    for (std::size_t k = 0; k < c.events.size(); ++k)
      if (auto st = take(c.events[k], c.index[k], tf); !st.ok()) return st;
    if (!c.error.empty()) return Error{c.error};
    return {};
  }

  void read_info(std::string& text, TraceFile& tf) {
    text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
    od::parser parser;
    od::document doc;
    simdjson::padded_string_view view(text.data(), text.size(), text.capacity());
    od::object info;
    if (parser.iterate(view).get(doc) || doc.get_object().get(info))
      return;  // not an object: ignore
    for (auto f : info) {
      std::string_view k;
      if (f.unescaped_key().get(k)) break;
      if (k != "rank"sv && k != "world_size"sv) continue;
      // The value's text, read as an integer here: a value that is none (-1, "1", 1.5, 2^40) is
      // kept for the warning, not taken for a missing rank (found by probing, 2026-11-30).
      std::string_view raw;
      if (f.value().raw_json_token().get(raw)) break;
      while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back())))
        raw.remove_suffix(1);
      std::int64_t v = -1;
      auto [end, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), v);
      const bool ok = ec == std::errc() && end == raw.data() + raw.size() && v >= 0 &&
                      v < (1 << 24) && (k == "world_size"sv ? v > 0 : true);
      std::string& bad = k == "rank"sv ? tf.bad_rank : tf.bad_world_size;
      if (!ok)
        bad = std::string(raw.substr(0, 40));
      else if (k == "rank"sv)
        tf.rank = static_cast<int>(v);
      else
        tf.world_size = static_cast<int>(v);
    }
  }

  // Reads the fields of one event in document order.
  std::string read_event(od::object& obj, RawEvent& ev, std::size_t index) const {
    bool skip = false;     // decided by "ph" and "cat", which Kineto writes first
    bool no_args = false;  // a CPU op: only its name matters (a ProfilerStep#N)
    for (auto field : obj) {
      od::raw_json_string rk;
      if (field.key().get(rk)) return fmt::format("event {}: bad key", index);
      const Key key = event_key(rk);
      od::value v;
      if (field.value().get(v))
        return fmt::format("event {}: bad value of '{}'", index, key_text(rk));
      if (key == Key::ph) {
        od::raw_json_string raw;
        if (v.get_raw_json_string().get(raw)) return type_error(index, "ph", "a string", v);
        ev.ph_x = raw.raw()[0] == 'X' && raw.raw()[1] == '"';
        skip = skip || !ev.ph_x;
      } else if (key == Key::cat) {
        std::string_view cat;
        if (v.get_string().get(cat)) return type_error(index, "cat", "a string", v);
        ev.cat = category(cat);
        if (!kept_category(ev.cat)) {
          ev.light = hta_ && light_category(ev.cat);
          no_args = ev.cat == Cat::cpu_op;
          skip = skip || (!ev.light && ev.cat != Cat::cpu_op);
        }
      } else if (skip) {
        break;  // flows, other host events: the rest of the event is skipped unread
      } else if (ev.light && !no_args && key != Key::ts && key != Key::dur && key != Key::args) {
        continue;  // a runtime call: only its start, duration and correlation id are read
      } else if (key == Key::name) {
        if (no_args) {  // a CPU op: its raw name is tested before it is unescaped
          od::raw_json_string raw;
          if (v.get_raw_json_string().get(raw)) return type_error(index, "name", "a string", v);
          if (std::strncmp(raw.raw(), "record_param_comms\"", 19) == 0) {
            ev.param_comms = true;  // its args are read (not for HTA's view)
            ev.light = false;
            no_args = false;
          } else if (!ev.light || std::strncmp(raw.raw(), "ProfilerStep#", 13) != 0) {
            break;  // not a step in HTA's view: the rest of the CPU op is not read
          }
        }
        if (v.get_string().get(ev.name)) return type_error(index, "name", "a string", v);
      } else if (key == Key::ts) {
        if (v.get_double().get(ev.ts)) return type_error(index, "ts", "a number", v);
      } else if (key == Key::dur) {
        if (v.get_double().get(ev.dur)) return type_error(index, "dur", "a number", v);
        ev.has_dur = true;
      } else if (key == Key::pid || key == Key::tid) {
        const std::string_view kname = key == Key::pid ? "pid"sv : "tid"sv;
        std::int64_t x = 0;
        od::json_type t;
        if (v.type().get(t)) return type_error(index, kname, "a number or a string", v);
        if (t == od::json_type::number) {
          double d = 0;
          if (v.get_double().get(d)) return type_error(index, kname, "a number", v);
          if (!(std::fabs(d) < 2e9))
            return type_error(index, kname, "a process or thread id below 2^31", v);
          x = static_cast<std::int64_t>(d);
        } else if (t == od::json_type::string) {
          std::string_view s;  // "stream 7", "PID 12": the digits
          if (v.get_string().get(s)) return type_error(index, kname, "a string", v);
          for (char c : s)
            if (c >= '0' && c <= '9' && x < 100000000) x = x * 10 + (c - '0');
        }
        (key == Key::pid ? ev.pid : ev.tid) = x;
      } else if (key == Key::args) {
        if (no_args) continue;
        od::object args;
        if (v.get_object().get(args)) continue;  // args of another shape: not ours to judge
        for (auto a : args) {
          od::raw_json_string rak;
          if (a.key().get(rak)) return fmt::format("event {}: bad key in args", index);
          const Key k = args_key(rak);
          od::value av;
          if (a.value().get(av))
            return fmt::format("event {}: bad value of args.{}", index, key_text(rak));
          if (k == Key::other) continue;
          if (k == Key::external_id) {
            std::int64_t x = -1;
            ev.external_id = av.get_int64().get(x) ? -1 : x;  // another type: none
          } else if (hta_ && k == Key::correlation) {
            std::int64_t c = -1;
            ev.correlation = av.get_int64().get(c) ? -1 : c;  // another type: none, as in HTA
          } else if (hta_ && k == Key::stream) {
            ev.stream = numeric_stream(av);
          } else if (ev.light) {
            continue;
          } else if (k == Key::collective) {
            if (av.get_string().get(ev.collective_name))
              return type_error(index, "args.Collective name", "a string", av);
          } else if (k == Key::in_nelems) {
            if (av.get_int64().get(ev.in_nelems))
              return type_error(index, "args.In msg nelems", "an integer", av);
          } else if (k == Key::out_nelems) {
            if (av.get_int64().get(ev.out_nelems))
              return type_error(index, "args.Out msg nelems", "an integer", av);
          } else if (k == Key::group_size) {
            if (av.get_int64().get(ev.group_size))
              return type_error(index, "args.Group size", "an integer", av);
          } else if (k == Key::dtype) {
            if (av.get_string().get(ev.dtype))
              return type_error(index, "args.dtype", "a string", av);
          } else if (k == Key::group) {
            if (av.get_string().get(ev.group_name))
              return type_error(index, "args.group", "a string", av);
          } else if (k == Key::bytes) {
            if (av.get_double().get(ev.bytes))
              return type_error(index, "args.bytes", "a number", av);
          } else if (k == Key::wait_us) {
            if (av.get_double().get(ev.wait_us))
              return type_error(index, "args.wait_us", "a number", av);
          }
        }
      }
    }
    return {};
  }

  Status check_held(std::size_t bytes, const std::string& what) const {
    if (bytes <= limits_.max_event_bytes) return {};
    return Error{fmt::format(
        "{}: byte {}: {} is over the maximum size of one event, {} MiB; split the trace or check "
        "that it is not damaged",
        name_, consumed_, what, limits_.max_event_bytes >> 20)};
  }

  // Counts what an event keeps in memory; refuses past --max-events or the memory budget.
  // Memory is counted as the vectors' capacities after their next growth (so that the growth
  // that would pass the limit is refused before it is made) plus the strings.
  Status count_kept(const TraceFile& tf, std::size_t index, std::size_t string_bytes) {
    string_bytes_ += string_bytes;
    ++kept_events_;
    auto next = [](const auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      return (v.size() == v.capacity() ? 2 * v.capacity() + 1 : v.capacity()) * sizeof(T);
    };
    const std::uint64_t kept_bytes =
        string_bytes_ + next(tf.timeline.events) + next(tf.comm_index) + next(tf.comm_args) +
        next(tf.steps) + next(tf.hta.device) + next(tf.hta.launches) + next(tf.hta.steps);
    if (limits_.max_events > 0 && kept_events_ > limits_.max_events)
      return Error{fmt::format(
          "{}: event {}: more than {} events kept (--max-events); raise the limit or split the "
          "trace",
          name_, index, limits_.max_events)};
    if (limits_.max_kept_bytes > 0 && kept_bytes > limits_.max_kept_bytes)
      return Error{fmt::format(
          "{}: event {}: the events kept pass the memory limit of {} MiB per file (derived from "
          "the available memory; --max-events sets a count instead); split the trace",
          name_, index, limits_.max_kept_bytes >> 20)};
    return {};
  }

  // "event N: field 'K': expected X, got V", V as written (at most 40 characters; an object
  // or array by its kind). The value was left out until 2026-11-30 (found by probing: a
  // "Group size" of 1e30 was refused without saying what it was).
  static std::string type_error(std::size_t index, std::string_view key, std::string_view expected,
                                od::value& v) {
    std::string_view tok = v.raw_json_token();
    while (!tok.empty() &&
           (tok.back() == ' ' || tok.back() == '\n' || tok.back() == '\r' || tok.back() == '\t' ||
            tok.back() == ',' || tok.back() == '}' || tok.back() == ']'))
      tok.remove_suffix(1);
    std::string got = !tok.empty() && tok.front() == '{'   ? std::string("an object")
                      : !tok.empty() && tok.front() == '[' ? std::string("an array")
                      : tok.size() > 40                    ? std::string(tok.substr(0, 40)) + "..."
                                                           : std::string(tok);
    return fmt::format("event {}: field '{}': expected {}, got {}", index, key, expected, got);
  }

  Status take(const RawEvent& ev, std::size_t index, TraceFile& tf) {
    if (!ev.ph_x) return {};
    if (ev.param_comms) {
      // record_param_comms: a collective's arguments, under the External id that its NCCL
      // kernel carries too (ProcessGroupNCCL launches the kernel inside it); kept for kernels
      // without arguments of their own (finish). Bounded: past kMaxParamComms, not kept.
      if (ev.external_id < 0 || ev.collective_name.empty() || param_comms_.size() >= kMaxParamComms)
        return {};
      CommArgs a{std::string(ev.collective_name), sane_nelems(ev.in_nelems),
                 sane_nelems(ev.out_nelems), std::string(ev.dtype), sane_count(ev.group_size)};
      string_bytes_ += a.collective.size() + a.dtype.size() + 128;
      param_comms_.try_emplace(ev.external_id, std::move(a));
      return {};
    }
    const bool own =
        ev.cat == Cat::own_compute || ev.cat == Cat::own_comm || ev.cat == Cat::own_memcpy;
    const bool kernel = ev.cat == Cat::kernel;
    const bool copy = ev.cat == Cat::copy;
    const bool step = (ev.cat == Cat::gpu_annotation || ev.cat == Cat::user_annotation) &&
                      starts_with(ev.name, "ProfilerStep#");
    const bool cpu_step = ev.cat == Cat::cpu_op && starts_with(ev.name, "ProfilerStep#");
    if (!own && !kernel && !copy && !step && !cpu_step) {
      if (!ev.light || !ev.has_dur || !std::isfinite(ev.ts) || !std::isfinite(ev.dur)) return {};
      const std::size_t before =
          tf.hta.steps.size() + tf.hta.launches.size() + tf.hta.device.size();
      const std::size_t kept = take_hta(ev, tf);
      if (tf.hta.steps.size() + tf.hta.launches.size() + tf.hta.device.size() == before) return {};
      return count_kept(tf, index, kept);
    }
    if (!std::isfinite(ev.ts) || std::fabs(ev.ts) > kMaxAbsTimestampUs)
      return Error{fmt::format(
          "{}: event {}: field 'ts': expected a finite number of microseconds within +-2^52 "
          "(4.5e15, where a double resolves 1 us), got "
          "{}",
          name_, index, std::isnan(ev.ts) ? std::string("nothing") : fmt::format("{}", ev.ts))};
    if (!ev.has_dur || !std::isfinite(ev.dur) || ev.dur < 0)
      return Error{fmt::format(
          "{}: event {}: field 'dur': expected a non-negative number of microseconds, got {}",
          name_, index, ev.has_dur ? fmt::format("{}", ev.dur) : std::string("nothing"))};
    if (ev.dur > kMaxDurationUs)  // more than a day
      return Error{
          fmt::format("{}: event {}: field 'dur': expected at most a day (8.64e10 us), got {}",
                      name_, index, ev.dur)};
    const double start = ev.ts * 1e-6, dur = ev.dur * 1e-6;
    std::size_t hta_kept = own || !hta_ ? 0 : take_hta(ev, tf);
    if (step || cpu_step) {
      StepWindow w{std::string(ev.name), start, start + dur, ev.cat == Cat::gpu_annotation};
      tf.steps.push_back(std::move(w));
      return count_kept(tf, index, ev.name.size() + hta_kept);
    }
    Event e;
    e.rank = static_cast<std::int32_t>(ev.pid);
    e.stream = static_cast<std::int32_t>(ev.tid);
    e.start = start;
    e.dur = dur;
    const std::size_t names = tf.timeline.names().size();
    e.name = tf.timeline.intern(ev.name);
    // A new name is kept twice (the list and the index) with their overheads.
    std::size_t kept =
        (tf.timeline.names().size() > names ? 2 * ev.name.size() + 96 : 0) + hta_kept;
    std::int32_t comm_index = -1;
    if (own) {
      // A commscope trace's process is its rank (or stage): never negative (-1 became rank -1,
      // found by probing, 2026-12-02).
      if (ev.pid < 0)
        return Error{fmt::format(
            "{}: event {}: field 'pid': expected a rank, 0 or more (a commscope trace), got {}",
            name_, index, ev.pid)};
      tf.own_format = true;
      e.kind = ev.cat == Cat::own_compute ? EventKind::compute
               : ev.cat == Cat::own_comm  ? EventKind::comm
                                          : EventKind::memcpy;
      if (e.kind == EventKind::comm) {
        Collective c;
        if (collective_from_name(ev.collective_name, c)) {
          e.has_collective = true;
          e.collective = c;
          e.group = group_of(ev.group_name);
          e.bytes = std::isfinite(ev.bytes) && ev.bytes > 0 && ev.bytes < 1e18 ? ev.bytes : 0;
          e.group_size = sane_count(ev.group_size);
        }
        // commscope's slices span the call from entry; the transfer begins wait_us later.
        const double wait = ev.wait_us * 1e-6;
        if (std::isfinite(wait) && wait > 0 && wait <= e.dur) {
          e.wait = wait;
          e.start += wait;
          e.dur -= wait;
        }
      }
    } else if (copy) {
      e.kind = EventKind::memcpy;
    } else if (!ev.collective_name.empty() || comm_name(e.name, ev.name, tf)) {
      e.kind = EventKind::comm;
      CommArgs a;
      a.collective = std::string(ev.collective_name.empty() ? ev.name : ev.collective_name);
      a.in_nelems = sane_nelems(ev.in_nelems);
      a.out_nelems = sane_nelems(ev.out_nelems);
      a.dtype = std::string(ev.dtype);
      a.group_size = sane_count(ev.group_size);
      // The argument is the truth when present (a SendRecv kernel may be an all-to-all).
      size_comm(e, a, !ev.collective_name.empty() ? ev.name : std::string_view());
      // Without arguments (PyTorch before they were copied onto the kernel): its CPU op's.
      if (ev.collective_name.empty() && a.in_nelems == 0 && a.out_nelems == 0 &&
          ev.external_id >= 0)
        unsized_.emplace_back(tf.timeline.events.size(), ev.external_id);
      comm_index = static_cast<std::int32_t>(tf.comm_args.size());
      kept += a.collective.size() + a.dtype.size();
      tf.comm_args.push_back(std::move(a));
    } else {
      e.kind = EventKind::compute;
    }
    tf.timeline.events.push_back(e);
    tf.comm_index.push_back(comm_index);
    return count_kept(tf, index, kept);
  }

  // What HTA's conventions keep of an event (TraceFile::hta): a device event (numeric stream
  // other than -1), a host event's correlation id, a host-side ProfilerStep#N. HTA calls an event
  // a GPU kernel when its stream >= 0 and its correlation >= 0 (hta/common/trace_filter.py,
  // GPUKernelFilter, 0.6.1), anything else a host event. Returns the string bytes kept.
  std::size_t take_hta(const RawEvent& ev, TraceFile& tf) {
    const std::int32_t stream = std::isfinite(ev.stream) && std::fabs(ev.stream) < 2e9
                                    ? static_cast<std::int32_t>(ev.stream)
                                    : -1;
    const bool gpu = stream >= 0 && ev.correlation >= 0;
    std::size_t kept = 0;
    if (stream != -1 && !ev.light) {  // a runtime call is never a kernel here (its name is unread)
      const std::size_t names = tf.timeline.names().size();
      HtaEvent h{ev.ts, ev.dur, ev.correlation, tf.timeline.intern(ev.name), stream};
      if (tf.timeline.names().size() > names) kept += 2 * ev.name.size() + 96;
      tf.hta.device.push_back(h);
    }
    if (!gpu && ev.correlation >= 0) tf.hta.launches.push_back({ev.correlation, ev.ts});
    if (!gpu && starts_with(ev.name, "ProfilerStep#")) {
      tf.hta.steps.push_back({std::string(ev.name), ev.ts, ev.dur});
      kept += ev.name.size();
    }
    return kept;
  }

  // Whether a kernel name (Timeline::names index `id`) is communication: the NCCL/RCCL table,
  // else unknown_comm. Decided once per name: a trace has millions of kernels, hundreds of names.
  bool comm_name(std::uint32_t id, std::string_view name, TraceFile& tf) {
    if (id >= name_comm_.size()) name_comm_.resize(id + 1, -1);
    if (name_comm_[id] < 0) name_comm_[id] = is_comm_kernel(name) || unknown_comm(name, tf);
    return name_comm_[id] > 0;
  }

  // A kernel that looks like communication but is in no row of the NCCL/RCCL table: counted as
  // communication and reported (once per name), never silently taken for compute.
  bool unknown_comm(std::string_view name, TraceFile& tf) {
    if (!looks_like_comm_kernel(name)) return false;
    if (unknown_seen_.insert(std::string(name)).second) {
      ++tf.unknown_comm_names;
      if (tf.unknown_comm_kernels.size() < 64) tf.unknown_comm_kernels.emplace_back(name);
    }
    return true;
  }

  // A communication event's collective, group size and bytes from its arguments (the
  // collective by the argument's name, else by `also`, the kernel's).
  static void size_comm(Event& e, const CommArgs& a, std::string_view also) {
    Collective c;
    if (!collective_from_name(a.collective, c) && (also.empty() || !collective_from_name(also, c)))
      return;
    e.has_collective = true;
    e.collective = c;
    e.group = CommGroup::data;  // a trace does not say which parallelism a group serves
    e.group_size = a.group_size;
    const double elem = profiler_dtype_bytes(a.dtype);
    const std::int64_t nelems = c == Collective::all_gather ? a.out_nelems : a.in_nelems;
    e.bytes = elem * static_cast<double>(nelems);
  }

  // An element count as the profiler writes it; negative or absurd (over 2^50) is unknown (0).
  static std::int64_t sane_nelems(std::int64_t v) { return v > 0 && v < (1ll << 50) ? v : 0; }

  // A group size as the profiler writes it; nonsense becomes 0 (unknown).
  static int sane_count(std::int64_t v) { return v > 0 && v < (1 << 24) ? static_cast<int>(v) : 0; }

  static CommGroup group_of(std::string_view g) {
    if (g == "tensor"sv) return CommGroup::tensor;
    if (g == "pipeline"sv) return CommGroup::pipeline;
    if (g == "embedding"sv) return CommGroup::embedding;
    if (g == "expert"sv) return CommGroup::expert;
    if (g == "context"sv) return CommGroup::context;
    if (g == "expert_data"sv) return CommGroup::expert_data;
    return CommGroup::data;
  }

  void finish(TraceFile& tf) {
    if (tf.rank < 0 && !tf.own_format) tf.rank = rank_from_file_name(name_);
    // Kernels without the collective's arguments (older PyTorch releases wrote them on the
    // record_param_comms CPU op alone) take those of the op with their External id: their
    // bytes were 0 (found by probing, 2026-12-02).
    for (const auto& [at, external] : unsized_) {
      const auto it = param_comms_.find(external);
      if (it == param_comms_.end()) continue;
      CommArgs& a = tf.comm_args[static_cast<std::size_t>(tf.comm_index[at])];
      a = it->second;
      size_comm(tf.timeline.events[at], a, {});
      ++tf.comm_args_from_cpu_ops;
    }
    if (!tf.own_format) {
      // The devices the GPU events came from (Kineto's pid of a device event is the GPU).
      std::set<std::int32_t> devices;
      for (const auto& e : tf.timeline.events)
        if (devices.size() < 64) devices.insert(e.rank);
      tf.devices.assign(devices.begin(), devices.end());
      // One rank per Kineto file: its events carry the file's rank.
      for (auto& e : tf.timeline.events) e.rank = std::max(tf.rank, 0);
    }
    std::sort(tf.steps.begin(), tf.steps.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.start < b.start; });
    // Prefer the GPU-side step annotations when the trace has them.
    if (std::any_of(tf.steps.begin(), tf.steps.end(), [](const StepWindow& s) { return s.on_gpu; }))
      tf.steps.erase(std::remove_if(tf.steps.begin(), tf.steps.end(),
                                    [](const StepWindow& s) { return !s.on_gpu; }),
                     tf.steps.end());
  }

  const std::string& name_;
  Source& source_;
  const ReadLimits limits_;
  const bool hta_;                      // also keep what HTA's conventions need (TraceFile::hta)
  const int threads_;                   // parsing threads (1: in line)
  std::set<std::string> unknown_seen_;  // names of unknown communication-like kernels
  std::vector<std::int8_t> name_comm_;  // per name index: -1 undecided, 0 compute, 1 comm
  std::uint64_t string_bytes_ = 0, kept_events_ = 0;
  // record_param_comms arguments by External id, and the comm events (index) without their own
  static constexpr std::size_t kMaxParamComms = 1 << 20;
  std::unordered_map<std::int64_t, CommArgs> param_comms_;
  std::vector<std::pair<std::size_t, std::int64_t>> unsized_;
  ByteBuffer buf_;
  std::string info_;  // distributedInfo's text
  od::parser parser_;
  std::size_t consumed_ = 0;   // bytes dropped from the front of buf_
  std::size_t cut_ = 0;        // events cut into chunks so far
  bool merge_failed_ = false;  // a merged chunk's error ended the scan
  std::size_t pending_ = 0;    // events scanned but not cut into a chunk yet
  std::size_t key_start_ = 0;
  std::size_t gap_from_ = 0;
  std::unique_ptr<Chunk> cut_chunk_;  // the chunk being cut  // where the bytes since the last
                                      // event (or the '[') begin
  bool events_open_ = false;
  // The parsing threads: chunks in file order (inflight_), those not started (queue_), those
  // owned while in flight, and those to reuse (their buffers keep their capacity).
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable job_, done_;
  std::deque<Chunk*> inflight_, queue_;
  std::vector<std::unique_ptr<Chunk>> owned_, free_;
  bool stop_ = false;
};

}  // namespace

namespace {
// 0: one per core, at most 8; at least 1.
int parse_threads(int threads) {
  if (threads > 0) return std::min(threads, 64);
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}
}  // namespace

Result<TraceFile> read_trace_text(const std::string& name, std::string text,
                                  const ReadLimits& limits, bool hta_view, int threads) {
  StringSource source(std::move(text));
  return Reader(name, source, limits, hta_view, parse_threads(threads)).run();
}

void set_rank(TraceFile& tf, int rank) {
  tf.rank = rank;
  for (auto& e : tf.timeline.events) e.rank = rank;
}

Result<TraceFile> read_trace(const std::string& path, const ReadLimits& limits, bool hta_view,
                             int threads) {
  // A FIFO or a device would block or never end: only regular files are read.
  if (auto st = check_regular_file(path); !st.ok()) return st.error();
  note_input_read(path);  // no output may replace it
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
    gzbuffer(f, 1 << 20);
    const int n = parse_threads(threads);
    if (n > 1) {
      InflatingSource source(f);
      return Reader(path, source, limits, hta_view, n).run();
    }
    GzSource source(f);
    return Reader(path, source, limits, hta_view, n).run();
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  FileSource source(f);
  return Reader(path, source, limits, hta_view, parse_threads(threads)).run();
}

std::pair<double, double> whole_trace_window(const TraceFile& tf) {
  if (!tf.own_format || tf.timeline.events.empty()) return {0, -1};
  double t0 = INFINITY, t1 = -INFINITY;
  for (const Event& e : tf.timeline.events) {
    t0 = std::min(t0, e.start - std::max(e.wait, 0.0));
    t1 = std::max(t1, e.end());
  }
  return {t0, t1};
}

}  // namespace commscope
