"""Validates the JAX reference itself, independently of vtrain:
(a) autodiff gradients against central finite differences, for every mode and variant;
(b) identities between modes that follow from the equations of docs/model.md, and direct checks of
    target resolution, parameter lists, masks, RoPE, GQA, padded vocabulary;
(c) compare_case.py accepts a correct case file and rejects broken ones.
"""

from __future__ import annotations

import math
import os
import shutil
import sys

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_case as cc  # noqa: E402
import make_case as mc  # noqa: E402
import reference_model as rm  # noqa: E402

SMALL = dict(n_layer=4, n_embd=16, n_head=2, n_kv_head=1, head_dim=8, vocab_size=19,
             seq_len=8, short_window=3)


def small_config(mode, **kw):
    over = dict(SMALL)
    over.update(kw)
    return rm.default_config(mode, **over)


def setup(cfg, seed=0, batch=2):
    params = mc.random_params(cfg, seed)
    inputs, targets = mc.random_tokens(cfg, batch, seed)
    return params, inputs, targets


def f64(params):
    return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}


# ---------------------------------------------------------------------------------------
# (a) finite differences
# ---------------------------------------------------------------------------------------

FD_CASES = [(m, {}) for m in rm.VALUE_MODES] + [
    ("resformer-learnable", {"detach_v1": True}),
    ("resformer-dense", {"detach_v1": True}),
    ("bov", {"shared_table": True}),
    ("bov-add", {"bov_add_fixed": True}),
    ("x0v", {"value_layers": "all"}),
    ("resformer-sparse", {"value_layers": "every-other"}),
    ("v1", {"value_layers": "1,3"}),
    # Block shapes (sas/sas-p need n_kv_head = n_head) and DenseFormer.
    ("baseline", {"block": "parallel"}),
    ("neutreno", {"block": "vskipinit"}),
    ("baseline", {"block": "sas", "n_kv_head": 2, "qk_norm": False}),
    ("x0v", {"block": "sas-p", "n_kv_head": 2, "qk_norm": False, "norm_none": True}),
    ("baseline", {"block": "sas", "n_kv_head": 2, "qk_norm": False, "attn_bias": "espa",
                  "reparam_init": "id"}),
    ("baseline", {"block": "sas-p", "n_kv_head": 2, "qk_norm": False, "attn_bias": "uspa"}),
    ("bov", {"dense": True, "dense_dilation": 2, "dense_period": 2}),
    # nanochat compatibility: the smear gate (reads 24 channels: d 32) and windows of W + 1 keys.
    ("x0v", {"smear_gate": True, "window_keys": "w+1", "n_embd": 32, "head_dim": 16,
             "dense": True}),
]


def _fd_id(case):
    mode, kw = case
    return mode + "".join(f"-{k}={v}" for k, v in kw.items())


def fd_check(what, loss_eval, p, grads, inputs, vocab, seed=42, h=1e-5):
    """Central differences of loss_eval at p, along one random coordinate (restricted to
    vocabulary rows/columns the loss can see) and one random unit direction per parameter."""
    rng = np.random.default_rng(seed)
    for name in sorted(p):
        g = grads[name]
        assert np.max(np.abs(g)) > 0, f"{what}: {name}: reference gradient is all zero"
        shape = p[name].shape
        idx = [int(rng.integers(0, n)) for n in shape]
        if name == "wte" or name.endswith("table"):
            idx[0] = int(inputs.flat[rng.integers(0, inputs.size)])
        if name == "lm_head":
            idx[1] = int(rng.integers(0, vocab))
        u_coord = np.zeros(shape)
        u_coord[tuple(idx)] = 1.0
        u_dir = rng.normal(size=shape)
        u_dir /= np.linalg.norm(u_dir)
        for u in (u_coord, u_dir):
            pp = dict(p)
            pp[name] = p[name] + h * u
            lp = loss_eval(pp)
            pp[name] = p[name] - h * u
            lm = loss_eval(pp)
            fd = (lp - lm) / (2 * h)
            an = float(np.sum(g * u))
            assert abs(fd - an) <= 1e-8 + 1e-5 * abs(an), (
                f"{what}: {name} finite difference {fd:.10e} vs autodiff {an:.10e}")


@pytest.mark.parametrize("case", FD_CASES, ids=_fd_id)
def test_grads_match_finite_differences(case):
    mode, kw = case
    cfg = small_config(mode, **kw)
    params, inputs, targets = setup(cfg, seed=1)
    p = f64(params)
    _, grads = rm.loss_and_grads(p, inputs, targets, cfg)
    if cfg["detach_v1"]:
        # The detached gradient is the derivative of the loss with V1 held at its value.
        eps = cfg["norm_eps"]
        x0 = p["wte"][inputs]
        x0 = x0 / np.sqrt(np.mean(x0 * x0, -1, keepdims=True) + eps)
        n0 = x0 / np.sqrt(np.mean(x0 * x0, -1, keepdims=True) + eps)
        v1 = n0 @ p["blocks.0.attn.wv"]
        frozen = jax.jit(lambda pp: rm.loss_fn(pp, inputs, targets, cfg, v1_override=v1))
        assert abs(float(frozen(p)) - rm.loss_and_grads(p, inputs, targets, cfg)[0]) < 1e-12

        def loss_eval(pp):
            return float(frozen(pp))
    else:
        def loss_eval(pp):  # reuses the compiled value_and_grad of this config
            return rm.loss_and_grads(pp, inputs, targets, cfg)[0]
    fd_check(_fd_id(case), loss_eval, p, grads, inputs, cfg["vocab_size"])


# ---------------------------------------------------------------------------------------
# (b) identities and direct checks
# ---------------------------------------------------------------------------------------


def lg(params, inputs, targets, cfg):
    return rm.loss_and_grads(params, inputs, targets, cfg)


def assert_same(a, b, what, rtol=1e-12):
    la, ga = a
    lb, gb = b
    assert abs(la - lb) <= rtol * abs(lb), f"{what}: loss {la!r} vs {lb!r}"
    return ga, gb


def assert_grads_close(ga, gb, names, rtol=1e-10):
    for n in names:
        scale = max(np.max(np.abs(gb[n])), 1e-300)
        err = np.max(np.abs(ga[n] - gb[n])) / scale
        assert err <= rtol, f"grad {n}: rel err {err:.3e}"


def _common(ga, gb):
    return sorted(set(ga) & set(gb))


def test_shaped_attention_with_zero_queries_is_the_identity():
    # W_Q = 0: A equals C (uniform over the visible keys), so I + A - C = I (docs/model.md).
    T, W = 9, 4
    q = jnp.zeros((1, T, 2, 4))
    k = jnp.asarray(np.random.default_rng(0).normal(size=(1, T, 2, 4)))
    one = jnp.ones(2)
    cfg = {"attn_bias": ""}
    M = rm.attention_matrices(q, k, cfg, W, 0, (one, one, one))
    assert np.allclose(np.asarray(M), np.eye(T)[None, None], atol=1e-14)


@pytest.mark.parametrize("kind", ["espa", "uspa"])
def test_spa_bias_propagates_the_target_kernel(kind):
    # exp(B_l) = A_l on the causal triangle, and A_l Sigma_{l-1} A_l^T = Sigma_l layer by layer.
    L, T = 4, 12
    cfg = {"attn_bias": kind, "n_layer": L}
    prev = np.eye(T)
    for layer in range(L):
        A = np.exp(rm.spa_bias(cfg, layer, T)) * np.tri(T)
        assert np.all(A >= 0)
        want = rm.spa_kernel(kind, rm.spa_rho(layer, L), T)
        assert np.allclose(A @ prev @ A.T, want, atol=1e-10), (kind, layer)
        prev = want
    assert math.isclose(rm.spa_rho(L - 1, L), 0.8)


def test_spa_schedule_and_entries_by_hand():
    # docs/model.md: rho_l = 0.8 (l+1)/L, rho_{-1} = 0 (Sigma_{-1} = I).
    assert rm.spa_rho(-1, 4) == 0.0
    for layer, L, want in [(0, 4, 0.2), (1, 4, 0.4), (3, 4, 0.8), (5, 12, 0.4), (0, 32, 0.025)]:
        assert math.isclose(rm.spa_rho(layer, L), want, rel_tol=1e-15), (layer, L)
    # Layer 1 of 4 (rho 0.4 after 0.2), T = 3, from the closed forms with s(x) = sqrt(1 - x^2).
    s = lambda x: math.sqrt(1.0 - x * x)
    r, p = 0.4, 0.2
    k = s(r) / s(p)
    espa = [[1, 0, 0], [r - p * k, k, 0], [r * (r - p * k), k * (r - p), k]]
    c1, c1p = r * (1 - r) / s(r), p * (1 - p) / s(p)  # compound symmetry: L[2][1]
    d2, d2p = math.sqrt(1 - r * r - c1 * c1), math.sqrt(1 - p * p - c1p * c1p)
    x2 = d2 / d2p
    x1 = (c1 - x2 * c1p) / s(p)
    uspa = [[1, 0, 0], [r - p * k, k, 0], [r - (x1 + x2) * p, x1, x2]]
    for kind, want in [("espa", espa), ("uspa", uspa)]:
        A = np.exp(rm.spa_bias({"attn_bias": kind, "n_layer": 4}, 1, 3)) * np.tri(3)
        assert np.allclose(A, np.array(want, dtype=float), atol=1e-12, rtol=0), kind
    assert np.allclose(np.array(uspa)[2], [0.195024869935, 0.115738360230, 0.909137290097],
                       atol=1e-11)


@pytest.mark.parametrize("kind", ["espa", "uspa"])
def test_spa_bias_of_a_shorter_sequence_is_the_leading_block(kind):
    # Evaluation and decoding at T' < T use the bias built for T' (docs/model.md).
    cfg = {"attn_bias": kind, "n_layer": 3}
    for layer in range(3):
        full, short = rm.spa_bias(cfg, layer, 12), rm.spa_bias(cfg, layer, 5)
        assert np.allclose(np.tril(full[:5, :5]), np.tril(short), atol=1e-12)


def test_dense_starting_weights_equal_the_plain_network():
    cfg_d = small_config("bov", dense=True, dense_dilation=2)
    cfg_p = small_config("bov")
    params, inputs, targets = setup(cfg_p, seed=4)
    pd = dict(params)
    for i in range(cfg_d["n_layer"]):
        n = len(rm.dense_inputs(cfg_d, i))
        pd[f"blocks.{i}.dwa"] = np.eye(n)[-1]
    la, _ = lg(pd, inputs, targets, cfg_d)
    lb, _ = lg(params, inputs, targets, cfg_p)
    assert abs(la - lb) <= 1e-12 * abs(lb)


def test_neutreno_with_zero_lambda_equals_baseline():
    cfg_n = small_config("neutreno", neutreno_lambda=0.0)
    cfg_b = small_config("baseline")
    params, inputs, targets = setup(cfg_b, seed=5)
    ga, gb = assert_same(lg(params, inputs, targets, cfg_n), lg(params, inputs, targets, cfg_b),
                         "neutreno lam=0")
    assert_grads_close(ga, gb, _common(ga, gb))


def test_learnable_half_half_equals_identity():
    cfg_i = small_config("resformer-identity")
    cfg_l = small_config("resformer-learnable")
    p, x, y = setup(cfg_l, seed=3)
    for i in cfg_l["target_layers"]:
        p[f"blocks.{i}.value.lambda1"] = np.array([0.5])
        p[f"blocks.{i}.value.lambda2"] = np.array([0.5])
    pi = {k: v for k, v in p.items() if ".value." not in k}
    ga, gb = assert_same(lg(p, x, y, cfg_l), lg(pi, x, y, cfg_i), "learnable(0.5,0.5) vs identity")
    assert_grads_close(ga, gb, _common(ga, gb))


@pytest.mark.parametrize("mode,l1,l2", [("resformer-constant", 2.0, 1.0),
                                        ("resformer-sparse", 5.0, 1.0)])
def test_fixed_modes_equal_learnable_with_their_constants(mode, l1, l2):
    cfg_f = small_config(mode)
    cfg_l = small_config("resformer-learnable", value_layers=",".join(map(str, cfg_f["target_layers"])))
    p, x, y = setup(cfg_l, seed=4)
    for i in cfg_l["target_layers"]:
        p[f"blocks.{i}.value.lambda1"] = np.array([l1])
        p[f"blocks.{i}.value.lambda2"] = np.array([l2])
    pf = {k: v for k, v in p.items() if ".value." not in k}
    ga, gb = assert_same(lg(p, x, y, cfg_l), lg(pf, x, y, cfg_f), f"{mode} vs learnable")
    assert_grads_close(ga, gb, _common(ga, gb))


def test_plus_equals_learnable_with_softmax_coefficients():
    cfg_p = small_config("resformer-plus")
    cfg_l = small_config("resformer-learnable")
    p, x, y = setup(cfg_p, seed=5)
    logits = np.asarray(p["value_plus.logits"], dtype=np.float64)
    w = np.exp(logits - logits.max())
    w /= w.sum()
    scale = float(p["value_plus.scale"][0])  # the learnable scale (the default)
    pl = {k: v for k, v in p.items() if not k.startswith("value_plus.")}
    for k, i in enumerate(cfg_p["target_layers"]):
        pl[f"blocks.{i}.value.lambda1"] = np.array([scale * w[k]])
    ga, gb = assert_same(lg(p, x, y, cfg_p), lg(pl, x, y, cfg_l), "plus vs learnable", rtol=1e-12)
    assert_grads_close(ga, gb, _common(ga, gb))


def test_plus_fixed_scale_equals_learnable_scale_at_L():
    cfg_f = small_config("resformer-plus", plus_scale="fixed")
    cfg_s = small_config("resformer-plus")
    assert "value_plus.scale" not in rm.expected_param_shapes(cfg_f)
    p, x, y = setup(cfg_s, seed=7)
    p["value_plus.scale"] = np.array([float(cfg_s["n_layer"])])
    pf = {k: v for k, v in p.items() if k != "value_plus.scale"}
    ga, gb = assert_same(lg(p, x, y, cfg_s), lg(pf, x, y, cfg_f), "plus scale L vs fixed",
                         rtol=1e-12)
    assert_grads_close(ga, gb, _common(ga, gb))


def test_plus_paper_init_grows_with_depth():
    targets = [1, 2, 3, 4, 5]
    a = np.asarray(rm.plus_init_logits({"plus_init": "paper"}, targets))
    w = np.exp(a) / np.exp(a).sum()
    assert np.allclose(w, np.array(targets) / sum(targets))
    assert rm.plus_init_logits({"plus_init": "blagpt"}, targets) is None


def test_fixed_value_coef_equals_gain_set_to_it():
    for mode in ("v1", "x0v"):
        cfg_f = small_config(mode, value_coef_fixed=True, value_coef=1.7)
        cfg_g = small_config(mode)
        assert not any(k.endswith(".value.gain") for k in rm.expected_param_shapes(cfg_f))
        p, x, y = setup(cfg_g, seed=8)
        for i in cfg_g["target_layers"]:
            p[f"blocks.{i}.value.gain"] = np.array([1.7])
        pf = {k: v for k, v in p.items() if not k.endswith(".value.gain")}
        ga, gb = assert_same(lg(p, x, y, cfg_g), lg(pf, x, y, cfg_f), f"{mode} fixed coef",
                             rtol=1e-12)
        assert_grads_close(ga, gb, _common(ga, gb))


def test_dense_diagonal_equals_baseline():
    cfg_d = small_config("resformer-dense")
    cfg_b = small_config("baseline")
    p, x, y = setup(cfg_d, seed=6)
    for i in cfg_d["target_layers"]:
        lam = np.zeros(i + 1)
        lam[i] = 1.0
        p[f"blocks.{i}.value.dense"] = lam
    pb = {k: v for k, v in p.items() if ".value." not in k}
    ga, gb = assert_same(lg(p, x, y, cfg_d), lg(pb, x, y, cfg_b), "dense(diag) vs baseline")
    assert_grads_close(ga, gb, _common(ga, gb))


def test_dense_reads_context_values_not_mixed_values():
    # dense with l_i0 = 0.5, l_ii = 0.5 and the rest 0 equals resformer-identity: V_0 = V1.
    cfg_d = small_config("resformer-dense")
    cfg_i = small_config("resformer-identity")
    p, x, y = setup(cfg_d, seed=7)
    for i in cfg_d["target_layers"]:
        lam = np.zeros(i + 1)
        lam[0], lam[i] = 0.5, 0.5
        p[f"blocks.{i}.value.dense"] = lam
    pi = {k: v for k, v in p.items() if ".value." not in k}
    assert_same(lg(p, x, y, cfg_d), lg(pi, x, y, cfg_i), "dense vs identity")
    # V_j (j >= 1) read by later layers is layer j's *context* value n_j W_V^j, not its
    # mixed value: with layer 1's W_O = 0 (its attention output vanishes) and layer 2 reading
    # only V_1, changing layer 1's own mixing coefficients must not change the loss.
    cfg3 = small_config("resformer-dense", n_layer=3)
    q2 = {k: v for k, v in p.items() if not k.startswith("blocks.3.")}
    q2["blocks.1.attn.wo"] = np.zeros_like(q2["blocks.1.attn.wo"])
    q2["blocks.2.value.dense"] = np.array([0.0, 1.0, 0.0])
    q3 = dict(q2)
    q3["blocks.1.value.dense"] = np.array([3.0, 0.7])
    l2_, g2_ = lg(q2, x, y, cfg3)
    l3_, _ = lg(q3, x, y, cfg3)
    assert abs(l2_ - l3_) <= 1e-12 * abs(l2_)
    assert np.max(np.abs(g2_["blocks.1.attn.wv"])) > 0  # V_1 does reach layer 2


def test_bov_with_aligned_table_equals_x0v():
    cfg_x = small_config("x0v")
    cfg_b = small_config("bov")
    px, x, y = setup(cfg_x, seed=8)
    eps = cfg_x["norm_eps"]
    wte = np.asarray(px["wte"], dtype=np.float64)
    nw = wte / np.sqrt(np.mean(wte * wte, axis=-1, keepdims=True) + eps)
    pb = {}
    for k, v in px.items():
        pb[k] = v
    for i in cfg_x["target_layers"]:
        px[f"blocks.{i}.value.gain"] = np.array([1.0])
        pb[f"blocks.{i}.value.gain"] = np.array([1.0])
        pb[f"blocks.{i}.value.table"] = nw @ np.asarray(px[f"blocks.{i}.attn.wv"], np.float64)
        del pb[f"blocks.{i}.attn.wv"]
    assert rm.expected_param_names(cfg_b) == set(pb)
    ga, gb = assert_same(lg(pb, x, y, cfg_b), lg(px, x, y, cfg_x), "bov(aligned) vs x0v")
    # gains see the same value tensor, so their gradients agree too
    assert_grads_close(ga, gb, [f"blocks.{i}.value.gain" for i in cfg_x["target_layers"]])


def test_value_embed_zero_table_equals_baseline():
    cfg_v = small_config("value-embed")
    cfg_b = small_config("baseline")
    p, x, y = setup(cfg_v, seed=9)
    for i in cfg_v["target_layers"]:
        p[f"blocks.{i}.value.table"] = np.zeros_like(p[f"blocks.{i}.value.table"])
    pb = {k: v for k, v in p.items() if ".value." not in k}
    ga, gb = assert_same(lg(p, x, y, cfg_v), lg(pb, x, y, cfg_b), "value-embed(E=0) vs baseline")
    assert_grads_close(ga, gb, _common(ga, gb))
    for i in cfg_v["target_layers"]:  # gate gradient vanishes with a zero table
        assert np.max(np.abs(ga[f"blocks.{i}.value.gate_w"])) == 0.0


def test_value_embed_gate_scale_and_per_kv_head():
    cfg_v = small_config("value-embed", n_kv_head=2)
    cfg_a = small_config("bov-add", n_kv_head=2, value_layers=",".join(
        map(str, cfg_v["target_layers"])))
    p, x, y = setup(cfg_v, seed=10)
    pa = {k: v for k, v in p.items() if ".value." not in k}
    hd = cfg_v["head_dim"]
    # gate_w = 0: sigmoid(0) = 0.5, so the value is n W_V + 1.5 E[id] on every head.
    for i in cfg_v["target_layers"]:
        p[f"blocks.{i}.value.gate_w"] = np.zeros((12, 2))
        pa[f"blocks.{i}.value.a"] = np.array([1.0])
        pa[f"blocks.{i}.value.b"] = np.array([1.5])
        pa[f"blocks.{i}.value.table"] = p[f"blocks.{i}.value.table"]
    assert_same(lg(p, x, y, cfg_v), lg(pa, x, y, cfg_a), "value-embed(gate 0) vs bov-add")
    # per-head gate: a gate that differs between KV heads must act per head.
    rng = np.random.default_rng(0)
    gw = rng.normal(size=(12, 2))
    i = cfg_v["target_layers"][-1]
    p[f"blocks.{i}.value.gate_w"] = gw
    tab = np.asarray(p[f"blocks.{i}.value.table"], np.float64)
    pz = dict(p)
    tz = tab.copy()
    tz[:, hd:] = 0.0  # kill head 1's table: head 1's gate must stop mattering
    pz[f"blocks.{i}.value.table"] = tz
    _, g = lg(pz, x, y, cfg_v)
    assert np.max(np.abs(g[f"blocks.{i}.value.gate_w"][:, 1])) == 0.0
    assert np.max(np.abs(g[f"blocks.{i}.value.gate_w"][:, 0])) > 0.0


def test_svformer_equals_v1_with_unit_gain_on_all_layers():
    cfg_s = small_config("svformer")
    cfg_v = small_config("v1", value_layers="all")
    assert cfg_s["target_layers"] == cfg_v["target_layers"] == [1, 2, 3]
    p, x, y = setup(cfg_v, seed=11)
    for i in cfg_v["target_layers"]:
        p[f"blocks.{i}.value.gain"] = np.array([1.0])
    ps = {k: v for k, v in p.items() if ".value." not in k}
    assert rm.expected_param_names(cfg_s) == set(ps)
    ga, gb = assert_same(lg(p, x, y, cfg_v), lg(ps, x, y, cfg_s), "v1(g=1, all) vs svformer")
    assert_grads_close(ga, gb, _common(ga, gb))


def test_bov_add_fixed_and_degenerate_coefficients():
    cfg = small_config("bov-add")
    cfg_f = small_config("bov-add", bov_add_fixed=True)
    cfg_b = small_config("baseline")
    p, x, y = setup(cfg, seed=12)
    for i in cfg["target_layers"]:
        p[f"blocks.{i}.value.a"] = np.array([0.5])
        p[f"blocks.{i}.value.b"] = np.array([0.5])
    pf = {k: v for k, v in p.items() if not k.endswith((".a", ".b"))}
    assert rm.expected_param_names(cfg_f) == set(pf)
    ga, gb = assert_same(lg(p, x, y, cfg), lg(pf, x, y, cfg_f), "bov-add(0.5,0.5) vs fixed")
    assert_grads_close(ga, gb, _common(ga, gb))
    for i in cfg["target_layers"]:  # a = 1, b = 0: plain attention
        p[f"blocks.{i}.value.a"] = np.array([1.0])
        p[f"blocks.{i}.value.b"] = np.array([0.0])
    pb = {k: v for k, v in p.items() if ".value." not in k}
    ga, gb = assert_same(lg(p, x, y, cfg), lg(pb, x, y, cfg_b), "bov-add(1,0) vs baseline")
    for i in cfg["target_layers"]:
        assert np.max(np.abs(ga[f"blocks.{i}.value.table"])) == 0.0


def test_shared_table_equals_per_layer_copies():
    cfg = small_config("bov")
    cfg_s = small_config("bov", shared_table=True)
    p, x, y = setup(cfg_s, seed=13)
    pn = {k: v for k, v in p.items() if k != "value.table"}
    for i in cfg["target_layers"]:
        pn[f"blocks.{i}.value.table"] = p["value.table"]
    assert rm.expected_param_names(cfg) == set(pn)
    gs, gn = assert_same(lg(p, x, y, cfg_s), lg(pn, x, y, cfg), "shared vs copied tables")
    total = sum(gn[f"blocks.{i}.value.table"] for i in cfg["target_layers"])
    assert np.max(np.abs(gs["value.table"] - total)) <= 1e-12 * np.max(np.abs(total))


@pytest.mark.parametrize("mode", ["resformer-learnable", "svformer", "resformer-dense"])
def test_detach_v1_changes_only_the_v1_gradient_path(mode):
    cfg = small_config(mode)
    cfg_d = small_config(mode, detach_v1=True)
    p, x, y = setup(cfg, seed=14)
    ga, gd = assert_same(lg(p, x, y, cfg), lg(p, x, y, cfg_d), "detach does not change loss")
    affected = {"wte", "blocks.0.attn.wv"}
    assert_grads_close(gd, ga, sorted(set(ga) - affected), rtol=1e-10)
    for n in affected:
        assert np.max(np.abs(gd[n] - ga[n])) > 1e-6 * np.max(np.abs(ga[n])), n


def test_gqa_equals_mha_with_repeated_kv_heads():
    # Hkv = 2, H = 4: query heads 0,1 use KV head 0 and heads 2,3 use KV head 1.
    cfg_g = small_config("value-embed", n_embd=32, n_head=4, n_kv_head=2)
    cfg_m = small_config("value-embed", n_embd=32, n_head=4, n_kv_head=4)
    p, x, y = setup(cfg_g, seed=15)
    hd = cfg_g["head_dim"]

    def rep(a):  # (.., 2*hd) -> (.., 4*hd) with heads [0, 0, 1, 1]
        a = np.asarray(a, np.float64)
        return np.concatenate([a[..., :hd], a[..., :hd], a[..., hd:], a[..., hd:]], axis=-1)

    pm = {}
    for k, v in p.items():
        if k.endswith(("attn.wk", "attn.wv", "value.table")):
            pm[k] = rep(v)
        elif k.endswith("gate_w"):
            v = np.asarray(v, np.float64)
            pm[k] = v[:, [0, 0, 1, 1]]
        else:
            pm[k] = v
    assert_same(lg(p, x, y, cfg_g), lg(pm, x, y, cfg_m), "GQA vs repeated MHA")


def test_short_window_covering_sequence_equals_full_attention():
    cfg_s = small_config("baseline", window_pattern="SSSL", short_window=8)  # T = 8
    cfg_l = small_config("baseline", window_pattern="L")
    p, x, y = setup(cfg_s, seed=16)
    assert_same(lg(p, x, y, cfg_s), lg(p, x, y, cfg_l), "window T vs full")
    cfg_n = small_config("baseline", window_pattern="SSSL", short_window=3)
    assert abs(lg(p, x, y, cfg_n)[0] - lg(p, x, y, cfg_l)[0]) > 1e-6


def test_window_sizes_and_mask():
    cfg = rm.default_config("baseline")  # L6, SSSL, short 8, T 32
    assert rm.window_sizes(cfg, 32) == [8, 8, 8, 32, 8, 32]  # last layer forced to L
    cfg2 = rm.default_config("baseline", window_pattern="SL", n_layer=4, short_window=0)
    assert rm.window_sizes(cfg2, 2048) == [512, 2048, 512, 2048]
    m = rm.window_mask(6, 3)
    for t in range(6):
        for s in range(6):
            assert m[t, s] == (s <= t and t - s < 3)
    # window_keys w+1: nanochat's flash-attention window (W, 0), i.e. 0 <= t - s <= W, on S
    # layers only (L layers see all T keys either way).
    cfg3 = rm.default_config("baseline", window_keys="w+1")
    assert rm.window_sizes(cfg3, 32) == [9, 9, 9, 32, 9, 32]
    m = rm.window_mask(12, rm.window_sizes(cfg3, 12)[0])
    for t in range(12):
        for s in range(12):
            assert m[t, s] == (s <= t and t - s <= 8)


def test_smear_gate():
    """The smear gate leaves position 0 of every row alone, is the identity at lambda = 0 (its
    init), and otherwise adds lambda sigmoid(x[t, :24] w) x[t-1]."""
    cfg = small_config("baseline", smear_gate=True, n_embd=32, head_dim=16)
    p = mc.random_params(cfg, 3)
    x = np.random.default_rng(4).normal(size=(2, 5, 32))
    y = np.asarray(rm.smear(jnp.asarray(x), p))
    np.testing.assert_allclose(y[:, 0], x[:, 0], rtol=0, atol=0)
    w, lam = p["smear.gate_w"][:, 0].astype(np.float64), float(p["smear.lambda"][0])
    for b in range(2):
        for t in range(1, 5):
            g = lam / (1 + math.exp(-float(x[b, t, :24] @ w)))
            np.testing.assert_allclose(y[b, t], x[b, t] + g * x[b, t - 1], rtol=1e-12)
    p0 = dict(p)
    p0["smear.lambda"] = np.zeros(1, np.float32)
    np.testing.assert_allclose(np.asarray(rm.smear(jnp.asarray(x), p0)), x, rtol=0, atol=0)


def test_rope_formula_and_relative_positions():
    base = 100000.0
    B, T, nh, hd = 1, 5, 1, 8
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, T, nh, hd))
    y = np.asarray(rm.rope(jnp.asarray(x), base))
    for t in range(T):
        for j in range(hd // 2):
            th = t * base ** (-2 * j / hd)
            a, b = x[0, t, 0, j], x[0, t, 0, j + hd // 2]
            assert np.isclose(y[0, t, 0, j], a * math.cos(th) - b * math.sin(th), atol=1e-14)
            assert np.isclose(y[0, t, 0, j + hd // 2], b * math.cos(th) + a * math.sin(th),
                              atol=1e-14)
    # q_t . k_s depends only on t - s
    q = np.repeat(rng.normal(size=(1, 1, 1, hd)), T, axis=1)
    k = np.repeat(rng.normal(size=(1, 1, 1, hd)), T, axis=1)
    rq, rk = np.asarray(rm.rope(jnp.asarray(q), base)), np.asarray(rm.rope(jnp.asarray(k), base))
    d1 = rq[0, 3, 0] @ rk[0, 1, 0]
    d2 = rq[0, 4, 0] @ rk[0, 2, 0]
    assert np.isclose(d1, d2, rtol=1e-12)


def test_zero_lm_head_gives_log_of_real_vocab():
    cfg = small_config("baseline")
    p, x, y = setup(cfg, seed=17)
    p["lm_head"] = np.zeros_like(p["lm_head"])
    loss = float(rm.loss_fn(f64(p), x, y, cfg))
    assert abs(loss - math.log(cfg["vocab_size"])) < 1e-12  # not log(vocab_padded)


def test_padded_vocab_columns_never_reach_the_loss():
    cfg = small_config("baseline")
    p, x, y = setup(cfg, seed=18)
    l0, g0 = lg(p, x, y, cfg)
    q = dict(p)
    lm = np.array(p["lm_head"], np.float64)
    lm[:, cfg["vocab_size"]:] = 100.0
    q["lm_head"] = lm
    l1, _ = lg(q, x, y, cfg)
    assert abs(l0 - l1) <= 1e-14 * l0
    assert np.all(g0["lm_head"][:, cfg["vocab_size"]:] == 0.0)


def test_softcap_bounds_logits():
    cfg = small_config("baseline")
    p, x, _ = setup(cfg, seed=19)
    p["lm_head"] = np.asarray(p["lm_head"], np.float64) * 1e4
    logits = np.asarray(rm.forward_logits(f64(p), x, cfg))
    assert logits.shape[-1] == cfg["vocab_size"]
    assert np.max(np.abs(logits)) <= 15.0 and np.max(np.abs(logits)) > 14.0


def test_resolve_targets_table():
    def t(mode, spec="default", L=6):
        return rm.resolve_targets({"value_mode": mode, "value_layers": spec, "n_layer": L})

    assert t("baseline") == []
    for m in ("resformer-identity", "resformer-constant", "resformer-learnable",
              "resformer-plus", "resformer-dense", "svformer"):
        assert t(m) == [1, 2, 3, 4, 5], m
    for m in ("resformer-sparse", "v1", "x0v", "bov", "bov-add"):
        assert t(m) == [4, 5], m
        assert t(m, L=12) == [8, 9, 10, 11], m
        assert t(m, L=8) == [5, 6, 7], m  # "last 3 of 8 layers"
    assert t("value-embed") == [1, 3, 5]
    assert t("value-embed", L=5) == [0, 2, 4]
    assert t("x0v", "all") == [0, 1, 2, 3, 4, 5]
    assert t("bov", "all") == [0, 1, 2, 3, 4, 5]
    assert t("v1", "all") == [1, 2, 3, 4, 5]
    assert t("resformer-sparse", "every-other") == [1, 3, 5]
    assert t("x0v", "every-other") == [1, 3, 5]
    assert t("x0v", "last-third") == [4, 5]
    assert t("value-embed", "last-third") == [4, 5]
    assert t("v1", "2,4") == [2, 4]
    assert t("bov", "0,3") == [0, 3]
    for bad in ("0,2", "7", "2,2", "x"):
        with pytest.raises(ValueError):
            t("v1", bad)


def test_expected_param_names():
    c = rm.default_config("bov")
    names = rm.expected_param_names(c)
    assert "blocks.4.attn.wv" not in names and "blocks.3.attn.wv" in names
    assert {"blocks.4.value.table", "blocks.4.value.gain", "blocks.5.value.table"} <= names
    c = rm.default_config("bov", shared_table=True)
    names = rm.expected_param_names(c)
    assert "value.table" in names and "blocks.4.value.table" not in names
    c = rm.default_config("svformer")
    names = rm.expected_param_names(c)
    assert [n for n in names if n.endswith("attn.wv")] == ["blocks.0.attn.wv"]
    c = rm.default_config("x0v")
    assert "blocks.5.attn.wv" in rm.expected_param_names(c)
    s = rm.expected_param_shapes(rm.default_config("resformer-dense"))
    assert s["blocks.3.value.dense"] == (4,) and "blocks.0.value.dense" not in s
    s = rm.expected_param_shapes(rm.default_config("resformer-plus"))
    assert s["value_plus.logits"] == (5,) and "blocks.1.value.lambda1" not in s
    s = rm.expected_param_shapes(rm.default_config("value-embed"))
    assert s["blocks.5.value.gate_w"] == (12, 2) and s["blocks.5.value.table"] == (256, 32)
    s = rm.expected_param_shapes(rm.default_config("bov-add", bov_add_fixed=True))
    assert "blocks.5.value.a" not in s and "blocks.5.value.table" in s
    s = rm.expected_param_shapes(rm.default_config("baseline"))
    assert s["wte"] == (256, 64) and s["lm_head"] == (64, 256)
    assert s["blocks.0.attn.wq"] == (64, 64) and s["blocks.0.attn.wk"] == (64, 32)
    assert s["blocks.0.mlp.fc"] == (64, 256) and s["blocks.0.mlp.proj"] == (256, 64)
    assert len(s) == 2 + 6 * 6


# ---------------------------------------------------------------------------------------
# (c) compare_case on Python-made case files
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_case(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cases") / "bov_add.h5")
    mc.make_case(path, rm.default_config("bov-add"), seed=21)
    return path


def _copy(src, tmp_path, name="case.h5"):
    dst = str(tmp_path / name)
    shutil.copy(src, dst)
    return dst


def test_compare_accepts_reference_case(good_case):
    rep = cc.compare(good_case)
    assert rep.ok, str(rep)
    assert rep.loss_rel_err <= 1e-7
    assert max(r.rel_err for r in rep.rows) <= 1e-6


def test_compare_cli_exit_status(good_case, tmp_path, capsys):
    assert cc.main([good_case]) == 0
    assert "PASS" in capsys.readouterr().out
    bad = _copy(good_case, tmp_path)
    with h5py.File(bad, "r+") as f:
        f["grads/lm_head"][...] = 0.0
    assert cc.main([good_case, bad]) == 1
    out = capsys.readouterr().out
    assert "lm_head" in out and "FAIL" in out and "rel_err" in out


@pytest.mark.parametrize("whole", [False, True])
def test_compare_rejects_gradient_off_by_1e3(good_case, tmp_path, whole):
    path = _copy(good_case, tmp_path)
    name = "blocks.5.value.table"
    with h5py.File(path, "r+") as f:
        g = f["grads/" + name][...].astype(np.float64)
        if whole:
            g *= 1.0 + 1e-3
        else:
            k = np.unravel_index(np.argmax(np.abs(g)), g.shape)
            g[k] *= 1.0 + 1e-3
        f["grads/" + name][...] = g.astype(np.float32)
    rep = cc.compare(path)
    assert not rep.ok
    failed = [r.name for r in rep.rows if not r.ok]
    assert failed == [name], str(rep)
    assert name in rep.table()


def test_compare_rejects_loss_off(good_case, tmp_path):
    path = _copy(good_case, tmp_path)
    with h5py.File(path, "r+") as f:
        f["loss"][...] = float(f["loss"][()]) * (1 + 1e-4)
    rep = cc.compare(path)
    assert not rep.ok and any("loss" in e for e in rep.errors)


def _edit_config(path, **kw):
    with h5py.File(path, "r+") as f:
        cfg = cc._read_config(f)
        cfg.update(kw)
        f.attrs["config"] = __import__("json").dumps(cfg)


def test_compare_rejects_wrong_targets(good_case, tmp_path):
    path = _copy(good_case, tmp_path)
    _edit_config(path, target_layers=[3, 4, 5])
    rep = cc.compare(path)
    assert not rep.ok and any("target_layers" in e for e in rep.errors)


def test_compare_rejects_wrong_constant(good_case, tmp_path):
    path = _copy(good_case, tmp_path)
    _edit_config(path, rope_base=10000.0)
    rep = cc.compare(path)
    assert not rep.ok and any("rope_base" in e for e in rep.errors)


def test_compare_rejects_param_set_mismatch(good_case, tmp_path):
    path = _copy(good_case, tmp_path)
    with h5py.File(path, "r+") as f:  # drop one parameter and its gradient
        del f["params/blocks.4.value.a"]
        del f["grads/blocks.4.value.a"]
    rep = cc.compare(path)
    assert not rep.ok and any("blocks.4.value.a" in e for e in rep.errors)
    path2 = _copy(good_case, tmp_path, "extra.h5")
    with h5py.File(path2, "r+") as f:  # an extra parameter
        f["params/blocks.4.value.gain"] = np.ones((1,), np.float32)
        f["grads/blocks.4.value.gain"] = np.ones((1,), np.float32)
    rep = cc.compare(path2)
    assert not rep.ok and any("unexpected" in e for e in rep.errors)


def test_compare_rejects_wv_on_bov_target(tmp_path):
    cfg = small_config("bov")
    path = str(tmp_path / "bov.h5")
    mc.make_case(path, cfg, seed=22)
    assert cc.compare(path).ok
    with h5py.File(path, "r+") as f:
        f["params/blocks.3.attn.wv"] = np.zeros((16, 8), np.float32)
        f["grads/blocks.3.attn.wv"] = np.zeros((16, 8), np.float32)
    rep = cc.compare(path)
    assert not rep.ok and any("blocks.3.attn.wv" in e for e in rep.errors)


def test_compare_rejects_all_zero_reference_gradient(tmp_path):
    # bov-add at its init b = 0: the table gradient is identically zero.
    cfg = small_config("bov-add")
    path = str(tmp_path / "zero.h5")
    over = {f"blocks.{i}.value.b": np.zeros(1) for i in cfg["target_layers"]}
    mc.make_case(path, cfg, seed=23, overrides=over)
    rep = cc.compare(path)
    assert not rep.ok
    assert any("identically zero" in e and "value.table" in e for e in rep.errors), str(rep)


def test_nanochat_rope_sense_is_a_reparameterization(monkeypatch):
    """docs/model.md "Base transformer": nanochat rotates the other way (y1 = x1 cos + x2 sin,
    y2 = -x1 sin + x2 cos); negating the second half of every head's W_Q and W_K columns maps
    one model onto the other exactly (QK-norm and the dot product do not see the sign)."""
    cfg = small_config("baseline", smear_gate=True, window_keys="w+1", n_embd=32, head_dim=16)
    p, x, y = setup(cfg, seed=21)
    ours = rm.forward_logits(p, x, cfg)
    hd, half = 16, 8

    def nanochat_rope(z, base):
        T = z.shape[1]
        j = np.arange(half, dtype=np.float64)
        ang = np.arange(T, dtype=np.float64)[:, None] * np.power(float(base), -2.0 * j / hd)[None, :]
        cos = jnp.asarray(np.cos(ang))[None, :, None, :]
        sin = jnp.asarray(np.sin(ang))[None, :, None, :]
        z1, z2 = z[..., :half], z[..., half:]
        return jnp.concatenate([z1 * cos + z2 * sin, -z1 * sin + z2 * cos], axis=-1)

    pm = dict(p)
    for name in p:
        if name.endswith("attn.wq") or name.endswith("attn.wk"):
            w = np.array(p[name], np.float64)
            for h in range(w.shape[1] // hd):
                w[:, h * hd + half:(h + 1) * hd] *= -1
            pm[name] = w
    monkeypatch.setattr(rm, "rope", nanochat_rope)
    theirs = rm.forward_logits(pm, x, cfg)
    np.testing.assert_allclose(np.asarray(theirs), np.asarray(ours), rtol=0, atol=1e-10)
    # and without the sign flips the two senses are different models
    other = rm.forward_logits(p, x, cfg)
    assert float(np.max(np.abs(np.asarray(other) - np.asarray(ours)))) > 1e-4
