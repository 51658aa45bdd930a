"""Step model of a vtrain training step on one GPU, calibrated on a GPU window's measurements.

What it is: for every kernel a d24 / d32 training step launches (bf16, baseline value mode, one GPU,
tp 1, pp 1), a predicted time from the kernel's launch geometry and data movement, with a handful of
device constants fitted on what a real GPU measured (bench/results/gpu-window-2026-11-26.md, H200,
commit 5f3dc9c). It replaces the peak roofline of bench/static_report.py as the guide to where the
time goes: the roofline assumes every kernel at peak and predicted MFU 69% for the code that then
measured 31.9%.

How a kernel's time is predicted (per call; `predict_call`):
  - GEMMs (cuBLASLt): FLOPs / the TFLOP/s the window's gemm stage measured for that (M, N, K)
    (independent measurements of the same library on the same GPU). Muon's Newton-Schulz GEMMs
    (small square-ish shapes the gemm stage did not time) run at one fitted rate.
  - Tensor-core attention: useful FLOPs (FlashAttention's convention) / the TFLOP/s the window's
    attention stage measured for the same kernel, window and pass (attention_bench, an
    independent run of the same kernels at d24's shape).
  - Memory-bound kernels: the larger of
      latency:   waves x (dram_trips x LAT_DRAM + l2_trips x LAT_L2 + syncs x T_SYNC + T_BLOCK)
      bandwidth: bytes / (ETA x HBM)
    plus T_LAUNCH per call. A wave is SMs x resident blocks per SM (occupancy from threads,
    registers and shared memory); a trip is one dependent round trip to global memory in a thread's
    critical path (a load whose value the next load waits for, or a loop iteration the compiler
    cannot overlap with the next: every scalar loop in today's kernels, checked in the PTX). This
    is Little's law per SM: a kernel that issues one 2-byte load per thread and waits for it cannot
    keep HBM busy however many threads it launches; one that keeps 16 bytes per thread in flight can.
  - cudaMemcpyAsync / cudaMemsetAsync: bytes / (ETA x HBM) plus T_LAUNCH.
  - Time outside the ops (host launches, synchronizations): the window's measurement, not modelled
    (CUDA graphs would remove it: issue 37 item 4).

Fitted constants (CALIBRATION, fitted by `--fit` on the window's memory-bound rows, log least
squares): LAT_DRAM, T_BLOCK, ETA and the Newton-Schulz GEMM rate. LAT_L2, T_SYNC and T_LAUNCH are
set from published Hopper microbenchmarks, not fitted (see CALIBRATION). Every number this file
prints for code that has not run on a GPU is a prediction and is labelled as one.

  python3 bench/step_model.py                   # reproduce the 2026-11-26 window, then predict
                                                # today's d24 step on the H200 and the H100
  python3 bench/step_model.py --kernels d24     # every kernel of today's d24 step, predicted
  python3 bench/step_model.py --fit             # refit the constants on the window (prints them)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field, replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import static_report as sr  # noqa: E402  (presets, attention tiles, Muon's matrices)

BF16, F32 = 2, 4


# --- devices ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    name: str
    hbm: float          # bytes/s, the datasheet figure
    sms: int
    tc_peak: float      # dense bf16 tensor-core FLOP/s (MFU's denominator, as peers report)
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    smem_per_sm: int = 228 * 1024
    l2_bytes: int = 50 * 1024 * 1024
    clock_ghz: float = 1.98    # SM boost clock (H100 SXM and H200: 1980 MHz)
    issue_per_clock: int = 128  # thread-instructions an SM issues per clock (4 schedulers x 32)


H100 = Device("H100 SXM", 3.35e12, 132, 989e12)
H200 = Device("H200", 4.8e12, 132, 989e12)
DEVICES = {"h100": H100, "h200": H200}


# --- the model's constants ------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    lat_dram: float     # s, one dependent global-memory round trip that misses L2, under load
    eta: float          # best fraction of the datasheet HBM bandwidth our streaming kernels and
                        # cudaMemcpyAsync reach (read + write traffic)
    ns_tflops: float    # TFLOP/s of Muon's Newton-Schulz GEMMs (small shapes the gemm stage did
                        # not time)
    lat_l2: float = 0.30e-6   # s, an L2 hit (set, not fitted: Hopper L2 hit latency ~260 cycles
                              # at 1.755 GHz in Luo et al., "Benchmarking and Dissecting the Nvidia
                              # Hopper GPU Architecture", IPDPS 2024, plus queueing under load)
    t_sync: float = 0.05e-6   # s, one __syncthreads with its shared-memory exchange (set)
    t_block: float = 0.0      # s, a block's start and retirement per wave, and
    t_launch: float = 0.0     # s, the gap between back-to-back kernels: both fitted to zero on the
                              # window when free (the per-trip latency absorbs them), so left out
    eta_write: float = 0.90   # fraction of HBM a write-only stream (cudaMemsetAsync) reaches (set:
                              # STREAM-like fill rates on H100 SXM are ~90% of the datasheet)
    host_op: float = 0.0      # s, the host's time to issue one op (dispatch, launch, the
                              # profiler's two event records): an op the GPU runs in less leaves
                              # it idle for the difference (fitted on the window's time outside
                              # the ops, one number: not validated)
    source: str = ""


# Fitted by `python3 bench/step_model.py --fit` on the 2026-11-26 H200 window (see fit_window).
# tests/launch/test_step_model.py checks that a refit gives these values.
CALIBRATION = Calibration(lat_dram=0.8387e-6, eta=0.5200, ns_tflops=619.7, host_op=16.43e-6,
                          source="fitted on the H200 window of 2026-11-26 (commit 5f3dc9c), "
                                 "10 memory-bound rows")


# --- kernels --------------------------------------------------------------------------------------
@dataclass
class Kernel:
    """One kernel (or library call) of a step: `calls` per step, bytes and FLOPs per call."""
    row: str                 # the bench/static_report.py row (and GPU window profile row) it is in
    name: str
    calls: float
    kind: str                # "mem", "memcpy", "memset", "gemm", "ns", "ns_batch", "attn"
    bytes: float = 0.0       # HBM bytes per call
    flops: float = 0.0       # per call (attention: useful FLOPs, FlashAttention's convention)
    blocks: int = 0          # grid
    threads: int = 256       # per block
    regs: int = 32           # per thread (ptxas, sm_90)
    smem: int = 0            # per block, bytes
    dram_trips: float = 1.0  # dependent round trips to HBM per thread
    l2_trips: float = 0.0    # dependent round trips that hit L2
    syncs: int = 0           # __syncthreads in the critical path
    instr: int = 0           # SASS instructions a thread executes (sm_90; 0: not limiting)
    shape: tuple = ()        # gemm: (M, N, K)
    optimizer: bool = False  # part of the optimizer step (what --cuda-graphs step also captures)
    attn: tuple = ()         # attn: (window, "fwd" | "bwd")
    note: str = ""

    def resident(self, dev: Device) -> int:
        warps = (self.threads + 31) // 32
        warp_regs = math.ceil(max(self.regs, 1) * 32 / 256) * 256
        by_regs = dev.regs_per_sm // (warps * warp_regs)
        by_smem = dev.smem_per_sm // (self.smem + 1024) if self.smem else dev.blocks_per_sm
        by_threads = dev.threads_per_sm // self.threads
        return max(1, min(by_regs, by_smem, by_threads, dev.blocks_per_sm))


@dataclass
class Rates:
    """What a window measured that the model takes as given: cuBLASLt TFLOP/s per (M, N, K) and
    the tensor-core attention's TFLOP/s per (window, pass)."""
    gemm: dict = field(default_factory=dict)   # GEMM name ("fc.dW") -> TFLOP/s
    attn: dict = field(default_factory=dict)   # (window, "fwd" | "bwd") -> TFLOP/s
    source: str = ""


def predict_call(k: Kernel, dev: Device, cal: Calibration, rates: Rates) -> float:
    """Seconds of one call of kernel k."""
    if k.kind == "gemm":
        # By the GEMM's name: the gemm stage timed d24's shapes (at d32 the same layer's d24 rate
        # stands in for its larger shape: a prediction).
        return k.flops / (rates.gemm[k.name] * 1e12) + cal.t_launch
    if k.kind == "ns":
        return k.flops / (cal.ns_tflops * 1e12)
    if k.kind == "ns_batch":
        return k.flops / (ns_batched_tflops(rates) * 1e12)
    if k.kind == "attn":
        return k.flops / (rates.attn[k.attn] * 1e12)
    if k.kind == "memset":
        return k.bytes / (cal.eta_write * dev.hbm) + cal.t_launch
    bw = k.bytes / (cal.eta * dev.hbm)
    if k.kind == "memcpy":
        return bw + cal.t_launch
    resident = k.resident(dev)
    waves = math.ceil(k.blocks / (dev.sms * resident))
    chain = (k.dram_trips * cal.lat_dram + k.l2_trips * cal.lat_l2 + k.syncs * cal.t_sync +
             cal.t_block)
    # Issue: a wave's threads share the SM's schedulers; their latency chains overlap each other.
    issue = k.instr * min(resident * k.threads, dev.threads_per_sm) / (
        dev.issue_per_clock * dev.clock_ghz * 1e9)
    return max(waves * max(chain, issue), bw) + cal.t_launch


def predict(kernels: list[Kernel], dev: Device, cal: Calibration, rates: Rates) -> dict[str, float]:
    """Seconds per step, per row."""
    rows: dict[str, float] = {}
    for k in kernels:
        rows[k.row] = rows.get(k.row, 0.0) + k.calls * predict_call(k, dev, cal, rates)
    return rows


def host_gaps(kernels: list[Kernel], dev: Device, cal: Calibration, rates: Rates) -> float:
    """Seconds per step the GPU waits for the host: each op the host issues in host_op seconds
    but the GPU finishes sooner. (The host gets ahead again behind long kernels; syncs are rare.)"""
    return sum(k.calls * max(0.0, cal.host_op - predict_call(k, dev, cal, rates)) for k in kernels)


# Host ops between a --cuda-graphs step's synchronizing read (its losses and guard) and the GPU's
# first kernel of the next step: the gradients' memset, micro-batch 0's two id uploads and two
# device copies, the graph launch. Everything after runs behind a graph the GPU is executing.
GRAPH_HOST_OPS_PER_STEP = 6
CUDA_GRAPH_MODES = ("off", "micro-step", "step")


def host_gaps_with_graphs(kernels: list[Kernel], dev: Device, cal: Calibration, rates: Rates,
                          mode: str, accum: int = 1) -> float:
    """PREDICTION (no window has measured a graph): seconds per micro-step the GPU waits for the
    host under --cuda-graphs `mode`. off: host_gaps of every op. micro-step: the micro-steps are
    graph launches the GPU runs far longer than the host takes to issue (no gap), the eager
    optimizer keeps its gaps (host_gaps of its ops), plus the ops after the step's read. step: only
    those GRAPH_HOST_OPS_PER_STEP ops, once per optimizer step (1 / accum per micro-step)."""
    if mode == "off":
        return host_gaps(kernels, dev, cal, rates)
    per_step = GRAPH_HOST_OPS_PER_STEP * cal.host_op / accum
    if mode == "micro-step":
        return host_gaps([k for k in kernels if k.optimizer], dev, cal, rates) + per_step
    if mode == "step":
        return per_step
    raise ValueError(f"--cuda-graphs has no mode {mode!r}")


# --- shapes shared by both inventories --------------------------------------------------------------
def grid(n: int, threads: int = 256) -> int:
    """kernels/cuda_check.cuh grid_for: one thread an element, at most 65535 x 16 blocks."""
    return max(1, min((n + threads - 1) // threads, 65535 * 16))


def stream_kernel(row, name, calls, n, bytes_per_elem, instr=0, threads=256, regs=32, note=""):
    """A grid-stride elementwise kernel launched with grid_for: each thread's iterations are serial
    (one round trip each: the loads of an iteration wait for nothing but the next iteration's wait
    for the store's address check, and the scalar loops are not unrolled)."""
    blocks = grid(n, threads)
    iters = math.ceil(n / (blocks * threads))
    return Kernel(row, name, calls, "mem", bytes=bytes_per_elem * n, blocks=blocks,
                  threads=threads, regs=regs, dram_trips=iters, instr=instr * iters, note=note)


def vec_kernel(row, name, calls, n, bytes_per_elem, W=8, blocks_per_sm=8, regs=32, instr=0,
               sms=132):
    """An elementwise kernel of kernels/vec_access.cuh: 256-thread blocks, a grid of at most
    `blocks_per_sm` x SMs blocks, each thread looping over chunks of W elements (one 16-byte word
    per operand an iteration: one round trip each)."""
    blocks = max(1, min(math.ceil(n / (256 * W)), blocks_per_sm * sms))
    iters = math.ceil(n / (blocks * 256 * W))
    return Kernel(row, name, calls, "mem", bytes=bytes_per_elem * n, blocks=blocks, threads=256,
                  regs=regs, dram_trips=iters, instr=instr * iters)


def row_kernel(row, name, calls, rows, C, nbytes, regs, trips=1, W=8):
    """A row kernel of kernels/row_team.cuh for a wide row: a block per row of C / W threads
    (rounded to a warp), one chunk a thread held in registers, block_sum (2 syncs)."""
    threads = (math.ceil(C / W) + 31) // 32 * 32
    return Kernel(row, name, calls, "mem", bytes=nbytes, blocks=rows, threads=threads, regs=regs,
                  dram_trips=trips, syncs=2)


def attention_kernels(c: dict, rows: tuple[str, str]) -> list[Kernel]:
    """Forward and backward of each layer's tensor-core attention: useful FLOPs (forward
    4 B H hd sum_t min(t+1, W), backward 2.5x: tools/attention_bench.cc's convention)."""
    out = []
    for W in sorted(set(c["windows"])):
        n = sum(1 for w in c["windows"] if w == W)
        useful = 4.0 * c["B"] * c["H"] * c["hd"] * sum(min(t + 1, W) for t in range(c["T"]))
        out.append(Kernel(rows[0], f"attn_tc_fwd_kernel<128> W{W}", n, "attn", flops=useful,
                          attn=(W, "fwd")))
        out.append(Kernel(rows[1], f"attn_tc backward W{W}", n, "attn", flops=2.5 * useful,
                          attn=(W, "bwd")))
    return out


def gemm_kernels(c: dict, row: str) -> list[Kernel]:
    """The blocks' linear layers (q, k, v fused: one GEMM) and the lm head: forward, dx, dW."""
    N, C, F, Vp = c["B"] * c["T"], c["C"], c["hidden"], c["Vp"]
    qkv = c["H"] * c["hd"] + 2 * c["Hkv"] * c["hd"]
    out = []
    for name, k_in, k_out, n in [("qkv", C, qkv, c["L"]), ("attn_out", c["H"] * c["hd"], C, c["L"]),
                                 ("fc", C, F, c["L"]), ("mlp_out", F, C, c["L"]),
                                 ("lm_head", C, Vp, 1)]:
        for what, shape in [("fwd", (N, k_out, k_in)), ("dx", (N, k_in, k_out)),
                            ("dW", (k_out, k_in, N))]:
            M, Nn, K = shape
            out.append(Kernel(row, f"{name}.{what}", n, "gemm", flops=2.0 * M * Nn * K,
                              shape=shape))
    return out


def ns_kernels(c: dict, row: str, owned: list[int] | None = None) -> list[Kernel]:
    """Muon's 5 bf16 Newton-Schulz iterations on each matrix this GPU orthogonalizes: per
    iteration A = X X^T, B = b A + c A A, Y = a X + B X on the small side m (three GEMMs)."""
    mats = sr.block_matrices(c)
    out = []
    for k in (owned if owned is not None else range(len(mats))):
        r, k_ = mats[k]
        m, n = min(r, k_), max(r, k_)
        for name, flops in (("A = X X^T", 2 * m * m * n), ("B = b A + c A A", 2 * m * m * m),
                            ("Y = a X + B X", 2 * m * m * n)):
            out.append(Kernel(row, f"Newton-Schulz GEMM {name}", 5, "ns", flops=flops))
    return out


# --- the window's code: commit 5f3dc9c, d24 baseline, micro-batch 16 x 2048, optimizer every step --
GEMM_ROW_OLD = ("GEMM forward (x W) & GEMM backward dx (dy W^T) & GEMM backward dW (x^T dy, fp32) & "
                "Muon Newton-Schulz GEMMs (5 steps, bf16)")
ATTN_BWD_ROW_OLD = "attention backward D & attention backward dQ & attention backward dK dV"


def window_code_kernels(c: dict) -> list[Kernel]:
    """Every kernel of the d24 step the 2026-11-26 window profiled (commit 5f3dc9c), with the launch
    geometry of that commit's kernels/ (git show 5f3dc9c:kernels/<file>): rows as its
    scripts/window_results.py mapped the profile, bytes as its bench/static_report.py counted them
    (each tensor read or written once, except where a second read misses L2, noted)."""
    N, C, F, H, Hkv, hd, L, Vp = (c["B"] * c["T"], c["C"], c["hidden"], c["H"], c["Hkv"], c["hd"],
                                  c["L"], c["Vp"])
    e = BF16
    qk_rows = N * (H + Hkv) // 2  # rows of one q (or k) norm call: N x heads
    ks: list[Kernel] = []
    ks += gemm_kernels(c, GEMM_ROW_OLD)
    ks += ns_kernels(c, GEMM_ROW_OLD)
    ks += attention_kernels(c, ("attention forward", ATTN_BWD_ROW_OLD))
    # rmsnorm.cu: one block a row, threads_for(C) = min(256, C rounded to a warp); phase 1 a
    # scalar loop (one 2-byte load, then the FMA that waits for it), block_sum (2 syncs), phase 2
    # re-reads the elements this thread read (L1 hits: no trip) and writes y. x norms: 2 per
    # layer, the embedding's and the final one; q and k: one call each per layer, rows of hd.
    it = math.ceil(C / 256)
    ks.append(Kernel("rmsnorm forward (x, q, k)", "rmsnorm_forward_kernel<bf16> (x)", 2 * L + 2,
                     "mem", bytes=e * 2 * N * C + F32 * N, blocks=N, threads=256,
                     dram_trips=it, syncs=2))
    ks.append(Kernel("rmsnorm forward (x, q, k)", "rmsnorm_forward_kernel<bf16> (q, k)", 2 * L,
                     "mem", bytes=e * 2 * N * H * hd + F32 * N * H, blocks=N * H, threads=128,
                     dram_trips=1, syncs=2))
    # Backward: phase 1 reads dy and x (one trip an iteration), phase 2 reads them again (L1) and,
    # accumulating into the stream's gradient (the x norms), dx from HBM.
    ks.append(Kernel("rmsnorm backward (x, q, k)", "rmsnorm_backward_kernel<bf16> (x)", 2 * L + 2,
                     "mem", bytes=e * 4 * N * C + F32 * N, blocks=N, threads=256,
                     dram_trips=2 * it, l2_trips=0, syncs=2))
    ks.append(Kernel("rmsnorm backward (x, q, k)", "rmsnorm_backward_kernel<bf16> (q, k)", 2 * L,
                     "mem", bytes=e * 3 * N * H * hd + F32 * N * H, blocks=N * H, threads=128,
                     dram_trips=1, syncs=2))
    # rope.cu rope_kernel: one (a, b) pair a thread (two 2-byte loads and the table's float2).
    pairs = N * H * hd // 2
    ks.append(stream_kernel("rope forward + backward", "rope_kernel<bf16>", 4 * L, pairs,
                            2 * e * 2, instr=150))
    # activation.cu: one element a thread; forward reads h, writes y; backward reads h, dy,
    # writes dh.
    ks.append(stream_kernel("relu^2 forward + backward", "relu2_forward_kernel<bf16>", L, N * F,
                            2 * e, instr=37))
    ks.append(stream_kernel("relu^2 forward + backward", "relu2_backward_kernel<bf16>", L, N * F,
                            3 * e, instr=79))
    # value_mix.cu axpy_kernel: the two residual adds of each block (x += delta).
    ks.append(stream_kernel("residual adds (axpy) & backward adds and value gradient",
                            "axpy_kernel<bf16>", 2 * L, N * C, 3 * e, instr=39))
    # Tensor::copy_from -> cudaMemcpyAsync device to device: x saved twice and v, per layer.
    ks.append(Kernel("copies (x saved twice, value copy)", "cudaMemcpyAsync", 3 * L, "memcpy",
                     bytes=2 * e * N * C))
    # Muon, one matrix at a time (5f3dc9c src/optim/muon.cc newton_schulz_ops on a device), with
    # the ops each piece ran under and so the profile row it landed in: momentum and apply
    # (optim_update.cu, f32, one element a thread: momentum reads g, buf, writes buf, u; apply
    # reads p, x, writes p); every Tensor::zeros a cudaMemsetAsync ("zero_fill": X32, X, Y, A, B);
    # every Tensor::copy_from a device-to-device cudaMemcpyAsync ("tensor_copy": X32 <- G, and in
    # each of the 5 iterations B <- A and Y <- X, then out <- X); the f32 <-> bf16 casts of X
    # ("copy", cast.cu); the transposes of tall matrices and the Frobenius normalization
    # (reduce.cu's 256-block partial sums, then div_by_norm) under the GEMM row.
    muon, cast_row, copies = ("Muon momentum + apply", "bf16 copy of the weights, zeroed gradients",
                              "copies (x saved twice, value copy)")
    for (r, k_) in sr.block_matrices(c):
        mn, m = r * k_, min(r, k_)
        ks.append(stream_kernel(muon, "muon_momentum_kernel", 1, mn, 16))
        for nbytes in (F32 * mn, BF16 * mn, BF16 * mn, BF16 * m * m, BF16 * m * m):
            ks.append(Kernel(cast_row, "cudaMemsetAsync (Newton-Schulz buffers)", 1, "memset",
                             bytes=nbytes))
        if r > k_:
            ks.append(Kernel(GEMM_ROW_OLD, "transpose_kernel<float> (in)", 1, "mem",
                             bytes=2 * F32 * mn, blocks=math.ceil(mn / 1024), threads=256,
                             dram_trips=1, syncs=2))
        else:
            ks.append(Kernel(copies, "cudaMemcpyAsync (X32 <- G)", 1, "memcpy", bytes=2 * F32 * mn))
        iters = math.ceil(mn / (256 * 256))
        ks.append(Kernel(GEMM_ROW_OLD, "partial_kernel<float> (sum of squares)", 1, "mem",
                         bytes=F32 * mn, blocks=256, threads=256, dram_trips=iters, syncs=2))
        ks.append(Kernel(GEMM_ROW_OLD, "final_kernel", 1, "mem", bytes=0, blocks=1, threads=256,
                         dram_trips=1, syncs=2))
        ks.append(stream_kernel(GEMM_ROW_OLD, "div_by_norm_kernel<float>", 1, mn, 2 * F32))
        ks.append(stream_kernel(cast_row, "f32_to_bf16_kernel (X)", 1, mn, F32 + BF16,
                                instr=32))
        for _ in range(5):
            ks.append(Kernel(copies, "cudaMemcpyAsync (B <- A)", 1, "memcpy", bytes=2 * BF16 * m * m))
            ks.append(Kernel(copies, "cudaMemcpyAsync (Y <- X)", 1, "memcpy", bytes=2 * BF16 * mn))
        ks.append(stream_kernel(cast_row, "bf16_to_f32_kernel (X)", 1, mn, F32 + BF16,
                                instr=32))
        if r > k_:
            ks.append(Kernel(GEMM_ROW_OLD, "transpose_kernel<float> (out)", 1, "mem",
                             bytes=2 * F32 * mn, blocks=math.ceil(mn / 1024), threads=256,
                             dram_trips=1, syncs=2))
        else:
            ks.append(Kernel(copies, "cudaMemcpyAsync (out <- X)", 1, "memcpy", bytes=2 * F32 * mn))
        ks.append(stream_kernel(muon, "muon_apply_kernel", 1, mn, 12))
    params = sum(r * k_ for r, k_ in sr.block_matrices(c)) + 2 * Vp * C
    # cast.cu over the flat weights (read 4, write 2), and the flat gradients zeroed.
    ks.append(stream_kernel(cast_row, "f32_to_bf16_kernel (weights)", 1, params,
                            F32 + BF16, instr=32))
    ks.append(Kernel(cast_row, "cudaMemsetAsync (gradients)", 1, "memset", bytes=F32 * params))
    # xent.cu: xent_forward_kernel one 256-thread block a row, two scalar passes over the 32768
    # logits (max, then sum of exp; the second read is counted as HBM bytes, 1056 rows of 64 KiB
    # in flight being more than L2 holds, but as an L2 round trip: the row was just read),
    # block_max and block_sum (4 syncs); xent_backward one element a thread (reads the logits,
    # writes the gradient).
    itv = math.ceil(Vp / 256)
    ks.append(Kernel("cross entropy forward + backward", "xent_forward_kernel<bf16>", 1, "mem",
                     bytes=e * 2 * N * Vp, blocks=N, threads=256, dram_trips=itv, l2_trips=itv,
                     syncs=4))
    ks.append(stream_kernel("cross entropy forward + backward", "xent_backward_kernel<bf16, bf16>",
                            1, N * Vp, 2 * e))
    # adamw.cu (f32, one element a thread): reads p, g, m, v, writes p, m, v; wte and lm_head.
    for _ in range(2):
        ks.append(stream_kernel("AdamW (embedding, lm_head)", "adamw_kernel", 1, Vp * C, 28))
    # embedding.cu: gather (one element a thread: the f32 row element, the bf16 output) and the
    # scatter-add of the gradient (f32 table rows read and written, bf16 dout read).
    ks.append(stream_kernel("embedding gather + scatter-add", "gather_kernel<bf16>", 1, N * C,
                            F32 + BF16, instr=88))
    ks.append(stream_kernel("embedding gather + scatter-add", "scatter_add_kernel<bf16>", 1, N * C,
                            BF16 + 2 * F32))
    return ks


# --- what the window measured ------------------------------------------------------------------
WINDOW_MEASURED = os.path.join(ROOT, "bench", "results", "gpu-window-2026-11-26T065148Z-measured.json")
WINDOW_CALIBRATION = os.path.join(ROOT, "bench", "results", "plan_calibration.json")
# The window's per-op profile had no per-call breakdown in the files kept; these come from its
# report (bench/results/gpu-window-2026-11-26.md): the step, the time outside any op, the
# attention stage's TFLOP/s (tools/attention_bench.cc, d24 shape, useful work) and the gemm
# stage's rows for the shapes plan_calibration.json folds together (same M N K).
WINDOW_STEP_S = 32768 / 66158.05735312063
WINDOW_OUTSIDE_S = 0.0408
WINDOW_ATTN_TFLOPS = {(2048, "fwd"): 176.4, (512, "fwd"): 152.3, (2048, "bwd"): 152.2,
                      (512, "bwd"): 131.4}
WINDOW_GEMM_TFLOPS = {  # docs/status.md GPU block (gemm stage), 2026-11-26, H200; by GEMM name
    "qkv.fwd": 802, "qkv.dx": 818, "qkv.dW": 760, "attn_out.fwd": 773, "attn_out.dx": 772,
    "attn_out.dW": 800, "fc.fwd": 788, "fc.dx": 783, "fc.dW": 765, "mlp_out.fwd": 756,
    "mlp_out.dx": 699, "mlp_out.dW": 745, "lm_head.fwd": 675, "lm_head.dx": 718, "lm_head.dW": 712,
}


def window_rates() -> Rates:
    return Rates(gemm=dict(WINDOW_GEMM_TFLOPS), attn=dict(WINDOW_ATTN_TFLOPS),
                 source="H200 window 2026-11-26 (gemm and attention stages, d24 shapes)")


def load_measured(path: str = WINDOW_MEASURED) -> dict[str, float]:
    with open(path) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("(unmapped)")}


def d24_window_preset() -> dict:
    return sr.preset("d24", 16)


# --- calibration -----------------------------------------------------------------------------------
MEM_KINDS = ("mem", "memcpy", "memset")


def fit_rows(kernels: list[Kernel], measured: dict[str, float]) -> list[str]:
    """The rows the memory constants are fitted on: every measured row whose kernels are all
    memory-bound kernels of our own (not cuBLASLt, not attention, not the driver's memcpy)."""
    rows = []
    for row in measured:
        ks = [k for k in kernels if k.row == row]
        if ks and all(k.kind in ("mem", "memset") for k in ks):
            rows.append(row)
    return rows


def fit_window(dev: Device = H200) -> tuple[Calibration, dict]:
    """Fits LAT_DRAM and ETA on the window's memory-bound rows (least squares of
    log(predicted / measured), each row weighted by the square root of its measured time so that a
    0.8 ms row does not pull as hard as a 28 ms one), then the Newton-Schulz rate so that the GEMM
    row's remainder after the measured layer GEMMs is matched. Returns the calibration and the
    fit's facts (rows used, residuals)."""
    import numpy as np
    from scipy.optimize import least_squares

    c = d24_window_preset()
    ks = window_code_kernels(c)
    meas = load_measured()
    rates = window_rates()
    rows = fit_rows(ks, meas)
    base = Calibration(lat_dram=0.6e-6, eta=0.85, ns_tflops=500.0)

    def calib(x):
        return replace(base, lat_dram=x[0] * 1e-6, eta=x[1])

    def resid(x):
        pred = predict(ks, dev, calib(x), rates)
        return np.array([math.sqrt(meas[r]) * math.log(pred[r] / meas[r]) for r in rows])

    sol = least_squares(resid, x0=[0.6, 0.85], bounds=([0.05, 0.3], [5.0, 0.98]))
    cal = calib(sol.x)
    # Newton-Schulz: the GEMM row less the layer GEMMs at their measured rates.
    gemm_row = [k for k in ks if k.row == GEMM_ROW_OLD]
    layer = sum(k.calls * predict_call(k, dev, cal, rates) for k in gemm_row if k.kind != "ns")
    ns_flops = sum(k.calls * k.flops for k in gemm_row if k.kind == "ns")
    cal = replace(cal, ns_tflops=ns_flops / (meas[GEMM_ROW_OLD] - layer) / 1e12,
                  source=f"fitted on the {dev.name} window of 2026-11-26 (commit 5f3dc9c), "
                         f"{len(rows)} memory-bound rows")
    # The host's time per op: the one that leaves the window's time outside the ops.
    lo, hi = 0.0, 1e-3
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if host_gaps(ks, dev, replace(cal, host_op=mid), rates) < WINDOW_OUTSIDE_S:
            lo = mid
        else:
            hi = mid
    cal = replace(cal, host_op=0.5 * (lo + hi))
    return cal, {"rows": rows, "cost": float(sol.cost)}


# --- today's code ----------------------------------------------------------------------------------
GEMM_ROW = GEMM_ROW_OLD
ATTN_BWD_ROW = "attention backward D & attention backward dQ & attention backward dK dV"
COPIES_ROW = "copies (block input x)"
CAST_ROW = "bf16 copy of the weights, zeroed gradients"
MUON_ROW = "Muon momentum + apply"


# Muon's batch cap (src/optim/muon.h kNsBatchElements): a round gives each owner at most this
# many elements of matrices, its newton_schulz_batched call batches them by shape.
NS_BATCH_ELEMENTS = 64 << 20


def ns_batched_tflops(rates: Rates) -> float:
    """ASSUMED (not measured): a batched Newton-Schulz GEMM (a strided batch of 7 to 28 problems
    of 1536-wide matrices at d24) runs at the FLOP-weighted rate the window measured for d24's
    layer GEMMs (cuBLASLt, about 723 TFLOP/s on the H200), where the one-matrix GEMMs were fitted
    at CALIBRATION.ns_tflops. A prediction until a window times the batched GEMMs."""
    ks = gemm_kernels(d24_window_preset(), "")
    flops = sum(k.calls * k.flops for k in ks)
    return flops / sum(k.calls * k.flops / rates.gemm[k.name] for k in ks)


def muon_rounds(mats: list[tuple[int, int]], owned: list[int]) -> list[list[int]]:
    """The batches one owner runs (src/optim/distributed_optimizer.cc plan_muon_rounds and
    muon_order, every matrix owned by this GPU): rounds of consecutive matrices within
    NS_BATCH_ELEMENTS, each round's matrices grouped by shape (groups in first-seen order)."""
    rounds, cur, size = [], [], 0
    for k in owned:
        e = mats[k][0] * mats[k][1]
        if cur and size + e > NS_BATCH_ELEMENTS:
            rounds.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += e
    if cur:
        rounds.append(cur)
    batches = []
    for r in rounds:
        shapes = list(dict.fromkeys(mats[k] for k in r))
        batches += [[k for k in r if mats[k] == sh] for sh in shapes]
    return batches


def muon_ns_batched_kernels(c: dict, owned: list[int], cast_row: str) -> list[Kernel]:
    """Newton-Schulz as src/optim/muon.cc newton_schulz_batched runs it for one GPU that owns
    every matrix (bf16 iterations; without TP each batch's Nesterov directions and results lie one
    after another, so each step is one op a batch): per batch of `b` same-shape matrices the 15
    GEMMs as strided batched GEMMs (kind ns_batch), the segmented sum of squares (one partial
    launch over b x the per-matrix blocks, one combine launch), the segmented division into bf16
    X, and the result cast to f32 into the output; a tall batch is transposed in (one launch) and
    out after a cast of the whole batch."""
    mats = sr.block_matrices(c)
    ks: list[Kernel] = []
    for batch in muon_rounds(mats, owned):
        r, k_ = mats[batch[0]]
        b = len(batch)
        m, n = min(r, k_), max(r, k_)
        mn = m * n
        tall = r > k_
        for name, flops in (("A = X X^T", 2 * m * m * n), ("B = b A + c A A", 2 * m * m * m),
                            ("Y = a X + B X", 2 * m * m * n)):
            ks.append(Kernel(GEMM_ROW, f"Newton-Schulz batched GEMM {name}", 5, "ns_batch",
                             flops=b * flops))
        if tall:
            ks.append(Kernel(GEMM_ROW, "transpose_kernel<float> (batch in)", 1, "mem",
                             bytes=2 * F32 * b * mn, blocks=b * math.ceil(mn / 1024), threads=256,
                             dram_trips=1, syncs=2))
        per = min(math.ceil(mn / 2048), 1024)
        part = Kernel(GEMM_ROW, "segment_partial_kernel<float> (sums of squares)", 1, "mem",
                      bytes=F32 * b * mn, blocks=b * per, threads=256,
                      dram_trips=math.ceil(mn / (per * 256 * 4)), syncs=2)
        ks.append(part)
        ks.append(Kernel(GEMM_ROW, "segment_combine_kernel", 1, "mem", bytes=8 * b * per,
                         blocks=b, threads=256, dram_trips=math.ceil(per / 256), syncs=2))
        div = vec_kernel(GEMM_ROW, "div_by_norm_segments_kernel<float, bf16> (G -> bf16 X)", 1,
                         mn, F32 + BF16, blocks_per_sm=4, regs=44)
        div.blocks *= b
        div.bytes *= b
        ks.append(div)
        cast = vec_kernel(cast_row, "cast_kernel<bf16, float> (batch result)", 1, b * mn,
                          F32 + BF16)
        ks.append(cast)
        if tall:
            ks.append(Kernel(GEMM_ROW, "transpose_kernel<float> (batch out)", 1, "mem",
                             bytes=2 * F32 * b * mn, blocks=b * math.ceil(mn / 1024), threads=256,
                             dram_trips=1, syncs=2))
    return ks


# SASS instructions xent_loss_grad_kernel<bf16, bf16> issues a logit over its two passes (tanhf
# and expf in each): its sm_90 loop bodies (cuobjdump -sass of build/.../xent.cu.o, 2026-11-27)
# are 406-427 instructions a chunk of 8 logits in pass 1 and 426-446 in pass 2.
XENT_INSTR = 105


def current_code_kernels(c: dict, accum: int = 1) -> list[Kernel]:
    """Every kernel of today's d24 / d32 step on one GPU (dp 1, tp 1, prenorm, baseline value
    mode, bf16, QK-norm, tensor-core attention), `accum` micro-batches per optimizer step (the
    optimizer's kernels are counted 1 / accum times per micro-step). Launch geometry from
    kernels/ at this commit; bytes as bench/static_report.py counts them (tests/launch/
    test_step_model.py holds the two to the same bytes per row)."""
    N, C, F, H, Hkv, hd, L, Vp = (c["B"] * c["T"], c["C"], c["hidden"], c["H"], c["Hkv"], c["hd"],
                                  c["L"], c["Vp"])
    e, a = BF16, 1.0 / accum
    ks: list[Kernel] = []
    ks += gemm_kernels(c, GEMM_ROW)
    ks += attention_kernels(c, ("attention forward", ATTN_BWD_ROW))
    # Row kernels (rmsnorm.cu over kernels/row_team.cuh): a block of C / 8 threads a row (d24 192,
    # d32 256), one 16-byte chunk a thread held in registers between the row's sum and its write.
    # add_rmsnorm: x and delta read (one trip), the sum and y written; 2L - 1 calls (prenorm's
    # attention add + MLP norm, each block's last add + the next block's norm).
    ks.append(row_kernel("residual add + rmsnorm forward (fused)",
                         "add_rmsnorm_forward_kernel<bf16, true, false>", 2 * L - 1, N, C,
                         e * 4 * N * C + F32 * N, regs=28))
    # The first block's input norm, the final norm, the embedding's norm.
    ks.append(row_kernel("rmsnorm forward (x)", "rmsnorm_forward_kernel<bf16, true, false>", 3, N,
                         C, e * 2 * N * C + F32 * N, regs=28))
    # Backward: x and dy read (one trip) and, accumulating into the stream's gradient (the blocks'
    # two norms), dx read after the row's sum (a second trip).
    ks.append(row_kernel("rmsnorm backward (x)",
                         "rmsnorm_backward_kernel<bf16, true, false> (accumulate)", 2 * L, N, C,
                         e * 4 * N * C + F32 * N, regs=36, trips=2))
    ks.append(row_kernel("rmsnorm backward (x)", "rmsnorm_backward_kernel<bf16, true, false>", 2,
                         N, C, e * 3 * N * C + F32 * N, regs=36))
    # rope_rmsnorm_forward_kernel<bf16, true> (rope.cu): teams of 8 threads a head vector, 32
    # vectors a 256-thread block; x in 16-byte words (one trip), the cos/sin table from L2 (one
    # trip), written once. q and k: one call each per layer.
    for rows_ in (N * H, N * Hkv):
        ks.append(Kernel("rope + QK-norm (fused)", "rope_rmsnorm_forward_kernel<bf16, true>", L,
                         "mem", bytes=e * 2 * rows_ * hd + F32 * rows_ + 8 * c["T"] * hd // 2,
                         blocks=math.ceil(rows_ / 32), threads=256, regs=41, dram_trips=1,
                         l2_trips=1))
    # activation.cu: chunks of 8, grid-stride over 8 blocks a SM. These two passes are the fewest
    # the MLP's relu^2 can take while cuBLASLt computes the GEMMs (issue 37 item 3): no cuBLASLt
    # epilogue squares (RELU, GELU and their AUX/backward forms only), so the forward reads fc's
    # output h and writes a = relu(h)^2 for proj's GEMM (4 bytes an element), and the backward
    # reads the derivative's source and proj's dgrad and writes dh for fc's two GEMMs (6 bytes).
    # Keeping only a and taking the derivative as 2 sqrt(a) moves the same bytes (it would save
    # h's memory, not a pass) and is not exact in bf16: sqrt(bf16(r^2)) is within 2^-9 of r
    # relative, up to half a bf16 ulp of dh before dh's own rounding; h is kept. Under
    # --recompute mlp the rerun (4 bytes) and the backward (6) could be one pass reading h and dy
    # and writing a and dh (8 bytes): not built. Fewer bytes need the square in a GEMM epilogue
    # (a CUTLASS/custom GEMM), not cuBLASLt.
    ks.append(vec_kernel("relu^2 forward + backward", "act_forward_kernel<bf16, true>", L, N * F,
                         2 * e, regs=24))
    ks.append(vec_kernel("relu^2 forward + backward", "act_backward_kernel<bf16, true>", L, N * F,
                         3 * e))
    ks.append(vec_kernel("residual adds (axpy)", "axpy_kernel<bf16>", 1, N * C, 3 * e, regs=28))
    ks.append(Kernel(COPIES_ROW, "cudaMemcpyAsync (first block's input)", 1, "memcpy",
                     bytes=2 * e * N * C))
    ks.append(vec_kernel("embedding gather + scatter-add", "gather_kernel<bf16>", 1, N * C,
                         F32 + BF16, regs=28))
    # The scatter-add keeps its per-element owners (deterministic sums): unchanged.
    ks.append(stream_kernel("embedding gather + scatter-add", "scatter_add_kernel<bf16>", 1, N * C,
                            BF16 + 2 * F32))
    # xent_loss_grad_kernel<bf16, bf16> (xent.cu): one 1024-thread block a row, 4 chunks of 8 a
    # thread a pass; pass 1 online max and sum (a trip a chunk), block reductions, pass 2 re-reads
    # the row (L2: 264 rows of 64 KiB in flight) and writes the gradient over it. Its arithmetic
    # (tanh and exp of each logit in both passes) issues about XENT_INSTR SASS instructions a
    # logit: `instr`.
    chunks = math.ceil(Vp / (1024 * 8))
    ks.append(Kernel("cross entropy forward + backward (fused)", "xent_loss_grad_kernel<bf16, bf16>",
                     1, "mem", bytes=e * 2 * N * Vp, blocks=N, threads=1024, regs=32,
                     dram_trips=chunks, l2_trips=chunks, syncs=4,
                     instr=XENT_INSTR * math.ceil(Vp / 1024)))
    # The optimizer, every `accum` micro-batches: Muon on every matrix (one GPU owns them all),
    # AdamW on wte and lm_head, the compute copy of the weights Muon does not write, the zeroing.
    first_optimizer = len(ks)
    mats = sr.block_matrices(c)
    for (r, k_) in mats:
        ks.append(vec_kernel(MUON_ROW, "muon_momentum_kernel", a, r * k_, 16, W=4))
        # The step-values instances (coefficients and guard read from device memory: ptxas 30
        # and 55 registers, 32 for the momentum).
        ks.append(vec_kernel(MUON_ROW, "muon_apply_kernel<float> (+ bf16 copy)", a, r * k_, 14,
                             regs=30))
    for k in muon_ns_batched_kernels(c, list(range(len(mats))), CAST_ROW):
        k.calls *= a
        ks.append(k)
    for _ in range(2):
        ks.append(vec_kernel("AdamW (embedding, lm_head)", "adamw_kernel", a, Vp * C, 28, W=4,
                             blocks_per_sm=4, regs=55))
    ks.append(vec_kernel(CAST_ROW, "cast_kernel<float, bf16> (wte, lm_head)", a, 2 * Vp * C,
                         F32 + BF16, regs=30))
    for k in ks[first_optimizer:]:
        k.optimizer = True
    # Deferred gradient zeroing (issue 37 item 3, ParamStore::set_overwrite_first): the block
    # matrices' and lm_head's gradients are overwritten by their step's first weight-gradient GEMM
    # (beta = 0, which also spares cuBLASLt reading the old f32 gradient: not modelled, small
    # beside the GEMM); only wte's gradient (the embedding's scatter-add writes a few rows) is
    # still zeroed, one memset a step. It was every gradient: F32 x (block matrices + 2 Vp C).
    # (Under --fp8 e4m3 the block matrices keep their zeroing: GPT::gemm_written_grads.)
    ks.append(Kernel(CAST_ROW, "cudaMemsetAsync (wte's gradient)", a, "memset",
                     bytes=F32 * Vp * C))
    return ks


# --- reports ---------------------------------------------------------------------------------------
def kernel_table(ks: list[Kernel], dev: Device, cal: Calibration, rates: Rates) -> list[dict]:
    """Per kernel: calls, ms per step, and what it achieves: GB/s and the fraction of the HBM
    datasheet bandwidth for memory kernels, TFLOP/s and the fraction of the tensor-core peak for
    GEMMs and attention."""
    out = []
    for k in ks:
        t = predict_call(k, dev, cal, rates)
        d = dict(row=k.row, kernel=k.name, calls=k.calls, ms=k.calls * t * 1e3, kind=k.kind)
        if k.kind in ("gemm", "ns", "ns_batch", "attn"):
            d["tflops"] = k.flops / t / 1e12
            d["of_peak"] = k.flops / t / dev.tc_peak
        else:
            d["gbps"] = k.bytes / t / 1e9 if t > 0 else 0.0
            d["of_peak"] = k.bytes / t / dev.hbm if t > 0 else 0.0
        out.append(d)
    return out


def merge_kernels(table: list[dict]) -> list[dict]:
    """Rows of kernel_table with the same kernel name and row summed (Muon's 144 matrices...)."""
    acc: dict[tuple, dict] = {}
    for d in table:
        key = (d["row"], d["kernel"])
        if key not in acc:
            acc[key] = dict(d, n=1, _w=d["ms"] * d["of_peak"])
        else:
            acc[key]["calls"] += d["calls"]
            acc[key]["ms"] += d["ms"]
            acc[key]["_w"] += d["ms"] * d["of_peak"]
    out = []
    for d in acc.values():
        d["of_peak"] = d["_w"] / d["ms"] if d["ms"] else 0.0  # time-weighted
        del d["_w"]
        out.append(d)
    return sorted(out, key=lambda d: -d["ms"])


ETA_STREAM = 0.85     # what-if: the HBM share STREAM-like kernels reach on Hopper (not fitted)
# What-if: issue 37's attention targets. The attention rows above use the rates the 2026-11-26
# window measured for the kernels it ran (WINDOW_ATTN_TFLOPS); the forward and backward kernels
# rewritten since (128-query forward blocks, one barrier per tile, masks only on edge tiles) have
# no measurement yet, and no rate is claimed for them: the next window's attention stage times
# the new kernels beside the old (attention_bench's "forward v1", "backward v1") and replaces these.
ATTN_TARGET_TFLOPS = {(2048, "fwd"): 300.0, (512, "fwd"): 300.0, (2048, "bwd"): 250.0,
                      (512, "bwd"): 250.0}
PEER_TOK_S = 89972.0  # compiled PyTorch peer, d24 baseline mb 16, H200, 2026-11-26 (same call)
TOP = 10              # the window's costliest rows the model must reproduce (issue 37)
TOLERANCE = 0.10


def reproduction(cal: Calibration = None) -> list[dict]:
    """The window's rows, measured against predicted, and how each prediction was made."""
    cal = cal or CALIBRATION
    c = d24_window_preset()
    ks = window_code_kernels(c)
    meas = load_measured()
    pred = predict(ks, H200, cal, window_rates())
    fitted = set(fit_rows(ks, meas))
    out = []
    for row in sorted(meas, key=lambda r: -meas[r]):
        kinds = {k.kind for k in ks if k.row == row}
        how = ("fitted (memory constants)" if row in fitted else
               "NS rate fitted on this row" if "ns" in kinds else
               "attention stage's TFLOP/s" if kinds == {"attn"} else
               "HBM constants (not fitted on it)")
        out.append(dict(row=row, measured_ms=meas[row] * 1e3, predicted_ms=pred[row] * 1e3,
                        error=pred[row] / meas[row] - 1.0, how=how))
    return out


# --fp8 e4m3 (issue 44). PREDICTION, nothing measured: Hopper's dense FP8 tensor-core peak is
# twice its bf16 peak (H100 SXM / H200 datasheets: 1,979 vs 989 TFLOP/s), so a block linear GEMM
# is predicted at FP8_GEMM_SPEEDUP times the bf16 rate the window measured for that shape (the
# same efficiency against a doubled peak); the lm head stays bf16. The quantization kernels are
# kernels/fp8.cu's: 16-byte accesses, grids of one wave (vec_kernel). Per micro-batch each block
# GEMM quantizes its activation operands: an amax pass (reads bf16) and a quantization pass
# (reads bf16, writes a byte a value; the weight gradient's two operands through the transposing
# 64 x 64 tile kernel, modelled as the same streaming pass: optimistic until a window times it).
# The weights are quantized once per optimizer step (ops::Fp8WeightCacheScope: an amax pass and
# one pass writing both layouts) and reused by every micro-batch's forward and data gradient.
# MFU stays counted against the bf16 peak, as peers report FP8 runs.
FP8_GEMM_SPEEDUP = 2.0
FP8_LAYERS = ("qkv", "attn_out", "fc", "mlp_out")
FP8_ROW = "fp8 quantization (amax + codes)"


def fp8_rates(rates: Rates) -> Rates:
    g = {k: (v * FP8_GEMM_SPEEDUP if k.split(".")[0] in FP8_LAYERS else v)
         for k, v in rates.gemm.items()}
    return replace(rates, gemm=g, source=rates.source + "; FP8 GEMMs predicted at "
                   f"{FP8_GEMM_SPEEDUP:g}x (not measured)")


def fp8_quant_kernels(ks: list[Kernel], accum: int = 1) -> list[Kernel]:
    """The quantization kernels the block linear GEMMs of `ks` add under --fp8 e4m3, per
    micro-step with the optimizer every `accum` micro-batches (kernels/fp8.cu, gemm_fp8.cc)."""
    out = []
    for k in ks:
        if k.kind != "gemm" or k.name.split(".")[0] not in FP8_LAYERS:
            continue
        M, N, K = k.shape
        what = k.name.split(".")[1]
        # The activation operands: fwd x (M,K); dx dy (M,K); dW x^T (M,K) and dy^T (N,K).
        for elems, tr in ([(M * K, False)] if what in ("fwd", "dx") else
                          [(M * K, True), (N * K, True)]):
            out.append(vec_kernel(FP8_ROW, "fp8 amax_kernel<bf16>", k.calls, elems, BF16))
            out.append(vec_kernel(FP8_ROW, "fp8 quantize_transposed_kernel<bf16>" if tr else
                                  "fp8 quantize_kernel<bf16>", k.calls, elems, BF16 + 1))
        if what == "fwd":  # the weight (N,K): once per optimizer step, both layouts in one pass
            out.append(vec_kernel(FP8_ROW, "fp8 amax_kernel<bf16> (weight)", k.calls / accum,
                                  N * K, BF16))
            out.append(vec_kernel(FP8_ROW, "fp8 quantize_transposed_kernel<bf16> (weight, both "
                                  "layouts)", k.calls / accum, N * K, BF16 + 2))
    return out


def fp8_scratch_bytes(ks: list[Kernel]) -> int:
    """The largest FP8 scratch one GEMM holds (its activation operands' codes; freed after it)."""
    return max((k.shape[0] + k.shape[1]) * k.shape[2] if k.name.endswith(".dW") else
               k.shape[0] * k.shape[2] for k in ks
               if k.kind == "gemm" and k.name.split(".")[0] in FP8_LAYERS)


def fp8_weight_cache_bytes(ks: list[Kernel]) -> int:
    """The weights' cached codes, both layouts (2 bytes a block linear weight element)."""
    return sum(2 * k.calls * k.shape[1] * k.shape[2] for k in ks
               if k.kind == "gemm" and k.name.split(".")[0] in FP8_LAYERS and
               k.name.endswith(".fwd"))


def step_prediction(ks: list[Kernel], c: dict, dev: Device, cal: Calibration, rates: Rates,
                    outside_s: float | None = None) -> dict:
    """The step: its kernels plus the time outside the ops (None: the host gaps the model
    predicts; 0: none, as CUDA graphs would give)."""
    rows = predict(ks, dev, cal, rates)
    if outside_s is None:
        outside_s = host_gaps(ks, dev, cal, rates)
    kern = sum(rows.values())
    tokens = c["B"] * c["T"]
    step = kern + outside_s
    flops = sr.model_flops_per_token(c) * tokens
    return dict(rows=rows, kernels_s=kern, outside_s=outside_s, step_s=step,
                tok_s=tokens / step, mfu=flops / (step * dev.tc_peak))


def short(row: str) -> str:
    """A row name for printing: the first of the rows a joined key covers, and how many more."""
    parts = row.split(" & ")
    return parts[0] + (f" & {len(parts) - 1} more" if len(parts) > 1 else "")


def _fmt_rows(rows: dict, meas: dict | None = None) -> list[str]:
    out = []
    for r in sorted(rows, key=lambda r: -rows[r]):
        m = f"{meas[r] * 1e3:9.2f}" if meas and r in meas else "        -"
        out.append(f"  {rows[r] * 1e3:9.2f} {m}  {short(r)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="refit the constants on the window")
    ap.add_argument("--kernels", metavar="PRESET", help="every kernel of today's step (d24, d32)")
    ap.add_argument("--device", choices=sorted(DEVICES), default="h200")
    ap.add_argument("--micro-batch", type=int, default=0, help="default: d24 16, d32 8")
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches per optimizer step (the window: 1)")
    ap.add_argument("--json", help="write the reproduction and predictions to this file")
    args = ap.parse_args()
    cal = CALIBRATION
    if args.fit:
        cal, facts = fit_window()
        print(f"fitted on {len(facts['rows'])} rows (cost {facts['cost']:.4g}):")
        print(f"  lat_dram {cal.lat_dram * 1e6:.4f} us, eta {cal.eta:.4f}, "
              f"Newton-Schulz {cal.ns_tflops:.1f} TFLOP/s, host per op {cal.host_op * 1e6:.2f} us")
    dev = DEVICES[args.device]
    rates = window_rates()
    if args.kernels:
        c = sr.preset(args.kernels, args.micro_batch or (16 if args.kernels == "d24" else 8))
        table = merge_kernels(kernel_table(current_code_kernels(c, args.accum), dev, cal, rates))
        total = sum(d["ms"] for d in table)
        print(f"PREDICTED (step model, {dev.name}; not measured): every kernel of today's "
              f"{args.kernels} step, micro-batch {c['B']} x {c['T']}, optimizer every "
              f"{args.accum} micro-batch(es), dp 1\n")
        print(f"  {'ms/step':>8} {'share':>6} {'calls':>7} {'achieves':>22}  kernel  [row]")
        for d in table:
            ach = (f"{d['gbps']:7.0f} GB/s {100 * d['of_peak']:4.0f}% HBM" if "gbps" in d else
                   f"{d['tflops']:6.0f} TF/s {100 * d['of_peak']:4.0f}% TC")
            print(f"  {d['ms']:8.2f} {100 * d['ms'] / total:5.1f}% {d['calls']:7.4g} {ach:>22}  "
                  f"{d['kernel']}  [{short(d['row'])}]")
        print(f"\n  {total:8.2f} ms of kernels (outside the ops not included)")
        return 0

    rep = reproduction(cal)
    meas_step = WINDOW_STEP_S
    print("Reproduction of the 2026-11-26 window (H200, commit 5f3dc9c, d24 baseline, "
          "micro-batch 16 x 2048, optimizer every step), ms per step:\n")
    print(f"  {'measured':>9} {'model':>9} {'error':>7}  row  (how the model got it)")
    for i, d in enumerate(rep):
        mark = "*" if i < TOP and abs(d["error"]) > TOLERANCE else " "
        print(f"  {d['measured_ms']:9.2f} {d['predicted_ms']:9.2f} {100 * d['error']:+6.1f}%{mark} "
              f"{short(d['row'])}  ({d['how']})")
    c = d24_window_preset()
    old = step_prediction(window_code_kernels(c), c, H200, cal, rates)
    print(f"\n  outside the ops: measured {WINDOW_OUTSIDE_S * 1e3:.1f} ms, model "
          f"{old['outside_s'] * 1e3:.1f} ms (host {cal.host_op * 1e6:.1f} us an op, fitted on it)")
    print(f"  step: measured {meas_step * 1e3:.1f} ms; model {old['step_s'] * 1e3:.1f} ms "
          f"({100 * (old['step_s'] / meas_step - 1):+.1f}%)")
    bad = [short(d["row"]) for d in rep[:TOP] if abs(d["error"]) > TOLERANCE]
    print(f"  the {TOP} costliest rows within {100 * TOLERANCE:.0f}%: {TOP - len(bad)} of {TOP}"
          + (f" (* outside: {'; '.join(bad)})" if bad else ""))

    out = {"calibration": cal.__dict__, "reproduction": rep, "predictions": {}}
    print("\nPREDICTED for today's code (not measured), baseline, one GPU, per micro-step (d24: the "
          "optimizer every micro-step, the window's setting; d32: every 4, 65,536 tokens a GPU):")
    for dname in ("h200", "h100"):
        d = DEVICES[dname]
        for preset, mb, accum in (("d24", 16, 1), ("d32", 8, 4)):
            c = sr.preset(preset, mb)
            ks = current_code_kernels(c, accum)
            eager = step_prediction(ks, c, d, cal, rates)
            bare = step_prediction(ks, c, d, cal, rates, 0.0)
            out["predictions"][f"{preset}/{dname}/accum{accum}"] = {
                "eager": {k: v for k, v in eager.items() if k != "rows"},
                "no_host_gaps": {k: v for k, v in bare.items() if k != "rows"},
                "launches": sum(k.calls for k in ks)}
            peer = (f", {eager['tok_s'] / PEER_TOK_S:.2f}x the torch peer's measured "
                    f"{PEER_TOK_S:,.0f} ({bare['tok_s'] / PEER_TOK_S:.2f}x with no host gaps)"
                    if (preset, dname) == ("d24", "h200") else "")
            print(f"  {preset} mb {mb} on {d.name}: {eager['kernels_s'] * 1e3:.1f} ms of kernels + "
                  f"{eager['outside_s'] * 1e3:.1f} ms host gaps = {eager['step_s'] * 1e3:.1f} ms, "
                  f"{eager['tok_s']:,.0f} tok/s, MFU {100 * eager['mfu']:.1f}%{peer}")
    print("\nPREDICTED host gaps by --cuda-graphs mode (not measured: no window has run a graph; "
          "docs/gpu-session.md's graphs stage measures them), d24 mb 16:")
    for dname in ("h200", "h100"):
        d = DEVICES[dname]
        c = sr.preset("d24", 16)
        ks = current_code_kernels(c, 1)
        parts = []
        for mode in CUDA_GRAPH_MODES:
            gap = host_gaps_with_graphs(ks, d, cal, rates, mode)
            p = step_prediction(ks, c, d, cal, rates, gap)
            out["predictions"][f"d24/{dname}/accum1/cuda-graphs-{mode}"] = {
                k: v for k, v in p.items() if k != "rows"}
            parts.append(f"{mode} {gap * 1e3:.2f} ms gaps, {p['step_s'] * 1e3:.1f} ms, "
                         f"{p['tok_s']:,.0f} tok/s")
        print(f"  {d.name}: " + "; ".join(parts))
    print("\nPREDICTED with --fp8 e4m3 (not measured; FP8 GEMMs at "
          f"{FP8_GEMM_SPEEDUP:g}x the measured bf16 rate, plus kernels/fp8.cu's vectorized "
          "quantization, weights once per optimizer step; MFU against the bf16 peak, as peers "
          "report):")
    for dname in ("h200", "h100"):
        d = DEVICES[dname]
        for preset, mb, accum in (("d24", 16, 1), ("d32", 8, 4)):
            c = sr.preset(preset, mb)
            ks = current_code_kernels(c, accum)
            base = step_prediction(ks, c, d, cal, rates)
            f8 = step_prediction(ks + fp8_quant_kernels(ks, accum), c, d, cal, fp8_rates(rates))
            fused = step_prediction(ks, c, d, cal, fp8_rates(rates))  # quantization free
            out["predictions"][f"{preset}/{dname}/accum{accum}/fp8"] = dict(
                {k: v for k, v in f8.items() if k != "rows"},
                quantization_s=f8["rows"].get(FP8_ROW, 0),
                weight_cache_bytes=fp8_weight_cache_bytes(ks),
                scratch_bytes=fp8_scratch_bytes(ks), bf16_step_s=base["step_s"],
                bf16_mfu=base["mfu"])
            print(f"  {preset} mb {mb} on {d.name}: {f8['step_s'] * 1e3:.1f} ms "
                  f"(bf16 {base['step_s'] * 1e3:.1f} ms, {100 * (base['step_s'] / f8['step_s'] - 1):+.1f}% "
                  f"tok/s), MFU {100 * f8['mfu']:.1f}% (bf16 {100 * base['mfu']:.1f}%); "
                  f"quantization {f8['rows'].get(FP8_ROW, 0) * 1e3:.1f} ms; weights' FP8 codes "
                  f"{fp8_weight_cache_bytes(ks) / 2**20:.0f} MiB, largest GEMM scratch "
                  f"{fp8_scratch_bytes(ks) / 2**20:.0f} MiB; with the quantization free "
                  f"{fused['step_s'] * 1e3:.1f} ms "
                  f"({100 * (base['step_s'] / fused['step_s'] - 1):+.1f}% tok/s)")
    c = sr.preset("d24", 16)
    ks = current_code_kernels(c, 1)
    hi = step_prediction(ks, c, H200, replace(cal, eta=ETA_STREAM), rates)
    print(f"  if the 16-byte kernels reach {100 * ETA_STREAM:.0f}% of HBM (a streaming kernel's "
          f"share on Hopper) instead of the window's fitted {100 * cal.eta:.0f}%: d24 H200 "
          f"{hi['step_s'] * 1e3:.1f} ms, {hi['tok_s'] / PEER_TOK_S:.2f}x the peer")
    fa = step_prediction(ks, c, H200, cal, replace(rates, attn=dict(ATTN_TARGET_TFLOPS)))
    print(f"  what-if, not a prediction: attention at issue 37's targets (forward "
          f"{ATTN_TARGET_TFLOPS[(2048, 'fwd')]:.0f}, backward {ATTN_TARGET_TFLOPS[(2048, 'bwd')]:.0f}"
          f" TFLOP/s, FlashAttention-2's published H100 class) instead of the window's v1 rates "
          f"(the rewritten kernels are unmeasured): d24 H200 {fa['step_s'] * 1e3:.1f} ms, "
          f"{fa['tok_s'] / PEER_TOK_S:.2f}x the peer")
    now = step_prediction(ks, c, H200, cal, rates)
    print("\n  d24 on the H200, rows of today's code (model) against the window's code (measured):")
    meas = load_measured()
    for line in _fmt_rows(now["rows"], meas):
        print(line)
    print(f"  {now['outside_s'] * 1e3:9.2f} {WINDOW_OUTSIDE_S * 1e3:9.2f}  (outside the ops)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
