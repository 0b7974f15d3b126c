"""commscope from Python: the CLI's verbs in-process, with keyword arguments for flags.

Every verb function builds the argument vector the ``commscope`` program would get
(``micro_batch_size=1`` -> ``--micro-batch-size=1``, ``nodes=[4, 8]`` -> ``--nodes=4,8``,
``sequence_parallel=True`` -> ``--sequence-parallel``) and runs the CLI's own parser and verb
inside this process (no subprocess), so results are the CLI's JSON documents as dicts and lists,
errors are the CLI's one-line messages, and a flag added to the CLI works here unchanged.
docs/python.md says more.
"""

import json as _json
import re as _re
import math as _math
import numbers as _numbers
import os as _os
import tempfile as _tempfile
import warnings as _warnings

from . import _commscope
from ._commscope import Error  # a ValueError carrying the CLI's one-line message

__all__ = [
    "Error", "CommscopeWarning", "Document", "Rows", "Trace", "describe", "predict", "validate",
    "calibrate", "analyze", "fit", "load_trace", "presets", "run", "argv", "__version__",
]

__version__ = _commscope.version()


def _program_dir():
    """The folder of commscope-train and commscope-bench, which train, bench and characterize
    launch: the interpreter is this process's executable, so the CLI's "beside the running
    program" names Python's folder (every MPI verb said "not found: built without MPI"). In
    order: $COMMSCOPE_BIN's folder, the build tree (build/python/commscope -> build), the
    installed prefix's bin, PATH."""
    import shutil
    here = _os.path.dirname(_os.path.abspath(__file__))
    candidates = []
    if _os.environ.get("COMMSCOPE_BIN"):
        candidates.append(_os.path.dirname(_os.path.abspath(_os.environ["COMMSCOPE_BIN"])))
    candidates.append(_os.path.dirname(_os.path.dirname(here)))
    import sys
    candidates.append(_os.path.join(sys.prefix, "bin"))
    found = shutil.which("commscope-train") or shutil.which("commscope-bench")
    if found:
        candidates.append(_os.path.dirname(found))
    for d in candidates:
        if any(_os.access(_os.path.join(d, p), _os.X_OK)
               for p in ("commscope-train", "commscope-bench")):
            return d
    return None


_dir = _program_dir()
if _dir:
    _commscope.set_program_dir(_dir)
del _dir


class CommscopeWarning(UserWarning):
    """A warning the CLI would print as ``commscope: warning: ...``."""


def _pandas():
    try:
        import pandas  # noqa: F401  (optional)
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("to_pandas() needs pandas (apt-get install python3-pandas)") from e
    return pandas


class Rows(list):
    """A list of dicts (one per row); ``pandas.DataFrame(rows)`` works, or ``rows.to_pandas()``."""

    def to_pandas(self):
        return _pandas().json_normalize(list(self))


class Document(dict):
    """A verb's JSON document as a dict. ``to_pandas()`` gives its table of rows (the list
    ``rows_key`` names, flattened with ``pandas.json_normalize``)."""

    rows_key = None

    def to_pandas(self, key=None):
        key = key or self.rows_key
        if key is None:
            return _pandas().json_normalize(dict(self))
        return _pandas().json_normalize(self[key])


def _wrap(value, rows_key=None):
    if isinstance(value, list):
        return Rows(value)
    if isinstance(value, dict):
        doc = Document(value)
        if rows_key is None:
            lists = [k for k, v in value.items() if isinstance(v, list) and v
                     and all(isinstance(x, dict) for x in v)]
            rows_key = "rows" if "rows" in lists else (lists[0] if len(lists) == 1 else None)
        doc.rows_key = rows_key
        return doc
    return value


def _flag_value(name, value):
    if isinstance(value, (list, tuple)):
        if not value:  # "--zero=" would make the CLI take the next argument as the value
            raise Error(f"--{name}: expected at least one value, got {value!r}")
        items = [_flag_value(name, v) for v in value]
        return ",".join(items)
    if isinstance(value, str) and not value:
        raise Error(f"--{name}: expected a value, got ''")
    if isinstance(value, bool):
        raise Error(f"--{name}: expected a single value in a list, got {value!r}")
    if isinstance(value, _os.PathLike):
        return _os.fspath(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


# The CLI's flags that take true or false (their --help says BOOLEAN; the default may be true):
# False passes "=false", where leaving the flag out kept a default of true (found by probing,
# 2026-11-30). tests/python checks this set against the verbs' --help.
_BOOLEAN_FLAGS = frozenset({
    "fsdp-limit-all-gathers", "pipe-partitioned", "scatter-gather-tensors-in-pipeline"})


# The CLI's flags that take several separate values (`--diff BASE NEW`): a list passes each as
# its own argument, where other flags join a list with commas (`diff=[a, b]` gave "--diff=a,b",
# one value, found by probing, 2026-11-30); Megatron-LM's --hierarchical-context-parallel-sizes
# (nargs='+': `2 4`) likewise.
_SEPARATE_VALUE_FLAGS = frozenset({"diff", "hierarchical-context-parallel-sizes"})


def _check_text(name, text):
    # A NUL ends the C string the CLI reads: "gpt2-small\0xyz" was gpt2-small.
    if isinstance(text, str) and "\0" in text:
        raise Error(f"--{name}: expected a value without NUL characters, got {text!r}")
    return text


def _path_text(x):
    # A path as the CLI reads it: str, bytes (os.fsdecode, so a name that is not UTF-8 keeps its
    # bytes) or os.PathLike; None is no path ("None" was looked for as a file).
    if x is None:
        raise Error("path: expected a file or folder name, got None")
    if isinstance(x, (bytes, _os.PathLike)):
        return _os.fsdecode(x)
    return str(x)


def argv(verb, *positionals, **flags):
    """The argument vector ``commscope`` gets for these arguments (after the program name):
    ``argv("predict", nodes=[4, 8])`` is ``["predict", "--nodes=4,8"]``.

    A positional that starts with "-" would be read as a flag (``validate(["--output=x"])``
    wrote x): it is refused, unless it follows an explicit "--" positional (``run("bench",
    "--", "-b", "8")`` passes the rest through). A keyword that is not a flag's name
    (``**{"nodes=8 --tp": 2}``) is refused too."""
    args = [_check_text("verb", str(verb))]
    passed_through = False
    for p in positionals:
        items = p if isinstance(p, (list, tuple)) else [p]
        for x in items:
            text = _check_text("path", _path_text(x))
            if not passed_through and text.startswith("-") and text != "--":
                raise Error(f"path: expected a file or folder name, got {text!r} (a name that "
                            f"starts with - reads as a flag: write ./{text})")
            passed_through = passed_through or text == "--"
            args.append(text)
    for key, value in flags.items():
        if not _re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_]*", key):
            raise Error(f"{key!r}: expected a flag's name (letters, digits and _), got {key!r}")
        name = key.replace("_", "-")
        if value is False and name in _BOOLEAN_FLAGS:
            args.append(f"--{name}=false")
            continue
        if value is None or value is False:
            continue
        if value is True:
            args.append(f"--{name}")
        elif name in _SEPARATE_VALUE_FLAGS and isinstance(value, (list, tuple)):
            if not value:
                raise Error(f"--{name}: expected at least one value, got {value!r}")
            args.append(f"--{name}")
            args.extend(_check_text(name, _flag_value(name, v)) for v in value)
        else:
            args.append(f"--{name}={_check_text(name, _flag_value(name, value))}")
    return args


def _caller_stacklevel():
    """The stacklevel of the first frame outside this module (for warnings.warn)."""
    import sys
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        level, frame = level + 1, frame.f_back
    return level


def _call(args):
    # As bytes: a file name that is not UTF-8 (os.fsdecode's surrogates) reaches the CLI as the
    # bytes it is (it was a pybind TypeError).
    status, out, errors, warnings = _commscope.run([_os.fsencode(a) for a in args])
    for w in warnings:
        _warnings.warn(w, CommscopeWarning, stacklevel=_caller_stacklevel())
    if status != 0:
        raise Error(errors[-1] if errors else f"{args[0]}: failed with status {status}")
    return out.decode("utf-8")


def _document(verb, positionals, flags, rows_key=None):
    """Runs a verb that prints a --format document: JSON unless format= says otherwise; the text
    for table/csv/md; None when output= wrote it to a file."""
    flags = dict(flags)
    if flags.get("help"):  # the verb's help text, not a document
        return _call(argv(verb, *positionals, help=True))
    fmt = flags.pop("format", None) or "json"  # None leaves the flag out: the default, JSON
    # format first: a flag given True that takes a value (zero=True) is then last, and the CLI
    # says its value is missing (it took "--format=json" for it)
    flags = {"format": fmt, **flags}
    text = _call(argv(verb, *positionals, **flags))
    if flags.get("output") or fmt != "json":
        return None if flags.get("output") else text
    return _wrap(_json.loads(text), rows_key)


def run(verb, *positionals, **flags):
    """Any verb of the CLI, including ones added after this module was written: returns the
    parsed JSON document when the verb printed JSON, else its text."""
    text = _call(argv(verb, *positionals, **flags))
    try:
        return _wrap(_json.loads(text))
    except ValueError:
        return text


def describe(**flags):
    """``commscope describe``: parameters, FLOPs, memory per rank, communication volume.
    Flags as the CLI's (``model="gpt2-large", nodes=4, tp=2, zero=1, ...``)."""
    return _document("describe", (), flags)


def predict(**flags):
    """``commscope predict``: one plan or a sweep (lists for comma flags:
    ``nodes=[4, 8, 16]``); the rows are ``result["predictions"]``. Ctrl-C stops a sweep."""
    return _document("predict", (), flags, rows_key="predictions")


def plan(**flags):
    """``commscope plan``: the best plans of a model on ``gpus=N`` GPUs, ranked and explained;
    ``network=[...]`` or ``system=[...]`` searches per option. The ranked rows (every option's)
    are ``result["plans"]``; the counts, the rules of thumb and the what-if are in
    ``result["options"]``. Ctrl-C stops the search."""
    return _document("plan", (), flags, rows_key="plans")


__all__ += ["plan"]


def validate(files, **flags):
    """``commscope validate FILES``: predicted vs measured iteration times."""
    return _document("validate", (files,), flags)


def analyze(paths, **flags):
    """``commscope analyze PATHS``: where the time went in Kineto/Chrome traces."""
    return _document("analyze", (paths,), flags)


def calibrate(files=None, **flags):
    """``commscope calibrate FILES``: the system preset with fitted efficiencies, as a dict
    (written to ``output=`` instead when given).

    ``calibrate(from_trace=PATH, model=..., nodes=..., tp=..., ...)`` is ``commscope calibrate
    --from-trace PATH``: a model fitted on a traced run (a trace file or a folder of them; no
    FILES then). It returns the fitted system preset the CLI writes to ``-o``, as a dict (also
    written to ``output=`` when given; the network profile to ``network_output=`` when given),
    with the report the CLI prints (classes, busbw, traced and predicted iteration, error) as
    its ``report`` attribute."""
    positionals = () if files is None else (files,)
    if flags.get("help"):
        return _call(argv("calibrate", *positionals, help=True))
    if not flags.get("from_trace"):
        text = _call(argv("calibrate", *positionals, **flags))
        return None if flags.get("output") else _wrap(_json.loads(text))
    flags = dict(flags)
    output = flags.pop("output", None)
    report, text = _written("calibrate", positionals, flags, output, "system.json")
    doc = _wrap(_json.loads(text))
    doc.report = report
    return doc


def _written(verb, positionals, flags, output, name):
    """Runs a verb that writes its document to -o: (what it printed, the document's text). The
    CLI writes a regular file (or a new one) itself; a device or FIFO (``/dev/null``), which
    cannot be read back, gets the text written through after the CLI wrote a private copy."""
    if output is not None and _os.path.exists(output) and not _os.path.isfile(output):
        printed, text = _written(verb, positionals, flags, None, name)
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        return printed, text
    with _tempfile.TemporaryDirectory(prefix=f"commscope-{verb}-") as tmp:
        path = output or _os.path.join(tmp, name)
        printed = _call(argv(verb, *positionals, output=path, **flags))
        with open(path, encoding="utf-8") as f:
            return printed, f.read()


def fit(results, **flags):
    """``commscope fit RESULTS``: the network profile (the all-reduce fit and the measured busbw
    curves) that ``predict(network=...)`` accepts, as a dict; also written to ``output=`` when
    given. ``format=`` is the CLI's input format (auto|bench-json|nccl-tests)."""
    if flags.get("help"):
        return _call(argv("fit", results, help=True))
    flags = dict(flags)
    output = flags.pop("output", None)
    return _wrap(_json.loads(_written("fit", (results,), flags, output, "profile.json")[1]))


def presets(kind=None):
    """The preset names: ``{"models": [...], "systems": [...], "networks": [...]}``, or one
    kind's list (``presets("models")``)."""
    kinds = ("models", "systems", "networks")
    if kind is None:
        return {k: _commscope.presets(k) for k in kinds}
    if kind not in kinds:
        raise Error(f"presets: expected one of models|systems|networks, got '{kind}'")
    return _commscope.presets(kind)


class Trace:
    """One trace as the library reads it (``load_trace``): GPU kernels, copies and
    ProfilerStep windows of a PyTorch profiler (Kineto) or commscope Chrome trace."""

    def __init__(self, native):
        self._t = native

    path = property(lambda self: self._t.path)
    rank = property(lambda self: self._t.rank, doc="the trace's rank (-1: none stated)")
    world_size = property(lambda self: self._t.world_size, doc="0: unknown")
    ranks = property(lambda self: self._t.ranks, doc="the ranks (processes) of its events")

    def __len__(self):
        return self._t.event_count

    def __repr__(self):
        return f"<commscope.Trace {self.path!r}: {len(self)} events, ranks {self.ranks}>"

    def events(self):
        """Events as dicts: rank, stream, name, kind (compute|comm|memcpy), start_s, dur_s,
        end_s, wait_s, collective, bytes, group_size."""
        return Rows(self._t.events())

    def steps(self):
        """ProfilerStep#N windows: name, start_s, end_s, on_gpu."""
        return Rows(self._t.steps())

    def breakdown(self, rank=None, t0=None, t1=None):
        """Where one rank's time went in [t0, t1] seconds (the whole trace when both are left
        out): the breakdown document analyze and predict write (wall_s, compute_s,
        exposed_comm_s, ...). A rank the trace does not have, a bound that is not a finite
        number, or t1 <= t0 raises Error."""
        ranks = self.ranks
        if rank is None:
            if not ranks:
                raise Error(f"{self.path}: no events to break down")
            rank = ranks[0]
        # An integer (numpy's too), not a bool (False was taken as rank 0).
        if isinstance(rank, bool) or not isinstance(rank, _numbers.Integral) or rank not in ranks:
            raise Error(f"rank: expected one of the trace's ranks {ranks}, got {rank!r}")
        if t0 is None and t1 is None:
            return _wrap(_json.loads(self._t.breakdown_json(int(rank), 0.0, -1.0)))
        if t0 is None or t1 is None:
            raise Error(f"t0, t1: expected both bounds or neither, got t0={t0!r} t1={t1!r}")
        bounds = []
        for name, v in (("t0", t0), ("t1", t1)):
            # Any real number (numpy's float32 and int64 too), not a bool; within +-1e11 s, so
            # that t1 - t0 stays finite (1e308 - -1e308 gave a wall of null).
            x = None
            if not isinstance(v, bool) and isinstance(v, _numbers.Real):
                try:
                    x = float(v)
                except OverflowError:
                    x = None
            if x is None or not _math.isfinite(x) or abs(x) > 1e11:
                raise Error(f"{name}: expected a finite number of seconds within +-1e11, "
                            f"got {v!r}")
            bounds.append(x)
        if not bounds[1] > bounds[0]:
            raise Error(f"t1: expected a time after t0 ({t0!r}), got {t1!r}")
        return _wrap(_json.loads(self._t.breakdown_json(int(rank), bounds[0], bounds[1])))

    def to_pandas(self):
        return self.events().to_pandas()


def load_trace(path, max_events=0):
    """Reads one .json or .json.gz trace (``commscope analyze``'s reader) into a Trace.
    ``max_events``: refuse files with more events (0: bounded by available memory only)."""
    if not isinstance(path, (str, bytes, _os.PathLike)):
        raise Error(f"path: expected a file name, got {path!r}")
    path = _os.fsdecode(_os.fspath(path))
    if "\0" in path:
        raise Error(f"path: expected a file name without NUL characters, got {path!r}")
    # An integer from 0 to 2^62 (numpy's too), not a bool, a float or None (1.9 was read as 1).
    if (isinstance(max_events, bool) or not isinstance(max_events, _numbers.Integral)
            or not 0 <= max_events <= 2**62):
        raise Error(f"max_events: expected an integer from 0 (no limit) to 2**62, "
                    f"got {max_events!r}")
    return Trace(_commscope.load_trace(path, int(max_events)))
