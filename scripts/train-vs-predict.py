#!/usr/bin/env python3
"""Measured model-parallel iteration time and bubble share beside `predict`'s for the same model,
plan and host (docs/train.md, "Measured against predict"). Reports; asserts nothing.

Usage: scripts/train-vs-predict.py [BUILD_DIR] [--steps N] [--system FILE] [--out DIR]
First fits the host: `commscope characterize --compute-only` times the trainer's kernels on this
machine (one process, and k = ceil(ranks / cores) processes at once for the 4-rank plans), the CPU
GPT's for GPT-2 and BERT and T5's own for T5, and writes fitted cpu-host presets into DIR/gpt and
DIR/t5 (DIR default train-vs-predict-out); `--system FILE` skips the
fit and predicts with FILE instead. Then, for each plan below, runs `mpirun -np R
commscope-train ... --format json` and `commscope predict ... --format json` with the same plan
flags, and prints one row per plan: the measured average step time after warm-up (rank 0, and
the slowest rank), the measured bubble share (a stage's receive waits, `bubble_s`, over its
step time: rank 0's, the first stage's, and the mean over the ranks, which is what predict's
bubble_share is: the mean over the stages), predict's
iteration_time_s with the fitted host and with the cpu-host preset, predict's bubble_share (the
causal view: idle the schedule leaves) and predict's receive waits (the profiler's view,
profiler_comm_s - comm_s, the quantity the trainer's bubble_s measures) over its iteration.
"""
import json
import math
import os
import subprocess
import sys

# (ranks, plan): every plan with TP or PP and no data parallelism (R = TP x PP), so that the
# virtual-stage row compares with the 1F1B row of the same ranks; TP 2 alone, with and without
# sequence parallelism, on 2 ranks (a core per rank here, as the PP 2 rows).
PLANS = [
    (2, "--tp 2"),
    (2, "--tp 2 --sequence-parallel"),
    (2, "--pp 2 --schedule gpipe"),
    (2, "--pp 2 --schedule 1f1b"),
    (2, "--pp 2 --virtual-pipeline-stages 2"),
    (4, "--pp 4 --schedule 1f1b"),
    (4, "--tp 2 --pp 2"),
]
COMMON = ("--precision fp32 --micro-batch-size 2 --global-batch-size 16 "
          "--ddp-bucket-size 0.05")


def run(cmd):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"train-vs-predict: {cmd}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return out.stdout


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main():
    args = list(sys.argv[1:])
    opts = {"--steps": "8", "--system": "", "--out": "train-vs-predict-out"}
    for k in opts:
        if k in args:
            i = args.index(k)
            if i + 1 >= len(args):
                sys.exit(f"train-vs-predict: {k}: expected a value")
            opts[k] = args[i + 1]
            del args[i:i + 2]
    steps = int(opts["--steps"])
    build = args[0] if args else "build"
    root = "--allow-run-as-root " if os.geteuid() == 0 else ""
    cores = os.cpu_count() or 1
    systems = {}  # (kernels, ranks) -> system file; kernels: "gpt" or "t5"
    if opts["--system"]:
        systems = {(kind, r): opts["--system"] for r, _ in PLANS for kind in ("gpt", "t5")}
    else:
        ranks = sorted({r for r, _ in PLANS})
        # GPT-2 and BERT run the CPU GPT's kernels, T5 its own (relative attention in loops,
        # RMSNorm, cross-attention): each is fitted on the kernels it runs.
        for kind, model in (("gpt", "gpt2-tiny-cpu"), ("t5", "t5-tiny-cpu")):
            out = os.path.join(opts["--out"], kind)
            print(f"# fitting the host on {model}'s kernels: characterize --compute-only "
                  f"(load {load():.1f})", flush=True)
            run(f"{build}/commscope characterize --compute-only --no-progress -o {out} "
                f"--model {model} --micro-batch-size 2 --ranks {','.join(map(str, ranks))}")
            for r in ranks:
                k = max(1, math.ceil(r / cores))
                name = "system-cpu-host.json" if k == 1 else f"system-cpu-host-x{k}.json"
                systems[(kind, r)] = os.path.join(out, name)
    print(f"# {cores} cores, load average at start {load():.1f}; systems: {systems}")
    print(f"{'model':14} {'plan':36} {'meas_ms':>8} {'slow_ms':>8} {'fit_ms':>8} {'ratio':>6} "
          f"{'preset_ms':>9} {'bub_r0':>6} {'bub_mean':>8} {'pred_bub':>8} {'pred_wait':>9} "
          f"{'load':>5}")
    for model in ("gpt2-tiny-cpu", "bert-tiny-cpu", "t5-tiny-cpu"):
        for ranks, plan in PLANS:
            # T5 trains with PP 2 at most (encoder stage, decoder stage) and no virtual stages.
            if model.startswith("t5") and ("virtual" in plan or "--pp 4" in plan):
                continue
            flags = f"--model {model} {COMMON} --gpus {ranks} {plan}"
            t = json.loads(run(f"mpirun -np {ranks} --oversubscribe {root}{build}/commscope-train "
                               f"{flags} --steps {steps} --warmup 2 --format json"))
            la = load()
            preds = {}
            kind = "t5" if model.startswith("t5") else "gpt"
            for name, system in (("fit", systems[(kind, ranks)]), ("preset", "cpu-host")):
                preds[name] = json.loads(run(f"{build}/commscope predict {flags} --system {system} "
                                             f"--format json"))["predictions"][0]
            p = preds["fit"]
            measured = t["average"]["time_s"]
            slowest = max(r["time_s"] for r in t["per_rank"])
            bub = [r.get("bubble_s", 0.0) / r["time_s"] for r in t["per_rank"] if r["time_s"] > 0]
            it = p["iteration_time_s"]
            wait = (p["profiler_comm_s"] - p["comm_s"]) / it
            print(f"{model:14} {plan:36} {measured * 1e3:8.1f} {slowest * 1e3:8.1f} "
                  f"{it * 1e3:8.1f} {it / measured:6.2f} "
                  f"{preds['preset']['iteration_time_s'] * 1e3:9.1f} "
                  f"{bub[0]:6.3f} {sum(bub) / len(bub):8.3f} "
                  f"{p['bubble_share']:8.3f} {wait:9.3f} {la:5.1f}", flush=True)


if __name__ == "__main__":
    main()
