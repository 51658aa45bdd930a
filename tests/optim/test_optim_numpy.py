"""Independent numpy (float64) check of vtrain's optimizers.

tools/optim_case runs vt::optim::DistributedOptimizer on a 1-rank grid (one process) for a few
steps on parameters of every group and writes params, grads, params after each step, stats and
final states to HDF5. This file re-implements the
schedule, AdamW, Muon (standard and Polar Express Newton-Schulz) and clipping from docs/model.md
"Optimizer groups" in plain numpy and compares. The hyperparameters are that section's numbers
written out here, not read back from the C++ side (the C++ config is checked against them instead).
"""
import json
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

BUILD = Path(os.environ.get("VTRAIN_BUILD", Path(__file__).resolve().parents[2] / "build"))
TOOL = BUILD / "optim_case"

# ---- docs/model.md "Optimizer groups" ------------------------------------------------------------

ADAMW = {  # group: (lr, beta1, beta2, wd, lr scaled by (d/768)^-0.5)
    "embedding": (0.3, 0.8, 0.995, 0.001, True),
    "lm_head": (0.008, 0.8, 0.96, 0.01, True),
    "value_table": (0.15, 0.8, 0.995, 0.01, True),
    "scalar": (0.5, 0.8, 0.95, 0.0, False),
    "gain": (0.01, 0.8, 0.95, 0.0, False),
    "smear": (0.2, 0.8, 0.95, 0.0, False),  # the smear gate: nanochat's own group
}
ADAM_EPS = 1e-10
MATRIX_LR = 0.02
WARMDOWN_FRAC, FINAL_LR_FRAC = 0.65, 0.05
MOM_START, MOM_END, MOM_STEPS = 0.85, 0.95, 300

NS_STANDARD = dict(abc=[(3.4445, -4.7750, 2.0315)] * 5, norm_scale=1.0, norm_eps=1e-7)
# Polar Express (arXiv:2505.16932), the coefficients published in modded-nanogpt / nanochat,
# with modded-nanogpt's normalization X / (||X||_F * 1.02 + 1e-6).
NS_POLAR = dict(
    abc=[
        (8.156554524902461, -22.48329292557795, 15.878769915207462),
        (4.042929935166739, -2.808917465908714, 0.5000178451051316),
        (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
        (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
        (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
    ],
    norm_scale=1.02,
    norm_eps=1e-6,
)


def group_of(name):
    """The optimizer group by parameter name (docs/model.md)."""
    if name == "wte":
        return "embedding"
    if name.startswith("smear."):
        return "smear"
    if name == "lm_head":
        return "lm_head"
    if name.endswith(".value.table"):
        return "value_table"
    if name.endswith((".gain", ".dense", ".logits", ".lambda1", ".lambda2", ".a", ".b")):
        return "scalar"
    if name.endswith((".alpha", ".beta", ".gamma", "_skip", "_resid", ".attn_gain", ".mlp_gain")):
        return "gain"
    return "matrix"


def lr_multiplier(step, total, warmup):
    d = math.floor(WARMDOWN_FRAC * total + 0.5)
    warm = (step + 1) / warmup if step < warmup else 1.0
    down = 1.0
    if d > 0 and step > total - d:
        p = max((total - step) / d, 0.0)
        down = p + (1 - p) * FINAL_LR_FRAC
    return min(warm, down)


def muon_momentum(step, schedule="warmup", total=0):
    if schedule == "nanochat":  # nanochat's base_train get_muon_momentum, docs/model.md
        if step < 400:
            return 0.85 + 0.12 * step / 400
        d = math.floor(WARMDOWN_FRAC * total + 0.5)
        start = total - d
        if d > 0 and step >= start:
            p = (step - start) / d
            return 0.97 * (1 - p) + 0.90 * p
        return 0.97
    frac = min(step / MOM_STEPS, 1.0)
    return (1 - frac) * MOM_START + frac * MOM_END


def muon_weight_decay(wd, style, step, total):
    """Constant, or nanochat's cosine to 0 (get_weight_decay)."""
    return wd * 0.5 * (1 + math.cos(math.pi * step / total)) if style == "nanochat" else wd


def newton_schulz(g, ns, steps=5):
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (np.linalg.norm(x) * ns["norm_scale"] + ns["norm_eps"])
    for k in range(steps):
        a, b, c = ns["abc"][min(k, len(ns["abc"]) - 1)]
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return x.T if g.shape[0] > g.shape[1] else x


class Reference:
    def __init__(self, params, d_model, ns, muon_wd, aspect, max_grad_norm, warmup, total,
                 wd_style="decoupled", momentum="warmup"):
        self.p = {k: v.astype(np.float64) for k, v in params.items()}
        self.state = {}
        for k, v in self.p.items():
            if group_of(k) == "matrix":
                self.state[k] = {"momentum_buffer": np.zeros_like(v)}
            else:
                self.state[k] = {"exp_avg": np.zeros_like(v), "exp_avg_sq": np.zeros_like(v)}
        self.d_model, self.ns, self.muon_wd, self.aspect = d_model, ns, muon_wd, aspect
        self.max_grad_norm, self.warmup, self.total = max_grad_norm, warmup, total
        self.wd_style, self.momentum = wd_style, momentum
        self.t = 0

    def step(self, step, grads):
        self.t += 1
        mult = lr_multiplier(step, self.total, self.warmup)
        mom = muon_momentum(step, self.momentum, self.total)
        wd_s = muon_weight_decay(self.muon_wd, self.wd_style, step, self.total)
        norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
        clip = 1.0
        if self.max_grad_norm > 0 and norm > self.max_grad_norm:
            clip = self.max_grad_norm / (norm + 1e-6)
        for name, g32 in grads.items():
            g = g32.astype(np.float64) * clip
            p, st, grp = self.p[name], self.state[name], group_of(name)
            if grp == "matrix":
                lr = MATRIX_LR * mult
                buf = mom * st["momentum_buffer"] + (1 - mom) * g
                st["momentum_buffer"] = buf
                u = (1 - mom) * g + mom * buf
                x = newton_schulz(u, self.ns)
                rows, cols = p.shape
                ratio = cols / rows if self.aspect == "fan_out_over_fan_in" else rows / cols
                scale = math.sqrt(max(1.0, ratio))
                if self.wd_style == "nanochat":  # cautious, times the aspect scale
                    keep = x * p >= 0
                    self.p[name] = np.where(keep, p * (1 - lr * scale * wd_s), p) - lr * scale * x
                else:
                    self.p[name] = p * (1 - lr * wd_s) - lr * scale * x
            else:
                base, b1, b2, wd, scaled = ADAMW[grp]
                lr = base * (self.d_model / 768) ** -0.5 if scaled else base
                lr *= mult
                m = b1 * st["exp_avg"] + (1 - b1) * g
                v = b2 * st["exp_avg_sq"] + (1 - b2) * g * g
                st["exp_avg"], st["exp_avg_sq"] = m, v
                mhat = m / (1 - b1**self.t)
                vhat = v / (1 - b2**self.t)
                self.p[name] = p * (1 - lr * wd) - lr * mhat / (np.sqrt(vhat) + ADAM_EPS)
        return dict(lr_multiplier=mult, momentum=mom, matrix_lr=MATRIX_LR * mult,
                    grad_norm=norm, clip_scale=clip, muon_weight_decay=wd_s)


def run_case(tmp_path, **kw):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: build the project first (VTRAIN_BUILD={BUILD})")
    out = tmp_path / "case.h5"
    args = [str(TOOL), "--out", str(out)]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True, capture_output=True, text=True)
    return h5py.File(out, "r")


def read_group(g):
    return {k: g[k][...] for k in g.keys()}


def rel_max(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


CASES = {
    "standard": dict(ns="standard"),
    "polar_express": dict(ns="polar_express"),
    "standard_wd_clip_late": dict(ns="standard", muon_wd=0.1, max_grad_norm=30.0,
                                  step_offset=150, total_steps=400, d_model=96, seed=7),
    "polar_wd_rows_over_cols": dict(ns="polar_express", muon_wd=0.05, aspect="rows_over_cols",
                                    d_model=32, seed=99, steps=6, warmup=3),
    # nanochat's Muon (the BoV recipe): momentum ramp end at 400 and the warmdown ramp (start
    # 175 of 500), cautious decay on a cosine; a large decay, so a wrong mask shows.
    "nanochat_wd_momentum": dict(ns="standard", muon_wd=2.0, muon_wd_style="nanochat",
                                 muon_momentum="nanochat", step_offset=397, total_steps=500,
                                 steps=5, seed=11),
}


@pytest.mark.parametrize("case", list(CASES))
def test_optimizer_matches_numpy(tmp_path, case):
    kw = dict(CASES[case])
    f = run_case(tmp_path, **kw)
    cfg = json.loads(f.attrs["config"])
    c = cfg["case"]
    steps, total, offset, d_model = c["steps"], c["total_steps"], c["step_offset"], c["d_model"]
    warmup = cfg["schedule"]["warmup_steps"]
    ns = NS_POLAR if kw["ns"] == "polar_express" else NS_STANDARD
    aspect = kw.get("aspect", "fan_out_over_fan_in")

    # The C++ side uses docs/model.md's numbers.
    for grp, (lr, b1, b2, wd, scaled) in ADAMW.items():
        h = cfg["adamw"][grp]
        expect_lr = lr * (d_model / 768) ** -0.5 if scaled else lr
        assert h["lr"] == pytest.approx(expect_lr, rel=1e-12), grp
        assert (h["beta1"], h["beta2"], h["weight_decay"], h["eps"]) == (b1, b2, wd, ADAM_EPS), grp
    assert cfg["muon"]["lr"] == MATRIX_LR and cfg["muon"]["ns_steps"] == 5
    assert cfg["muon"]["ns"] == kw["ns"] and cfg["muon"]["aspect"] == aspect
    s = cfg["schedule"]
    assert (s["warmdown_frac"], s["final_lr_frac"]) == (WARMDOWN_FRAC, FINAL_LR_FRAC)
    assert (s["momentum_start"], s["momentum_end"], s["momentum_steps"]) == (
        MOM_START, MOM_END, MOM_STEPS)
    wd_style = kw.get("muon_wd_style", "decoupled")
    momentum = kw.get("muon_momentum", "warmup")
    assert s["momentum_schedule"] == momentum and cfg["muon"]["wd_style"] == wd_style

    before = read_group(f["params_before"])
    groups = {group_of(k) for k in before}
    assert groups == {"matrix", "embedding", "lm_head", "value_table", "scalar", "gain", "smear"}
    for k in before:
        assert f["params_before"][k].attrs["group"] == group_of(k), k
    shapes = [v.shape for k, v in before.items() if group_of(k) == "matrix"]
    assert any(r > c_ for r, c_ in shapes) and any(r < c_ for r, c_ in shapes)
    assert any(r == c_ for r, c_ in shapes)

    ref = Reference(before, d_model, ns, kw.get("muon_wd", 0.0), aspect,
                    kw.get("max_grad_norm", 0.0), warmup, total, wd_style, momentum)
    prev_cpp = {k: v.astype(np.float64) for k, v in before.items()}
    prev_ref = {k: v.copy() for k, v in ref.p.items()}
    clipped = False
    for k in range(steps):
        grads = read_group(f[f"step_{k}/grads"])
        st = ref.step(offset + k, grads)
        for field in ("lr_multiplier", "momentum", "matrix_lr", "muon_weight_decay"):
            assert f["stats"][field][k] == pytest.approx(st[field], rel=1e-12, abs=1e-15), field
        assert f["stats/grad_norm"][k] == pytest.approx(st["grad_norm"], rel=1e-12)
        assert f["stats/clip_scale"][k] == pytest.approx(st["clip_scale"], rel=1e-12)
        clipped |= st["clip_scale"] < 1.0
        cpp = {n: v.astype(np.float64) for n, v in read_group(f[f"step_{k}/params"]).items()}
        for name, want in ref.p.items():
            got = cpp[name]
            # Parameters: 1e-5 relative to the tensor's scale.
            assert rel_max(got, want) < 1e-5, (case, k, name, rel_max(got, want))
            # The update itself (much smaller than the parameter), norm-wise relative. The fp32
            # storage of p rounds each delta by up to half an ulp of p: a few 1e-6 of AdamW's
            # large updates, a few 1e-5 of Muon's small ones (measured), hence the two bounds;
            # where a small lr makes that rounding (2^-24 ||p|| / ||delta||, norm-wise) larger
            # still (the gain group at 0.01), four times the rounding.
            d_got, d_want = got - prev_cpp[name], want - prev_ref[name]
            err = np.linalg.norm(d_got - d_want) / np.linalg.norm(d_want)
            rounding = 2.0**-24 * np.linalg.norm(want) / np.linalg.norm(d_want)
            bound = max(2e-4 if group_of(name) == "matrix" else 2e-5, 4 * rounding)
            assert err < bound, (case, k, name, err)
        prev_cpp, prev_ref = cpp, {n: v.copy() for n, v in ref.p.items()}
    if kw.get("max_grad_norm", 0.0) > 0:
        assert clipped, "the clipping case should clip at least once"

    for name, states in ref.state.items():
        for kind, want in states.items():
            got = f[f"final_state/{name}/{kind}"][...].astype(np.float64)
            assert rel_max(got, want) < 1e-5, (case, name, kind, rel_max(got, want))


def test_numpy_newton_schulz_matches_known_singular_value_ranges():
    """Sanity of the reference itself: the standard quintic leaves singular values in about
    [0.68, 1.13], Polar Express in about [0.86, 1.14] for well-conditioned inputs."""
    rng = np.random.default_rng(0)
    for shape in [(32, 96), (96, 32)]:
        g = rng.standard_normal(shape)
        sv = np.linalg.svd(newton_schulz(g, NS_STANDARD), compute_uv=False)
        assert 0.66 < sv.min() and sv.max() < 1.2
        sv = np.linalg.svd(newton_schulz(g, NS_POLAR), compute_uv=False)
        assert 0.84 < sv.min() and sv.max() < 1.16
