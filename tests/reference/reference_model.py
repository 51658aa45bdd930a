"""Independent JAX reference of the vtrain model family (the "oracle").

Written from the model reference docs/model.md (equations, pinned choices, parameter names) and
tests/reference/FORMAT.md (config keys) only, never from the C++. Everything is computed in float64
on the CPU with plain jnp ops: full T x T attention with an explicit mask, every attention-matrix
term (shaped attention's I and C, E-SPA/U-SPA biases from a generic Cholesky) as an explicit T x T
matrix, no fusion.

Every value mode is one function (the value v of a target layer) and one entry of VALUE_PATHS (its
facts: default targets, V1, W_V, its parameters, its options); every block shape is one function
(the block's composition) and one entry of BLOCKS (its parameters). A new mode or shape is one
function and one entry.

Public API:
  VALUE_PATHS, VALUE_MODES, V1_MODES, BLOCKS, BLOCK_SHAPES, SIMPLIFIED
  default_config(mode, ...)                -> config dict (the exporter's tiny default shape)
  resolve_targets(config)                  -> sorted list of target layers
  window_sizes(config, T)                  -> per-layer attention window W
  expected_param_shapes(config)            -> {name: shape}
  expected_param_names(config)             -> set of names
  loss_fn(params, inputs, targets, config) -> scalar loss (mean token CE in nats)
  loss_and_grads(params, inputs, targets, config) -> (loss, {name: grad})
"""

from __future__ import annotations

import functools
import json
import math
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)
# The reference's graphs are tiny: XLA's optimization passes cost far more compile time than
# they save at run time, and they play no part in what is computed.
jax.config.update("jax_disable_most_optimizations", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# Constants fixed by the model reference (compare_case checks that a case's config agrees with them).
SPEC_CONSTANTS = {
    "rope_base": 100000.0,
    "norm_eps": 1e-6,
    "qk_norm_scale": 1.2,
    "logit_softcap": 15.0,
    "mlp_ratio": 4,
    "value_embed_gate_channels": 12,
    "value_embed_gate_scale": 3.0,
}

def padded_vocab(v: int) -> int:
    return int(math.ceil(v / 64) * 64)


def default_config(
    mode: str = "baseline",
    value_layers: str = "default",
    detach_v1: bool = False,
    shared_table: bool = False,
    bov_add_fixed: bool = False,
    block: str = "prenorm",
    **overrides,
) -> dict:
    """The exporter's default tiny config (6 layers, d 64, 4 heads, 2 KV heads, hd 16,
    V 251 padded to 256, T 32, short window 8, pattern SSSL); keys as in FORMAT.md."""
    cfg = {
        "n_layer": 6,
        "n_embd": 64,
        "n_head": 4,
        "n_kv_head": 2,
        "head_dim": 16,
        "vocab_size": 251,
        "vocab_padded": 256,
        "seq_len": 32,
        "window_pattern": "SSSL",
        "short_window": 8,
        "rope_base": SPEC_CONSTANTS["rope_base"],
        "norm_eps": SPEC_CONSTANTS["norm_eps"],
        "qk_norm_scale": SPEC_CONSTANTS["qk_norm_scale"],
        "logit_softcap": SPEC_CONSTANTS["logit_softcap"],
        "mlp_ratio": SPEC_CONSTANTS["mlp_ratio"],
        "value_mode": mode,
        "value_layers": value_layers,
        "detach_v1": bool(detach_v1),
        "shared_table": bool(shared_table),
        "bov_add_fixed": bool(bov_add_fixed),
        "value_embed_gate_channels": SPEC_CONSTANTS["value_embed_gate_channels"],
        "value_embed_gate_scale": SPEC_CONSTANTS["value_embed_gate_scale"],
        "block": block,
        "norm_none": False,
        "qk_norm": block not in ZERO_WQ,
        "reparam_init": "",
        "attn_bias": "",
        "proj_gains": False,
        "mlp_act": "relu2",
        "dense": False,
        "dense_dilation": 1,
        "dense_period": 1,
        "neutreno_lambda": 0.4,
    }
    cfg.update(overrides)
    if "vocab_size" in overrides and "vocab_padded" not in overrides:
        cfg["vocab_padded"] = padded_vocab(cfg["vocab_size"])
    cfg["target_layers"] = resolve_targets(cfg)
    return cfg


# ----------------------------------------------------------------------------------------
# Targets and windows
# ----------------------------------------------------------------------------------------


def _default_spec(mode: str) -> str:
    spec = VALUE_PATHS[mode].targets
    if spec is None:
        raise ValueError(f"no default targets for mode {mode!r}")
    return spec


def resolve_targets(config: dict) -> list[int]:
    """Target layers of the value path, from `value_mode` and the `value_layers` spec."""
    mode = config["value_mode"]
    if mode not in VALUE_MODES:
        raise ValueError(f"unknown value_mode {mode!r}")
    L = int(config["n_layer"])
    if VALUE_PATHS[mode].targets is None:
        return []  # baseline has no value path: every layer is plain attention
    reads_v1 = mode in V1_MODES
    spec = config.get("value_layers", "default")
    if spec is None:
        spec = "default"
    if isinstance(spec, (list, tuple)):
        spec = ",".join(str(int(s)) for s in spec)
    spec = str(spec).strip()
    if spec in ("", "default"):
        spec = _default_spec(mode)
    elif spec == "value-embed-default":
        raise ValueError(f"bad value_layers spec {spec!r}")

    if spec == "last-third":
        targets = list(range((2 * L) // 3, L))
    elif spec == "all":
        targets = list(range(L))
    elif spec == "every-other":
        targets = list(range(1, L, 2))
    elif spec == "value-embed-default":  # alternate layers ending at the last one
        targets = [i for i in range(L) if (L - 1 - i) % 2 == 0]
    else:
        try:
            items = [int(s) for s in spec.split(",") if s.strip() != ""]
        except ValueError as e:
            raise ValueError(f"bad value_layers spec {spec!r}") from e
        if not items:
            raise ValueError(f"empty value_layers list {spec!r}")
        for i in items:
            if not 0 <= i < L:
                raise ValueError(f"value layer {i} out of range for {L} layers")
        if len(set(items)) != len(items):
            raise ValueError(f"duplicate layer in value_layers {spec!r}")
        if reads_v1 and 0 in items:
            raise ValueError(f"layer 0 cannot be a target of {mode} (it reads V1)")
        targets = sorted(items)
    if reads_v1:
        targets = [i for i in targets if i >= 1]
    if not targets:
        raise ValueError(f"mode {mode} with spec {spec!r} resolves to no target layer (L={L})")
    return targets


def short_window_of(config: dict, T: int) -> int:
    sw = config.get("short_window")
    if sw is None or int(sw) <= 0:
        return int(math.ceil(T / 4 / 128) * 128)
    return int(sw)


def window_sizes(config: dict, T: int) -> list[int]:
    """Attention window W of each layer: query t sees key s iff 0 <= t - s < W. Under
    window_keys "w+1" (nanochat's flash-attention window (W, 0): t - s <= W) an S layer sees
    one key more."""
    L = int(config["n_layer"])
    pattern = config.get("window_pattern") or "SSSL"
    keys = config.get("window_keys", "w")
    if keys not in ("w", "w+1"):
        raise ValueError(f"bad window_keys {keys!r}")
    sw = short_window_of(config, T) + (1 if keys == "w+1" else 0)
    out = []
    for i in range(L):
        c = "L" if i == L - 1 else pattern[i % len(pattern)]
        if c == "L":
            out.append(T)
        elif c == "S":
            out.append(sw)
        else:
            raise ValueError(f"bad window pattern character {c!r} in {pattern!r}")
    return out


def dense_inputs(config: dict, i: int) -> list[int]:
    """DenseFormer: the j of x_j averaged after block i (x_0 = embedding output, x_j = output of
    block j-1), or [] when block i has no average (its (i+1) is not a multiple of the period)."""
    k = int(config.get("dense_dilation", 1))
    per = int(config.get("dense_period", 1))
    if (i + 1) % per != 0:
        return []
    return [j for j in range(i + 2) if (i + 1 - j) % k == 0]


def spa_rho(layer: int, L: int, schedule: str = "ours") -> float:
    """Depth schedule of E-SPA/U-SPA (docs/model.md), rho_{-1} = 0. "ours" (vtrain's own, not
    the paper's): rho_l = 0.8 (l+1)/L. "simplest" (SimplEsT-ViT's E-SPA rule with its layers
    numbered 1..L and gamma_L = 0.005): 1 - exp(-2 gamma_l) = (1 - exp(-2 gamma_L))^((l+1)/L),
    rho_l = exp(-gamma_l)."""
    if layer < 0:
        return 0.0
    if schedule == "simplest":
        gamma_l = -0.5 * math.log(1.0 - (1.0 - math.exp(-2 * 0.005)) ** ((layer + 1) / L))
        return math.exp(-gamma_l)
    if schedule != "ours":
        raise ValueError(f"unknown spa schedule {schedule!r}")
    return 0.8 * (layer + 1) / L


def spa_kernel(kind: str, rho: float, T: int) -> np.ndarray:
    i = np.arange(T)
    if kind == "uspa":
        return (1.0 - rho) * np.eye(T) + rho * np.ones((T, T))
    if kind == "espa":
        if rho == 0.0:
            return np.eye(T)
        gamma = -math.log(rho)  # exp(-gamma) = rho, the neighbour correlation
        return np.exp(-gamma * np.abs(i[:, None] - i[None, :]))
    raise ValueError(f"unknown attention bias {kind!r}")


def spa_matrix(config: dict, layer: int, T: int) -> np.ndarray:
    """A_l = L_l L_{l-1}^{-1} (T x T), from a generic Cholesky of the target kernels."""
    kind = config["attn_bias"]
    L = int(config["n_layer"])
    sched = config.get("spa_schedule", "ours")
    Lc = np.linalg.cholesky(spa_kernel(kind, spa_rho(layer, L, sched), T))
    Lp = np.linalg.cholesky(spa_kernel(kind, spa_rho(layer - 1, L, sched), T))
    return np.linalg.solve(Lp.T, Lc.T).T  # A Lp = Lc


def spa_bias(config: dict, layer: int, T: int) -> np.ndarray:
    """B_l = log A_l on the causal triangle (-inf where not positive)."""
    A = spa_matrix(config, layer, T)
    with np.errstate(divide="ignore"):
        B = np.where(A > 0, np.log(np.where(A > 0, A, 1.0)), -np.inf)
    return np.tril(B)


# ----------------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------------


def expected_param_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    mode = config["value_mode"]
    L = int(config["n_layer"])
    d = int(config["n_embd"])
    H = int(config["n_head"])
    Hkv = int(config["n_kv_head"])
    hd = int(config["head_dim"])
    Vp = int(config["vocab_padded"])
    hidden = int(config.get("mlp_ratio", 4)) * d
    kvw = Hkv * hd
    targets = resolve_targets(config)
    tset = set(targets)
    owners: dict[str, list[str]] = {}  # a mode's options belong to that mode (or modes)
    for other, path in VALUE_PATHS.items():
        for key in path.options:
            owners.setdefault(key, []).append(other)
    for key, modes in owners.items():
        if config.get(key, False) and mode not in modes:
            raise ValueError(f"{key} is only defined for {' or '.join(modes)}")
    dims = Dims(config, d, H, Hkv, hd, Vp, kvw, int(config.get("value_embed_gate_channels", 12)))

    shapes: dict[str, tuple[int, ...]] = {"wte": (Vp, d), "lm_head": (d, Vp)}
    if config.get("smear_gate", False):
        shapes["smear.gate_w"] = (SMEAR_CHANNELS, 1)
        shapes["smear.lambda"] = (1,)
    block = config.get("block", "prenorm")
    if block not in BLOCK_SHAPES:
        raise ValueError(f"unknown block shape {block!r}")
    path = VALUE_PATHS[mode]
    for i in range(L):
        p = f"blocks.{i}."
        shapes[p + "attn.wq"] = (d, H * hd)
        shapes[p + "attn.wk"] = (d, kvw)
        has_v = not (i in tset and not path.wv_on_target)
        shapes.update({p + k: v for k, v in BLOCKS[block].params(dims, i, has_v).items()})
        shapes[p + "mlp.fc"] = (d, hidden)
        shapes[p + "mlp.proj"] = (hidden, d)
        if config.get("dense"):
            inputs = dense_inputs(config, i)
            if inputs:
                shapes[p + "dwa"] = (len(inputs),)
        if i in tset:
            shapes.update({p + "value." + k: v for k, v in path.layer_params(dims, i).items()})
    shapes.update(path.shared_params(dims, targets))
    return shapes


SMEAR_CHANNELS = 24


def smear(x, p):
    """The smear gate on the normalized embedding x (B, T, d): position t >= 1 of each row adds
    lambda * sigmoid(x[t, :24] . w) * x[t-1]; position 0 is unchanged."""
    w = p["smear.gate_w"][:, 0]
    lam = p["smear.lambda"][0]
    gate = lam * jax.nn.sigmoid(x[:, 1:, :SMEAR_CHANNELS] @ w)  # (B, T-1)
    return jnp.concatenate([x[:, :1], x[:, 1:] + gate[..., None] * x[:, :-1]], axis=1)


def expected_param_names(config: dict) -> set[str]:
    return set(expected_param_shapes(config))


# ----------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------


def rms_norm(x, eps):
    """RMSNorm without weight over the last axis."""
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def rope(x, base):
    """Rotate-half RoPE on x of shape (B, T, heads, hd), positions 0..T-1."""
    T, hd = x.shape[1], x.shape[3]
    half = hd // 2
    j = np.arange(half, dtype=np.float64)
    inv_freq = np.power(float(base), -2.0 * j / hd)  # base^(-2j/hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]  # (T, half)
    cos = jnp.asarray(np.cos(ang))[None, :, None, :]
    sin = jnp.asarray(np.sin(ang))[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def window_mask(T: int, W: int):
    t = np.arange(T)[:, None]
    s = np.arange(T)[None, :]
    diff = t - s
    return (diff >= 0) & (diff < W)  # (T, T) bool, [query, key]


def attention_matrices(q, k, config, W, layer, gains):
    """Per-head attention matrices (B, H, T, T): softmax(q.k/sqrt(hd) + bias) under the causal
    window mask, then alpha*I + D (beta*A - gamma*C) (shaped attention; gains absent: D A).
    With a bias: D (spa_rescale on) is the diagonal of A_l's row sums over the visible keys, else
    1; C (spa_centre bias) is the softmax of the bias alone under the mask, else the uniform
    matrix."""
    T, hd = q.shape[1], q.shape[3]
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    mask = window_mask(T, W)
    bias = spa_bias(config, layer, T) if config.get("attn_bias") else None
    if bias is not None:
        scores = scores + jnp.asarray(bias)[None, None]
    scores = jnp.where(jnp.asarray(mask)[None, None], scores, -jnp.inf)
    A = jax.nn.softmax(scores, axis=-1)
    D = np.ones(T)
    if bias is not None and config.get("spa_rescale") == "on":
        D = np.where(mask, spa_matrix(config, layer, T), 0.0).sum(axis=1)
    D = jnp.asarray(D)[None, None, :, None]
    alpha, beta, gamma = gains
    if alpha is None and beta is None and gamma is None:
        return D * A
    # C: what softmax gives when every logit is 0 under the same mask (uniform over the visible
    # keys), the "uniform causal" matrix under full context; with the bias as the centre, the
    # softmax of the bias alone (the attention at q = 0).
    if bias is not None and config.get("spa_centre") == "bias":
        Bm = np.where(mask, bias, -np.inf)
        Bm = Bm - Bm.max(axis=1, keepdims=True)
        C = np.where(mask, np.exp(Bm), 0.0)
        C = C / C.sum(axis=1, keepdims=True)
    else:
        C = mask / mask.sum(axis=1, keepdims=True)
    I = np.eye(T)
    M = (beta[None, :, None, None] if beta is not None else 1.0) * A
    if gamma is not None:
        M = M - gamma[None, :, None, None] * jnp.asarray(C)[None, None]
    M = D * M
    if alpha is not None:
        M = M + alpha[None, :, None, None] * jnp.asarray(I)[None, None]
    return M


def attention(n, v, p, b, config, W, layer, v1=None, lam=0.0, fixed=None):
    """n: attention input (B, T, d); v: value (B, T, Hkv*hd). Returns the sub-layer output (B, T, d)
    after the output projection."""
    B, T, _ = n.shape
    H = int(config["n_head"])
    Hkv = int(config["n_kv_head"])
    hd = int(config["head_dim"])
    eps = float(config["norm_eps"])
    qs = float(config["qk_norm_scale"])
    base = float(config["rope_base"])
    assert H % Hkv == 0
    q = rope((n @ p[b + "attn.wq"]).reshape(B, T, H, hd), base)
    k = rope((n @ p[b + "attn.wk"]).reshape(B, T, Hkv, hd), base)
    if config.get("qk_norm", True):
        q = qs * rms_norm(q, eps)
        k = qs * rms_norm(k, eps)
    group = H // Hkv
    kv_of_head = np.arange(H) // group  # query head h uses KV head h // (H/Hkv)
    k = k[:, :, kv_of_head, :]
    vh = v.reshape(B, T, Hkv, hd)[:, :, kv_of_head, :]
    gains = tuple(p.get(b + "attn." + g) for g in ("alpha", "beta", "gamma"))
    M = attention_matrices(q, k, config, W, layer, gains)
    y = jnp.einsum("bhts,bshd->bthd", M, vh)
    if lam != 0.0:  # NeuTRENO: A v + lam (V1 - v), per query head from its KV head
        v1h = v1.reshape(B, T, Hkv, hd)[:, :, kv_of_head, :]
        y = y + lam * (v1h - vh)
    return project(y.reshape(B, T, H * hd), p, b, "o", fixed)


def project(x, p, b, what, fixed):
    """The V ("v") or O ("o") projection of block prefix b: a matrix, the reparameterization
    x (s W0 + r dW) with W0 fixed, the identity times a gain, or (no parameter at all: sas/sas-p
    without proj_gains) the plain identity."""
    w, skip, resid = b + f"attn.w{what}", b + f"attn.{what}_skip", b + f"attn.{what}_resid"
    if resid in p:
        W0 = jnp.asarray(fixed[b + f"attn.w{what}_base"], dtype=jnp.float64)
        return x @ (p[skip][0] * W0 + p[resid][0] * p[w])
    if skip in p:
        return p[skip][0] * x
    if w in p:
        return x @ p[w]
    return x


def mlp(n, fc, proj, act="relu2"):
    """docs/model.md "Base transformer": relu^2 (default) or relu (--mlp-act relu)."""
    h = jnp.maximum(n @ fc, 0.0)
    if act == "relu":
        return h @ proj
    if act != "relu2":
        raise ValueError(f"unknown mlp_act {act!r}")
    return (h * h) @ proj


def _scalar(p):
    return p[0]


# ----------------------------------------------------------------------------------------
# Value paths: one function per mode (the value v of a target layer) and one table entry
# ----------------------------------------------------------------------------------------


class Sources(NamedTuple):
    """What a target layer's value may read (docs/model.md, "Value paths")."""

    config: dict
    p: dict  # parameters by name
    vp: str  # the layer's value-parameter prefix, "blocks.i.value."
    i: int  # the layer
    k: int  # its position among the target layers
    L: int
    n: object  # the normalized block input (B, T, d)
    ctx: object  # the layer's context value n W_V (x0 W_V for x0v; None without W_V)
    v1: object  # layer 0's context value (None unless the mode reads it)
    inputs: object  # token ids (B, T)
    ctx_values: list  # [j] = layer j's context value, j < i


class Dims(NamedTuple):
    """Sizes parameter shapes are made of."""

    config: dict
    d: int
    H: int
    Hkv: int
    hd: int
    Vp: int
    kvw: int  # Hkv * hd
    gc: int  # value-embed gate channels


class ValuePathRef(NamedTuple):
    value: object  # Sources -> v (B, T, Hkv*hd)
    targets: str | None = None  # the default value_layers spec; None: no target layers
    reads_v1: bool = False  # target layers read V1 (layer 0 is never a target)
    wv_on_target: bool = True  # target layers keep their own W_V
    context_from_x0: bool = False  # the context value is x0 W_V
    layer_params: object = lambda dims, i: {}  # {name after "blocks.i.value.": shape}
    shared_params: object = lambda dims, targets: {}  # {name: shape}
    v1_coef: object = lambda config: 0.0  # lam of the attention-output term lam (V1 - v)
    attn_input_x0: float = 0.0  # c: a target's attention reads (1 - c) n + c x0 (q, k and v)
    options: tuple = ()  # config keys only this mode reads


def _gain(s):
    return _scalar(s.p[s.vp + "gain"])


def _baseline(s):
    raise AssertionError("baseline has no target layers")


def _fixed_coeffs(l1, l2):
    """v = l1 V1 + l2 ctx with fixed coefficients (the resformer-identity/constant/sparse)."""
    return lambda s: l1 * s.v1 + l2 * s.ctx


def _resformer_learnable(s):
    return _scalar(s.p[s.vp + "lambda1"]) * s.v1 + _scalar(s.p[s.vp + "lambda2"]) * s.ctx


def _plus_scale_learnable(config):
    return config.get("plus_scale", "learnable") in ("", "learnable")


def _resformer_plus(s):
    """s_scale softmax(a)_k V1 + l2 ctx; s_scale = value_plus.scale, or L with plus_scale fixed.
    (plus_init only sets the logits' init, which the comparison's perturbed weights replace.)"""
    w = jax.nn.softmax(s.p["value_plus.logits"])
    scale = _scalar(s.p["value_plus.scale"]) if _plus_scale_learnable(s.config) else float(s.L)
    return scale * w[s.k] * s.v1 + _scalar(s.p[s.vp + "lambda2"]) * s.ctx


def _plus_shared(dims, targets):
    shapes = {"value_plus.logits": (len(targets),)}
    if _plus_scale_learnable(dims.config):
        shapes["value_plus.scale"] = (1,)
    return shapes


def plus_init_logits(config: dict, targets) -> list | None:
    """The logits' init of --plus-init paper: a_k = ln(i_k) for target layer i_k, so that
    softmax(a)_k = i_k / sum_j i_j (docs/model.md); None for blagpt (random N(0, 0.1))."""
    if config.get("plus_init", "paper") in ("", "paper"):
        return [math.log(i) for i in targets]
    return None


def _resformer_dense(s):
    lam = s.p[s.vp + "dense"]
    v = lam[s.i] * s.ctx
    for j in range(s.i):
        v = v + lam[j] * s.ctx_values[j]
    return v


def _svformer(s):
    return s.v1


def _coef(s):
    """--value-coef: a fixed coefficient (no gain parameter), else the learnable gain."""
    return float(s.config["value_coef"]) if s.config.get("value_coef_fixed") else _gain(s)


def _coef_layer(dims, i):
    return {} if dims.config.get("value_coef_fixed") else {"gain": (1,)}


def _v1(s):
    return _coef(s) * s.v1


def _x0v(s):
    return _coef(s) * s.ctx


def _bov(s):
    table = s.p["value.table"] if s.config.get("shared_table", False) else s.p[s.vp + "table"]
    return _gain(s) * table[s.inputs]


BOV_ADD_FIXED = (0.5, 0.5)  # (a, b) for bov-add with fixed coefficients


def _bov_add(s):
    if s.config.get("bov_add_fixed", False):
        a, bb = BOV_ADD_FIXED
    else:
        a, bb = _scalar(s.p[s.vp + "a"]), _scalar(s.p[s.vp + "b"])
    return a * s.ctx + bb * s.p[s.vp + "table"][s.inputs]


def _value_embed(s):
    B, T = s.inputs.shape
    Hkv, hd = int(s.config["n_kv_head"]), int(s.config["head_dim"])
    gc = int(s.config.get("value_embed_gate_channels", 12))
    gscale = float(s.config.get("value_embed_gate_scale", 3.0))
    gate = gscale * jax.nn.sigmoid(s.n[..., :gc] @ s.p[s.vp + "gate_w"])  # (B, T, Hkv)
    emb = s.p[s.vp + "table"][s.inputs].reshape(B, T, Hkv, hd)
    return s.ctx + (gate[..., None] * emb).reshape(B, T, Hkv * hd)


def _neutreno(s):
    return s.ctx  # NeuTRENO changes the attention output (v1_coef), not v


def _resformer_hidden(s):
    return s.ctx  # the context value of the mixed attention input (attn_input_x0)


def _bov_shared(dims, targets):
    return {"value.table": (dims.Vp, dims.kvw)} if dims.config.get("shared_table", False) else {}


def _bov_layer(dims, i):
    shapes = {"gain": (1,)}
    if not dims.config.get("shared_table", False):
        shapes["table"] = (dims.Vp, dims.kvw)
    return shapes


def _bov_add_layer(dims, i):
    shapes = {} if dims.config.get("bov_add_fixed", False) else {"a": (1,), "b": (1,)}
    shapes["table"] = (dims.Vp, dims.kvw)
    return shapes


VALUE_PATHS = {
    "baseline": ValuePathRef(_baseline),
    "resformer-identity": ValuePathRef(_fixed_coeffs(0.5, 0.5), "all", reads_v1=True),
    "resformer-constant": ValuePathRef(_fixed_coeffs(2.0, 1.0), "all", reads_v1=True),
    "resformer-learnable": ValuePathRef(
        _resformer_learnable, "all", reads_v1=True,
        layer_params=lambda dims, i: {"lambda1": (1,), "lambda2": (1,)}),
    "resformer-plus": ValuePathRef(
        _resformer_plus, "all", reads_v1=True, layer_params=lambda dims, i: {"lambda2": (1,)},
        shared_params=_plus_shared, options=("plus_init", "plus_scale")),
    "resformer-sparse": ValuePathRef(_fixed_coeffs(5.0, 1.0), "last-third", reads_v1=True),
    "resformer-dense": ValuePathRef(
        _resformer_dense, "all", reads_v1=True, layer_params=lambda dims, i: {"dense": (i + 1,)}),
    "svformer": ValuePathRef(_svformer, "all", reads_v1=True, wv_on_target=False),
    "v1": ValuePathRef(_v1, "last-third", reads_v1=True, wv_on_target=False,
                       layer_params=_coef_layer, options=("value_coef_fixed",)),
    "x0v": ValuePathRef(_x0v, "last-third", context_from_x0=True,
                        layer_params=_coef_layer, options=("value_coef_fixed",)),
    "bov": ValuePathRef(_bov, "last-third", wv_on_target=False, layer_params=_bov_layer,
                        shared_params=_bov_shared, options=("shared_table",)),
    "bov-add": ValuePathRef(_bov_add, "last-third", layer_params=_bov_add_layer,
                            options=("bov_add_fixed",)),
    "value-embed": ValuePathRef(
        _value_embed, "value-embed-default",
        layer_params=lambda dims, i: {"table": (dims.Vp, dims.kvw), "gate_w": (dims.gc, dims.Hkv)}),
    "neutreno": ValuePathRef(_neutreno, "all", reads_v1=True,
                             v1_coef=lambda config: float(config.get("neutreno_lambda", 0.4))),
    "resformer-hidden": ValuePathRef(_resformer_hidden, "all", attn_input_x0=0.5),
}

VALUE_MODES = tuple(VALUE_PATHS)
# Modes whose target layers read V1 (layer 0's context value). Layer 0 is never their target.
V1_MODES = frozenset(m for m, ref in VALUE_PATHS.items() if ref.reads_v1)


# ----------------------------------------------------------------------------------------
# Block shapes: one function per shape (its composition) and one table entry
# ----------------------------------------------------------------------------------------


class BlockRef(NamedTuple):
    # (x, n, attn, mlp_of, nrm, p, b) -> the block output; n = nrm(x), attn / mlp_of map a
    # normalized input to the sub-layer's output, p the parameters, b the block prefix.
    forward: object
    params: object  # (dims, i, has_v) -> {name after "blocks.i.": shape} of the attention side
    simplified: bool = False  # identity projections, W_Q = 0, no QK-norm by default
    zero_wq: bool = False  # W_Q = 0 at init, hence no QK-norm by default


def _matrix_params(dims, i, has_v):
    shapes = {"attn.wv": (dims.d, dims.kvw)} if has_v else {}
    shapes["attn.wo"] = (dims.H * dims.hd, dims.d)
    return shapes


def _simplified_params(dims, i, has_v):
    """docs/model.md "Block shapes": layer 0's W_V is reparameterized s W0 + r dW (dW stored
    under the matrix's name), every other W_V and every W_O is the plain identity (no
    parameter). reparam_init: every layer's W_V and W_O reparameterized. proj_gains: the
    identities carry a gain s (v_skip / o_skip) and layer 0's W_O is reparameterized too.
    Then the shaped-attention gains and the block gains."""
    shapes = {}
    every = bool(dims.config.get("reparam_init"))
    gains = bool(dims.config.get("proj_gains", False))
    for what, present in (("v", has_v), ("o", True)):
        if not present:
            continue
        rep = every or (i == 0 and (what == "v" or gains))
        if rep:
            shapes[f"attn.w{what}"] = (dims.d, dims.d)
            shapes[f"attn.{what}_skip"] = (1,)
            shapes[f"attn.{what}_resid"] = (1,)
        elif gains:
            shapes[f"attn.{what}_skip"] = (1,)
    for g in ("alpha", "beta", "gamma"):
        shapes["attn." + g] = (dims.H,)
    shapes["attn_gain"] = (1,)
    shapes["mlp_gain"] = (1,)
    return shapes


def _prenorm(x, n, attn, mlp_of, nrm, p, b):
    x = x + attn(n)
    return x + mlp_of(nrm(x))


def _parallel(x, n, attn, mlp_of, nrm, p, b):
    return x + attn(n) + mlp_of(n)


def _vskipinit(x, n, attn, mlp_of, nrm, p, b):
    x = attn(n)
    return x + _scalar(p[b + "mlp_gain"]) * mlp_of(nrm(x))


def _sas(x, n, attn, mlp_of, nrm, p, b):
    x = _scalar(p[b + "attn_gain"]) * attn(n)
    return _scalar(p[b + "mlp_skip"]) * x + _scalar(p[b + "mlp_gain"]) * mlp_of(nrm(x))


def _sas_p(x, n, attn, mlp_of, nrm, p, b):
    return _scalar(p[b + "attn_gain"]) * attn(n) + _scalar(p[b + "mlp_gain"]) * mlp_of(n)


BLOCKS = {
    "prenorm": BlockRef(_prenorm, _matrix_params),
    "parallel": BlockRef(_parallel, _matrix_params),
    "vskipinit": BlockRef(
        _vskipinit,
        lambda dims, i, has_v: {**_matrix_params(dims, i, has_v), "attn.alpha": (dims.H,),
                                "attn.beta": (dims.H,), "mlp_gain": (1,)},
        zero_wq=True),
    "sas": BlockRef(
        _sas, lambda dims, i, has_v: {**_simplified_params(dims, i, has_v), "mlp_skip": (1,)},
        simplified=True),
    "sas-p": BlockRef(_sas_p, _simplified_params, simplified=True),
}

BLOCK_SHAPES = tuple(BLOCKS)
SIMPLIFIED = frozenset(name for name, ref in BLOCKS.items() if ref.simplified)
# Shapes whose W_Q starts at 0: QK-norm is off unless asked for.
ZERO_WQ = frozenset(name for name, ref in BLOCKS.items() if ref.simplified or ref.zero_wq)


def forward_logits(params, inputs, config, v1_override=None, fixed=None):
    """Logits over the real vocabulary after the soft-cap, shape (B, T, V).

    v1_override (tests only): a fixed array used wherever later layers read V1, to check
    detach-v1 gradients against finite differences of the loss with V1 held constant.
    fixed: untrained tensors (the W0 of reparameterized projections), by name."""
    mode = config["value_mode"]
    if mode not in VALUE_MODES:
        raise ValueError(f"unknown value_mode {mode!r}")
    block = config.get("block", "prenorm")
    if block not in BLOCK_SHAPES:
        raise ValueError(f"unknown block shape {block!r}")
    L = int(config["n_layer"])
    V = int(config["vocab_size"])
    eps = float(config["norm_eps"])
    cap = float(config["logit_softcap"])
    detach = bool(config.get("detach_v1", False))
    norm_none = bool(config.get("norm_none", False))
    dense = bool(config.get("dense", False))
    targets = resolve_targets(config)
    tpos = {layer: k for k, layer in enumerate(targets)}
    fixed = fixed or {}

    p = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}
    inputs = jnp.asarray(inputs)
    B, T = inputs.shape
    windows = window_sizes(config, T)

    x0 = rms_norm(p["wte"][inputs], eps)  # (B, T, d)
    if config.get("smear_gate", False):
        x0 = smear(x0, p)  # x0 (and DenseFormer's x_0) is the first block's input
    # x0v's source: the smeared x0 normalized again, as the BoV authors' gpt_base.py
    # (CausalSelfAttention.forward: x0n = norm(x0), v = c_v(x0n)); x0 itself without the gate.
    x0_for_value = rms_norm(x0, eps) if config.get("smear_gate", False) else x0
    x = x0
    xs = [x0]  # DenseFormer: x_0 and the block outputs
    v1 = None  # layer 0's context value, as read by later layers
    ctx_values = []  # V_j = n_j W_V^j (context values), as read later (resformer-dense)
    path = VALUE_PATHS[mode]

    for i in range(L):
        b = f"blocks.{i}."
        # The block's pre-norm(s); --norm none keeps them in layer 0 only.
        keep_norm = not (norm_none and i > 0)
        nrm = (lambda z: rms_norm(z, eps)) if keep_norm else (lambda z: z)
        n = nrm(x)
        has_v = not (i in tpos and not path.wv_on_target)
        ctx = None
        is_target = i in tpos
        hx = path.attn_input_x0 if is_target else 0.0

        def attn_input(z, hx=hx):  # the attention sub-layer's input (resformer-hidden mixes x0)
            return (1.0 - hx) * z + hx * x0 if hx else z

        if has_v:
            src = x0_for_value if (is_target and path.context_from_x0) else attn_input(n)
            ctx = project(src, p, b, "v", fixed)
        if i == 0 and path.reads_v1:
            v1 = jax.lax.stop_gradient(ctx) if detach else ctx
            if v1_override is not None:
                v1 = jnp.asarray(v1_override, dtype=jnp.float64)
        v = path.value(Sources(config, p, b + "value.", i, tpos.get(i), L, attn_input(n), ctx, v1,
                               inputs, ctx_values)) if is_target else ctx
        # Layer j's context value as later layers read it (resformer-dense); V_0 = V1 obeys
        # detach-v1.
        ctx_values.append(v1 if (i == 0 and v1 is not None) else ctx)
        lam = path.v1_coef(config) if is_target else 0.0

        def attn(z):
            return attention(attn_input(z), v, p, b, config, windows[i], i, v1, lam, fixed)

        def mlp_of(z):
            return mlp(z, p[b + "mlp.fc"], p[b + "mlp.proj"], config.get("mlp_act", "relu2"))

        x = BLOCKS[block].forward(x, n, attn, mlp_of, nrm, p, b)

        if dense:
            xs.append(x)
            inputs_i = dense_inputs(config, i)
            if inputs_i:
                a = p[b + "dwa"]
                x = sum(a[k] * xs[j] for k, j in enumerate(inputs_i))

    logits = rms_norm(x, eps) @ p["lm_head"]  # (B, T, Vp)
    logits = logits[..., :V]  # padded columns never reach the softmax
    return cap * jnp.tanh(logits / cap)


def loss_fn(params, inputs, targets, config, v1_override=None, fixed=None):
    """Mean over all (batch, position) of the cross-entropy, in nats."""
    logits = forward_logits(params, inputs, config, v1_override, fixed)
    targets = jnp.asarray(targets)
    lse = jax.scipy.special.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - picked)


@functools.partial(jax.jit, static_argnums=3)
def _jit_value_and_grad(params, inputs, targets, config_json, fixed):
    return jax.value_and_grad(loss_fn)(params, inputs, targets, json.loads(config_json), None,
                                       fixed)


def default_fixed(config: dict) -> dict:
    """The W0 of every reparameterized projection when reparam_init is "" or "id": the
    identity (reparam_init "orth" draws them at random: the caller must pass them)."""
    if config.get("reparam_init") == "orth":
        raise ValueError("reparam_init orth: pass the orthogonal W0 matrices as `fixed`")
    d = int(config["n_embd"])
    return {k.replace("_resid", "_base").replace("attn.v_", "attn.wv_").replace("attn.o_", "attn.wo_"):
            np.eye(d) for k in expected_param_shapes(config) if k.endswith(("v_resid", "o_resid"))}


def loss_and_grads(params, inputs, targets, config, jit: bool = True, fixed=None):
    """(loss, {name: dloss/dparam}) in float64. With jit, compiled code is cached per config.
    fixed: untrained tensors by name (the W0 of reparameterized projections; default: the
    identity, see default_fixed)."""
    if fixed is None:
        fixed = default_fixed(config)
    p64 = {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
    f64 = {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in (fixed or {}).items()}
    inputs = jnp.asarray(np.asarray(inputs, dtype=np.int32))
    targets = jnp.asarray(np.asarray(targets, dtype=np.int32))
    if jit:
        loss, grads = _jit_value_and_grad(p64, inputs, targets, json.dumps(config, sort_keys=True),
                                          f64)
    else:
        loss, grads = jax.value_and_grad(loss_fn)(p64, inputs, targets, config, None, f64)
    return float(loss), {k: np.asarray(g, dtype=np.float64) for k, g in grads.items()}
