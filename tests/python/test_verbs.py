# The Python results equal the CLI's JSON for the same arguments, verb by verb (issue 17): the
# CLI runs as a separate program (COMMSCOPE_BIN), the module in this interpreter.
import json
import math

import pytest

from conftest import source_path

MEASURED = source_path("data", "vtrain", "ground_truth_multi.csv")
NCCL_LOG = source_path("tests", "data", "nccl-tests", "a3mega-h100-2x8-all_reduce.txt")
OSU_LOG = source_path("tests", "data", "osu", "omb-7.4-openmpi-1x4-collectives.txt")
TRACES = source_path("data", "traces")
NCCL_TRACE = source_path("data", "traces", "nccl_parser_config_nccl_data.json.gz")
TORCHTITAN = source_path("tests", "data", "torchtitan", "llama3_8b_op_ac.toml")

# (CLI arguments without --format json, the Python call)
SAME = [
    (["describe"], ("describe", (), {})),
    (["describe", "--model", "llama2-70b", "--system", "dgx-h100", "--nodes", "16", "--tp", "8",
      "--pp", "4", "--sequence-parallel", "--micro-batch-size", "1", "--zero", "1"],
     ("describe", (), {"model": "llama2-70b", "system": "dgx-h100", "nodes": 16, "tp": 8, "pp": 4,
                       "sequence_parallel": True, "micro_batch_size": 1, "zero": 1})),
    (["describe", "--model", source_path("tests", "data", "hf", "t5-small.json")],
     ("describe", (), {"model": source_path("tests", "data", "hf", "t5-small.json")})),
    (["predict"], ("predict", (), {})),
    (["predict", "--model", "gpt2-large", "--network", "tcp-10g,ipoib-100g,rdma-100g", "--nodes",
      "1,2,4,8"], ("predict", (), {"model": "gpt2-large",
                                   "network": ["tcp-10g", "ipoib-100g", "rdma-100g"],
                                   "nodes": [1, 2, 4, 8]})),
    (["predict", "--model", "megatron-18.4b", "--nodes", "4,8,16", "--tp", "4", "--pp", "4",
      "--micro-batch-size", "1", "--zero", "1", "--scaling", "strong", "--sort", "mfu", "--top",
      "2"],
     ("predict", (), {"model": "megatron-18.4b", "nodes": "4,8,16", "tp": 4, "pp": 4,
                      "micro_batch_size": 1, "zero": 1, "scaling": "strong", "sort": "mfu",
                      "top": 2})),
    # DeepSpeed ZeRO-Offload: a flag without a value
    (["describe", "--model", "gpt2-xl", "--system", "dgx-a100-80gb", "--gpus", "16",
      "--framework", "deepspeed", "--zero", "2", "--offload-optimizer"],
     ("describe", (), {"model": "gpt2-xl", "system": "dgx-a100-80gb", "gpus": 16,
                       "framework": "deepspeed", "zero": 2, "offload_optimizer": True})),
    (["predict", "--torchtitan-config", TORCHTITAN, "--system", "dgx-h100", "--gpus", "8"],
     ("predict", (), {"torchtitan_config": TORCHTITAN, "system": "dgx-h100", "gpus": 8})),
    (["plan", "--torchtitan-config", TORCHTITAN, "--system", "dgx-h100", "--gpus", "8",
      "--top", "3"],
     ("plan", (), {"torchtitan_config": TORCHTITAN, "system": "dgx-h100", "gpus": 8, "top": 3})),
    (["describe", "--model", "llama2-7b", "--gpus", "16", "--pp", "2", "--global-batch-size",
      "64", "--framework", "fsdp", "--fsdp-sharding", "hybrid_shard_zero2", "--fsdp-grad-sync",
      "step"],
     ("describe", (), {"model": "llama2-7b", "gpus": 16, "pp": 2, "global_batch_size": 64,
                       "framework": "fsdp", "fsdp_sharding": "hybrid_shard_zero2",
                       "fsdp_grad_sync": "step"})),
    (["predict", "--tp", "1,2,3", "--ddp-bucket-size", "12.5"],
     ("predict", (), {"tp": (1, 2, 3), "ddp_bucket_size": 12.5})),
    (["validate", MEASURED, "--rows", "odd"], ("validate", (MEASURED,), {"rows": "odd"})),
    (["validate", MEASURED, "--summary-only"],
     ("validate", ([MEASURED],), {"summary_only": True})),
    (["analyze", TRACES], ("analyze", (TRACES,), {})),
    (["analyze", NCCL_TRACE, "--top", "3", "--jobs", "1"],
     ("analyze", ([NCCL_TRACE],), {"top": 3, "jobs": 1})),
]


def _ids(cases):
    return [" ".join(c[0])[:70].replace(source_path(""), "") for c in cases]


@pytest.mark.parametrize("cli_args,call", SAME, ids=_ids(SAME))
def test_python_equals_cli_json(cli, commscope, cli_args, call):
    expected = cli.json(*cli_args, "--format", "json")
    name, positionals, kwargs = call
    got = getattr(commscope, name)(*positionals, **kwargs)
    assert isinstance(got, dict)
    assert got == expected
    # Plain containers: the document survives a JSON round trip unchanged.
    assert json.loads(json.dumps(got)) == expected


def test_text_formats_equal_the_cli(cli, commscope):
    for fmt in ("table", "csv", "md"):
        r = cli.run("predict", "--nodes", "1,2", "--format", fmt)
        assert r.returncode == 0
        assert commscope.predict(nodes=[1, 2], format=fmt) == r.stdout


def test_output_file_written_as_the_cli_writes_it(cli, commscope, tmp_path):
    mine, theirs = tmp_path / "py.json", tmp_path / "cli.json"
    assert commscope.describe(nodes=2, output=mine) is None
    assert cli.run("describe", "--nodes", "2", "--format", "json", "-o", str(theirs)).returncode == 0
    assert json.loads(mine.read_text()) == json.loads(theirs.read_text())


def test_fit_returns_the_profile_the_cli_writes(cli, commscope, tmp_path):
    out = tmp_path / "cli-profile.json"
    r = cli.run("fit", NCCL_LOG, "--name", "a3mega", "--transport", "roce", "-o", str(out))
    assert r.returncode == 0, r.stderr
    profile = commscope.fit(NCCL_LOG, name="a3mega", transport="roce")
    expected = json.loads(out.read_text())
    assert profile == expected
    # and written to output= as well, when asked
    mine = tmp_path / "py-profile.json"
    assert commscope.fit([NCCL_LOG], name="a3mega", transport="roce", output=mine) == expected
    assert json.loads(mine.read_text()) == expected
    # The profile is what predict --network accepts.
    rows = commscope.predict(network=str(mine))["predictions"]
    assert rows[0]["network"] == expected["name"]


def test_fit_of_osu_logs_takes_the_ranks_and_nodes_as_keywords(cli, commscope, tmp_path):
    out = tmp_path / "osu-profile.json"
    r = cli.run("fit", OSU_LOG, "--ranks", "4", "--nodes", "1", "-o", str(out))
    assert r.returncode == 0, r.stderr
    profile = commscope.fit(OSU_LOG, ranks=4, nodes=1)
    assert profile == json.loads(out.read_text())
    assert {c["collective"] for c in profile["curves"]} == {
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"}
    # OSU does not print the ranks: without them, the CLI's one-line error as an exception
    with pytest.raises(commscope.Error, match="expected --ranks N"):
        commscope.fit(OSU_LOG)


def test_calibrate_returns_the_system_the_cli_prints(cli, commscope):
    args = (MEASURED,)
    kwargs = {"rows": "even", "evaluations": 12}
    expected = cli.json("calibrate", MEASURED, "--rows", "even", "--evaluations", "12")
    assert commscope.calibrate(*args, **kwargs) == expected


def test_presets_equal_the_cli_listing(cli, commscope):
    r = cli.run("presets")
    assert r.returncode == 0
    listing, kind = {}, None
    for line in r.stdout.splitlines():
        if line.endswith(":"):
            kind = line[:-1]
            listing[kind] = []
        else:
            listing[kind].append(line.strip())
    assert commscope.presets() == listing
    assert commscope.presets("networks") == listing["networks"]


def test_warnings_are_the_cli_warnings(cli, commscope):
    # analyze of the shipped folder warns about ranks; the same lines arrive as Python warnings.
    r = cli.run("analyze", TRACES, "--format", "json")
    expected = [line[len("commscope: warning: "):] for line in r.stderr.splitlines()]
    assert expected, "the shipped traces are expected to warn (a rank claimed twice)"
    with pytest.warns(commscope.CommscopeWarning) as record:
        commscope.analyze(TRACES)
    assert [str(w.message) for w in record] == expected


def test_notes_arrive_as_warnings(cli, commscope):
    # A torchtitan file's notes ("commscope: note: ...") arrive as warnings saying "note: "
    # (they went to the process's stderr past the module).
    toml = source_path("tests/data/torchtitan/llama3_8b_op_ac.toml")
    args = ["--system", "dgx-h100", "--gpus", "8"]
    r = cli.run("describe", "--torchtitan-config", toml, *args)
    notes = [line[len("commscope: "):] for line in r.stderr.splitlines()
             if line.startswith("commscope: note: ")]
    assert notes, r.stderr
    with pytest.warns(commscope.CommscopeWarning) as record:
        commscope.describe(torchtitan_config=toml, system="dgx-h100", gpus=8)
    messages = [str(w.message) for w in record]
    for note in notes:
        assert note in messages


def test_generic_run_and_argv(cli, commscope):
    assert commscope.argv("predict", nodes=[4, 8], sequence_parallel=True, trace=None,
                          fp16=False, micro_batch_size=1) == [
        "predict", "--nodes=4,8", "--sequence-parallel", "--micro-batch-size=1"]
    # Any verb through run(), e.g. one added to the CLI later, with the CLI's spelling.
    assert commscope.run("describe", format="json", nodes=2) == cli.json(
        "describe", "--nodes", "2", "--format", "json")


def test_diff_takes_its_two_traces_as_separate_values(commscope):
    # Found by probing, 2026-11-30: diff=[a, b] became "--diff=a,b", one value, and the CLI
    # refused it ("At least 2 required but received 1").
    assert commscope.argv("analyze", diff=["a.json", "b.json"]) == [
        "analyze", "--diff", "a.json", "b.json"]
    same = commscope.analyze([], diff=[NCCL_TRACE, NCCL_TRACE])
    assert same["total"]["delta_wall_s"] == 0
    assert same["calls_compared"] > 0
    with pytest.raises(commscope.Error):
        commscope.analyze([], diff=[])


def test_hierarchical_cp_sizes_are_separate_values(commscope):
    # Megatron-LM's nargs='+' flag: a list is its words, as on the command line.
    assert commscope.argv("predict", cp=8, cp_comm_type="a2a+p2p",
                          hierarchical_context_parallel_sizes=[2, 4]) == [
        "predict", "--cp=8", "--cp-comm-type=a2a+p2p",
        "--hierarchical-context-parallel-sizes", "2", "4"]
    row = commscope.predict(model="llama3-8b", system="dgx-h100", gpus=16, cp=8,
                            cp_comm_type="a2a+p2p", hierarchical_context_parallel_sizes=[2, 4])
    plan = row["predictions"][0]["plan"]
    assert plan["hierarchical_context_parallel_sizes"] == [2, 4]
    assert row["predictions"][0]["comm_by_group"]["context"]["total_s"] > 0


def test_load_trace_matches_analyze(commscope):
    trace = commscope.load_trace(NCCL_TRACE)
    analysis = commscope.analyze(NCCL_TRACE)
    rank = analysis["ranks"][0]
    assert trace.rank == rank["rank"]
    assert trace.ranks == [rank["rank"]]
    # The whole-trace breakdown is analyze's per-rank breakdown (the same library routine).
    assert trace.breakdown() == rank["breakdown"]
    events = trace.events()
    assert len(events) == len(trace) > 0
    comm = [e for e in events if e["kind"] == "comm"]
    # Analyze counts the calls per collective; the events say the same.
    assert analysis["collectives"]
    for c in analysis["collectives"]:
        assert sum(1 for e in comm if e["collective"] == c["kind"]) == c["calls"]
    assert len(comm) == sum(c["calls"] for c in analysis["collectives"])
    for e in events:
        assert e["end_s"] == pytest.approx(e["start_s"] + e["dur_s"])
        assert e["kind"] in ("compute", "comm", "memcpy")
    # Steps are ProfilerStep windows in order.
    steps = trace.steps()
    assert [s["start_s"] for s in steps] == sorted(s["start_s"] for s in steps)
    assert all(s["name"].startswith("ProfilerStep") for s in steps)
    assert not math.isnan(trace.breakdown(t0=0.0, t1=1e-3)["wall_s"])


def test_to_pandas(commscope):
    pandas = pytest.importorskip("pandas")
    sweep = commscope.predict(nodes=[1, 2, 4])
    frame = sweep.to_pandas()
    assert list(frame["nodes"]) == [1, 2, 4]
    assert list(frame["iteration_time_s"]) == [r["iteration_time_s"] for r in sweep["predictions"]]
    # nested plan fields are flattened, as pandas.json_normalize does
    assert list(frame["plan.dp"]) == [r["plan"]["dp"] for r in sweep["predictions"]]
    plain = pandas.DataFrame(sweep["predictions"])
    assert len(plain) == 3
    events = commscope.load_trace(NCCL_TRACE).to_pandas()
    assert len(events) == len(commscope.load_trace(NCCL_TRACE))


def test_help_and_presets_are_returned_not_printed(cli, commscope, capfd):
    # Found by probing, 2026-11-30: both went to the process's stdout and run() returned ''.
    listing = commscope.run("presets")
    assert listing == cli.run("presets").stdout
    text = commscope.run("plan", help=True)
    assert text.splitlines()[0] == cli.run("plan", "--help").stdout.splitlines()[0]
    assert "--gpus" in text
    assert commscope.plan(help=True) == text
    assert capfd.readouterr().out == ""


def test_mpi_verbs_find_their_programs(commscope, cli, monkeypatch, tmp_path):
    # The interpreter is the process's executable: train, bench and characterize looked for
    # commscope-train beside Python and said "built without MPI" (found by probing,
    # 2026-12-02). The module now names the folder of the built programs.
    import os
    import shutil
    train = os.path.join(os.path.dirname(cli.path), "commscope-train")
    if not shutil.which("mpirun") or not os.access(train, os.X_OK):
        pytest.skip("built without MPI")
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        monkeypatch.setenv(var, "1")  # CI runs as root
    out = tmp_path / "train.json"  # the trainer prints to the process's stdout
    commscope.run("train", ranks=2, steps=2, output=str(out))
    doc = json.loads(out.read_text())
    assert len(doc["steps"]) == 2
    assert doc["steps"][-1]["loss"] > 0


def test_offload_optimizer_keyword_reaches_the_plan(commscope):
    # offload_optimizer=True is the CLI's --offload-optimizer: the plan says it and the GPU holds
    # no optimizer state (the states live in host memory).
    kw = {"model": "gpt2-xl", "system": "dgx-a100-80gb", "gpus": 16, "framework": "deepspeed",
          "zero": 2}
    on = commscope.describe(offload_optimizer=True, **kw)
    off = commscope.describe(**kw)
    assert on["plan"]["offload_optimizer"] == "cpu"
    assert "offload_optimizer" not in off["plan"]
    assert on["stages"][0]["memory"]["optimizer_bytes"] == 0
    assert off["stages"][0]["memory"]["optimizer_bytes"] > 0


def test_offload_param_keyword_reaches_the_plan(commscope):
    # offload_param=True is the CLI's --offload-param: the plan says it, the GPU holds none of
    # the 16-bit partition, and describe counts the fetches' copies of a micro-batch.
    kw = {"model": "gpt2-xl", "system": "dgx-a100-80gb", "gpus": 16, "framework": "deepspeed",
          "zero": 3}
    on = commscope.describe(offload_param=True, **kw)
    off = commscope.describe(**kw)
    assert on["plan"]["offload_param"] == "cpu"
    assert "offload_param" not in off["plan"]
    assert on["stages"][0]["memory"]["weights_bytes"] == 0
    assert off["stages"][0]["memory"]["weights_bytes"] > 0
    assert on["offload"]["param_fetches_per_microbatch"]["copies"] > 0
    assert "offload" not in off


def test_fsdp_cpu_offload_keyword_reaches_the_plan(commscope):
    # fsdp_cpu_offload=True is the CLI's --fsdp-cpu-offload: the GPU holds no shard, gradient
    # shard or optimizer state, and the step is torch's AdamW on the host.
    kw = {"model": "gpt2-xl", "system": "dgx-a100-80gb", "gpus": 16, "framework": "fsdp"}
    on = commscope.describe(fsdp_cpu_offload=True, **kw)
    assert on["plan"]["fsdp_cpu_offload"] is True
    memory = on["stages"][0]["memory"]
    assert memory["weights_bytes"] == memory["optimizer_bytes"] == 0
    assert [p["name"] for p in on["offload"]["parts"]] == ["cpu_adamw"]


def test_optimizer_cpu_offload_keywords_reach_the_plan(commscope):
    # optimizer_cpu_offload=True and optimizer_offload_fraction are Megatron-Core's flags: half of
    # the distributed optimizer's states leave the GPU, and the host path's four parts are priced.
    kw = {"model": "llama3-8b", "system": "dgx-h100", "gpus": 8, "framework": "megatron",
          "use_distributed_optimizer": True, "use_precision_aware_optimizer": True}
    on = commscope.describe(optimizer_cpu_offload=True, optimizer_offload_fraction=0.5, **kw)
    off = commscope.describe(**kw)
    assert on["plan"]["optimizer_cpu_offload"] is True
    assert on["plan"]["optimizer_offload_fraction"] == 0.5
    assert on["offload"]["megatron"] is True
    assert [p["name"] for p in on["offload"]["parts"]] == [
        "offload_grad_copy", "cpu_adamw", "cpu_param_cast", "offload_param_copy"]
    a = on["stages"][0]["memory"]["optimizer_bytes"]
    b = off["stages"][0]["memory"]["optimizer_bytes"]
    assert abs(a - b / 2) <= 1
