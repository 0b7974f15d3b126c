# commscope.plan() (issue 17) equals `commscope plan --format json` for the same arguments, and
# bad arguments raise commscope.Error with the CLI's one-line message.
import pytest

SMALL = {"model": "gpt2-medium", "system": "polaris", "gpus": 8, "global_batch_size": 32,
         "fixed_global_batch": True, "top": 4}
SMALL_ARGS = ["plan", "--model", "gpt2-medium", "--system", "polaris", "--gpus", "8",
              "--global-batch-size", "32", "--fixed-global-batch", "--top", "4"]


def test_plan_equals_cli_json(cli, commscope):
    expected = cli.json(*SMALL_ARGS, "--format", "json")
    got = commscope.plan(**SMALL)
    assert got == expected
    assert len(got["plans"]) == 4
    times = [p["iteration_time_s"] for p in got["plans"]]
    assert times == sorted(times)


def test_plan_what_if_equals_cli_json(cli, commscope):
    expected = cli.json(*SMALL_ARGS, "--network", "roce-100,tcp-10g", "--format", "json")
    got = commscope.plan(network=["roce-100", "tcp-10g"], **SMALL)
    assert got == expected
    assert [o["option"] for o in got["options"]] == ["roce-100", "tcp-10g"]


@pytest.mark.parametrize("flags", [{"top": -1}, {"objective": "speed"}, {"zero": [0, 5]},
                                   {"gpus": 0}, {"threads": 0}])
def test_plan_bad_arguments_raise_the_cli_message(cli, commscope, flags):
    args = dict(model="gpt2-medium", gpus=8)
    args.update(flags)
    cli_args = ["plan"]
    for k, v in args.items():
        v = ",".join(map(str, v)) if isinstance(v, list) else str(v)
        cli_args += ["--" + k.replace("_", "-"), v]
    message = cli.error(*cli_args)
    with pytest.raises(commscope.Error) as e:
        commscope.plan(**args)
    assert str(e.value) == message
    assert isinstance(e.value, ValueError)


def test_plan_frameworks_and_memory_headroom_equal_cli_json(cli, commscope):
    # --frameworks and --memory-headroom as keyword arguments (issue 16): the same document.
    expected = cli.json(*SMALL_ARGS, "--frameworks", "commscope,fsdp", "--memory-headroom", "10%",
                        "--format", "json")
    got = commscope.plan(frameworks=["commscope", "fsdp"], memory_headroom="10%", **SMALL)
    assert got == expected
    for p in got["plans"]:
        assert p["framework"] in ("commscope", "fsdp")
        assert p["memory_headroom_bytes"] == pytest.approx(0.1 * p["gpu_memory_bytes"])
        assert p["memory_per_gpu_bytes"] <= p["gpu_memory_bytes"] - p["memory_headroom_bytes"]
