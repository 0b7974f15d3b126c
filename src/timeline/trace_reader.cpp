// Kineto / Chrome trace reader. One forward pass with simdjson On-Demand; events are copied
// into plain records as they are met; everything but the GPU timeline is skipped unread.
#include "commscope/timeline/trace_reader.h"

#include "commscope/util/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>

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

// Where the JSON text comes from, in blocks: a plain file, a gzip file, or memory.
class Source {
 public:
  virtual ~Source() = default;
  // Appends up to n bytes to out; 0 at the end. Errors are values.
  virtual Result<std::size_t> read(std::string& out, std::size_t n) = 0;
};

class FileSource : public Source {
 public:
  explicit FileSource(std::FILE* f) : f_(f) {}
  ~FileSource() override { std::fclose(f_); }
  Result<std::size_t> read(std::string& out, std::size_t n) override {
    const std::size_t old = out.size();
    out.resize(old + n);
    const std::size_t got = std::fread(out.data() + old, 1, n, f_);
    out.resize(old + got);
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
  Result<std::size_t> read(std::string& out, std::size_t n) override {
    const std::size_t old = out.size();
    out.resize(old + n);
    const int got = gzread(f_, out.data() + old, static_cast<unsigned>(n));
    out.resize(old + static_cast<std::size_t>(std::max(got, 0)));
    int code = Z_OK;
    const char* msg = gzerror(f_, &code);
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

class StringSource : public Source {
 public:
  explicit StringSource(std::string text) : text_(std::move(text)) {}
  Result<std::size_t> read(std::string& out, std::size_t n) override {
    const std::size_t k = std::min(n, text_.size() - at_);
    out.append(text_, at_, k);
    at_ += k;
    return k;
  }

 private:
  std::string text_;
  std::size_t at_ = 0;
};

}  // namespace

// Categories of the events the reader keeps (Kineto's, and commscope's own).
static bool kept_category(std::string_view c) {
  if (c.empty()) return false;
  switch (c[0]) {  // most events are cpu_op, cuda_runtime, ac2g: rejected on the first letter
    case 'k':
    case 'K':
    case 'g':
    case 'u':
    case 'c':
    case 'm':
    case 'M':
      break;
    default:
      return false;
  }
  return c == "kernel"sv || c == "gpu_memcpy"sv || c == "gpu_memset"sv ||
         c == "gpu_user_annotation"sv || c == "user_annotation"sv || c == "compute"sv ||
         c == "comm"sv || c == "memcpy"sv || c == "Kernel"sv || c == "Memcpy"sv || c == "Memset"sv;
}

// Host-side categories read only for what HTA's conventions need (report/hta.h): runtime and
// driver calls (their correlation ids and stream) and CPU ops (only a ProfilerStep#N name).
static bool light_category(std::string_view c) {
  return c == "cuda_runtime"sv || c == "cuda_driver"sv || c == "cpu_op"sv;
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

// One event as read; strings point into the document until copied.
struct RawEvent {
  std::string_view ph, cat, name, collective_name, dtype, group_name;
  double ts = NAN, dur = NAN;
  std::int64_t pid = 0, tid = 0;
  std::int64_t in_nelems = 0, out_nelems = 0, group_size = 0;
  double bytes = 0;
  double wait_us = 0;  // own format: the part of the slice spent waiting for peers
  bool has_dur = false;
  bool light = false;             // a host event read only for HTA's view
  std::int64_t correlation = -1;  // args.correlation
  double stream = NAN;            // args.stream as HTA's pandas reads it (NaN: not numeric)
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

class Reader {
 public:
  Reader(const std::string& name, Source& source, const ReadLimits& limits, bool hta)
      : name_(name), source_(source), limits_(limits), hta_(hta) {}

  // One forward pass: a small lexical scanner walks the top-level object and cuts the
  // traceEvents array into chunks of whole events, each parsed by simdjson On-Demand as it is
  // cut; the buffer holds one chunk at a time, so memory stays a fraction of the file.
  Result<TraceFile> run() {
    TraceFile tf;
    tf.path = name_;
    enum class Mode { start, key, colon, value, events, done } mode = Mode::start;
    std::string key, info;  // current top-level key; distributedInfo's text
    bool capture_info = false, saw_events = false;
    int depth = 0;
    bool in_string = false, escape = false;
    std::size_t value_start = 0, event_start = 0, chunk_start = std::string::npos, chunk_end = 0;
    std::size_t i = 0;
    for (;;) {
      if (i == buf_.size()) {
        // Keep what is still needed (the pending chunk, or the current event or value).
        std::size_t keep =
            std::min({i, chunk_start, mode == Mode::events && depth > 2 ? event_start : i,
                      mode == Mode::value && capture_info ? value_start : i});
        if (mode == Mode::key && in_string) keep = std::min(keep, key_start_);
        // Memory stays bounded: one event, value or key may not grow past the limit.
        if (auto st = check_held(mode == Mode::events && depth > 2     ? i - event_start
                                 : mode == Mode::value && capture_info ? i - value_start
                                 : mode == Mode::key && in_string      ? i - key_start_
                                                                       : 0,
                                 mode == Mode::events  ? fmt::format("event {}", index_ + pending_)
                                 : mode == Mode::value ? std::string("field 'distributedInfo'")
                                                       : std::string("a top-level key"));
            !st.ok())
          return st.error();
        shift(keep, i, value_start, event_start, chunk_start, chunk_end);
        auto got = source_.read(buf_, kBlock);
        if (!got) return Error{fmt::format("{}: {}", name_, got.error().message)};
        if (*got == 0) break;
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
            key.assign(buf_, key_start_ + 1, at - key_start_ - 1);
            mode = Mode::colon;
          }
        }
        continue;
      }
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
      switch (mode) {
        case Mode::start:
          if (c != '{') return bad(at, "expected a JSON object at the top level");
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
              if (capture_info) info.assign(buf_, value_start, at - value_start);
              depth = 0;
              mode = Mode::done;
              break;
            }
            --depth;
          } else if (c == ',' && depth == 1) {
            if (capture_info) info.assign(buf_, value_start, at - value_start);
            capture_info = false;
            mode = Mode::key;
          }
          break;
        case Mode::events:
          if (!events_open_) {
            if (c != '[') return bad(at, "field 'traceEvents': expected an array");
            events_open_ = true;
            depth = 2;
            break;
          }
          if (c == '"') {
            in_string = true;
          } else if (c == '{' || c == '[') {
            if (depth == 2) {
              if (c != '{')
                return bad(at, fmt::format("event {}: expected an object", index_ + pending_));
              event_start = at;
              if (chunk_start == std::string::npos) chunk_start = at;
            }
            ++depth;
          } else if (c == '}' || c == ']') {
            if (depth == 2) {
              if (c != ']') return bad(at, "unbalanced '}' in traceEvents");
              if (auto st = flush(chunk_start, chunk_end, tf); !st.ok()) return st.error();
              chunk_start = std::string::npos;
              depth = 1;
              mode = Mode::key;
              break;
            }
            --depth;
            if (depth == 2) {                                 // an event ends
              if (i - event_start > limits_.max_event_bytes)  // (formatted only when over)
                return check_held(i - event_start, fmt::format("event {}", index_ + pending_))
                    .error();
              chunk_end = i;
              ++pending_;
              if (chunk_end - chunk_start >= kChunk) {
                if (auto st = flush(chunk_start, chunk_end, tf); !st.ok()) return st.error();
                chunk_start = std::string::npos;
              }
            }
          } else if (depth == 2 && c != ',') {
            return bad(at, fmt::format("event {}: expected an object", index_ + pending_));
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
    if (!info.empty()) read_info(info, tf);
    tf.json_bytes = consumed_ + buf_.size();
    finish(tf);
    return tf;
  }

 private:
  // Reads the fields of one event in document order.
  std::string read_event(od::object& obj, RawEvent& ev, std::size_t index) {
    bool skip = false;     // decided by "ph" and "cat", which Kineto writes first
    bool no_args = false;  // a CPU op: only its name matters (a ProfilerStep#N)
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return fmt::format("event {}: bad key", index);
      od::value v;
      if (field.value().get(v)) return fmt::format("event {}: bad value of '{}'", index, key);
      if (key == "ph"sv) {
        if (v.get_string().get(ev.ph)) return type_error(index, key, "a string");
        skip = skip || ev.ph != "X"sv;
      } else if (key == "cat"sv) {
        if (v.get_string().get(ev.cat)) return type_error(index, key, "a string");
        if (!kept_category(ev.cat)) {
          ev.light = hta_ && light_category(ev.cat);
          no_args = ev.cat == "cpu_op"sv;
          skip = skip || !ev.light;
        }
      } else if (skip) {
        break;  // flows, other host events: the rest of the event is skipped unread
      } else if (ev.light && !no_args && key != "ts"sv && key != "dur"sv && key != "args"sv) {
        continue;  // a runtime call: only its start, duration and correlation id are read
      } else if (key == "name"sv) {
        if (no_args) {  // a CPU op: its raw name is tested before it is unescaped
          od::raw_json_string raw;
          if (v.get_raw_json_string().get(raw)) return type_error(index, key, "a string");
          if (std::strncmp(raw.raw(), "ProfilerStep#", 13) != 0) {
            break;  // not a step: the rest of the CPU op is not read
          }
        }
        if (v.get_string().get(ev.name)) return type_error(index, key, "a string");
      } else if (key == "ts"sv) {
        if (v.get_double().get(ev.ts)) return type_error(index, key, "a number");
      } else if (key == "dur"sv) {
        if (v.get_double().get(ev.dur)) return type_error(index, key, "a number");
        ev.has_dur = true;
      } else if (key == "pid"sv || key == "tid"sv) {
        std::int64_t x = 0;
        od::json_type t;
        if (v.type().get(t)) return type_error(index, key, "a number or a string");
        if (t == od::json_type::number) {
          double d = 0;
          if (v.get_double().get(d)) return type_error(index, key, "a number");
          if (!(std::fabs(d) < 2e9))
            return type_error(index, key, "a process or thread id below 2^31");
          x = static_cast<std::int64_t>(d);
        } else if (t == od::json_type::string) {
          std::string_view s;  // "stream 7", "PID 12": the digits
          if (v.get_string().get(s)) return type_error(index, key, "a string");
          for (char c : s)
            if (c >= '0' && c <= '9' && x < 100000000) x = x * 10 + (c - '0');
        }
        (key == "pid"sv ? ev.pid : ev.tid) = x;
      } else if (key == "args"sv) {
        if (no_args) continue;
        od::object args;
        if (v.get_object().get(args)) continue;  // args of another shape: not ours to judge
        for (auto a : args) {
          std::string_view k;
          if (a.unescaped_key().get(k)) return fmt::format("event {}: bad key in args", index);
          od::value av;
          if (a.value().get(av)) return fmt::format("event {}: bad value of args.{}", index, k);
          if (hta_ && k == "correlation"sv) {
            std::int64_t c = -1;
            ev.correlation = av.get_int64().get(c) ? -1 : c;  // another type: none, as in HTA
          } else if (hta_ && k == "stream"sv) {
            ev.stream = numeric_stream(av);
          } else if (ev.light) {
            continue;
          } else if (k == "Collective name"sv || k == "collective"sv) {
            if (av.get_string().get(ev.collective_name))
              return type_error(index, "args.Collective name", "a string");
          } else if (k == "In msg nelems"sv) {
            if (av.get_int64().get(ev.in_nelems))
              return type_error(index, "args.In msg nelems", "an integer");
          } else if (k == "Out msg nelems"sv) {
            if (av.get_int64().get(ev.out_nelems))
              return type_error(index, "args.Out msg nelems", "an integer");
          } else if (k == "Group size"sv || k == "group_size"sv) {
            if (av.get_int64().get(ev.group_size))
              return type_error(index, "args.Group size", "an integer");
          } else if (k == "dtype"sv) {
            if (av.get_string().get(ev.dtype)) return type_error(index, "args.dtype", "a string");
          } else if (k == "group"sv) {
            if (av.get_string().get(ev.group_name))
              return type_error(index, "args.group", "a string");
          } else if (k == "bytes"sv) {
            if (av.get_double().get(ev.bytes)) return type_error(index, "args.bytes", "a number");
          } else if (k == "wait_us"sv) {
            if (av.get_double().get(ev.wait_us))
              return type_error(index, "args.wait_us", "a number");
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

  static std::string type_error(std::size_t index, std::string_view key,
                                std::string_view expected) {
    return fmt::format("event {}: field '{}': expected {}", index, key, expected);
  }

  Status take(const RawEvent& ev, std::size_t index, TraceFile& tf) {
    if (ev.ph != "X"sv) return {};
    const bool own = ev.cat == "compute"sv || ev.cat == "comm"sv || ev.cat == "memcpy"sv;
    const bool kernel = ev.cat == "kernel"sv || ev.cat == "Kernel"sv;
    const bool copy = ev.cat == "gpu_memcpy"sv || ev.cat == "gpu_memset"sv ||
                      ev.cat == "Memcpy"sv || ev.cat == "Memset"sv;
    const bool step = (ev.cat == "gpu_user_annotation"sv || ev.cat == "user_annotation"sv) &&
                      starts_with(ev.name, "ProfilerStep#");
    const bool cpu_step = ev.cat == "cpu_op"sv && starts_with(ev.name, "ProfilerStep#");
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
          "{}: event {}: field 'ts': expected a finite number of microseconds within +-1e17, got "
          "{}",
          name_, index, std::isnan(ev.ts) ? std::string("nothing") : fmt::format("{}", ev.ts))};
    if (!ev.has_dur || !std::isfinite(ev.dur) || ev.dur < 0)
      return Error{fmt::format(
          "{}: event {}: field 'dur': expected a non-negative number of microseconds, got {}",
          name_, index, ev.has_dur ? fmt::format("{}", ev.dur) : std::string("nothing"))};
    if (ev.dur > kMaxDurationUs)  // more than a day
      return Error{
          fmt::format("{}: event {}: field 'dur': expected at most a day (1e11 us), got {}", name_,
                      index, ev.dur)};
    const double start = ev.ts * 1e-6, dur = ev.dur * 1e-6;
    std::size_t hta_kept = own || !hta_ ? 0 : take_hta(ev, tf);
    if (step || cpu_step) {
      StepWindow w{std::string(ev.name), start, start + dur, ev.cat == "gpu_user_annotation"sv};
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
      tf.own_format = true;
      e.kind = ev.cat == "compute"sv ? EventKind::compute
               : ev.cat == "comm"sv  ? EventKind::comm
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
      Collective c;
      // The argument is the truth when present (a SendRecv kernel may be an all-to-all).
      if (collective_from_name(a.collective, c) ||
          (!ev.collective_name.empty() && collective_from_name(ev.name, c))) {
        e.has_collective = true;
        e.collective = c;
        e.group = CommGroup::data;  // a trace does not say which parallelism a group serves
        e.group_size = a.group_size;
        const double elem = profiler_dtype_bytes(a.dtype);
        const std::int64_t nelems = c == Collective::all_gather ? a.out_nelems : a.in_nelems;
        e.bytes = elem * static_cast<double>(nelems);
      }
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
    if (!tf.own_format) {
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

  static constexpr std::size_t kBlock = 4 << 20;  // bytes read at a time
  // The characters the scanner must see inside an event.
  static constexpr std::array<bool, 256> kStructural = [] {
    std::array<bool, 256> t{};
    for (unsigned char c : {'"', '{', '}', '[', ']'}) t[c] = true;
    return t;
  }();
  static constexpr std::size_t kChunk = 8 << 20;  // events parsed at a time, in bytes

  // Drops the first `keep` bytes of the buffer (already scanned and no longer needed).
  void shift(std::size_t keep, std::size_t& i, std::size_t& value_start, std::size_t& event_start,
             std::size_t& chunk_start, std::size_t& chunk_end) {
    if (keep == 0) return;
    buf_.erase(0, keep);
    consumed_ += keep;
    i -= keep;
    auto move = [&](std::size_t& x) {
      if (x != std::string::npos) x = x >= keep ? x - keep : 0;
    };
    move(value_start), move(event_start), move(chunk_start), move(chunk_end), move(key_start_);
  }

  Error bad(std::size_t at, const std::string& what) {
    return Error{fmt::format("{}: byte {}: {}", name_, consumed_ + at, what)};
  }

  // Parses the events in buf_[from, to) as the array they are part of.
  Status flush(std::size_t from, std::size_t to, TraceFile& tf) {
    if (from == std::string::npos || to <= from) return {};
    chunk_.assign(1, '[');
    chunk_.append(buf_, from, to - from);
    chunk_.push_back(']');
    const std::size_t file_offset = consumed_ + from - 1;  // of chunk_[0]
    chunk_.reserve(chunk_.size() + simdjson::SIMDJSON_PADDING);
    od::document doc;
    simdjson::padded_string_view view(chunk_.data(), chunk_.size(), chunk_.capacity());
    auto where = [&](std::size_t event) {
      const char* p = nullptr;
      std::size_t off = doc.current_location().get(p) || !p
                            ? chunk_.size()
                            : static_cast<std::size_t>(p - chunk_.data());
      return fmt::format("{}: byte {}: event {}", name_, file_offset + off, event);
    };
    if (auto e = parser_.iterate(view).get(doc)) {
      if (e == simdjson::UTF8_ERROR)
        return Error{fmt::format("{}: byte {}: invalid UTF-8", name_,
                                 file_offset + first_invalid_utf8(chunk_))};
      if (e == simdjson::CAPACITY)
        return Error{fmt::format(
            "{}: byte {}: event {} is over simdjson's 4 GiB document limit; split the trace "
            "(one file per rank, fewer active steps in torch.profiler's schedule)",
            name_, file_offset, index_)};
      return Error{fmt::format("{}: byte {}: {}", name_, file_offset, simdjson::error_message(e))};
    }
    od::array arr;
    if (auto e = doc.get_array().get(arr))
      return Error{where(index_) + ": " + simdjson::error_message(e)};
    for (auto item : arr) {
      od::object obj;
      if (item.get_object().get(obj)) return Error{where(index_) + ": expected an object"};
      RawEvent ev;
      if (auto err = read_event(obj, ev, index_); !err.empty())
        return Error{fmt::format("{}: byte {}: {}", name_, file_offset + location(doc), err)};
      if (auto st = take(ev, index_, tf); !st.ok()) return st.error();
      ++index_;
    }
    pending_ = 0;
    return {};
  }

  std::size_t location(od::document& doc) {
    const char* p = nullptr;
    if (doc.current_location().get(p) || p == nullptr) return chunk_.size();
    return static_cast<std::size_t>(p - chunk_.data());
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
      std::int64_t v = 0;
      if (k == "rank"sv && !f.value().get_int64().get(v))
        tf.rank = v >= 0 && v < (1 << 24) ? static_cast<int>(v) : -1;
      else if (k == "world_size"sv && !f.value().get_int64().get(v))
        tf.world_size = v >= 0 && v < (1 << 24) ? static_cast<int>(v) : 0;
    }
  }

  // Offset of the first byte that breaks UTF-8 (RFC 3629).
  static std::size_t first_invalid_utf8(const std::string& text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    for (std::size_t i = 0; i < n;) {
      const unsigned char c = p[i];
      std::size_t len = c < 0x80         ? 1
                        : (c >> 5) == 6  ? 2
                        : (c >> 4) == 14 ? 3
                        : (c >> 3) == 30 ? 4
                                         : 0;
      if (len == 0 || i + len > n || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return i;
      for (std::size_t k = 1; k < len; ++k)
        if ((p[i + k] & 0xC0) != 0x80) return i;
      i += len;
    }
    return n;
  }

  const std::string& name_;
  Source& source_;
  const ReadLimits limits_;
  const bool hta_;                      // also keep what HTA's conventions need (TraceFile::hta)
  std::set<std::string> unknown_seen_;  // names of unknown communication-like kernels
  std::vector<std::int8_t> name_comm_;  // per name index: -1 undecided, 0 compute, 1 comm
  std::uint64_t string_bytes_ = 0, kept_events_ = 0;
  std::string buf_, chunk_;
  od::parser parser_;
  std::size_t consumed_ = 0;  // bytes dropped from the front of buf_
  std::size_t index_ = 0;     // events parsed so far
  std::size_t pending_ = 0;   // events cut but not parsed yet
  std::size_t key_start_ = 0;
  bool events_open_ = false;
};

}  // namespace

Result<TraceFile> read_trace_text(const std::string& name, std::string text,
                                  const ReadLimits& limits, bool hta_view) {
  StringSource source(std::move(text));
  return Reader(name, source, limits, hta_view).run();
}

void set_rank(TraceFile& tf, int rank) {
  tf.rank = rank;
  for (auto& e : tf.timeline.events) e.rank = rank;
}

Result<TraceFile> read_trace(const std::string& path, const ReadLimits& limits, bool hta_view) {
  // A FIFO or a device would block or never end: only regular files are read.
  if (auto st = check_regular_file(path); !st.ok()) return st.error();
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
    gzbuffer(f, 1 << 20);
    GzSource source(f);
    return Reader(path, source, limits, hta_view).run();
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  FileSource source(f);
  return Reader(path, source, limits, hta_view).run();
}

}  // namespace commscope
