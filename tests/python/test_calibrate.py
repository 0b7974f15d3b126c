# calibrate(from_trace=...) in Python equals `commscope calibrate --from-trace` run as a
# program: the same fitted system preset and network profile, the same report, the same errors.
import json
import os

import pytest

PLAN = ["--model", "llama2-7b", "--nodes", "2", "--tp", "4", "--pp", "2",
        "--micro-batch-size", "1"]
PLAN_KW = {"model": "llama2-7b", "nodes": 2, "tp": 4, "pp": 2, "micro_batch_size": 1}


@pytest.fixture(scope="module")
def trace(cli, tmp_path_factory):
    """A trace made by `predict --trace` on polaris."""
    path = str(tmp_path_factory.mktemp("trace") / "t.json")
    r = cli.run("predict", "--system", "polaris", *PLAN, "--trace", path)
    assert r.returncode == 0, r.stderr
    return path


def test_from_trace_equals_cli(cli, commscope, trace, tmp_path):
    out, net = str(tmp_path / "cli.json"), str(tmp_path / "cli-net.json")
    r = cli.run("calibrate", "--from-trace", trace, "--system", "polaris", *PLAN, "-o", out,
                "--network-output", net)
    assert r.returncode == 0, r.stderr
    with open(out, encoding="utf-8") as f:
        expected = json.load(f)
    with open(net, encoding="utf-8") as f:
        expected_net = json.load(f)
    py_net = str(tmp_path / "py-net.json")
    got = commscope.calibrate(from_trace=trace, system="polaris", network_output=py_net,
                              **PLAN_KW)
    assert isinstance(got, dict)
    assert got == expected
    assert "calibration" in got and got["calibration"]["gemm_efficiency"] > 0
    assert got.report == r.stdout
    assert "predicted iteration" in got.report
    with open(py_net, encoding="utf-8") as f:
        assert json.load(f) == expected_net
    # output= writes the same file and still returns the preset.
    py_out = str(tmp_path / "py.json")
    again = commscope.calibrate(from_trace=os.path.dirname(trace), system="polaris",
                                output=py_out, **PLAN_KW)
    with open(py_out, encoding="utf-8") as f:
        assert json.load(f) == again
    assert again["calibration"] == expected["calibration"]


def test_from_trace_errors_are_the_clis(cli, commscope, trace, tmp_path):
    csv = str(tmp_path / "runs.csv")
    with open(csv, "w", encoding="utf-8") as f:
        f.write("model\n")
    cases = [
        ((csv,), {"from_trace": trace}, [csv, "--from-trace", trace]),
        ((), {"from_trace": trace, "tp": 0}, ["--from-trace", trace, "--tp", "0"]),
        ((), {"from_trace": str(tmp_path / "missing")},
         ["--from-trace", str(tmp_path / "missing")]),
        ((), {"tp": 2}, ["--tp", "2"]),
    ]
    for positionals, kwargs, args in cases:
        out = ["-o", str(tmp_path / "o.json")] if "from_trace" in kwargs else []
        expected = cli.error("calibrate", *args, *out)
        with pytest.raises(commscope.Error) as e:
            commscope.calibrate(*positionals, **kwargs)
        assert str(e.value) == expected
