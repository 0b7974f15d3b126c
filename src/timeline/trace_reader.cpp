// Kineto / Chrome trace reader. One forward pass with simdjson On-Demand; events are copied
// into plain records as they are met; everything but the GPU timeline is skipped unread.
#include "commscope/timeline/trace_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <simdjson.h>

namespace commscope {

namespace od = simdjson::ondemand;

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

// Reads the whole file into a buffer with simdjson's padding; .gz through zlib.
Result<std::string> load(const std::string& path) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::string buf;
  if (!gz) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
    const auto size = static_cast<std::size_t>(in.tellg());
    if (size > simdjson::SIMDJSON_MAXSIZE_BYTES)
      return Error{
          fmt::format("{}: {:.1f} GiB of JSON is over simdjson's 4 GiB document limit; split the "
                      "trace (one file per rank, fewer active steps in torch.profiler's schedule)",
                      path, static_cast<double>(size) / (1 << 30))};
    buf.reserve(size + simdjson::SIMDJSON_PADDING);
    buf.resize(size);
    in.seekg(0);
    if (size && !in.read(buf.data(), static_cast<std::streamsize>(size)))
      return Error{fmt::format("{}: read failed", path)};
    return buf;
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  {
    // The gzip trailer holds the uncompressed size modulo 4 GiB: a good first reservation.
    std::ifstream raw(path, std::ios::binary | std::ios::ate);
    const auto csize = static_cast<std::size_t>(raw.tellg());
    if (csize >= 4) {
      unsigned char t[4];
      raw.seekg(static_cast<std::streamoff>(csize - 4));
      raw.read(reinterpret_cast<char*>(t), 4);
      const std::size_t isize =
          t[0] | (t[1] << 8) | (t[2] << 16) | (static_cast<std::size_t>(t[3]) << 24);
      buf.reserve(std::max(isize, csize) + simdjson::SIMDJSON_PADDING);
    }
  }
  std::size_t len = 0;
  for (;;) {
    if (buf.capacity() < len + (1 << 20) + simdjson::SIMDJSON_PADDING)
      buf.reserve(std::max<std::size_t>(buf.capacity() * 3 / 2, len + (1 << 20)) +
                  simdjson::SIMDJSON_PADDING);
    buf.resize(len + (1 << 20));
    int n = gzread(f, buf.data() + len, 1 << 20);
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      return Error{
          fmt::format("{}: corrupt gzip stream after {} uncompressed bytes: {}", path, len, msg)};
    }
    len += static_cast<std::size_t>(n);
    if (n == 0) break;
    if (len > simdjson::SIMDJSON_MAXSIZE_BYTES) {
      gzclose(f);
      return Error{fmt::format(
          "{}: over 4 GiB of JSON once uncompressed, simdjson's document limit; split the "
          "trace (one file per rank, fewer active steps in torch.profiler's schedule)",
          path)};
    }
  }
  // gzread stops at a truncated stream without an error; gzclose/gzeof tell.
  const bool complete = gzeof(f);
  int code = 0;
  std::string msg = gzerror(f, &code);
  gzclose(f);
  if (code != Z_OK && code != Z_STREAM_END)
    return Error{fmt::format("{}: corrupt gzip stream: {}", path, msg)};
  if (!complete) return Error{fmt::format("{}: truncated gzip stream after {} bytes", path, len)};
  buf.resize(len);
  return buf;
}

int dtype_bytes_of(std::string_view d) {
  return profiler_dtype_bytes(d);
}

}  // namespace

bool is_comm_kernel(std::string_view n) {
  return starts_with(n, "nccl") || starts_with(n, "rccl") || contains(n, "ncclKernel") ||
         contains(n, "ncclDevKernel") || contains(n, "ncclSymkDevKernel");
}

bool collective_from_name(std::string_view name, Collective& out) {
  const std::string s = lower(name);
  auto has = [&](const char* p) { return s.find(p) != std::string::npos; };
  if (has("alltoall") || has("all_to_all"))
    out = Collective::all_to_all;
  else if (has("allgather") || has("all_gather"))
    out = Collective::all_gather;
  else if (has("reducescatter") || has("reduce_scatter"))
    out = Collective::reduce_scatter;
  else if (has("allreduce") || has("all_reduce"))
    out = Collective::all_reduce;
  else if (has("broadcast"))
    out = Collective::broadcast;
  else if (has("sendrecv") || has("send"))
    out = Collective::send;
  else if (has("recv"))
    out = Collective::recv;
  else if (has("reduce"))
    out = Collective::reduce;
  else
    return false;
  return true;
}

int profiler_dtype_bytes(std::string_view dtype) {
  const std::string d = lower(dtype);
  if (d == "float" || d == "float32" || d == "int" || d == "int32" || d == "uint32") return 4;
  if (d == "half" || d == "float16" || d == "bfloat16" || d == "short" || d == "int16") return 2;
  if (d == "double" || d == "float64" || d == "long" || d == "int64" || d == "uint64") return 8;
  if (d == "byte" || d == "char" || d == "int8" || d == "uint8" || d == "bool" ||
      d == "float8_e4m3fn" || d == "float8_e5m2")
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
  bool has_dur = false;
};

class Reader {
 public:
  Reader(const std::string& name, std::string& text) : name_(name), text_(text) {}

  Result<TraceFile> run() {
    TraceFile tf;
    tf.path = name_;
    tf.json_bytes = text_.size();
    if (text_.find_first_not_of(" \t\r\n") == std::string::npos)
      return Error{fmt::format("{}: empty file, expected a JSON object with 'traceEvents'", name_)};
    od::parser parser;
    od::document doc;
    simdjson::padded_string_view view(text_.data(), text_.size(), text_.capacity());
    if (auto e = parser.iterate(view).get(doc)) return fail_before_document(e);
    od::object root;
    if (auto e = doc.get_object().get(root))
      return fail(doc, e, "expected a JSON object at the top level");
    bool saw_events = false;
    for (auto field : root) {
      std::string_view key;
      if (auto e = field.unescaped_key().get(key)) return fail(doc, e, "");
      if (key == "traceEvents") {
        saw_events = true;
        od::array arr;
        if (auto e = field.value().get_array().get(arr))
          return fail(doc, e, "field 'traceEvents': expected an array");
        std::size_t index = 0;
        for (auto item : arr) {
          od::object obj;
          if (auto e = item.get_object().get(obj))
            return fail(doc, e, fmt::format("event {}: expected an object", index));
          RawEvent ev;
          if (auto err = read_event(obj, ev, index); !err.empty()) return located(doc, err);
          if (auto st = take(ev, index, tf); !st.ok()) return st.error();
          ++index;
        }
      } else if (key == "distributedInfo") {
        od::object info;
        if (field.value().get_object().get(info)) continue;  // not an object: ignore
        for (auto f : info) {
          std::string_view k;
          if (f.unescaped_key().get(k)) break;
          std::int64_t v = 0;
          if (k == "rank" && !f.value().get_int64().get(v))
            tf.rank = v >= 0 && v < (1 << 24) ? static_cast<int>(v) : -1;
          else if (k == "world_size" && !f.value().get_int64().get(v))
            tf.world_size = v >= 0 && v < (1 << 24) ? static_cast<int>(v) : 0;
        }
      } else if (key == "otherData") {
        // commscope writes {"producer": "commscope"}; nothing else is needed from it
      }
    }
    if (!saw_events)
      return Error{fmt::format("{}: missing 'traceEvents': not a Chrome or Kineto trace", name_)};
    finish(tf);
    return tf;
  }

 private:
  // Reads the fields of one event in document order.
  std::string read_event(od::object& obj, RawEvent& ev, std::size_t index) {
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return fmt::format("event {}: bad key", index);
      od::value v;
      if (field.value().get(v)) return fmt::format("event {}: bad value of '{}'", index, key);
      if (key == "ph") {
        if (v.get_string().get(ev.ph)) return type_error(index, key, "a string");
      } else if (key == "cat") {
        if (v.get_string().get(ev.cat)) return type_error(index, key, "a string");
      } else if (key == "name") {
        if (v.get_string().get(ev.name)) return type_error(index, key, "a string");
      } else if (key == "ts") {
        if (v.get_double().get(ev.ts)) return type_error(index, key, "a number");
      } else if (key == "dur") {
        if (v.get_double().get(ev.dur)) return type_error(index, key, "a number");
        ev.has_dur = true;
      } else if (key == "pid" || key == "tid") {
        std::int64_t x = 0;
        od::json_type t;
        if (v.type().get(t)) return type_error(index, key, "a number or a string");
        if (t == od::json_type::number) {
          double d = 0;
          if (v.get_double().get(d)) return type_error(index, key, "a number");
          if (!(std::fabs(d) < 2e9)) return type_error(index, key, "a process or thread id below 2^31");
          x = static_cast<std::int64_t>(d);
        } else if (t == od::json_type::string) {
          std::string_view s;  // "stream 7", "PID 12": the digits
          if (v.get_string().get(s)) return type_error(index, key, "a string");
          for (char c : s)
            if (c >= '0' && c <= '9' && x < 100000000) x = x * 10 + (c - '0');
        }
        (key == "pid" ? ev.pid : ev.tid) = x;
      } else if (key == "args") {
        od::object args;
        if (v.get_object().get(args)) continue;  // args of another shape: not ours to judge
        for (auto a : args) {
          std::string_view k;
          if (a.unescaped_key().get(k)) return fmt::format("event {}: bad key in args", index);
          od::value av;
          if (a.value().get(av)) return fmt::format("event {}: bad value of args.{}", index, k);
          if (k == "Collective name" || k == "collective") {
            if (av.get_string().get(ev.collective_name))
              return type_error(index, "args.Collective name", "a string");
          } else if (k == "In msg nelems") {
            if (av.get_int64().get(ev.in_nelems))
              return type_error(index, "args.In msg nelems", "an integer");
          } else if (k == "Out msg nelems") {
            if (av.get_int64().get(ev.out_nelems))
              return type_error(index, "args.Out msg nelems", "an integer");
          } else if (k == "Group size" || k == "group_size") {
            if (av.get_int64().get(ev.group_size))
              return type_error(index, "args.Group size", "an integer");
          } else if (k == "dtype") {
            if (av.get_string().get(ev.dtype)) return type_error(index, "args.dtype", "a string");
          } else if (k == "group") {
            if (av.get_string().get(ev.group_name))
              return type_error(index, "args.group", "a string");
          } else if (k == "bytes") {
            if (av.get_double().get(ev.bytes)) return type_error(index, "args.bytes", "a number");
          }
        }
      }
    }
    return {};
  }

  static std::string type_error(std::size_t index, std::string_view key,
                                std::string_view expected) {
    return fmt::format("event {}: field '{}': expected {}", index, key, expected);
  }

  Status take(const RawEvent& ev, std::size_t index, TraceFile& tf) {
    if (ev.ph != "X") return {};
    const bool own = ev.cat == "compute" || ev.cat == "comm" || ev.cat == "memcpy";
    const bool kernel = ev.cat == "kernel" || ev.cat == "Kernel";
    const bool copy = ev.cat == "gpu_memcpy" || ev.cat == "gpu_memset" || ev.cat == "Memcpy" ||
                      ev.cat == "Memset";
    const bool step = (ev.cat == "gpu_user_annotation" || ev.cat == "user_annotation") &&
                      starts_with(ev.name, "ProfilerStep#");
    if (!own && !kernel && !copy && !step) return {};
    if (!std::isfinite(ev.ts))
      return Error{
          fmt::format("{}: event {}: field 'ts': expected a finite number, got {}", name_, index,
                      std::isnan(ev.ts) ? std::string("nothing") : fmt::format("{}", ev.ts))};
    if (!ev.has_dur || !std::isfinite(ev.dur) || ev.dur < 0)
      return Error{fmt::format(
          "{}: event {}: field 'dur': expected a non-negative number of microseconds, got {}",
          name_, index, ev.has_dur ? fmt::format("{}", ev.dur) : std::string("nothing"))};
    if (ev.dur > 1e11)  // more than a day
      return Error{
          fmt::format("{}: event {}: field 'dur': expected at most a day (1e11 us), got {}", name_,
                      index, ev.dur)};
    const double start = ev.ts * 1e-6, dur = ev.dur * 1e-6;
    if (step) {
      StepWindow w{std::string(ev.name), start, start + dur, ev.cat == "gpu_user_annotation"};
      tf.steps.push_back(std::move(w));
      return {};
    }
    Event e;
    e.rank = static_cast<std::int32_t>(ev.pid);
    e.stream = static_cast<std::int32_t>(ev.tid);
    e.start = start;
    e.dur = dur;
    e.name = tf.timeline.intern(ev.name);
    std::int32_t comm_index = -1;
    if (own) {
      tf.own_format = true;
      e.kind = ev.cat == "compute" ? EventKind::compute
               : ev.cat == "comm"  ? EventKind::comm
                                   : EventKind::memcpy;
      if (e.kind == EventKind::comm) {
        Collective c;
        if (collective_from_name(ev.collective_name, c)) {
          e.has_collective = true;
          e.collective = c;
          e.group = group_of(ev.group_name);
          e.bytes = std::isfinite(ev.bytes) && ev.bytes > 0 ? ev.bytes : 0;
          e.group_size = sane_count(ev.group_size);
        }
      }
    } else if (copy) {
      e.kind = EventKind::memcpy;
    } else if (is_comm_kernel(ev.name) || !ev.collective_name.empty()) {
      e.kind = EventKind::comm;
      CommArgs a;
      a.collective = std::string(ev.collective_name.empty() ? ev.name : ev.collective_name);
      a.in_nelems = std::max<std::int64_t>(ev.in_nelems, 0);
      a.out_nelems = std::max<std::int64_t>(ev.out_nelems, 0);
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
        const double elem = dtype_bytes_of(a.dtype);
        const std::int64_t nelems = c == Collective::all_gather ? a.out_nelems : a.in_nelems;
        e.bytes = elem * static_cast<double>(nelems);
      }
      comm_index = static_cast<std::int32_t>(tf.comm_args.size());
      tf.comm_args.push_back(std::move(a));
    } else {
      e.kind = EventKind::compute;
    }
    tf.timeline.events.push_back(e);
    tf.comm_index.push_back(comm_index);
    return {};
  }

  // A group size as the profiler writes it; nonsense becomes 0 (unknown).
  static int sane_count(std::int64_t v) { return v > 0 && v < (1 << 24) ? static_cast<int>(v) : 0; }

  static CommGroup group_of(std::string_view g) {
    if (g == "tensor") return CommGroup::tensor;
    if (g == "pipeline") return CommGroup::pipeline;
    if (g == "embedding") return CommGroup::embedding;
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

  std::size_t offset(od::document& doc) {
    const char* p = nullptr;
    if (doc.current_location().get(p) || p == nullptr) return text_.size();
    return static_cast<std::size_t>(p - text_.data());
  }

  Error fail(od::document& doc, simdjson::error_code e, const std::string& what) {
    if (e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT)
      return Error{
          fmt::format("{}: byte {}: truncated JSON: the document ends before its last '}}' or ']'",
                      name_, text_.size())};
    std::string reason = simdjson::error_message(e);
    if (e == simdjson::UTF8_ERROR) reason = "invalid UTF-8";
    if (e == simdjson::TAPE_ERROR) reason = "malformed JSON";
    const std::size_t at = offset(doc);
    return Error{
        fmt::format("{}: byte {}: {}{}", name_, at, what.empty() ? "" : what + ": ", reason)};
  }

  // Errors of the first pass (structure and UTF-8), before there is a document to ask.
  Error fail_before_document(simdjson::error_code e) {
    if (e == simdjson::UTF8_ERROR)
      return Error{fmt::format("{}: byte {}: invalid UTF-8", name_, first_invalid_utf8())};
    if (e == simdjson::CAPACITY)
      return Error{fmt::format(
          "{}: over simdjson's 4 GiB document limit; split the trace (one file per rank, "
          "fewer active steps in torch.profiler's schedule)",
          name_)};
    return Error{fmt::format("{}: byte 0: {}", name_, simdjson::error_message(e))};
  }

  // Offset of the first byte that breaks UTF-8 (RFC 3629).
  std::size_t first_invalid_utf8() const {
    const auto* p = reinterpret_cast<const unsigned char*>(text_.data());
    const std::size_t n = text_.size();
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

  Error located(od::document& doc, const std::string& what) {
    return Error{fmt::format("{}: byte {}: {}", name_, offset(doc), what)};
  }

  const std::string& name_;
  std::string& text_;
};

}  // namespace

Result<TraceFile> read_trace_text(const std::string& name, std::string text) {
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  return Reader(name, text).run();
}

Result<TraceFile> read_trace(const std::string& path) {
  CS_ASSIGN_OR_RETURN(std::string text, load(path));
  return Reader(path, text).run();
}

}  // namespace commscope
