// commscope._commscope: the compiled half of the Python module (docs/python.md). It holds no
// verb of its own: run() parses an argument vector with the CLI's own parser and runs the CLI's
// verb (apps/commscope/embed.h), with the GIL released and Ctrl-C checked between units of work;
// Trace wraps the library's trace reader for load_trace(). The Python half (commscope/__init__.py)
// turns keyword arguments into that vector and the JSON documents into dicts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/launch/process.h"
#include "commscope/spec/preset.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/timeline/trace_reader.h"
#include "commscope/util/input_file.h"
#include "embed.h"

namespace py = pybind11;
using namespace commscope;

namespace {

// commscope.Error (a ValueError): the library's one-line message.
struct CommscopeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs `commscope <args...>` in-process. Returns (status, stdout document, errors, warnings).
py::tuple run(const std::vector<std::string>& args) {
  std::vector<std::string> argv_storage;
  argv_storage.reserve(args.size() + 1);
  argv_storage.emplace_back("commscope");
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  cli::Capture capture;
  // Between units of work: take the GIL and let Python run its signal handlers; a pending
  // KeyboardInterrupt stops the verb.
  capture.poll = [] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  };
  int status = 0;
  {
    py::gil_scoped_release release;
    cli::CaptureScope scope(capture);
    try {
      status = cli::run_command(static_cast<int>(argv.size() - 1), argv.data());
    } catch (py::error_already_set&) {
      throw;  // KeyboardInterrupt: re-raised in Python once the GIL is back
    } catch (const std::exception& e) {
      // As the CLI's main(): one line, status 2.
      capture.errors.push_back(std::string("internal error: ") + e.what());
      status = 2;
    }
  }
  // Messages that echo a file name that is not UTF-8 keep its bytes as os.fsdecode would (a
  // std::string -> str conversion raised UnicodeDecodeError).
  auto texts = [](const std::vector<std::string>& v) {
    py::list l;
    for (const auto& t : v)
      l.append(py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(t.data(), static_cast<Py_ssize_t>(t.size()), "surrogateescape")));
    return l;
  };
  return py::make_tuple(status, py::bytes(capture.out), texts(capture.errors),
                        texts(capture.warnings));
}

// One read trace (read_trace): its events, steps and breakdowns.
struct Trace {
  TraceFile file;
};

std::string breakdown_json(const Trace& t, int rank, double t0, double t1) {
  return breakdown_to_json(breakdown(t.file.timeline, rank, t0, t1)).dump();
}

py::list events(const Trace& t) {
  const Timeline& tl = t.file.timeline;
  py::list out;
  for (std::size_t i = 0; i < tl.events.size(); ++i) {
    const Event& e = tl.events[i];
    py::dict d;
    d["rank"] = e.rank;
    d["stream"] = e.stream;
    d["name"] = tl.name(e);
    d["kind"] = std::string(to_string(e.kind));
    d["start_s"] = e.start;
    d["dur_s"] = e.dur;
    d["end_s"] = e.end();
    d["wait_s"] = e.wait;
    if (e.kind == EventKind::comm) {
      d["collective"] =
          e.has_collective ? py::object(py::str(std::string(to_string(e.collective)))) : py::none();
      d["bytes"] = e.bytes;
      d["group_size"] = e.group_size;
    } else {
      d["collective"] = py::none();
      d["bytes"] = e.kind == EventKind::memcpy ? py::object(py::float_(e.bytes)) : py::none();
      d["group_size"] = py::none();
    }
    out.append(std::move(d));
  }
  return out;
}

py::list steps(const Trace& t) {
  py::list out;
  for (const auto& s : t.file.steps) {
    py::dict d;
    d["name"] = s.name;
    d["start_s"] = s.start;
    d["end_s"] = s.end;
    d["on_gpu"] = s.on_gpu;
    out.append(std::move(d));
  }
  return out;
}

Trace load_trace(const std::string& path, long long max_events) {
  if (max_events < 0)
    throw CommscopeError("max_events: expected a non-negative integer, got '" +
                         std::to_string(max_events) + "'");
  Result<TraceFile> r = Error{""};
  {
    py::gil_scoped_release release;
    ReadLimits limits;
    limits.max_events = static_cast<std::uint64_t>(max_events);
    // As analyze reads one file: at most an eighth of the available memory kept.
    limits.max_kept_bytes = std::max<std::uint64_t>(available_memory_bytes() / 8, 64ull << 20);
    r = read_trace(path, limits);
  }
  if (!r) throw CommscopeError(r.error().message);
  return Trace{std::move(*r)};
}

}  // namespace

PYBIND11_MODULE(_commscope, m) {
  m.doc() = "commscope's compiled core: the CLI's verbs in-process and the trace reader";
  py::register_exception<CommscopeError>(m, "Error", PyExc_ValueError);
  m.def("run", &run, py::arg("args"),
        "Runs `commscope <args>` in-process; returns (status, document bytes, errors, warnings).");
  m.def(
      "presets",
      [](const std::string& kind) {
        PresetKind k = kind == "models"    ? PresetKind::model
                       : kind == "systems" ? PresetKind::system
                                           : PresetKind::network;
        return list_presets(k);
      },
      py::arg("kind"));
  m.def("preset_roots", [] {
    std::vector<std::string> out;
    for (const auto& r : preset_roots()) out.push_back(r.string());
    return out;
  });
  m.def("version", [] { return std::string(COMMSCOPE_VERSION); });
  m.def("set_program_dir", &launch::set_program_dir, py::arg("dir"),
        "The folder of commscope-train and commscope-bench (train, bench, characterize).");
  py::class_<Trace>(m, "_Trace")
      .def_property_readonly("path", [](const Trace& t) { return t.file.path; })
      .def_property_readonly("rank", [](const Trace& t) { return t.file.rank; })
      .def_property_readonly("world_size", [](const Trace& t) { return t.file.world_size; })
      .def_property_readonly("ranks", [](const Trace& t) { return t.file.timeline.ranks(); })
      .def_property_readonly("event_count",
                             [](const Trace& t) { return t.file.timeline.events.size(); })
      .def("events", &events)
      .def("steps", &steps)
      .def("breakdown_json", &breakdown_json, py::arg("rank"), py::arg("t0"), py::arg("t1"));
  m.def("load_trace", &load_trace, py::arg("path"), py::arg("max_events") = 0);
}
