#!/usr/bin/env python3
"""Measured model-parallel iteration time and bubble share beside `predict`'s for the same model,
plan and host (docs/train.md, "Measured against predict"). Reports; asserts nothing.

Usage: scripts/train-vs-predict.py [BUILD_DIR] [--steps N]
Runs `mpirun -np R commscope-train ... --format json` and `commscope predict ... --format json`
with the same plan flags for each plan below, and prints one row per plan: the measured average
step time after warm-up (rank 0, and the slowest rank), the measured bubble share (the stage's
receive waits over its step time, rank 0 = the first stage, and the largest over the ranks), and
predict's iteration_time_s and bubble_share for the same flags on the cpu-host system.
"""
import json
import os
import subprocess
import sys

PLANS = [
    (2, "--pp 2 --schedule gpipe"),
    (2, "--pp 2 --schedule 1f1b"),
    (4, "--pp 4 --schedule 1f1b"),
    (4, "--tp 2 --pp 2"),
    (4, "--pp 2 --virtual-pipeline-stages 2"),
]
COMMON = ("--system cpu-host --precision fp32 --micro-batch-size 2 --global-batch-size 16 "
          "--ddp-bucket-size 0.05")


def run(cmd):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"train-vs-predict: {cmd}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def main():
    args = [a for a in sys.argv[1:]]
    steps = 8
    if "--steps" in args:
        i = args.index("--steps")
        steps = int(args[i + 1])
        del args[i:i + 2]
    build = args[0] if args else "build"
    root = "--allow-run-as-root " if os.geteuid() == 0 else ""
    print(f"{'model':14} {'plan':38} {'meas_ms':>8} {'slow_ms':>8} {'pred_ms':>8} "
          f"{'ratio':>6} {'bub_r0':>6} {'bub_max':>7} {'pred_bub':>8}")
    for model in ("gpt2-tiny-cpu", "bert-tiny-cpu"):
        for ranks, plan in PLANS:
            flags = f"--model {model} {COMMON} --gpus {ranks} {plan}"
            t = run(f"mpirun -np {ranks} --oversubscribe {root}{build}/commscope-train {flags} "
                    f"--steps {steps} --warmup 2 --format json")
            p = run(f"{build}/commscope predict {flags} --format json")["predictions"][0]
            avg = t["average"]
            measured = avg["time_s"]
            slowest = max(r["time_s"] for r in t["per_rank"])
            bub = [r.get("bubble_s", 0.0) / r["time_s"] for r in t["per_rank"] if r["time_s"] > 0]
            print(f"{model:14} {plan:38} {measured * 1e3:8.1f} {slowest * 1e3:8.1f} "
                  f"{p['iteration_time_s'] * 1e3:8.1f} {p['iteration_time_s'] / measured:6.2f} "
                  f"{bub[0]:6.3f} {max(bub):7.3f} {p['bubble_share']:8.3f}")


if __name__ == "__main__":
    main()
