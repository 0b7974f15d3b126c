# Bad arguments raise commscope.Error with the CLI's own one-line message (docs/python.md,
# issue 17), and the interpreter keeps working: each verb gets the CLI's bad-input cases.
import os

import pytest

from conftest import source_path

MEASURED = source_path("data", "vtrain", "ground_truth_multi.csv")
NCCL_LOG = source_path("tests", "data", "nccl-tests", "a3mega-h100-2x8-all_reduce.txt")
TRACE = source_path("data", "traces", "trace_filter_sampled_rank-0.json.gz")

# (CLI arguments, the Python call as (function name, positionals, keyword arguments))
CASES = [
    # flags the CLI converts or checks itself
    (["describe", "--tp", "x"], ("describe", (), {"tp": "x"})),
    (["describe", "--tp", "3"], ("describe", (), {"tp": 3})),
    (["describe", "--nodes", "2,4"], ("describe", (), {"nodes": [2, 4]})),
    (["describe", "--model", "no-such-model"], ("describe", (), {"model": "no-such-model"})),
    (["describe", "--model", source_path("tests", "data", "bad", "truncated-model.json")],
     ("describe", (), {"model": source_path("tests", "data", "bad", "truncated-model.json")})),
    (["describe", "--model", source_path("tests", "data", "bad", "typo-model.json")],
     ("describe", (), {"model": source_path("tests", "data", "bad", "typo-model.json")})),
    (["describe", "--no-such-flag=1"], ("describe", (), {"no_such_flag": 1})),
    (["predict", "--top", "-1"], ("predict", (), {"top": -1})),
    (["predict", "--top", "abc"], ("predict", (), {"top": "abc"})),
    (["predict", "--nodes", "4,,8"], ("predict", (), {"nodes": "4,,8"})),
    (["plan", "--gpus", "8", "--zero", "0,,1"], ("plan", (), {"gpus": 8, "zero": "0,,1"})),
    (["predict", "--scaling", "medium"], ("predict", (), {"scaling": "medium"})),
    (["predict", "--sort", "speed"], ("predict", (), {"sort": "speed"})),
    (["predict", "--format", "xml"], ("predict", (), {"format": "xml"})),
    (["predict", "--network", "carrier-pigeon"], ("predict", (), {"network": "carrier-pigeon"})),
    (["predict", "--system", source_path("tests", "data", "bad", "wrong-type-system.json")],
     ("predict", (), {"system": source_path("tests", "data", "bad", "wrong-type-system.json")})),
    (["predict", "--tp", "3,5"], ("predict", (), {"tp": [3, 5]})),
    (["predict", "--nodes", ",".join(["1"] * 400), "--tp", ",".join(["1"] * 400)],
     ("predict", (), {"nodes": [1] * 400, "tp": [1] * 400})),
    # the CLI's extreme inputs (tests/unit/apps_cli_test.cpp, CliLimits): refused at once
    (["predict", "--gpus", "1073741828"], ("predict", (), {"gpus": 1073741828})),
    (["predict", "--dp", "1048576", "--tp", "4"], ("predict", (), {"dp": 1048576, "tp": 4})),
    (["predict", "--micro-batch-size", "1.5"], ("predict", (), {"micro_batch_size": 1.5})),
    (["predict", "--tp", "99999999999"], ("predict", (), {"tp": 99999999999})),
    (["predict", "--ddp-bucket-size", "inf"], ("predict", (), {"ddp_bucket_size": float("inf")})),
    (["predict", "--gradient-accumulation-steps", "1000000000"],
     ("predict", (), {"gradient_accumulation_steps": 1000000000})),
    (["predict", "--seq-length", "100000000"], ("predict", (), {"seq_length": 100000000})),
    (["predict"] + [a for f in ("--tp", "--pp", "--dp", "--micro-batch-size")
                    for a in (f, ",".join(str(i) for i in range(1, 21)))],
     ("predict", (), {k: list(range(1, 21)) for k in ("tp", "pp", "dp", "micro_batch_size")})),
    (["predict", "--pp", "36", "--nodes", "9", "--gradient-accumulation-steps", "60000"],
     ("predict", (), {"pp": 36, "nodes": 9, "gradient_accumulation_steps": 60000})),
    (["describe", "--nodes", "1000000"], ("describe", (), {"nodes": 1000000})),
    (["analyze", TRACE, "--rank", "-5"], ("analyze", (TRACE,), {"rank": -5})),
    (["analyze", TRACE, "--max-events", "0"], ("analyze", (TRACE,), {"max_events": 0})),
    (["frobnicate"], ("run", ("frobnicate",), {})),
    (["validate", "no-such.csv"], ("validate", ("no-such.csv",), {})),
    (["validate", MEASURED, "--rows", "third"], ("validate", (MEASURED,), {"rows": "third"})),
    (["validate", MEASURED, "--system", "nope"], ("validate", (MEASURED,), {"system": "nope"})),
    (["calibrate", MEASURED, "--evaluations", "5"],
     ("calibrate", (MEASURED,), {"evaluations": 5})),
    (["calibrate", MEASURED, "--rows", "x"], ("calibrate", (MEASURED,), {"rows": "x"})),
    (["analyze", "no-such-dir/"], ("analyze", ("no-such-dir/",), {})),
    (["analyze", TRACE, "--top", "-1"], ("analyze", (TRACE,), {"top": -1})),
    (["analyze", TRACE, "--jobs", "0"], ("analyze", (TRACE,), {"jobs": 0})),
    (["analyze", MEASURED], ("analyze", (MEASURED,), {})),
    (["fit", "no-such.txt"], ("fit", ("no-such.txt",), {})),
    (["fit", NCCL_LOG, "--collective", "allreduce"],
     ("fit", (NCCL_LOG,), {"collective": "allreduce"})),
    (["fit", NCCL_LOG, "--nics-per-node", "0"], ("fit", (NCCL_LOG,), {"nics_per_node": 0})),
    (["fit", NCCL_LOG, "--format", "csv"], ("fit", (NCCL_LOG,), {"format": "csv"})),
    (["fit", MEASURED], ("fit", (MEASURED,), {})),
]


@pytest.mark.parametrize("cli_args,call", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_arguments_raise_the_cli_message(cli, commscope, cli_args, call):
    expected = cli.error(*cli_args)
    name, positionals, kwargs = call
    with pytest.raises(commscope.Error) as info:
        getattr(commscope, name)(*positionals, **kwargs)
    assert str(info.value) == expected
    assert isinstance(info.value, ValueError)


def test_the_interpreter_survives_every_bad_case(commscope):
    # After all the errors above (and here), a good call still answers.
    for _, (name, positionals, kwargs) in CASES:
        with pytest.raises(commscope.Error):
            getattr(commscope, name)(*positionals, **kwargs)
    assert commscope.describe()["params_total"] > 0
    assert commscope.predict()["predictions"]


def test_model_files_that_cannot_be_read_safely(cli, commscope, tmp_path):
    # A FIFO would block a reader forever; a 100-byte model of 1e9 layers would take gigabytes.
    fifo = tmp_path / "model.json"
    os.mkfifo(fifo)
    layers = tmp_path / "layers.json"
    layers.write_text('{"name":"x","kind":"gpt","layers":1e9,"hidden":64,"heads":4,'
                      '"vocab":100,"seq_length":64}')
    for verb in ("describe", "predict"):
        for path in (fifo, layers):
            expected = cli.error(verb, "--model", str(path))
            with pytest.raises(commscope.Error) as info:
                getattr(commscope, verb)(model=path)
            assert str(info.value) == expected


def test_nothing_is_written_on_error(commscope, tmp_path):
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    with pytest.raises(commscope.Error):
        commscope.describe(pp=7, output=out)
    with pytest.raises(commscope.Error):
        commscope.predict(pp=4, nodes=1, gradient_accumulation_steps=60000, trace=trace)
    assert not out.exists() and not trace.exists()


def test_load_trace_errors(commscope, tmp_path):
    with pytest.raises(commscope.Error) as info:
        commscope.load_trace(tmp_path / "missing.json")
    assert "missing.json" in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [ {"ph": "X", "ts": "soon"} ]}')
    with pytest.raises(commscope.Error) as info:
        commscope.load_trace(bad)
    assert "bad.json" in str(info.value)
    with pytest.raises(commscope.Error):
        commscope.load_trace(TRACE, max_events=-1)
    # A FIFO would block a naive reader forever: refused, as analyze refuses it.
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(commscope.Error):
        commscope.load_trace(fifo)
    # The event limit refuses a file with more events, naming the limit.
    with pytest.raises(commscope.Error):
        commscope.load_trace(TRACE, max_events=1)


def test_presets_kind_error(commscope, cli):
    expected = cli.error("presets", "gadgets")
    with pytest.raises(commscope.Error) as info:
        commscope.presets("gadgets")
    assert str(info.value) == expected


def test_empty_values_are_refused(commscope):
    # An empty list used to become "--zero=", which made the CLI take the next argument as the
    # value (found by probing, 2026-11-30).
    for flags in ({"zero": []}, {"network": []}, {"model": ""}):
        with pytest.raises(commscope.Error) as info:
            commscope.plan(gpus=8, **flags)
        assert "expected" in str(info.value)


def test_trace_breakdown_refuses_bad_windows(commscope):
    trace = commscope.load_trace(TRACE)
    step = trace.steps()[0]
    inside = trace.breakdown(t0=step["start_s"], t1=step["end_s"])
    assert inside["wall_s"] > 0
    # Each used to give a number: the whole trace, zeros, or nulls where the parts no longer
    # added up (found by probing, 2026-11-30).
    for kwargs in ({"t0": 0.0, "t1": float("inf")}, {"t0": float("nan"), "t1": 1.0},
                   {"t0": step["end_s"], "t1": step["start_s"]}, {"t0": 0.0, "t1": 0.0},
                   {"t0": 0.0}, {"rank": 5}, {"t0": "0", "t1": 1.0}):
        with pytest.raises(commscope.Error):
            trace.breakdown(**kwargs)


def test_trace_values_are_checked_as_numbers(commscope, tmp_path):
    # Found by probing, 2026-11-30: bools were taken as numbers (rank False as rank 0), +-1e308
    # bounds gave a wall of null, 10**400 raised OverflowError, max_events 1.9 was read as 1,
    # None or 123 as a path raised TypeError. numpy's scalars are numbers.Integral/Real and pass
    # the same checks (numpy is not installed here; fractions stand in for other Real types).
    import fractions
    trace = commscope.load_trace(TRACE)
    step = trace.steps()[0]
    whole = trace.breakdown(t0=step["start_s"], t1=step["end_s"])
    same = trace.breakdown(t0=fractions.Fraction(step["start_s"]),
                           t1=fractions.Fraction(step["end_s"]))
    assert same == whole
    for kwargs in ({"rank": False}, {"rank": 0.0}, {"t0": True, "t1": 2.0},
                   {"t0": -1e308, "t1": 1e308}, {"t0": 0, "t1": 10**400}):
        with pytest.raises(commscope.Error):
            trace.breakdown(**kwargs)
    for path, limit in ((None, 0), (123, 0), ("a\0b.json", 0), (TRACE, 1.9), (TRACE, True),
                        (TRACE, None), (TRACE, -1), (TRACE, 2**63), (TRACE, float("nan"))):
        with pytest.raises(commscope.Error):
            commscope.load_trace(path, max_events=limit)


def test_boolean_flags_false_and_values_the_cli_would_misread(cli, commscope):
    # The module's true/false flags are the CLI's BOOLEAN options (its --help), and False passes
    # "=false" for them: leaving the flag out kept a default of true.
    import re
    listed = set()
    for verb in ("predict", "describe", "plan", "validate", "train"):
        for names in re.findall(r"(--[a-z0-9-]+(?:,--[a-z0-9-]+)*) BOOLEAN",
                                cli.run(verb, "--help").stdout):
            listed.update(n[2:] for n in names.split(","))
    assert listed == set(commscope._BOOLEAN_FLAGS)
    plan = {"framework": "deepspeed", "tp": 2, "pp": 2}
    off = commscope.predict(pipe_partitioned=False, **plan)["predictions"][0]
    on = commscope.predict(pipe_partitioned=True, **plan)["predictions"][0]
    assert off == cli.json("predict", "--pipe-partitioned=false", "--framework", "deepspeed",
                           "--tp", "2", "--pp", "2", "--format", "json")["predictions"][0]
    assert off["iteration_time_s"] != on["iteration_time_s"]
    # True for a flag that takes a value: the CLI says its value is missing (the module's own
    # --format=json was taken for it), and a flag after it is not taken for its value either.
    with pytest.raises(commscope.Error, match="--zero: expected a value, got nothing"):
        commscope.predict(zero=True)
    with pytest.raises(commscope.Error, match="expected a value, got the flag '--tp=2'"):
        commscope.predict(zero=True, tp=2)
    # A NUL would end the CLI's string there ("gpt2-small\0xyz" was gpt2-small).
    with pytest.raises(commscope.Error, match="without NUL"):
        commscope.describe(model="gpt2-small\0xyz")


def test_names_that_read_as_flags_are_refused(commscope, tmp_path):
    # A file name starting with "-" was read as a flag: validate(["gt.csv", "--output=x"]) wrote
    # x and then failed to parse JSON; a keyword that is no flag's name injected flags (found
    # by probing, 2026-12-02).
    out = tmp_path / "inj.csv"
    with pytest.raises(commscope.Error, match=r"^path: expected a file or folder name, got "
                                              r"'--output="):
        commscope.validate([MEASURED, f"--output={out}"])
    assert not out.exists()
    with pytest.raises(commscope.Error, match=r"^path: expected a file or folder name, got None"):
        commscope.validate(None)
    with pytest.raises(commscope.Error, match=r"expected a flag's name"):
        commscope.predict(**{"nodes=8 --tp": 2})
    # after an explicit "--" the rest passes through (bench's own flags)
    assert commscope.argv("bench", "--", "-b", "8") == ["bench", "--", "-b", "8"]


def test_paths_that_are_not_utf8_or_bytes(commscope, cli, tmp_path):
    # A name that is not UTF-8 reached pybind as a str it could not convert (TypeError), and the
    # CLI ended in an internal error where its JSON echoed it; bytes paths were looked for as
    # "b'...'" (found by probing, 2026-12-02). Bytes paths work; a name that is not UTF-8 is one
    # line asking for another, from Python as from the CLI.
    path = tmp_path / "r0.json.gz"
    path.write_bytes(open(TRACE, "rb").read())
    by_str = commscope.analyze(str(path))
    by_bytes = commscope.analyze(os.fsencode(str(path)))
    assert by_str["ranks"][0]["breakdown"] == by_bytes["ranks"][0]["breakdown"]
    odd = tmp_path / os.fsdecode(b"r\xff.json.gz")
    odd.write_bytes(open(TRACE, "rb").read())
    with pytest.raises(commscope.Error) as info:
        commscope.analyze(odd)
    assert "expected UTF-8 text" in str(info.value)
    import subprocess
    r = subprocess.run([cli.path, "analyze", "--format", "json", os.fsencode(str(odd))],
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and b"expected UTF-8 text" in r.stderr, r.stderr


def test_help_format_none_and_outputs_that_cannot_be_read_back(commscope, tmp_path):
    assert "--line-rate-gbps" in commscope.fit(NCCL_LOG, help=True)
    assert "--evaluations" in commscope.calibrate(MEASURED, help=True)
    # format=None leaves the flag out: the default document, a dict
    assert "predictions" in commscope.predict(format=None)
    # an output that is a device: the document is returned and written through
    profile = commscope.fit(NCCL_LOG, output="/dev/null")
    assert profile == commscope.fit(NCCL_LOG)
