#!/usr/bin/env python3
"""Measure one GPU for commscope: its kernels and single-GPU training runs that commscope predicts.

    python3 scripts/measure-gpu.py --out DIR            # on a machine with a CUDA GPU and PyTorch
    python3 scripts/measure-gpu.py --out DIR --quick    # tiny shapes, any device (checks the script)

Writes into DIR:
  device.json   the GPU (nvidia-smi's name, memory, power limit, clocks), driver, PyTorch and CUDA
  kernels.csv   kind,shape,dtype,seconds,tflops,gbs: bf16 and fp8 matrix products, FlashAttention
                and cuDNN attention forward and forward+backward, a device copy, the launch cost
                of a tiny kernel
  runs.csv      commscope's validate CSV (model, system: --system, else the GPU's preset; gpus,
                micro_batch, global_batch, seq_length, precision, recompute, attention,
                measured_s, measured_memory_gib: PyTorch's peak allocated memory, outcome: ran,
                notes: the spread of the timed steps)
  oom.csv       the plans that ran out of memory, in the same columns (outcome oom, no times)
  trace-N.json.gz  PyTorch profiler (Kineto) traces of two steps of the runs --trace-rows names

The training loop is Megatron-LM's mixed precision on one GPU, written so that what it keeps in
memory is what commscope's memory model counts: bf16 weights and gradients, fp32 master weights
and Adam moments (2 + 2 + 12 bytes per parameter), the gradients accumulated over micro-batches
in bf16, the step taken in chunks so the fp32 gradients never exist all at once. GPT-2 blocks
(LayerNorm, biases, GELU, dropout 0.1, learned positions, tied embeddings); attention either
PyTorch's FlashAttention (scaled_dot_product_attention on its flash backend) or the unfused
product-softmax-dropout-product; the loss on fp32 logits, as Megatron computes it. Llama blocks
(RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, no bias, no dropout) for the llama
rows. No torch.compile: eager PyTorch, as most users first run it.
"""
import argparse
import csv
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.utils.checkpoint
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# "megatron": the fused forms Megatron-LM uses and commscope's memory and time model assume (the
# scale inside the scores' GEMM, the mask applied in place, its in-place fp32 cross entropy, the
# fused SwiGLU that keeps only its input, grouped-query attention without repeating K and V);
# "eager": the plain PyTorch forms (scale, mask and softmax as separate passes, F.cross_entropy on
# fp32 logits, silu(gate) * up, K and V repeated per query head). Set by --kernels.
KERNELS = "megatron"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps, warmup=3):
    """Median seconds of fn() over reps calls after warmup calls, the device synchronised."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ----------------------------------------------------------------------------------------------
# Models


class GptBlock(nn.Module):
    def __init__(self, h, heads, ffn, flash, dropout):
        super().__init__()
        self.heads, self.flash, self.p = heads, flash, dropout
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def attention(self, q, k, v):
        p = self.p if self.training else 0.0
        if self.flash:
            return flash_attention(q, k, v, p)
        # Megatron's unfused path: scores, causal mask, softmax, dropout, product with V.
        b, h, s, d = q.shape
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
        if KERNELS == "megatron":  # Megatron's baddbmm with alpha = 1/sqrt(d), mask in place
            q2, k2 = q.reshape(b * h, s, d), k.reshape(b * h, s, d)
            out = torch.empty(b * h, s, s, dtype=q.dtype, device=q.device)
            scores = torch.baddbmm(out, q2, k2.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(d))
            scores = scores.view(b, h, s, s).masked_fill_(mask, float("-inf"))
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            scores = scores.masked_fill(mask, float("-inf"))
        probs = F.dropout(torch.softmax(scores, dim=-1), p, self.training)
        return torch.matmul(probs, v)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        a = self.attention(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(a), self.p, self.training)
        y = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(y, self.p, self.training)


def flash_attention(q, k, v, p, backend="FLASH_ATTENTION"):
    attn = getattr(torch.nn, "attention", None)
    if DEV == "cuda" and attn is not None:
        gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
        with attn.sdpa_kernel(getattr(attn.SDPBackend, backend)):  # fail rather than fall back
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, **gqa)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    # PyTorch before 2.0 (only to check the script on a CPU): the unfused form.
    s = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu_(1), float("-inf"))
    return torch.matmul(F.dropout(torch.softmax(scores, -1), p), v)


def rms_norm(x, w, eps=1e-5):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w


def rotary(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, h // heads
        self.n1, self.n2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * self.hd, bias=False)
        self.proj = nn.Linear(h, h, bias=False)
        self.up = nn.Linear(h, 2 * ffn, bias=False)  # gate and up, one GEMM
        self.down = nn.Linear(ffn, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, h = x.shape
        qkv = self.qkv(rms_norm(x, self.n1))
        q, k, v = qkv.split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], -1)
        q = rotary(q.reshape(b, s, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = rotary(k.reshape(b, s, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = v.reshape(b, s, self.kv_heads, self.hd).transpose(1, 2)
        if KERNELS == "eager" or DEV != "cuda":
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = flash_attention(q, k, v, 0.0).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(a)
        gu = self.up(rms_norm(x, self.n2))
        if KERNELS == "megatron":
            return x + self.down(SwiGLU.apply(gu))
        gate, up = gu.chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class SwiGLU(torch.autograd.Function):
    """silu(gate) * up keeping only its 2f-wide input, silu recomputed in backward (Megatron-LM's
    bias_swiglu_impl without the bias)."""

    @staticmethod
    def forward(ctx, gu):
        ctx.save_for_backward(gu)
        gate, up = gu.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, g):
        (gu,) = ctx.saved_tensors
        gate, up = gu.float().chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        dgate = g.float() * up * sig * (1 + gate * (1 - sig))
        return torch.cat((dgate, g.float() * silu), dim=-1).to(gu.dtype)


class CrossEntropy(torch.autograd.Function):
    """Megatron-LM's vocab-parallel cross entropy on one rank: the logits upcast to fp32, the
    softmax computed in place and saved (4 bytes per logit), its gradient made in place."""

    @staticmethod
    def forward(ctx, logits, target):
        x = logits.float() if logits.dtype != torch.float32 else logits.clone()
        x.sub_(x.max(dim=-1, keepdim=True)[0])
        picked = x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        torch.exp(x, out=x)
        total = x.sum(dim=-1)
        loss = torch.log(total) - picked
        x.div_(total.unsqueeze(-1))
        ctx.save_for_backward(x, target)
        ctx.dtype = logits.dtype
        return loss.mean()

    @staticmethod
    def backward(ctx, g):
        softmax, target = ctx.saved_tensors
        softmax.scatter_add_(-1, target.unsqueeze(-1), -torch.ones_like(softmax[..., :1]))
        softmax.mul_(g / target.numel())
        return softmax.to(ctx.dtype), None


class Model(nn.Module):
    def __init__(self, cfg, flash, recompute):
        super().__init__()
        self.cfg, self.recompute = cfg, recompute
        h, V = cfg["hidden"], cfg["vocab"]
        self.llama = cfg["kind"] == "llama"
        self.embed = nn.Embedding(V, h)
        if self.llama:
            self.blocks = nn.ModuleList(
                LlamaBlock(h, cfg["heads"], cfg["kv_heads"], cfg["ffn"]) for _ in range(cfg["layers"])
            )
            self.norm = nn.Parameter(torch.ones(h))
            hd = h // cfg["heads"]
            inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(torch.arange(cfg["seq_length"]).float(), inv)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)
        else:
            self.pos = nn.Embedding(cfg["seq_length"], h)
            self.blocks = nn.ModuleList(
                GptBlock(h, cfg["heads"], cfg["ffn"], flash, 0.1) for _ in range(cfg["layers"])
            )
            self.ln_f = nn.LayerNorm(h)
        for p in self.parameters():  # small weights: a random model whose loss stays finite
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        s = idx.shape[1]
        x = self.embed(idx)
        if self.llama:
            cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        else:
            x = F.dropout(x + self.pos.weight[:s], 0.1, self.training)
        for blk in self.blocks:
            args = (x, cos, sin) if self.llama else (x,)
            if self.recompute:
                x = torch.utils.checkpoint.checkpoint(blk, *args, use_reentrant=False)
            else:
                x = blk(*args)
        x = rms_norm(x, self.norm) if self.llama else self.ln_f(x)
        logits = F.linear(x, self.embed.weight)  # tied embeddings
        # Megatron computes the cross entropy on fp32 logits.
        if KERNELS == "megatron":
            return CrossEntropy.apply(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# ----------------------------------------------------------------------------------------------
# Training


class MixedPrecisionAdam:
    """bf16 model weights and gradients, fp32 master weights and moments (2 + 2 + 12 bytes per
    parameter); the step is taken chunk by chunk so at most one chunk's fp32 gradients exist."""

    def __init__(self, params, chunk=64 << 20):
        self.params = [p for p in params if p.requires_grad]
        self.groups, group, size = [], [], 0
        for p in self.params:
            group.append(p)
            size += p.numel()
            if size >= chunk:
                self.groups.append(group)
                group, size = [], 0
        if group:
            self.groups.append(group)
        self.master = [[p.detach().float().clone() for p in g] for g in self.groups]
        kw = {"fused": True} if DEV == "cuda" else {}
        self.opts = [torch.optim.AdamW(m, lr=1e-4, weight_decay=0.1, **kw) for m in self.master]

    def step(self):
        for g, m, opt in zip(self.groups, self.master, self.opts):
            for p, mp in zip(g, m):
                mp.grad = p.grad.float()
                p.grad = None
            opt.step()
            for p, mp in zip(g, m):
                mp.grad = None
                p.data.copy_(mp)


def train_run(cfg, mb, gbs, recompute, flash, steps, warmup, trace_path=None):
    torch.manual_seed(0)
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float32
    if hasattr(torch, "device") and hasattr(torch.device(DEV), "__enter__"):
        with torch.device(DEV):  # initialise on the device: seconds, not minutes, for 1.5B weights
            model = Model(cfg, flash, recompute).to(dtype)
    else:
        model = Model(cfg, flash, recompute).to(DEV).to(dtype)
    opt = MixedPrecisionAdam(model.parameters())
    s, V = cfg["seq_length"], cfg["vocab"]
    M = gbs // mb
    data = torch.randint(0, V, (M, mb, s + 1), device=DEV)
    inputs, targets = data[..., :-1].contiguous(), data[..., 1:].contiguous()

    def step():
        for i in range(M):
            loss = model(inputs[i], targets[i]) / M
            loss.backward()
        opt.step()
        return loss

    loss = None
    for _ in range(warmup):
        loss = step()
    sync()
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if DEV == "cuda" else 0
    states = torch.cuda.memory_allocated() if DEV == "cuda" else 0  # weights, moments, data
    reserved = torch.cuda.max_memory_reserved() if DEV == "cuda" else 0
    if trace_path:
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
        raw = trace_path + ".tmp.json"
        # One warm-up step, then two recorded: ProfilerStep#1 and #2; the trace is written when
        # the cycle ends (after it the profiler clears its events).
        with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=lambda p: p.export_chrome_trace(raw)) as prof:
            for _ in range(3):
                step()
                sync()
                prof.step()
        with open(raw, "rb") as src, gzip.open(trace_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
    params = sum(p.numel() for p in model.parameters())
    del model, opt, data, inputs, targets
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return {
        "measured_s": statistics.median(times),
        "step_min_s": min(times),
        "step_max_s": max(times),
        "peak_allocated_gib": peak / 2**30,
        "peak_reserved_gib": reserved / 2**30,
        "states_gib": states / 2**30,
        "parameters": params,
        "final_loss": float(loss) * M,
    }


# ----------------------------------------------------------------------------------------------
# Kernels


def kernels(quick):
    rows = []
    reps = 3 if quick else 20
    dt = torch.bfloat16 if DEV == "cuda" else torch.float32
    # Matrix products (m, n, k): squares, and the GEMMs of the runs below (tokens x out x in).
    shapes = [(256, 256, 256), (512, 512, 512)] if quick else [
        (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
        (16384, 16384, 16384), (8192, 4800, 1600), (8192, 1600, 1600), (8192, 6400, 1600),
        (8192, 1600, 6400), (8192, 50257, 1600), (16384, 3072, 2048), (16384, 16384, 2048),
        (16384, 2048, 8192), (16384, 128256, 2048), (4096, 8192, 8192), (2048, 2048, 8192),
    ]
    for m, n, k in shapes:
        a = torch.randn(m, k, device=DEV, dtype=dt)
        b = torch.randn(k, n, device=DEV, dtype=dt)
        sec = timed(lambda: torch.matmul(a, b), reps)
        rows.append(("gemm", f"{m}x{n}x{k}", str(dt).split(".")[-1], sec, 2 * m * n * k / sec / 1e12, ""))
        if DEV == "cuda" and hasattr(torch, "float8_e4m3fn") and m % 16 == 0 and n % 16 == 0:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt asks
            one = torch.ones((), device=DEV)
            # fp32 accumulation throughout, then fast accumulation (what Transformer Engine's
            # forward GEMMs use).
            for fast, name in ((False, "fp8_e4m3"), (True, "fp8_e4m3_fast_accum")):
                try:
                    sec = timed(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16,
                                                         use_fast_accum=fast), reps)
                    rows.append(("gemm", f"{m}x{n}x{k}", name, sec, 2 * m * n * k / sec / 1e12, ""))
                except Exception as e:  # noqa: BLE001  (an older PyTorch's signature)
                    print(f"{name} {m}x{n}x{k}: {e}", file=sys.stderr)
        del a, b
    # FlashAttention, causal: batch x heads x seq x head_dim. FLOPs of the causal half:
    # forward 2 b h s^2 d (two products over half the s x s pairs), backward 2.5 x that.
    att = [(2, 4, 128, 64)] if quick else [
        (8, 25, 1024, 64), (4, 32, 2048, 64), (4, 32, 4096, 64), (4, 32, 2048, 128),
        (2, 32, 4096, 128), (1, 32, 8192, 128), (1, 64, 16384, 128),
    ]
    for b, h, s, d in att:
        q, k, v = (torch.randn(b, h, s, d, device=DEV, dtype=dt, requires_grad=True) for _ in range(3))
        fwd = 2.0 * b * h * s * s * d
        sec = timed(lambda: flash_attention(q, k, v, 0.0), reps)
        rows.append(("flash_fwd", f"{b}x{h}x{s}x{d}", str(dt).split(".")[-1], sec, fwd / sec / 1e12, ""))
        go = torch.randn(b, h, s, d, device=DEV, dtype=dt)

        def fb():
            flash_attention(q, k, v, 0.0).backward(go)

        sec = timed(fb, reps)
        rows.append(("flash_fwd_bwd", f"{b}x{h}x{s}x{d}", str(dt).split(".")[-1], sec, 3.5 * fwd / sec / 1e12, ""))
        # cuDNN's fused attention, the backend Transformer Engine runs on Hopper (NeMo, Megatron).
        if DEV == "cuda":
            try:
                sec = timed(lambda: flash_attention(q, k, v, 0.0, "CUDNN_ATTENTION"), reps)
                rows.append(("cudnn_fwd", f"{b}x{h}x{s}x{d}", str(dt).split(".")[-1], sec, fwd / sec / 1e12, ""))

                def cb():
                    flash_attention(q, k, v, 0.0, "CUDNN_ATTENTION").backward(go)

                sec = timed(cb, reps)
                rows.append(("cudnn_fwd_bwd", f"{b}x{h}x{s}x{d}", str(dt).split(".")[-1], sec,
                             3.5 * fwd / sec / 1e12, ""))
            except (RuntimeError, AttributeError) as e:
                print(f"cudnn attention {b}x{h}x{s}x{d}: {e}", file=sys.stderr)
        del q, k, v, go
    # A device copy of 1 GiB (bytes read plus written), and an elementwise add.
    n = (1 << 20) if quick else (1 << 29)
    x = torch.empty(n, device=DEV, dtype=dt)
    y = torch.empty_like(x)
    sec = timed(lambda: y.copy_(x), reps)
    rows.append(("copy", str(n), str(dt).split(".")[-1], sec, "", 2 * n * x.element_size() / sec / 1e9))
    z = torch.empty_like(x)
    sec = timed(lambda: torch.add(x, y, out=z), reps)
    rows.append(("add", str(n), str(dt).split(".")[-1], sec, "", 3 * n * x.element_size() / sec / 1e9))
    del x, y, z
    # The cost of one tiny kernel, launched back to back (the host's launch rate).
    t = torch.zeros(1, device=DEV)
    sec = timed(lambda: [t.add_(1) for _ in range(1000)], 3) / 1000
    rows.append(("launch", "1", "fp32", sec, "", ""))
    return rows


def device_info():
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": DEV}
    if DEV == "cuda":
        pr = torch.cuda.get_device_properties(0)
        info.update(name=pr.name, memory_bytes=pr.total_memory, multiprocessors=pr.multi_processor_count)
        q = "name,memory.total,power.limit,clocks.max.sm,clocks.max.mem,driver_version,pci.device_id"
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
            info["nvidia_smi"] = dict(zip(q.split(","), [v.strip() for v in out.split(",")]))
        except (OSError, subprocess.SubprocessError) as e:
            info["nvidia_smi"] = str(e)
    return info


def longer(cfg, factor):
    """The model at `factor` times its sequence length."""
    return dict(cfg, seq_length=cfg["seq_length"] * factor)


def system_preset(gpu_name):
    """commscope's system preset for a GPU named as CUDA names it, or None. The presets are the
    SXM parts of DGX systems: a PCIe or NVL card (other clocks, power and memory) has none."""
    name = gpu_name.upper()
    if "PCIE" in name or "NVL" in name:
        return None
    if "H200" in name:  # "NVIDIA H200"
        return "dgx-h200"
    if "H100" in name and "HBM3" in name:  # "NVIDIA H100 80GB HBM3"
        return "dgx-h100"
    if "A100-SXM4" in name:  # "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"
        return "dgx-a100-80gb" if "80GB" in name else "dgx-a100-40gb"
    return "cpu-host" if DEV == "cpu" else None


GPT2_XL = dict(kind="gpt", layers=48, hidden=1600, heads=25, ffn=6400, vocab=50257, seq_length=1024)
LLAMA32_1B = dict(kind="llama", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                  seq_length=4096)
TINY = dict(kind="gpt", layers=2, hidden=64, heads=4, ffn=256, vocab=512, seq_length=64)
TINY_LLAMA = dict(kind="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=512, seq_length=64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="tiny shapes: check the script anywhere")
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--skip-runs", action="store_true", help="the kernel sweep only")
    ap.add_argument("--rows", help="comma list of the plan's rows to run (0-based) [all]")
    ap.add_argument("--trace-rows", default="0", help="rows whose two steps are traced [0]")
    ap.add_argument("--kernels", choices=["megatron", "eager"], default="megatron",
                    help="the training runs' attention, loss and SwiGLU forms (see KERNELS)")
    ap.add_argument("--system", help="the commscope system preset the runs' CSV names [from the GPU's "
                    "name: dgx-h100, dgx-h200, dgx-a100-80gb or -40gb for those SXM parts; others "
                    "must name one]")
    args = ap.parse_args()
    global KERNELS
    KERNELS = args.kernels
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "device.json"), "w") as f:
        json.dump(device_info(), f, indent=2)
    print(json.dumps(device_info()), flush=True)
    if not args.skip_kernels:
        rows = kernels(args.quick)
        with open(os.path.join(args.out, "kernels.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kind", "shape", "dtype", "seconds", "tflops", "gbs"])
            for r in rows:
                w.writerow([r[0], r[1], r[2], f"{r[3]:.6g}"] + [f"{v:.4g}" if v != "" else "" for v in r[4:]])
                print(r, flush=True)
    if args.skip_runs:
        return
    system = args.system or system_preset(device_info().get("name", ""))
    if not system:
        sys.exit(f"measure-gpu.py: --system: expected the commscope system preset of this GPU, got none "
                 f"(no preset is known for '{device_info().get('name', DEV)}')")
    gpt, llama = (TINY, TINY_LLAMA) if args.quick else (GPT2_XL, LLAMA32_1B)
    gname, lname = ("tiny", "tiny-llama") if args.quick else ("gpt2-xl", "llama3.2-1b")
    steps, warm = (2, 1) if args.quick else (10, 3)
    # model, config, micro-batch, global batch, recompute, flash
    # Near and beyond the memory: llama mb 8 (71.4 GiB by commscope's count), gpt2-xl mb 20
    # (77.1 GiB), and two that do not fit in 80 GB (91.6 and 87.9 GiB), run last, so an
    # out-of-memory error leaves no fragments behind for the others.
    plan = [
        (gname, gpt, 8, 8, False, True),
        (gname, gpt, 4, 4, False, True),
        (gname, gpt, 8, 32, False, True),
        (gname, gpt, 16, 16, False, True),
        (gname, gpt, 16, 16, True, True),
        (gname, gpt, 4, 4, False, False),
        (gname, gpt, 6, 6, False, False),
        (gname, gpt, 8, 8, True, False),
        (lname, llama, 4, 4, False, True),
        (lname, llama, 2, 8, False, True),
        (lname, llama, 8, 8, False, True),
        (gname, gpt, 20, 20, False, True),
        (gname, gpt, 8, 8, False, False),
        (gname, gpt, 24, 24, False, True),
        # Added after the first runs: the edge between micro-batch 16 (ran) and 20 (did not).
        (gname, gpt, 18, 18, False, True),
        (gname, gpt, 19, 19, False, True),
        # Added for the H200 (139.8 GiB usable): plans near its memory by commscope's count on
        # dgx-h200 (gpt2-xl flash 32 and 40: 112.5 and 134.8 GiB; standard 12: 127.0; Llama 12
        # and 14: 109.6 and 124.8), then three above it, last (Llama 16: 140.0; gpt2-xl flash 44:
        # 146.0; standard 14: 144.2). On an 80 GB GPU each of these runs out of memory.
        (gname, gpt, 32, 32, False, True),
        (gname, gpt, 40, 40, False, True),
        (gname, gpt, 12, 12, False, False),
        (lname, llama, 12, 12, False, True),
        (lname, llama, 14, 14, False, True),
        (lname, llama, 16, 16, False, True),
        (gname, gpt, 44, 44, False, True),
        (gname, gpt, 14, 14, False, False),
        # Added for long sequences (FlashAttention's memory is linear in the sequence, its time
        # quadratic): Llama 3.2 1B at 2, 4, 8 and 16 times its sequence (8,192 to 65,536 tokens
        # on a GPU), the same tokens per micro-batch as micro-batch 4 at first; by commscope's
        # count on dgx-h200 48.8, 48.8, 79.2 and 140.0 GiB (the last above the H200's memory, so
        # run last but one), then 65,536 tokens with full recompute (69.9 GiB).
        (lname, longer(llama, 2), 2, 2, False, True),
        (lname, longer(llama, 4), 1, 1, False, True),
        (lname, longer(llama, 8), 1, 1, False, True),
        (lname, longer(llama, 16), 1, 1, False, True),
        (lname, longer(llama, 16), 1, 1, True, True),
    ]
    cols = ["model", "system", "gpus", "tp", "pp", "dp", "zero", "micro_batch", "global_batch",
            "seq_length", "precision", "recompute", "attention", "measured_s", "measured_memory_gib",
            "outcome", "notes", "attention_backend"]
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f, \
            open(os.path.join(args.out, "oom.csv"), "w", newline="") as f_oom:
        w, w_oom = csv.writer(f), csv.writer(f_oom)
        w.writerow(cols)
        w_oom.writerow(cols)
        rows = [int(x) for x in args.rows.split(",")] if args.rows else range(len(plan))
        traced = {int(x) for x in args.trace_rows.split(",") if x}
        for i in rows:
            name, cfg, mb, gbs, rc, flash = plan[i]
            trace = os.path.join(args.out, f"trace-{i}.json.gz") if i in traced else None
            row = dict(model=name, system=system, gpus=1, tp=1, pp=1, dp=1, zero=0, micro_batch=mb,
                       global_batch=gbs, seq_length=cfg["seq_length"], precision="bf16",
                       recompute="full" if rc else "none", attention="flash" if flash else "standard",
                       attention_backend="flash" if flash else "")
            try:
                r = train_run(cfg, mb, gbs, rc, flash, steps, warm, trace)
            except torch.cuda.OutOfMemoryError if DEV == "cuda" else MemoryError as e:
                msg = str(e).split("\n")[0][:300]
                print(f"{name} mb {mb}: out of memory: {msg}", file=sys.stderr, flush=True)
                row.update(measured_s="", measured_memory_gib="", outcome="oom",
                           notes=f"out of memory: {msg}")
                w_oom.writerow([row[c] for c in cols])
                f_oom.flush()
                torch.cuda.empty_cache()
                continue
            notes = (f"median of {steps} steps after {warm}: min {r['step_min_s']:.4f} s, max "
                     f"{r['step_max_s']:.4f} s; peak reserved {r['peak_reserved_gib']:.2f} GiB; "
                     f"{r['states_gib']:.2f} GiB allocated between steps; kernels {KERNELS}; "
                     f"{r['parameters']} parameters; loss {r['final_loss']:.4f}")
            row.update(measured_s=f"{r['measured_s']:.6g}",
                       measured_memory_gib=f"{r['peak_allocated_gib']:.4g}" if r["peak_allocated_gib"] else "",
                       outcome="ran",
                       notes=notes)
            w.writerow([row[c] for c in cols])
            f.flush()
            print(row, flush=True)


if __name__ == "__main__":
    main()
