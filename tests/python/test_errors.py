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
    (["predict", "--scaling", "medium"], ("predict", (), {"scaling": "medium"})),
    (["predict", "--sort", "speed"], ("predict", (), {"sort": "speed"})),
    (["predict", "--format", "xml"], ("predict", (), {"format": "xml"})),
    (["predict", "--network", "carrier-pigeon"], ("predict", (), {"network": "carrier-pigeon"})),
    (["predict", "--system", source_path("tests", "data", "bad", "wrong-type-system.json")],
     ("predict", (), {"system": source_path("tests", "data", "bad", "wrong-type-system.json")})),
    (["predict", "--tp", "3,5"], ("predict", (), {"tp": [3, 5]})),
    (["predict", "--nodes", ",".join(["1"] * 400), "--tp", ",".join(["1"] * 400)],
     ("predict", (), {"nodes": [1] * 400, "tp": [1] * 400})),
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
