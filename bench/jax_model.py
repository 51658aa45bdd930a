# bench/jax_model.py owns the JAX peer used by bench_cpu_vs_jax.py: a float32 implementation of
# the value-residual transformer (docs/model.md) and of its two
# optimizers (Muon for block matrices, AdamW for the rest), with a jit-compiled training step.
# Written from docs/model.md, not from vtrain's C++: it is a speed peer, not the numerical
# oracle (that one lives in tests/reference/).
"""JAX (CPU, float32) value-residual transformer + Muon/AdamW training step.

Parameters are a flat dict keyed by vtrain's names (`wte`, `lm_head`, `blocks.i.attn.wq`, ...),
matrices stored (in, out) so that y = x @ W, vocabulary padded to a multiple of 64.
Value modes implemented: baseline, resformer-identity, svformer, v1, x0v, bov.
"""
from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

VALUE_MODES = ("baseline", "resformer-identity", "svformer", "v1", "x0v", "bov")
_READS_V1 = ("resformer-identity", "svformer", "v1")
_NO_WV_ON_TARGETS = ("svformer", "v1", "bov")
NS_COEFFS = (3.4445, -4.7750, 2.0315)


@dataclasses.dataclass(frozen=True)
class Config:
    vocab_size: int
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_kv_head: int = 4
    head_dim: int = 32
    seq_len: int = 256
    window_pattern: str = "SSSL"
    short_window: int = 0  # 0: ceil(T/4/128)*128
    value_mode: str = "baseline"
    rope_base: float = 100000.0
    norm_eps: float = 1e-6
    qk_norm_scale: float = 1.2
    logit_softcap: float = 15.0
    mlp_ratio: int = 4

    def __post_init__(self):
        if self.value_mode not in VALUE_MODES:
            raise ValueError(f"value mode {self.value_mode!r} is not implemented in the JAX peer "
                             f"(have: {', '.join(VALUE_MODES)})")
        if self.n_head * self.head_dim != self.n_embd:
            raise ValueError("n_head * head_dim must equal n_embd")
        if self.n_head % self.n_kv_head:
            raise ValueError("n_kv_head must divide n_head")

    @property
    def vocab_padded(self) -> int:
        return (self.vocab_size + 63) // 64 * 64

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    def window(self, layer: int) -> int:
        if layer == self.n_layer - 1 or self.window_pattern[layer % len(self.window_pattern)] == "L":
            return self.seq_len
        w = self.short_window or -(-self.seq_len // 512) * 128  # ceil(T/4/128)*128
        return min(w, self.seq_len)

    def targets(self) -> tuple[int, ...]:
        L = self.n_layer
        if self.value_mode == "baseline":
            return ()
        if self.value_mode in ("resformer-identity", "svformer"):
            return tuple(range(1, L))
        first = 1 if self.value_mode in _READS_V1 else 0
        return tuple(range(max(first, 2 * L // 3), L))

    def has_wv(self, layer: int) -> bool:
        return not (layer in self.targets() and self.value_mode in _NO_WV_ON_TARGETS)

    def flops_per_token(self) -> float:
        """docs/model.md "Metrics": 6 * matmul params per token + attention over the windows."""
        C, K, Q = self.n_embd, self.kv_dim, self.n_head * self.head_dim
        n = 0
        for i in range(self.n_layer):
            n += C * Q + C * K + Q * C + (C * K if self.has_wv(i) else 0)
            n += 2 * C * self.mlp_ratio * C
        n += C * self.vocab_size
        attn = sum(12.0 * self.n_head * self.head_dim * min(self.window(i), self.seq_len)
                   for i in range(self.n_layer))
        return 6.0 * n + attn


# ----------------------------------------------------------------------------- parameters

def param_group(name: str) -> str:
    """Optimizer group of a parameter: muon, embedding, lm_head, value_table or scalar."""
    if name == "wte":
        return "embedding"
    if name == "lm_head":
        return "lm_head"
    if name.endswith(".value.table"):
        return "value_table"
    if name.endswith(".value.gain"):
        return "scalar"
    return "muon"


def _rms(x, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def init_params(cfg: Config, seed: int = 0) -> dict[str, jax.Array]:
    C, K, Vp = cfg.n_embd, cfg.kv_dim, cfg.vocab_padded
    Q, Hm = cfg.n_head * cfg.head_dim, cfg.mlp_ratio * cfg.n_embd
    s = math.sqrt(3.0 / C)
    rng = np.random.default_rng(seed)
    uni = lambda shape, b: rng.uniform(-b, b, size=shape).astype(np.float32)
    p = {"wte": rng.normal(0.0, 0.8, size=(Vp, C)).astype(np.float32),
         "lm_head": rng.normal(0.0, 0.001, size=(C, Vp)).astype(np.float32)}
    targets = cfg.targets()
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        p[b + "attn.wq"] = uni((C, Q), s)
        p[b + "attn.wk"] = uni((C, K), s)
        wv = uni((C, K), s)
        if cfg.has_wv(i):
            p[b + "attn.wv"] = wv
        p[b + "attn.wo"] = np.zeros((Q, C), np.float32)
        p[b + "mlp.fc"] = uni((C, Hm), 0.4 * s)
        p[b + "mlp.proj"] = np.zeros((Hm, C), np.float32)
        if i in targets and cfg.value_mode in ("v1", "x0v", "bov"):
            p[b + "value.gain"] = np.ones((1,), np.float32)
        if i in targets and cfg.value_mode == "bov":
            wte = p["wte"].astype(np.float64)
            normed = wte / np.sqrt(np.mean(wte * wte, axis=-1, keepdims=True) + cfg.norm_eps)
            p[b + "value.table"] = (normed @ wv).astype(np.float32)  # aligned init
    return {k: jnp.asarray(v) for k, v in p.items()}


# ----------------------------------------------------------------------------- forward

def _rope_tables(cfg: Config):
    half = cfg.head_dim // 2
    inv = cfg.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim)
    ang = np.arange(cfg.seq_len, dtype=np.float64)[:, None] * inv[None, :]
    return jnp.asarray(np.cos(ang), jnp.float32), jnp.asarray(np.sin(ang), jnp.float32)


def _rope(x, cos, sin):  # x (B, T, h, hd); rotate-half pairing j <-> j + hd/2
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _attention(q, k, v, window):  # q (B,T,H,hd), k/v (B,T,Hkv,hd)
    B, T, H, hd = q.shape
    rep = H // k.shape[2]
    if rep > 1:
        k = jnp.repeat(k, rep, axis=2)
        v = jnp.repeat(v, rep, axis=2)
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    t = np.arange(T)[:, None]
    s = np.arange(T)[None, :]
    allowed = jnp.asarray((t - s >= 0) & (t - s < window))
    scores = jnp.where(allowed[None, None], scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhts,bshd->bthd", probs, v)


def loss_fn(params, ids, targets, cfg: Config):
    """Mean soft-capped cross-entropy over (B, T) tokens."""
    B, T = ids.shape
    C, H, Hkv, hd, eps = cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.norm_eps
    cos, sin = _rope_tables(cfg)
    targets_set = cfg.targets()
    x0 = _rms(params["wte"][ids], eps)  # (B, T, C)
    x = x0
    v1 = None
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        n = _rms(x, eps)
        q = (n @ params[b + "attn.wq"]).reshape(B, T, H, hd)
        k = (n @ params[b + "attn.wk"]).reshape(B, T, Hkv, hd)
        ctx_v = n @ params[b + "attn.wv"] if cfg.has_wv(i) else None  # (B, T, Hkv*hd)
        if i == 0:
            v1 = ctx_v
        mode, tgt = cfg.value_mode, i in targets_set
        if not tgt:
            v = ctx_v
        elif mode == "resformer-identity":
            v = 0.5 * v1 + 0.5 * ctx_v
        elif mode == "svformer":
            v = v1
        elif mode == "v1":
            v = params[b + "value.gain"] * v1
        elif mode == "x0v":
            v = params[b + "value.gain"] * (x0 @ params[b + "attn.wv"])
        elif mode == "bov":
            v = params[b + "value.gain"] * params[b + "value.table"][ids]
        else:  # pragma: no cover - Config validates the mode
            raise AssertionError(mode)
        v = v.reshape(B, T, Hkv, hd)
        q = cfg.qk_norm_scale * _rms(_rope(q, cos, sin), eps)
        k = cfg.qk_norm_scale * _rms(_rope(k, cos, sin), eps)
        y = _attention(q, k, v, cfg.window(i)).reshape(B, T, H * hd)
        x = x + y @ params[b + "attn.wo"]
        h = jax.nn.relu(_rms(x, eps) @ params[b + "mlp.fc"])
        x = x + (h * h) @ params[b + "mlp.proj"]
    logits = _rms(x, eps) @ params["lm_head"][:, :cfg.vocab_size]
    logits = cfg.logit_softcap * jnp.tanh(logits / cfg.logit_softcap)
    lse = jax.nn.logsumexp(logits, axis=-1)
    tgt_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - tgt_logit)


# ----------------------------------------------------------------------------- optimizers

@dataclasses.dataclass(frozen=True)
class Hyper:
    """docs/model.md "Optimizer groups" defaults; AdamW lrs of embedding/lm_head/tables scaled by
    (d/768)^-0.5."""
    matrix_lr: float = 0.02
    muon_wd: float = 0.0
    ns_steps: int = 5
    adamw: tuple = ()  # ((group, lr, beta1, beta2, wd), ...), filled by for_width

    @staticmethod
    def for_width(d: int) -> "Hyper":
        s = (d / 768.0) ** -0.5
        return Hyper(adamw=(("embedding", 0.3 * s, 0.8, 0.995, 0.001),
                            ("lm_head", 0.008 * s, 0.8, 0.96, 0.01),
                            ("value_table", 0.15 * s, 0.8, 0.995, 0.01),
                            ("scalar", 0.5, 0.8, 0.95, 0.0)))


def lr_multiplier(step: int, total: int, warmup: int = 40, warmdown: float = 0.65,
                  final: float = 0.05) -> float:
    warm = (step + 1) / warmup if warmup > 0 and step < warmup else 1.0
    d = round(warmdown * total)
    down = 1.0
    if d > 0 and step > total - d:
        p = max((total - step) / d, 0.0)
        down = p + (1.0 - p) * final
    return min(warm, down)


def muon_momentum(step: int, start: float = 0.85, end: float = 0.95, steps: int = 300) -> float:
    f = min(step / steps, 1.0)
    return (1.0 - f) * start + f * end


def newton_schulz(g, steps: int = 5):
    """Approximate orthogonalization of a 2-D matrix, run on its smaller side."""
    a, b, c = NS_COEFFS
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / (jnp.sqrt(jnp.sum(x * x)) + 1e-7)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return x.T if tall else x


def init_opt_state(params):
    state = {}
    for name, p in params.items():
        if param_group(name) == "muon":
            state[name] = {"buf": jnp.zeros_like(p)}
        else:
            state[name] = {"m": jnp.zeros_like(p), "v": jnp.zeros_like(p)}
    return state


def _update(params, grads, state, lr_mult, momentum, t, hyper: Hyper):
    adam = {g: (lr, b1, b2, wd) for g, lr, b1, b2, wd in hyper.adamw}
    new_p, new_s = {}, {}
    for name, p in params.items():
        g, grp = grads[name], param_group(name)
        if grp == "muon":
            buf = momentum * state[name]["buf"] + (1.0 - momentum) * g
            u = (1.0 - momentum) * g + momentum * buf  # Nesterov
            x = newton_schulz(u, hyper.ns_steps)
            lr = hyper.matrix_lr * lr_mult
            scale = math.sqrt(max(1.0, p.shape[1] / p.shape[0]))  # fan_out / fan_in, (in, out)
            new_p[name] = p * (1.0 - lr * hyper.muon_wd) - lr * scale * x
            new_s[name] = {"buf": buf}
        else:
            lr0, b1, b2, wd = adam[grp]
            lr = lr0 * lr_mult
            m = b1 * state[name]["m"] + (1.0 - b1) * g
            v = b2 * state[name]["v"] + (1.0 - b2) * g * g
            mhat = m / (1.0 - b1 ** t)
            vhat = v / (1.0 - b2 ** t)
            new_p[name] = p * (1.0 - lr * wd) - lr * mhat / (jnp.sqrt(vhat) + 1e-10)
            new_s[name] = {"m": m, "v": v}
    return new_p, new_s


def make_train_step(cfg: Config, hyper: Hyper | None = None):
    """Returns a jitted step(params, state, ids, targets, lr_mult, momentum, t) ->
    (params, state, loss, grad_norm). Schedules are host scalars, so no step recompiles."""
    hyper = hyper or Hyper.for_width(cfg.n_embd)

    @partial(jax.jit, donate_argnums=(0, 1))
    def step(params, state, ids, targets, lr_mult, momentum, t):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, targets, cfg)
        gnorm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads.values()))
        params, state = _update(params, grads, state, lr_mult, momentum, t, hyper)
        return params, state, loss, gnorm

    return step


def num_params(params) -> int:
    return int(sum(int(np.prod(p.shape)) for p in params.values()))
