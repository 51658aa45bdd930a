"""Independent JAX reference of the vtrain model family (the "oracle").

Written from ../../shared/MODEL.md (the equations), docs/model-conventions.md (pinned choices,
parameter names) and tests/reference/FORMAT.md (config keys) only. Everything is computed in
float64 on the CPU with plain jnp ops: full T x T attention with an explicit mask, no fusion.

Public API:
  VALUE_MODES, V1_MODES
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

import jax

jax.config.update("jax_enable_x64", True)
# The reference's graphs are tiny: XLA's optimization passes cost far more compile time than
# they save at run time, and they play no part in what is computed.
jax.config.update("jax_disable_most_optimizations", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

VALUE_MODES = (
    "baseline",
    "resformer-identity",
    "resformer-constant",
    "resformer-learnable",
    "resformer-plus",
    "resformer-sparse",
    "resformer-dense",
    "svformer",
    "v1",
    "x0v",
    "bov",
    "bov-add",
    "value-embed",
)

# Modes whose target layers read V1 (layer 0's context value). Layer 0 is never their target.
V1_MODES = frozenset(
    {
        "resformer-identity",
        "resformer-constant",
        "resformer-learnable",
        "resformer-plus",
        "resformer-sparse",
        "resformer-dense",
        "svformer",
        "v1",
    }
)

# Modes whose target layers store no W_V (the value never comes from n_i W_V^i there).
NO_WV_ON_TARGET = frozenset({"svformer", "v1", "bov"})

# Constants fixed by MODEL.md (compare_case checks that a case's config agrees with them).
SPEC_CONSTANTS = {
    "rope_base": 100000.0,
    "norm_eps": 1e-6,
    "qk_norm_scale": 1.2,
    "logit_softcap": 15.0,
    "mlp_ratio": 4,
    "value_embed_gate_channels": 12,
    "value_embed_gate_scale": 3.0,
}

# Fixed mixing coefficients (l1 on V1, l2 on the context value) from MODEL.md section 2.
FIXED_COEFFS = {
    "resformer-identity": (0.5, 0.5),
    "resformer-constant": (2.0, 1.0),
    "resformer-sparse": (5.0, 1.0),
}
BOV_ADD_FIXED = (0.5, 0.5)  # (a, b) for bov-add with fixed coefficients


def padded_vocab(v: int) -> int:
    return int(math.ceil(v / 64) * 64)


def default_config(
    mode: str = "baseline",
    value_layers: str = "default",
    detach_v1: bool = False,
    shared_table: bool = False,
    bov_add_fixed: bool = False,
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
    if mode in ("resformer-identity", "resformer-constant", "resformer-learnable",
                "resformer-plus", "resformer-dense", "svformer"):
        return "all"
    if mode in ("resformer-sparse", "v1", "x0v", "bov", "bov-add"):
        return "last-third"
    if mode == "value-embed":
        return "value-embed-default"
    raise ValueError(f"no default targets for mode {mode!r}")


def resolve_targets(config: dict) -> list[int]:
    """Target layers of the value path, from `value_mode` and the `value_layers` spec."""
    mode = config["value_mode"]
    if mode not in VALUE_MODES:
        raise ValueError(f"unknown value_mode {mode!r}")
    L = int(config["n_layer"])
    if mode == "baseline":
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
    """Attention window W of each layer: query t sees key s iff 0 <= t - s < W."""
    L = int(config["n_layer"])
    pattern = config.get("window_pattern") or "SSSL"
    sw = short_window_of(config, T)
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
    shared = bool(config.get("shared_table", False))
    fixed = bool(config.get("bov_add_fixed", False))
    if shared and mode != "bov":
        raise ValueError("shared_table is only defined for bov")
    if fixed and mode != "bov-add":
        raise ValueError("bov_add_fixed is only defined for bov-add")
    gc = int(config.get("value_embed_gate_channels", 12))

    shapes: dict[str, tuple[int, ...]] = {"wte": (Vp, d), "lm_head": (d, Vp)}
    for i in range(L):
        p = f"blocks.{i}."
        shapes[p + "attn.wq"] = (d, H * hd)
        shapes[p + "attn.wk"] = (d, kvw)
        if not (i in tset and mode in NO_WV_ON_TARGET):
            shapes[p + "attn.wv"] = (d, kvw)
        shapes[p + "attn.wo"] = (H * hd, d)
        shapes[p + "mlp.fc"] = (d, hidden)
        shapes[p + "mlp.proj"] = (hidden, d)
        if i not in tset:
            continue
        v = p + "value."
        if mode == "resformer-learnable":
            shapes[v + "lambda1"] = (1,)
            shapes[v + "lambda2"] = (1,)
        elif mode == "resformer-plus":
            shapes[v + "lambda2"] = (1,)
        elif mode == "resformer-dense":
            shapes[v + "dense"] = (i + 1,)
        elif mode in ("v1", "x0v"):
            shapes[v + "gain"] = (1,)
        elif mode == "bov":
            shapes[v + "gain"] = (1,)
            if not shared:
                shapes[v + "table"] = (Vp, kvw)
        elif mode == "bov-add":
            if not fixed:
                shapes[v + "a"] = (1,)
                shapes[v + "b"] = (1,)
            shapes[v + "table"] = (Vp, kvw)
        elif mode == "value-embed":
            shapes[v + "table"] = (Vp, kvw)
            shapes[v + "gate_w"] = (gc, Hkv)
    if mode == "resformer-plus":
        shapes["value_plus.logits"] = (len(targets),)
    if mode == "bov" and shared:
        shapes["value.table"] = (Vp, kvw)
    return shapes


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


def attention(n, v, wq, wk, wo, config, W):
    """n: normed input (B, T, d); v: value (B, T, Hkv*hd). Returns (B, T, d)."""
    B, T, _ = n.shape
    H = int(config["n_head"])
    Hkv = int(config["n_kv_head"])
    hd = int(config["head_dim"])
    eps = float(config["norm_eps"])
    qs = float(config["qk_norm_scale"])
    base = float(config["rope_base"])
    assert H % Hkv == 0
    q = (n @ wq).reshape(B, T, H, hd)
    k = (n @ wk).reshape(B, T, Hkv, hd)
    v = v.reshape(B, T, Hkv, hd)
    q = qs * rms_norm(rope(q, base), eps)
    k = qs * rms_norm(rope(k, base), eps)
    group = H // Hkv
    kv_of_head = np.arange(H) // group  # query head h uses KV head h // (H/Hkv)
    k = k[:, :, kv_of_head, :]
    v = v[:, :, kv_of_head, :]
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    mask = jnp.asarray(window_mask(T, W))[None, None]
    scores = jnp.where(mask, scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1)
    y = jnp.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, H * hd)
    return y @ wo


def mlp(n, fc, proj):
    h = jnp.maximum(n @ fc, 0.0)
    return (h * h) @ proj


def _scalar(p):
    return p[0]


def forward_logits(params, inputs, config, v1_override=None):
    """Logits over the real vocabulary after the soft-cap, shape (B, T, V).

    v1_override (tests only): a fixed array used wherever later layers read V1, to check
    detach-v1 gradients against finite differences of the loss with V1 held constant."""
    mode = config["value_mode"]
    if mode not in VALUE_MODES:
        raise ValueError(f"unknown value_mode {mode!r}")
    L = int(config["n_layer"])
    V = int(config["vocab_size"])
    Hkv = int(config["n_kv_head"])
    hd = int(config["head_dim"])
    eps = float(config["norm_eps"])
    cap = float(config["logit_softcap"])
    detach = bool(config.get("detach_v1", False))
    shared = bool(config.get("shared_table", False))
    fixed = bool(config.get("bov_add_fixed", False))
    gc = int(config.get("value_embed_gate_channels", 12))
    gscale = float(config.get("value_embed_gate_scale", 3.0))
    targets = resolve_targets(config)
    tpos = {layer: k for k, layer in enumerate(targets)}

    p = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}
    inputs = jnp.asarray(inputs)
    B, T = inputs.shape
    windows = window_sizes(config, T)

    x0 = rms_norm(p["wte"][inputs], eps)  # (B, T, d)
    x = x0
    v1 = None  # layer 0's context value, as read by later layers
    ctx_values = []  # resformer-dense: V_j = n_j W_V^j (context values), as read later

    for i in range(L):
        b = f"blocks.{i}."
        n = rms_norm(x, eps)
        ctx = None
        if (b + "attn.wv") in p:
            ctx = n @ p[b + "attn.wv"]
        if i == 0 and mode in V1_MODES:
            v1 = jax.lax.stop_gradient(ctx) if detach else ctx
            if v1_override is not None:
                v1 = jnp.asarray(v1_override, dtype=jnp.float64)
        is_target = i in tpos
        vp = b + "value."

        if not is_target:
            v = ctx
        elif mode in FIXED_COEFFS:
            l1, l2 = FIXED_COEFFS[mode]
            v = l1 * v1 + l2 * ctx
        elif mode == "resformer-learnable":
            v = _scalar(p[vp + "lambda1"]) * v1 + _scalar(p[vp + "lambda2"]) * ctx
        elif mode == "resformer-plus":
            w = jax.nn.softmax(p["value_plus.logits"])
            v = float(L) * w[tpos[i]] * v1 + _scalar(p[vp + "lambda2"]) * ctx
        elif mode == "resformer-dense":
            lam = p[vp + "dense"]
            v = lam[i] * ctx
            for j in range(i):
                v = v + lam[j] * ctx_values[j]
        elif mode == "svformer":
            v = v1
        elif mode == "v1":
            v = _scalar(p[vp + "gain"]) * v1
        elif mode == "x0v":
            v = _scalar(p[vp + "gain"]) * (x0 @ p[b + "attn.wv"])
        elif mode == "bov":
            table = p["value.table"] if shared else p[vp + "table"]
            v = _scalar(p[vp + "gain"]) * table[inputs]
        elif mode == "bov-add":
            if fixed:
                a, bb = BOV_ADD_FIXED
            else:
                a, bb = _scalar(p[vp + "a"]), _scalar(p[vp + "b"])
            v = a * ctx + bb * p[vp + "table"][inputs]
        elif mode == "value-embed":
            gate = gscale * jax.nn.sigmoid(n[..., :gc] @ p[vp + "gate_w"])  # (B, T, Hkv)
            emb = p[vp + "table"][inputs].reshape(B, T, Hkv, hd)
            v = ctx + (gate[..., None] * emb).reshape(B, T, Hkv * hd)
        else:  # baseline never has targets
            raise AssertionError(mode)

        if mode == "resformer-dense":
            # V_j read by later layers is the context value; V_0 (= V1) obeys detach-v1.
            ctx_values.append(v1 if i == 0 else ctx)

        x = x + attention(n, v, p[b + "attn.wq"], p[b + "attn.wk"], p[b + "attn.wo"],
                          config, windows[i])
        x = x + mlp(rms_norm(x, eps), p[b + "mlp.fc"], p[b + "mlp.proj"])

    logits = rms_norm(x, eps) @ p["lm_head"]  # (B, T, Vp)
    logits = logits[..., :V]  # padded columns never reach the softmax
    return cap * jnp.tanh(logits / cap)


def loss_fn(params, inputs, targets, config, v1_override=None):
    """Mean over all (batch, position) of the cross-entropy, in nats."""
    logits = forward_logits(params, inputs, config, v1_override)
    targets = jnp.asarray(targets)
    lse = jax.scipy.special.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - picked)


@functools.partial(jax.jit, static_argnums=3)
def _jit_value_and_grad(params, inputs, targets, config_json):
    return jax.value_and_grad(loss_fn)(params, inputs, targets, json.loads(config_json))


def loss_and_grads(params, inputs, targets, config, jit: bool = True):
    """(loss, {name: dloss/dparam}) in float64. With jit, compiled code is cached per config."""
    p64 = {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
    inputs = jnp.asarray(np.asarray(inputs, dtype=np.int32))
    targets = jnp.asarray(np.asarray(targets, dtype=np.int32))
    if jit:
        loss, grads = _jit_value_and_grad(p64, inputs, targets, json.dumps(config, sort_keys=True))
    else:
        loss, grads = jax.value_and_grad(loss_fn)(p64, inputs, targets, config)
    return float(loss), {k: np.asarray(g, dtype=np.float64) for k, g in grads.items()}
