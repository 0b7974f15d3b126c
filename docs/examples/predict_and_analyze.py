"""commscope from Python, notebook style (docs/python.md): predict a sweep, plot it, analyze a
shipped trace and compare it with the prediction.

    PYTHONPATH=build/python python3 docs/examples/predict_and_analyze.py [output folder]

(with commscope installed, no PYTHONPATH). Writes sweep.png into the output folder [.] and
prints the comparison. tests/python/test_example.py runs it.
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

import commscope  # noqa: E402

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# %% 1. Predict a sweep: GPT-2 Large, data parallel, over the seeds' three network classes
# and 1 to 16 Polaris nodes (the CLI: commscope predict --model gpt2-large --network
# tcp-10g,ipoib-100g,rdma-100g --nodes 1,2,4,8,16 --format json).
networks = ["tcp-10g", "ipoib-100g", "rdma-100g"]
sweep = commscope.predict(model="gpt2-large", network=networks, nodes=[1, 2, 4, 8, 16])
rows = sweep["predictions"]  # a list of dicts: pandas.DataFrame(rows) works too
print(f"{len(rows)} predictions")

# %% 2. Plot tokens/s against GPUs, one line per network.
fig, ax = plt.subplots(figsize=(6, 4))
for net in networks:
    mine = [r for r in rows if r["network"] == net]
    ax.plot([r["gpus"] for r in mine], [r["tokens_per_s"] for r in mine], marker="o", label=net)
ax.set_xscale("log", base=2)
ax.set_xlabel("GPUs")
ax.set_ylabel("tokens/s")
ax.set_title("GPT-2 Large, data parallel on Polaris (predicted)")
ax.legend()
fig.tight_layout()
png = os.path.join(out_dir, "sweep.png")
fig.savefig(png, dpi=100)
print(f"wrote {png}")

# %% 3. Analyze a shipped trace: one rank of a 2-rank NCCL all-reduce job on A100 (HTA's test
# data, data/traces/README.md) and load it as a Timeline-like Trace object.
trace_path = os.path.join(repo, "data", "traces", "nccl_parser_config_nccl_data.json.gz")
analysis = commscope.analyze(trace_path)
measured = analysis["ranks"][0]["breakdown"]
trace = commscope.load_trace(trace_path)
kernels = trace.events()
comm = [e for e in kernels if e["kind"] == "comm"]
print(f"{trace}: {len(comm)} communication kernels")

# %% 4. Compare: the share of busy time that is exposed communication, measured on the trace
# and predicted for the same kind of job (data parallel over 2 A100 ranks of one node). The
# trace's model is not known (HTA's test job), so this shows the method, not a validation:
# with your own job, predict its model and plan and analyze its traces (docs/analyze.md).
def exposed_share(b):
    busy = b["compute_s"] + b["exposed_comm_s"]
    return b["exposed_comm_s"] / busy if busy > 0 else 0.0


predicted = commscope.predict(model="gpt2-large", system="dgx-a100-80gb", nodes=1, gpus=2)
p = predicted["predictions"][0]
print(f"exposed communication, share of busy time: measured {exposed_share(measured):.1%}, "
      f"predicted {exposed_share(p):.1%} ({p['model']} on {p['gpus']} GPUs of {p['system']})")
# The measured all-reduce bus bandwidth (nccl-tests' busbw): what the network delivered.
ar = [c for c in analysis["collectives"] if c["kind"] == "all_reduce"]
if ar:
    print(f"all-reduce busbw in the trace: median {ar[0]['busbw_bytes_per_s']['p50'] / 1e9:.1f} GB/s "
          f"over {ar[0]['calls']} calls")
