"""The CI check on the compiled sm_90 kernels (no GPU needed), from the nvcc objects of
vtrain_kernels_sm90: their ptxas -v reports (kept at build time by scripts/ptxas_log.sh) and
their SASS (cuobjdump, from the venv's nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm):

  - no kernel of kernels/*.cu spills registers (ptxas: 0 bytes spill stores/loads; the binary:
    0 bytes of local memory), and the reports belong to these objects (registers agree);
  - the tensor-core attention kernels (kernels/attention_tc.cu) run on tensor cores: at least the
    HMMA (mma.sync) count of one unrolled loop body of each kernel, which follows from its tiling
    (forward HD: per 32-key sub-tile two m-tiles of S = Q K^T HD/16 x 4 and O += P V 2 x HD/8;
    forward v1 the same count for 16 rows x 64 keys; dQ 3 HD/2; dK/dV HD, v1 the same), with ldmatrix
    (LDSM) and cp.async (LDGSTS) feeding them.
Runs in about 10 s (cuobjdump on 14 objects).
"""
import os
import sys

import pytest

ROOT = os.environ.get("VTRAIN_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("VTRAIN_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import kernel_resources as kr  # noqa: E402

OBJECTS = kr.kernel_objects(BUILD)
if not OBJECTS:
    pytest.skip("no nvcc kernel objects in the build (built without CUDA)", allow_module_level=True)


@pytest.fixture(scope="module")
def cuobjdump():
    return kr.find_cuobjdump()  # fails, naming the packages, when they are missing


def test_every_kernel_file_has_a_ptxas_report():
    sources = sorted(f for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".cu"))
    have = sorted(os.path.basename(o)[:-2] for o in OBJECTS if os.path.exists(o + ".ptxas.txt"))
    assert have == sources


def test_no_kernel_spills(cuobjdump):
    exe, env = cuobjdump
    reports = kr.ptxas_reports(BUILD)
    assert len(reports) > 40, "too few kernels in the ptxas reports"
    names = kr.demangle(list(reports))
    spilling = [f"{kr.short_name(names[k])}: {r['spill_stores']} B stored, {r['spill_loads']} B loaded"
                for k, r in reports.items() if r["spill_stores"] or r["spill_loads"]]
    assert not spilling, "register spills: " + "; ".join(spilling)
    for obj in OBJECTS:
        for k, r in kr.res_usage(obj, exe, env).items():
            assert r["local"] == 0, f"{kr.short_name(names.get(k, k))} uses local memory"
            assert k in reports, f"{k} is in {obj} but not in its ptxas report (stale report?)"
            assert r["regs"] == reports[k]["regs"], f"{k}: ptxas report and binary disagree"


EXPECTED_MMA = {  # HMMA per unrolled loop body, from the tiling (see kernels/attention_tc.cu)
    # forward: per 32-key sub-tile and warp, two m-tiles: S 2 x HD/16 x 4, O += P V 2 x 2 x HD/8
    "attn_tc_fwd_kernel": lambda hd: 2 * (hd // 16 * 4) + 2 * (2 * hd // 8),
    "attn_tc_fwd_v1_kernel": lambda hd: hd // 16 * 8 + 4 * hd // 8,
    "attn_tc_dq_v1_kernel": lambda hd: 2 * (hd // 16 * 8) + 4 * hd // 8,
    "attn_tc_dkdv_v1_kernel": lambda hd: 2 * (hd // 16 * 4) + 2 * (2 * hd // 8),
    "attn_tc_dq_kernel": lambda hd: 2 * (hd // 16 * 8) + 4 * hd // 8,
    "attn_tc_dkdv_kernel": lambda hd: 2 * (hd // 16 * 4) + 2 * (2 * hd // 8),
}


def test_attention_kernels_use_tensor_cores(cuobjdump):
    exe, env = cuobjdump
    obj = os.path.join(kr.objects_dir(BUILD), "attention_tc.cu.o")
    ops = kr.sass_opcodes(obj, exe, env)
    names = {k: kr.short_name(v) for k, v in kr.demangle(list(ops)).items()}
    seen = set()
    for k, counts in ops.items():
        base, _, rest = names[k].partition("<")
        if base not in EXPECTED_MMA:
            continue
        hd = int(rest.rstrip(">"))
        seen.add((base, hd))
        want = EXPECTED_MMA[base](hd)
        print(f"{names[k]:28s} HMMA {counts['HMMA']:4d} (>= {want}) LDSM {counts['LDSM']:4d} "
              f"LDGSTS {counts['LDGSTS']:3d} FFMA {counts['FFMA']:4d}")
        assert counts["HMMA.16816.F32.BF16"] >= want, f"{names[k]}: too few bf16 HMMA"
        assert counts["LDSM"] > 0 and counts["LDGSTS"] > 0, f"{names[k]}: no ldmatrix / cp.async"
    assert seen == {(b, hd) for b in EXPECTED_MMA for hd in (32, 64, 128)}


def test_reference_attention_has_no_tensor_cores(cuobjdump):
    # The check can fail: the scalar reference kernels compile to no HMMA at all.
    exe, env = cuobjdump
    ops = kr.sass_opcodes(os.path.join(kr.objects_dir(BUILD), "attention.cu.o"), exe, env)
    assert ops and all(c["HMMA"] == 0 for c in ops.values())


# The memory-bound kernels move 16-byte words (docs/design.md "Memory-bound kernels"): their
# vector-path instances load with LDG.E.128 (uint4: 8 bf16 or 4 f32) and, where they write a
# tensor, store with STG.E.128. The row kernels' fallback instances (first bool template
# argument false) load one element at a time by design and are not checked.
VECTOR_LOADS_AND_STORES = {
    "act_forward_kernel", "act_backward_kernel", "cast_kernel", "mix2_kernel", "axpy_kernel",
    "gated_mix_kernel", "scale_copy_coef_kernel", "axpy_coef_kernel", "div_by_norm_kernel",
    "muon_momentum_kernel", "muon_apply_kernel", "adamw_kernel", "gather_kernel",
    "rmsnorm_forward_kernel", "rmsnorm_backward_kernel", "add_rmsnorm_forward_kernel",
    "rope_kernel", "rope_rmsnorm_forward_kernel", "xent_loss_grad_kernel", "xent_backward_kernel",
}
VECTOR_LOADS_ONLY = {"partial_kernel", "xent_forward_kernel"}  # they write per-block scalars
ROW_KERNELS = {"rmsnorm_forward_kernel", "rmsnorm_backward_kernel", "add_rmsnorm_forward_kernel",
               "rope_kernel", "rope_rmsnorm_forward_kernel"}  # <T, vec, ...>


def _wide(counts, op):
    return sum(n for k, n in counts.items() if k.startswith(op + ".E.128"))


def test_memory_bound_kernels_move_16_byte_words(cuobjdump):
    exe, env = cuobjdump
    seen = set()
    for obj in OBJECTS:
        ops = kr.sass_opcodes(obj, exe, env)
        names = {k: kr.short_name(v) for k, v in kr.demangle(list(ops)).items()}
        for k, counts in ops.items():
            base, _, args = names[k].partition("<")
            if base not in VECTOR_LOADS_AND_STORES | VECTOR_LOADS_ONLY:
                continue
            if base in ROW_KERNELS and args.split(",")[1].strip().rstrip(">") == "false":
                continue  # the fallback instance
            seen.add(base)
            assert _wide(counts, "LDG") > 0, f"{names[k]}: no 16-byte global load"
            if base in VECTOR_LOADS_AND_STORES:
                assert _wide(counts, "STG") > 0, f"{names[k]}: no 16-byte global store"
    assert seen == VECTOR_LOADS_AND_STORES | VECTOR_LOADS_ONLY
