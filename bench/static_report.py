"""Static performance report of a vtrain training step on one H100, without a GPU.

For a preset (d24, d32: docs/model.md's depth-parameterised GPTs, baseline value mode, bf16
activations), every kernel a training step launches on one GPU, with
  - FLOPs and HBM bytes per step (the FLOPs the kernel executes: for attention, whole 64 x 64
    tiles, masked elements included; bytes: each tensor read or written once from HBM, i.e. what
    the kernel cannot avoid moving, L2 reuse assumed for re-read tiles);
  - registers, static + dynamic shared memory and the resulting blocks per SM (occupancy), from
    the ptxas -v reports of the nvcc build (tools/kernel_resources.py); cuBLASLt GEMMs have none;
  - the roofline time on an H100 SXM: max(FLOPs / peak, bytes / 3.35 TB/s), peak 989 TFLOP/s for
    tensor-core (bf16 mma) work and 67 TFLOP/s for CUDA-core fp32 work;
  - optionally a measured column (--measured FILE: JSON {kernel row name: seconds per step}),
    for a GPU session (docs/gpu-session.md).
From the sum: the step time and MFU (model FLOPs of docs/model.md "Metrics" / (time x 989
TFLOP/s)) the design can at best reach, with the reference (CUDA-core) attention for comparison.

What it is not: a prediction. Real kernels reach a fraction of the roofline (mma.sync kernels on
H100 run well below the 989 TFLOP/s that wgmma reaches; launch gaps, the tails of small grids,
synchronization), and communication between GPUs is left out. It bounds what the design allows.

  .venv/bin/python bench/static_report.py [--build build] [--presets d24,d32] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import kernel_resources as kr  # noqa: E402

# H100 SXM5.
PEAK_TC = 989e12      # dense bf16 tensor-core FLOP/s
PEAK_FP32 = 67e12     # CUDA-core fp32 FLOP/s
HBM = 3.35e12         # bytes/s
SMS = 132
SM_REGS, SM_SMEM, SM_THREADS, SM_BLOCKS = 65536, 228 * 1024, 2048, 32
RESERVED_SMEM = 1024  # per block (sm_90)

BF16, F32 = 2, 4


def preset(name: str, micro_batch: int) -> dict:
    """src/model/config.cc config_from_depth: n_embd = 64 depth rounded up to 128, hd 128, MHA,
    vocab 32768 (padded to 64), T 2048, MLP 4x, windows SSSL with the last layer long, short
    window ceil(T/4/128)*128."""
    depth = int(name[1:])
    C = (64 * depth + 127) // 128 * 128
    T = 2048
    short = ((T + 3) // 4 + 127) // 128 * 128
    windows = [T if (i == depth - 1 or "SSSL"[i % 4] == "L") else min(short, T)
               for i in range(depth)]
    return dict(name=name, L=depth, C=C, H=C // 128, Hkv=C // 128, hd=128, V=32768,
                Vp=(32768 + 63) // 64 * 64, T=T, hidden=4 * C, windows=windows, B=micro_batch)


def model_flops_per_token(c: dict) -> float:
    """docs/model.md "Metrics" (src/model/flops.cc): 6 x matmul params + attention 12 H hd
    min(W, T)."""
    C, L = c["C"], c["L"]
    per_layer = C * C + 2 * C * c["Hkv"] * c["hd"] + C * C + 2 * C * c["hidden"]
    matmul = L * per_layer + C * c["V"]
    attn = sum(12.0 * c["H"] * c["hd"] * min(w, c["T"]) for w in c["windows"])
    return 6.0 * matmul + attn


# --- attention tiles, exactly as the kernels visit them ----------------------------------------
def tc_attention(T: int, W: int, hd: int, H: int, Hkv: int, B: int) -> dict:
    """FLOPs of kernels/attention_tc.cu as its warps visit tiles, per call over B sequences.
    Forward: blocks of 128 queries, warps of 32 rows, key tiles of 64 from the block's first
    visible one to its diagonal, computed as 32-key sub-tiles that a warp skips when none of its
    rows sees them. dQ: blocks of 64 queries, warps of 16 rows, 64-key tiles, skipped likewise.
    dK/dV: blocks of 64 keys, warps of 16 keys, 32-query steps, skipped likewise."""
    def sees(r0: int, r1: int, k0: int, k1: int) -> bool:  # some query in [r0, r1] sees a key
        return k0 <= r1 and r0 - k1 < W

    fwd_visits = 0  # (warp, 32-key sub-tile) pairs: 32 x 32 each
    for t0 in range(0, T, 128):
        t_last = min(t0 + 128, T) - 1
        for j in range(max(0, t0 - W + 1) // 64, t_last // 64 + 1):
            for k0 in (64 * j, 64 * j + 32):
                fwd_visits += sum(sees(t0 + 32 * w, t0 + 32 * w + 31, k0, k0 + 31)
                                  for w in range(4))
    dq_visits = 0  # (warp, 64-key tile) pairs: 16 x 64 each
    for t0 in range(0, T, 64):
        t_last = min(t0 + 64, T) - 1
        for j in range(max(0, t0 - W + 1) // 64, t_last // 64 + 1):
            dq_visits += sum(sees(t0 + 16 * w, t0 + 16 * w + 15, 64 * j, 64 * j + 63)
                             for w in range(4))
    kv_visits = 0  # (warp, 32-query step) pairs per query head: 16 x 32 each
    for s0 in range(0, T, 64):
        s_last = min(s0 + 64, T) - 1
        t_end = min(T, s_last + W)
        for i in range(s0 // 32, (t_end - 1) // 32 + 1):
            kv_visits += sum(sees(32 * i, 32 * i + 31, s0 + 16 * w, s0 + 16 * w + 15)
                             for w in range(4))
    fwd = B * H * fwd_visits * 2 * (2 * 32 * 32 * hd)         # S, O += P V
    dq = B * H * dq_visits * 3 * (2 * 16 * 64 * hd)           # S, dP, dQ
    dkdv = B * H * kv_visits * 4 * (2 * 16 * 32 * hd)         # S^T, dV, dP^T, dK
    return dict(fwd=fwd, dq=dq, dkdv=dkdv)


def ref_attention(T: int, W: int, hd: int, H: int, Hkv: int, B: int) -> dict:
    """FLOPs of the reference kernels/attention.cu (32 x 32 tiles, fp32 FMA on CUDA cores)."""
    tiles = 0
    for t0 in range(0, T, 32):
        t1 = min(t0 + 32, T)
        tiles += (t1 - 1) // 32 - max(0, t0 - W + 1) // 32 + 1  # s0 steps from max(0, t0-W+1)
    kv = 0
    for s0 in range(0, T, 32):
        s1 = min(s0 + 32, T)
        t_end = min(s1 - 1 + W, T)
        kv += (t_end - s0 + 31) // 32
    fwd = B * H * tiles * 2 * (2 * 32 * 32 * hd)
    dq = B * H * tiles * 3 * (2 * 32 * 32 * hd)
    dkdv = B * H * kv * 4 * (2 * 32 * 32 * hd)
    return dict(fwd=fwd, dq=dq, dkdv=dkdv)


# --- the step's kernels -------------------------------------------------------------------------
class Row:
    def __init__(self, name, kernel, calls, flops, nbytes, tensor_cores, threads=256, dyn_smem=0):
        self.name, self.kernel, self.calls = name, kernel, calls
        self.flops, self.bytes, self.tc = flops, nbytes, tensor_cores
        self.threads, self.dyn_smem = threads, dyn_smem

    def roofline(self) -> float:
        peak = PEAK_TC if self.tc else PEAK_FP32
        return max(self.flops / peak, self.bytes / HBM)

    def bound(self) -> str:
        peak = PEAK_TC if self.tc else PEAK_FP32
        return "compute" if self.flops / peak >= self.bytes / HBM else "memory"


def gemm(M, N, K, out_bytes=BF16, accumulate=False):
    """2MNK FLOPs; bf16 A, B read once, C written once (read too when accumulating)."""
    return 2.0 * M * N * K, BF16 * (M * K + K * N) + out_bytes * M * N * (2 if accumulate else 1)


def step_rows(c: dict, reference_attention: bool) -> list[Row]:
    B, T, C, L, H, Hkv, hd = c["B"], c["T"], c["C"], c["L"], c["H"], c["Hkv"], c["hd"]
    N, F, Vp = B * T, c["hidden"], c["Vp"]
    qd, kvd = H * hd, Hkv * hd
    rows: list[Row] = []
    acc: dict[str, list] = {}

    def add(name, kernel, flops, nbytes, tc=False, calls=1, threads=256, dyn_smem=0):
        if name in acc:
            acc[name][2] += flops
            acc[name][3] += nbytes
            acc[name][5] += calls
        else:
            acc[name] = [name, kernel, flops, nbytes, tc, calls, threads, dyn_smem]

    # Forward + backward GEMMs of the blocks: y = x W (dx = dy W^T, dW += x^T dy in fp32).
    for (k_in, k_out, what) in [(C, qd, "wq"), (C, kvd, "wk"), (C, kvd, "wv"), (qd, C, "wo"),
                                (C, F, "fc"), (F, C, "proj")]:
        f, b = gemm(N, k_out, k_in)
        add("GEMM forward (x W)", "cuBLASLt", L * f, L * b, True, L)
        f, b = gemm(N, k_in, k_out)
        add("GEMM backward dx (dy W^T)", "cuBLASLt", L * f, L * b, True, L)
        f, b = gemm(k_in, k_out, N, out_bytes=F32, accumulate=True)
        add("GEMM backward dW (x^T dy, fp32)", "cuBLASLt", L * f, L * b, True, L)
    # lm_head and its gradients.
    f, b = gemm(N, Vp, C)
    add("GEMM forward (x W)", "cuBLASLt", f, b, True)
    f, b = gemm(N, C, Vp)
    add("GEMM backward dx (dy W^T)", "cuBLASLt", f, b, True)
    f, b = gemm(C, Vp, N, out_bytes=F32, accumulate=True)
    add("GEMM backward dW (x^T dy, fp32)", "cuBLASLt", f, b, True)

    # Attention.
    row = hd + 8  # kernels/attention_tc.cu PaddedTile: shared rows padded by 8 elements
    smem_tc = {"fwd": (128 + 4 * 64) * row * BF16,
               "dq": (2 * 64 + 4 * 64) * row * BF16 + 2 * 64 * F32,
               "dkdv": (2 * 64 + 4 * 32) * row * BF16 + 4 * 32 * F32}
    smem_ref = {"fwd": F32 * (4 * 32 * (hd + 1) + 32 * 32 + 3 * 32),
                "dq": F32 * (5 * 32 * (hd + 1) + 32 * 32 + 2 * 32),
                "dkdv": F32 * (6 * 32 * (hd + 1) + 2 * 32 * 32 + 2 * 32)}
    q_bytes, kv_bytes, stat = N * qd * BF16, N * kvd * BF16, B * H * T * F32
    # On tensor cores the backward of RoPE + QK-norm is the epilogue of the dQ and dK kernels
    # (kernels/attention_tc.cuh RopeNormGrad, issue 29): each also reads the pre-RoPE q (k), its
    # rstd and the cos/sin table of the T positions, and does the 9 FLOPs per element (rotation 3,
    # norm 6) that rope_rmsnorm_backward did; the gradient it writes is the pre-RoPE one.
    table = 4 * 2 * T * hd // 2
    qk_epi_q, qk_epi_k = q_bytes + F32 * N * H + table, kv_bytes + F32 * N * Hkv + table
    for W in c["windows"]:
        if reference_attention:
            fl = ref_attention(T, W, hd, H, Hkv, B)
            add("attention forward", "attn_fwd_kernel<bf16>", fl["fwd"],
                2 * q_bytes + 2 * kv_bytes + stat, False, 1, 128, smem_ref["fwd"])
            add("attention backward D", "attn_bwd_d_kernel<bf16>", 2.0 * N * qd,
                2 * q_bytes + stat, False, 1, 256)
            add("attention backward dQ", "attn_bwd_dq_kernel<bf16>", fl["dq"],
                3 * q_bytes + 2 * kv_bytes + 2 * stat, False, 1, 128, smem_ref["dq"])
            add("attention backward dK dV", "attn_bwd_dkdv_kernel<bf16>", fl["dkdv"],
                2 * q_bytes + 4 * kv_bytes + 2 * stat, False, 1, 128, smem_ref["dkdv"])
        else:
            fl = tc_attention(T, W, hd, H, Hkv, B)
            add("attention forward", f"attn_tc_fwd_kernel<{hd}>", fl["fwd"],
                2 * q_bytes + 2 * kv_bytes + stat, True, 1, 128, smem_tc["fwd"])
            # D = rowsum(dO * O) is computed by the dQ kernel from its dO tile (reading O once
            # more, writing D where it read it): no kernel of its own.
            add("attention backward dQ", f"attn_tc_dq_kernel<{hd}>",
                fl["dq"] + 9 * N * qd + 2.0 * N * qd,
                4 * q_bytes + 2 * kv_bytes + 2 * stat + qk_epi_q, True, 1, 128, smem_tc["dq"])
            add("attention backward dK dV", f"attn_tc_dkdv_kernel<{hd}>", fl["dkdv"] + 9 * N * kvd,
                2 * q_bytes + 4 * kv_bytes + 2 * stat + qk_epi_k, True, 1, 128, smem_tc["dkdv"])

    # Memory-bound kernels of the blocks (bf16 activations; rstd and statistics fp32).
    e = BF16
    # The prenorm block's attention residual add and the MLP's norm are one kernel
    # (ops::add_rmsnorm): x and the attention output read once; the sum and n written once (before:
    # axpy 3 passes, the copy 2, rmsnorm 2). So are the MLP residual add that ends a block and the
    # input copy and norm that start the next (the add is carried across the boundary,
    # GPT::blocks_forward): L - 1 more calls on one stage, whose first block's input norm and copy
    # and last block's add stay unfused (the embedding and the head read the stream there). The
    # sum goes into the sub-layer output's buffer, which becomes the stream and the norm's saved
    # input (TrainKit::add_norm, carry_in; prenorm never writes its stream in place): no copy of
    # x, 4 passes (5 with the copy, which shapes that write the stream in place still make).
    # The row kernels run a block of C / 8 threads a row (kernels/row_team.cuh: one 16-byte chunk
    # each, rounded to a warp).
    row_threads = (C // 8 + 31) // 32 * 32
    add("residual add + rmsnorm forward (fused)", "add_rmsnorm_forward_kernel<bf16, true, false>",
        (2 * L - 1) * 4 * N * C, (2 * L - 1) * (e * 4 * N * C + F32 * N), calls=2 * L - 1,
        threads=row_threads)
    add("rmsnorm forward (x)", "rmsnorm_forward_kernel<bf16, true, false>", 3 * N * C,
        e * 2 * N * C + F32 * N, calls=1, threads=row_threads)
    # Backward of the block's two x norms, each adding into the stream's gradient (accumulate):
    # x, dy read, dx read and written.
    add("rmsnorm backward (x)", "rmsnorm_backward_kernel<bf16, true, false>", L * 6 * N * 2 * C,
        L * (e * 4 * 2 * N * C + F32 * N * 2), calls=2 * L, threads=row_threads)
    # RoPE and QK-norm of q and k, one kernel each way (ops::rope_rmsnorm, issue 29): forward
    # reads the pre-RoPE q (k) and writes the normed one; backward reads q (k), dy and rstd and
    # writes dq (dk) in place of dy: 5 passes over N x (qd + kvd) where rope then rmsnorm took 9
    # (rope forward 2, rmsnorm forward 2, rmsnorm backward 3, rope backward 2). FLOPs per element:
    # the rotation 3 and the norm 3 forward, 3 and 6 backward. Each call reads the cos/sin table
    # of the T positions (T x hd/2 fp32 pairs). The kernel's second template argument: pairs per
    # lane, ceil(hd / 64) rounded up to a power of two (registers: the forward's).
    # On tensor cores only the forward is left here (the backward is in the attention's dQ and
    # dK kernels, above): 2 passes.
    per_lane = next(p for p in (1, 2, 4, 8) if hd <= 64 * p)
    if reference_attention:
        add("rope + QK-norm (fused)", "rope_rmsnorm_forward_kernel<bf16, true>",
            L * 15 * N * (qd + kvd),
            L * (e * 5 * N * (qd + kvd) + F32 * 2 * N * (H + Hkv) + 4 * 8 * T * hd // 2),
            calls=4 * L)
    else:
        add("rope + QK-norm (fused)", "rope_rmsnorm_forward_kernel<bf16, true>",
            L * 6 * N * (qd + kvd),
            L * (e * 2 * N * (qd + kvd) + F32 * N * (H + Hkv) + 2 * 8 * T * hd // 2),
            calls=2 * L)
    add("relu^2 forward + backward", "act_forward_kernel<bf16, true>", L * 3 * N * F,
        L * e * (2 * N * F + 3 * N * F), calls=2 * L)
    # The last block's MLP add and the first block's input copy (the norm's saved input); the
    # others are fused above. The baseline's layers attend over their context value itself (no
    # value copy, none of its gradient: TrainKit::attention).
    add("residual adds (axpy)", "axpy_kernel<bf16>", 2 * N * C, 3 * e * N * C, calls=1)
    add("copies (block input x)", "cudaMemcpyAsync", 0, 2 * e * N * C, calls=1)
    # No backward adds: the residual gradient is added inside rmsnorm_backward (accumulate), and
    # the baseline's attention and MLP backward accumulate their input gradients in the GEMMs
    # (`vtrain train --profile`: axpy runs once per step and stage, the last block's MLP add).
    # Embedding, final norm, cross entropy.
    add("embedding gather + scatter-add", "gather_kernel<bf16>", N * C,
        F32 * N * C + e * N * C + e * N * C + F32 * 2 * N * C, calls=2)
    add("rmsnorm forward (x)", "rmsnorm_forward_kernel<bf16, true, false>", 3 * N * C * 2,
        e * 4 * N * C + F32 * 2 * N, calls=2)
    add("rmsnorm backward (x)", "rmsnorm_backward_kernel<bf16, true, false>", 6 * N * C * 2,
        e * 6 * N * C + F32 * 2 * N, calls=2)
    # Cross entropy fused with its backward (ops::xent_loss_grad, issue 29; the head is not
    # vocabulary-sharded at tp 1): one block a row reads the bf16 logits once from memory (its
    # second pass re-reads the row from cache) and writes the gradient over them: 2 passes over
    # N x Vp where the unfused forward and backward took 3 (read, read, write).
    add("cross entropy forward + backward (fused)", "xent_loss_grad_kernel<bf16, bf16>",
        8.0 * N * Vp, e * N * Vp * 2, calls=1, threads=1024)
    return [Row(*[a[0], a[1], a[5], a[2], a[3], a[4], a[6], a[7]]) for a in acc.values()]


def block_matrices(c: dict) -> list[tuple[int, int]]:
    """The Muon matrices in ParamStore order (src/model/block_shape.cc: per layer wq, wk, wv,
    wo, fc, proj), as (rows, cols)."""
    C, L, F, kvd = c["C"], c["L"], c["hidden"], c["Hkv"] * c["hd"]
    return L * [(C, C), (C, kvd), (C, kvd), (C, C), (C, F), (F, C)]


def ns_cost(r: int, k: int) -> tuple[float, float]:
    """FLOPs and bytes of 5 bf16 Newton-Schulz iterations on an r x k matrix (src/optim/muon.cc
    newton_schulz_ops: A = X X^T, B = b A + c A A, Y = a X + B X on the small side m)."""
    m, n = min(r, k), max(r, k)
    return (5 * (2 * m * m * n + 2 * m * m * m + 2 * m * m * n),
            5 * BF16 * (3 * m * n + 3 * m * m + 2 * m * n + m * n))


def busiest_owner(c: dict, dp: int) -> list[int]:
    """Indices of the matrices the busiest rank of a dp-way stage owns: matrix k is
    orthogonalized by stage rank k % dp (src/optim/distributed_optimizer.h, tp 1)."""
    mats = block_matrices(c)
    owned = [[k for k in range(len(mats)) if k % dp == r] for r in range(dp)]
    return max(owned, key=lambda ks: sum(ns_cost(*mats[k])[0] for k in ks))


def optimizer_rows(c: dict, accum: int, dp: int = 1, momentum_everywhere: bool = False,
                   bf16_grads: bool = False) -> list[Row]:
    """Once per optimizer step, amortized over `accum` micro-batches, on the busiest rank of a
    dp-way data-parallel group (tp 1): Muon on the block matrices (momentum and 5 Newton-Schulz
    iterations in bf16 by the matrix's owner only, the apply on every rank), AdamW on the
    embedding and lm_head (ZeRO-1: 1/dp of each), the bf16 compute copy of the weights and the
    gradient zeroing (every rank)."""
    C, Vp = c["C"], c["Vp"]
    mats = block_matrices(c)
    block_params = sum(r * k for r, k in mats)
    mine = busiest_owner(c, dp)
    owned_params = sum(mats[k][0] * mats[k][1] for k in mine)
    if momentum_everywhere:  # before 2026-11-26: every DP replica kept every momentum
        owned_params = block_params
    other = 2 * Vp * C
    ns_flops = sum(ns_cost(*mats[k])[0] for k in mine)
    ns_bytes = sum(ns_cost(*mats[k])[1] for k in mine)
    a = 1.0 / accum
    return [
        Row("Muon Newton-Schulz GEMMs (5 steps, bf16)", "cuBLASLt", 3 * 5 * len(mine) * a,
            ns_flops * a, ns_bytes * a, True),
        # momentum: read g, m; write m, u (owned matrices); apply: read p, x; write p (all):
        # serial or one rank: x f32; pipelined: x bf16 as broadcast, after the owner's
        # f32 -> bf16 cast of its results (read 4, write 2 bytes). (The apply also writes the
        # matrix's bf16 compute copy, ops::muon_apply's copy: counted in the copy's row below,
        # as the cast it replaces was.)
        Row("Muon momentum + apply", "muon_momentum_kernel",
            ((len(mats) if momentum_everywhere else len(mine)) + len(mats)) * a,
            4 * owned_params * a + 2 * block_params * a,
            (16 * owned_params + (12 * block_params if momentum_everywhere or dp == 1 else
                                  10 * block_params + 6 * sum(mats[k][0] * mats[k][1]
                                                              for k in mine))) * a, False),
        Row("AdamW (embedding, lm_head)", "adamw_kernel", a, 12 * other / dp * a,
            28 * other / dp * a, False),
        # (--grad-sync bf16 adds its casts of the gradients to the wire and back: 12 bytes each.)
        # The bf16 compute copy: a cast (read 4, write 2) of the weights Muon does not update; the
        # matrices' copies are written by Muon's applies (2 bytes, no second read of p). The
        # zeroing of every gradient.
        Row("bf16 copy of the weights, zeroed gradients", "cast_kernel<float, bf16>",
            (2 + (2 if bf16_grads else 0)) * a, 0.0,
            ((F32 + BF16) * other + BF16 * block_params +
             (F32 + (12 if bf16_grads else 0)) * (block_params + other)) * a, False),
    ]


# --- communication of a data-parallel step --------------------------------------------------------
class Link:
    """One collective per optimizer step, amortized per micro-step: bytes each rank moves over
    its link and the part of its time the schedule leaves exposed."""
    def __init__(self, name, how, nbytes, seconds, exposed):
        self.name, self.how, self.bytes, self.seconds, self.exposed = (
            name, how, nbytes, seconds, exposed)


def exposed_grad_sum(allreduce_s, layer_share, layers, window_s):
    """src/plan/step_time.cc exposed_grad_sum_s with overlap: the layers' sums (and the output
    head's, started after the head's backward) run behind the last micro-batch's backward (at
    least the last layer's share is exposed), the rest (the embedding) after it."""
    layers_s = allreduce_s * layer_share
    return max(layers_s - window_s, layers_s / layers) + allreduce_s * (1.0 - layer_share)


def muon_phase(c: dict, dp: int, gbps: float, wire_bytes: int, pipelined: bool) -> tuple[float, float]:
    """Muon's Newton-Schulz and broadcasts of one optimizer step on the busiest rank, as
    src/optim/distributed_optimizer.cc muon_step runs them: (seconds of the phase, seconds of it
    that are Newton-Schulz on the busiest rank). Pipelined: round r (matrices [r dp, (r+1) dp),
    one per owner) is broadcast while round r+1 is orthogonalized, each round waiting for its
    slowest owner. Serial (before 2026-11-26): every owner's Newton-Schulz, then the broadcasts."""
    mats = block_matrices(c)
    ns = [max(ns_cost(r, k)[0] / PEAK_TC, ns_cost(r, k)[1] / HBM) for r, k in mats]
    bc = [r * k * wire_bytes / (gbps * 1e9) for r, k in mats]
    busiest = sum(ns[k] for k in busiest_owner(c, dp))
    if not pipelined:
        return busiest + sum(bc), busiest
    rounds = [range(lo, min(lo + dp, len(mats))) for lo in range(0, len(mats), dp)]
    t = max(ns[k] for k in rounds[0])
    for r in range(len(rounds)):
        nxt = max(ns[k] for k in rounds[r + 1]) if r + 1 < len(rounds) else 0.0
        t += max(sum(bc[k] for k in rounds[r]), nxt)
    return t, busiest


def comm_links(c: dict, accum: int, dp: int, gbps: float, grad_bytes: int,
               backward_window_s: float, muon_serial: bool) -> list[Link]:
    """The collectives of vtrain's data-parallel step (docs/design.md "Parallelism") at tp 1,
    pp 1 on a link of `gbps` GB/s per GPU (ring algorithms: an all-reduce moves 2 (dp-1)/dp of
    the data, an all-gather (dp-1)/dp, a broadcast the whole of it through every rank)."""
    mats = block_matrices(c)
    block_params = sum(r * k for r, k in mats)
    other = 2 * c["Vp"] * c["C"]
    bw = gbps * 1e9
    a = 1.0 / accum
    grads = (block_params + other) * grad_bytes
    ar = 2.0 * (dp - 1) / dp * grads
    ar_s = ar / bw
    gather = (dp - 1) / dp * other * F32
    wire = F32 if muon_serial else BF16  # bf16 Newton-Schulz (the GPU default) results
    bcast = block_params * wire
    phase, ns = muon_phase(c, dp, gbps, wire, not muon_serial)
    how = ("fp32, after every Newton-Schulz" if muon_serial else
           "bf16, round r behind round r+1's Newton-Schulz")
    return [
        Link("gradient all-reduce", f"{'fp32' if grad_bytes == F32 else 'bf16'} wire, bucketed, "
             "behind the last backward", ar * a, ar_s * a,
             exposed_grad_sum(ar_s, (block_params + other / 2) / (block_params + other), c["L"],
                              backward_window_s) * a),
        Link("AdamW ZeRO-1 all-gather", "fp32, after the update", gather * a, gather / bw * a,
             gather / bw * a),
        Link("Muon broadcast of the orthogonalized matrices", how, bcast * a, bcast / bw * a,
             (phase - ns) * a),
    ]


# --- resources and occupancy --------------------------------------------------------------------
def load_resources(build: str) -> dict[str, dict]:
    try:
        reports = kr.ptxas_reports(build)
    except FileNotFoundError:
        return {}
    names = kr.demangle(list(reports))
    return {kr.short_name(names[k]): v for k, v in reports.items()}


def occupancy(regs: int, threads: int, smem: int) -> int:
    """Blocks per SM on an H100 (registers allocated per warp in units of 256)."""
    warps = (threads + 31) // 32
    warp_regs = math.ceil(max(regs, 1) * 32 / 256) * 256
    by_regs = SM_REGS // (warps * warp_regs)
    by_smem = SM_SMEM // (smem + RESERVED_SMEM)
    by_threads = SM_THREADS // threads
    return max(0, min(by_regs, by_smem, by_threads, SM_BLOCKS))


def table(c: dict, rows: list[Row], res: dict, measured: dict, markdown: bool) -> tuple[float, str]:
    total = sum(r.roofline() for r in rows)
    lines = []
    head = ["kernel", "launch", "calls", "GFLOP", "MB", "regs", "smem KiB", "blocks/SM",
            "roofline us", "bound", "share", "measured us"]
    lines.append(head)
    for r in sorted(rows, key=lambda r: -r.roofline()):
        info = res.get(r.kernel)
        if info:
            smem = info["smem"] + r.dyn_smem
            regs = str(info["regs"])
            occ = occupancy(info["regs"], r.threads, smem)
            occ_s = f"{occ} ({occ * r.threads * 100 // SM_THREADS}%)"
            smem_s = f"{smem / 1024:.1f}"
        else:
            regs, smem_s, occ_s = "-", "-", "-"
        meas = measured.get(r.name)
        lines.append([r.name, r.kernel, f"{r.calls:g}", f"{r.flops / 1e9:,.1f}",
                      f"{r.bytes / 1e6:,.1f}", regs, smem_s, occ_s, f"{r.roofline() * 1e6:,.0f}",
                      r.bound(), f"{100 * r.roofline() / total:.1f}%",
                      f"{meas * 1e6:,.0f}" if meas is not None else "-"])
    if markdown:
        for l in lines[1:]:
            l[1] = f"`{l[1]}`"  # template brackets would read as HTML
        out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
        out += ["| " + " | ".join(l) + " |" for l in lines[1:]]
    else:
        widths = [max(len(l[i]) for l in lines) for i in range(len(lines[0]))]
        out = ["  ".join(x.ljust(w) for x, w in zip(l, widths)) for l in lines]
    return total, "\n".join(out)


def comm_table(links: list[Link], markdown: bool) -> str:
    lines = [["collective (per GPU)", "how", "MB", "time us", "exposed us"]]
    for l in links:
        lines.append([l.name, l.how, f"{l.bytes / 1e6:,.1f}", f"{l.seconds * 1e6:,.0f}",
                      f"{l.exposed * 1e6:,.0f}"])
    if markdown:
        out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
        out += ["| " + " | ".join(l) + " |" for l in lines[1:]]
    else:
        widths = [max(len(l[i]) for l in lines) for i in range(len(lines[0]))]
        out = ["  ".join(x.ljust(w) for x, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("VTRAIN_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--presets", default="d24,d32")
    ap.add_argument("--micro-batch", default="d24:16,d32:8",
                    help="sequences of T tokens per GPU per micro-step, per preset")
    ap.add_argument("--tokens-per-optimizer-step", type=int, default=65536,
                    help="per GPU (nanochat: 524288 tokens over 8 GPUs)")
    ap.add_argument("--dp", type=int, default=8,
                    help="data-parallel GPUs (tp 1, pp 1): Muon's Newton-Schulz and AdamW are "
                         "split over them and the collectives are counted (nanochat: 8)")
    ap.add_argument("--link-gbps", type=float, default=400.0,
                    help="GB/s per GPU for the collectives (vtrain plan's --intra-node-gbps)")
    ap.add_argument("--grad-sync", choices=["fp32", "bf16"], default="fp32",
                    help="the wire dtype of the gradient all-reduce (vtrain train --grad-sync)")
    ap.add_argument("--muon-schedule", choices=["pipelined", "serial"], default="pipelined",
                    help="pipelined: momentum on the owner's replica only, bf16 broadcasts of "
                         "round r behind round r+1's Newton-Schulz (vtrain since 2026-11-26); "
                         "serial: every replica's momentum, fp32 broadcasts after every "
                         "Newton-Schulz (before)")
    ap.add_argument("--measured", help="JSON {row name: seconds per step} from a GPU run")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.dp < 1:
        ap.error(f"--dp {args.dp}: give at least 1")
    if not args.link_gbps > 0:
        ap.error(f"--link-gbps {args.link_gbps}: give a positive rate")
    mb = dict(kv.split(":") for kv in args.micro_batch.split(","))
    res = load_resources(args.build)
    if not res:
        print(f"(no ptxas reports under {args.build}: registers and occupancy left out)")
    measured = json.load(open(args.measured)) if args.measured else {}
    li = "- " if args.markdown else ""
    for name in args.presets.split(","):
        c = preset(name, int(mb.get(name, 8)))
        tokens = c["B"] * c["T"]
        accum = max(1, args.tokens_per_optimizer_step // tokens)
        model_flops = model_flops_per_token(c) * tokens
        print(f"\n## {name}: L {c['L']}, d {c['C']}, {c['H']} heads x hd {c['hd']}, T {c['T']}, "
              f"windows {c['windows'][0]}/{c['T']} (SSSL), micro-batch {c['B']} x {c['T']} = "
              f"{tokens} tokens, optimizer every {accum} micro-batches, dp {args.dp}\n")
        results = {}
        for ref in (False, True):
            rows = step_rows(c, ref) + optimizer_rows(c, accum, args.dp,
                                                      args.muon_schedule == "serial",
                                                      args.grad_sync == "bf16" and args.dp > 1)
            total, text = table(c, rows, res, measured if not ref else {}, args.markdown)
            results[ref] = (total, rows)
            if not ref:
                print(text)
        t_tc, rows_tc = results[False]
        t_ref, rows_ref = results[True]
        attn = lambda rows: sum(r.roofline() for r in rows if r.name.startswith("attention"))
        muon = lambda rows: sum(r.roofline() for r in rows if r.name.startswith("Muon"))
        # The last micro-batch's backward: the rows that are backward work, plus half of the
        # rows that hold a forward and its backward (the gradient sums run behind it).
        back = sum(r.roofline() * (0.5 if "forward" in r.name else 1.0) for r in rows_tc
                   if "backward" in r.name)
        links = comm_links(c, accum, args.dp, args.link_gbps,
                           F32 if args.grad_sync == "fp32" else BF16, back,
                           args.muon_schedule == "serial") if args.dp > 1 else []
        exposed = sum(l.exposed for l in links)
        muon_exposed = muon(rows_tc) + sum(l.exposed for l in links if l.name.startswith("Muon"))
        step = t_tc + exposed
        print(f"\n{li}model FLOPs per micro-step (docs/model.md): {model_flops / 1e12:.2f} TFLOP; "
              f"executed: {sum(r.flops for r in rows_tc) / 1e12:.2f} TFLOP")
        print(f"{li}roofline of the kernels: {t_tc * 1e3:.1f} ms (attention "
              f"{100 * attn(rows_tc) / t_tc:.0f}% of it)")
        if links:
            print(f"\ncollectives of the dp {args.dp} step at {args.link_gbps:g} GB/s per GPU, "
                  f"per micro-step (the optimizer's amortized over {accum}):\n")
            print(comm_table(links, args.markdown))
            print()
        print(f"{li}roofline step time at dp {args.dp}: {step * 1e3:.1f} ms (kernels "
              f"{t_tc * 1e3:.1f} + exposed communication {exposed * 1e3:.1f}) -> at best "
              f"{tokens / step:,.0f} tok/s per GPU, MFU {100 * model_flops / (step * PEAK_TC):.0f}%")
        print(f"{li}Muon exposed: {muon_exposed * 1e3:.1f} ms = {100 * muon_exposed / step:.1f}% "
              f"of the step (Newton-Schulz of the busiest owner, momentum of its matrices, the "
              f"apply on every rank, the broadcast)")
        print(f"{li}with the reference attention (CUDA cores): {(t_ref + exposed) * 1e3:.1f} ms, "
              f"MFU {100 * model_flops / ((t_ref + exposed) * PEAK_TC):.0f}% (attention "
              f"{100 * attn(rows_ref) / (t_ref + exposed):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
