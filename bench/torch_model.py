# bench/torch_model.py owns the PyTorch peer used by bench_gpu_vs_torch.py: the value-residual
# transformer of docs/model.md with every choice it pins, written the way a
# tuned nanochat-style PyTorch trainer writes it (bf16 autocast, torch.compile, SDPA/flash or
# flex_attention, batched bf16 Newton-Schulz, fused AdamW), plus the Muon + AdamW optimizers with
# vtrain's groups, hyperparameters and schedules. Device-agnostic: the same code runs in float64
# on the CPU (check_torch_model.py compares it with vtrain through checkpoints) and in
# fp32-params/bf16-compute on a GPU (the speed peer). It is also the model file of `vtrain export`
# (embedded as modeling_vtrain.py: load_export, and the transformers VtrainForCausalLM).
"""PyTorch value-residual transformer + Muon/AdamW, parameter-compatible with vtrain.

Parameters are named exactly as in vtrain's checkpoints (`wte`, `lm_head`, `blocks.i.attn.wq`,
`blocks.i.value.table`, `value.table`, `value_plus.logits`, ...) and stored (in, out) so that
y = x @ W; the vocabulary is padded to a multiple of 64 in storage and logits beyond the real
vocabulary are dropped. `GPT.load_vtrain_checkpoint(path)` loads a vtrain HDF5 checkpoint
(/model/<name>, and optionally /optim/<name>/<kind> into an `Optimizer`).

Attention implementations (`attn_impl`):
  math   explicit (T x T) scores, causal+window mask, softmax: the reference form (checks, fp64).
  sdpa   F.scaled_dot_product_attention: is_causal=True on full-context layers (flash backend);
         sliding-window layers pass an explicit boolean (T x T) mask (memory-efficient backend,
         flash cannot take a mask).
  flex   full-context layers as in sdpa (flash); sliding-window layers use
         torch.nn.attention.flex_attention with a causal+window BlockMask (block-sparse: the
         kernel skips the blocks outside the window). Needs torch.compile to be fast.
  auto   flex when torch.nn.attention.flex_attention imports, else sdpa.

Value modes: all of docs/model.md "Value paths" (baseline, resformer-*, svformer, v1, x0v, bov,
bov-add, value-embed, neutreno, resformer-hidden), with detach-v1, shared-table, bov-add-fixed,
--value-coef and resformer-plus's trainable scale. Block shapes: prenorm, parallel, vskipinit,
sas, sas-p with --norm none, --reparam-init, --proj-gains, --qk-norm and E-SPA/U-SPA biases
(--spa-schedule, --spa-rescale, --spa-centre); DenseFormer, --mlp-act relu, --window-keys w+1 and
the smear gate. Shaped attention and biased logits take an explicit (T x T) path (sdpa with an
additive mask, or math); plain softmax attention keeps the fast paths above. init_weights and
the Optimizer cover the pre-norm value modes only (Config.plain()) and refuse the rest by name.

Exports: `load_export(DIR)` (an nn.Module) and, where transformers imports,
`AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` (VtrainForCausalLM).
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

VALUE_MODES = (
    "baseline", "resformer-identity", "resformer-constant", "resformer-learnable",
    "resformer-plus", "resformer-sparse", "resformer-dense", "svformer", "v1", "x0v", "bov",
    "bov-add", "value-embed", "neutreno", "resformer-hidden",
)
V1_MODES = frozenset({"resformer-identity", "resformer-constant", "resformer-learnable",
                      "resformer-plus", "resformer-sparse", "resformer-dense", "svformer", "v1",
                      "neutreno"})
# docs/model.md "Block shapes": every shape, and the simplified ones (identity projections,
# W_Q = 0 at init; --norm none, --reparam-init, --proj-gains and --attn-bias apply to them only).
BLOCK_SHAPES = ("prenorm", "parallel", "vskipinit", "sas", "sas-p")
SIMPLIFIED = frozenset({"sas", "sas-p"})
SMEAR_CHANNELS = 24
NO_WV_ON_TARGET = frozenset({"svformer", "v1", "bov"})
FIXED_COEFFS = {"resformer-identity": (0.5, 0.5), "resformer-constant": (2.0, 1.0),
                "resformer-sparse": (5.0, 1.0)}
BOV_ADD_FIXED = (0.5, 0.5)


# ------------------------------------------------------------------------------------ config

@dataclasses.dataclass
class Config:
    """Mirror of vtrain's ModelConfig (src/model/config.h); `target_layers` is derived."""
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_kv_head: int = 4
    head_dim: int = 32
    vocab_size: int = 32768
    seq_len: int = 256
    window_pattern: str = "SSSL"
    short_window: int = 0  # 0: ceil(T/4/128)*128
    rope_base: float = 100000.0
    norm_eps: float = 1e-6
    qk_norm_scale: float = 1.2
    logit_softcap: float = 15.0
    mlp_ratio: int = 4
    value_mode: str = "baseline"
    value_layers: str = "default"
    detach_v1: bool = False
    shared_table: bool = False
    bov_add_fixed: bool = False
    value_embed_gate_channels: int = 12
    value_embed_gate_scale: float = 3.0
    # Block shapes and options (docs/model.md; "" / None: what a config without the key means).
    block: str = "prenorm"
    norm_none: bool = False
    qk_norm: bool | None = None        # None: on for prenorm/parallel, off for the others
    reparam_init: str = ""             # "" (none), "id", "orth": W0 comes from the export
    attn_bias: str = ""                # "", "espa", "uspa"
    spa_schedule: str = "ours"
    spa_rescale: str = ""              # "on" | "off" ("": off, a config written before it)
    spa_centre: str = ""               # "bias" | "uniform" ("": uniform)
    proj_gains: bool | None = None     # None: on for sas/sas-p (configs written before the flag)
    mlp_act: str = "relu2"
    window_keys: str = "w"
    smear_gate: bool = False
    dense: bool = False
    dense_dilation: int = 1
    dense_period: int = 1
    neutreno_lambda: float = 0.4
    value_coef_fixed: bool = False
    value_coef: float = 1.0
    plus_init: str = ""                # init only: never changes the forward pass
    plus_scale: str = ""               # "learnable" (value_plus.scale) | "fixed" ("": fixed)
    target_layers: tuple = ()

    def __post_init__(self):
        if self.value_mode not in VALUE_MODES:
            raise ValueError(f"unknown value mode {self.value_mode!r}")
        if self.block not in BLOCK_SHAPES:
            raise ValueError(f"unknown block shape {self.block!r}: choose {', '.join(BLOCK_SHAPES)}")
        if self.qk_norm is None:
            self.qk_norm = self.block in ("prenorm", "parallel")
        if self.proj_gains is None:
            self.proj_gains = self.block in SIMPLIFIED
        self.reparam_init = "" if self.reparam_init in ("", "none", None) else self.reparam_init
        for key, allowed in (("reparam_init", ("", "id", "orth")), ("attn_bias", ("", "espa", "uspa")),
                             ("spa_schedule", ("ours", "simplest", "")),
                             ("spa_rescale", ("", "on", "off")), ("spa_centre", ("", "bias", "uniform")),
                             ("mlp_act", ("relu2", "relu")), ("window_keys", ("w", "w+1")),
                             ("plus_scale", ("", "learnable", "fixed")),
                             ("plus_init", ("", "paper", "blagpt"))):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} {getattr(self, key)!r} is not implemented here: choose "
                                 f"{', '.join(repr(a) for a in allowed)}")
        if self.block not in SIMPLIFIED and (self.norm_none or self.reparam_init or
                                             self.attn_bias or self.proj_gains):
            raise ValueError(f"norm_none, reparam_init, attn_bias and proj_gains need block sas or "
                             f"sas-p, not {self.block}")
        if self.block in SIMPLIFIED and self.kv_dim != self.n_embd:
            raise ValueError(f"block {self.block} has identity projections: n_kv_head x head_dim "
                             f"must equal n_embd")
        if self.value_coef_fixed and self.value_mode not in ("v1", "x0v"):
            raise ValueError("value_coef_fixed applies only to v1 and x0v")
        if self.dense and (self.dense_dilation < 1 or self.dense_period < 1):
            raise ValueError("dense_dilation and dense_period must be >= 1")
        if self.n_head * self.head_dim != self.n_embd:
            raise ValueError(f"n_head {self.n_head} x head_dim {self.head_dim} != n_embd {self.n_embd}")
        if self.n_head % self.n_kv_head:
            raise ValueError("n_kv_head must divide n_head")
        if self.shared_table and self.value_mode != "bov":
            raise ValueError("shared_table applies only to bov")
        if self.bov_add_fixed and self.value_mode != "bov-add":
            raise ValueError("bov_add_fixed applies only to bov-add")
        self.target_layers = tuple(resolve_target_layers(self.value_mode, self.value_layers,
                                                         self.n_layer))

    # --- constructors
    @staticmethod
    def preset(name: str, **overrides) -> "Config":
        """vtrain's presets (src/model/config.cc): tiny, d12, d24, d32 (vocabulary 32768)."""
        if name == "tiny":
            base = dict(n_layer=4, n_embd=128, head_dim=32, n_head=4, n_kv_head=4, seq_len=256)
        elif name in ("d12", "d24", "d32"):
            L = int(name[1:])
            d = (64 * L + 127) // 128 * 128
            base = dict(n_layer=L, n_embd=d, head_dim=128, n_head=d // 128, n_kv_head=d // 128,
                        seq_len=2048)
        else:
            raise ValueError(f"unknown preset {name!r}; choose tiny, d12, d24 or d32")
        base.update(overrides)
        return Config(**base)

    @staticmethod
    def from_vtrain_json(j) -> "Config":
        """From the `config` JSON that vtrain stores in checkpoints (ModelConfig::to_json)."""
        if isinstance(j, (bytes, str)):
            j = json.loads(j)
        fields = {f.name for f in dataclasses.fields(Config)} - {"target_layers"}
        cfg = Config(**{k: v for k, v in j.items() if k in fields})
        if "target_layers" in j and list(cfg.target_layers) != list(j["target_layers"]):
            raise ValueError(f"target layers {list(cfg.target_layers)} resolved here differ from "
                             f"vtrain's {j['target_layers']}")
        return cfg

    # --- derived sizes
    @property
    def vocab_padded(self) -> int:
        return (self.vocab_size + 63) // 64 * 64

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def hidden(self) -> int:
        return self.mlp_ratio * self.n_embd

    def effective_short_window(self) -> int:
        if self.short_window > 0:
            return self.short_window
        return ((self.seq_len + 3) // 4 + 127) // 128 * 128

    def layer_window(self, i: int) -> int:
        """ModelConfig::layer_window: query t sees key s iff 0 <= t - s < W (an S layer sees one
        key more under window_keys w+1)."""
        if i == self.n_layer - 1:
            return self.seq_len
        if self.window_pattern[i % len(self.window_pattern)] == "L":
            return self.seq_len
        extra = 1 if self.window_keys == "w+1" else 0
        return min(self.effective_short_window() + extra, self.seq_len)

    def dense_inputs(self, i: int) -> list:
        """DenseFormer: the j of x_j averaged after block i ([] when block i has no average)."""
        if not self.dense or (i + 1) % self.dense_period:
            return []
        return [j for j in range(i + 2) if (i + 1 - j) % self.dense_dilation == 0]

    @property
    def plus_scale_learnable(self) -> bool:
        return self.value_mode == "resformer-plus" and self.plus_scale == "learnable"

    def plain(self) -> bool:
        """The configs the GPU peer (init_weights, Optimizer, FLOPs) covers: value modes of
        vtrain's first release on pre-norm blocks with no other option."""
        return (self.block == "prenorm" and self.mlp_act == "relu2" and self.window_keys == "w"
                and not (self.smear_gate or self.dense or self.value_coef_fixed)
                and self.qk_norm and self.value_mode not in ("neutreno", "resformer-hidden"))

    def is_target(self, i: int) -> bool:
        return i in self.target_layers

    def has_wv(self, i: int) -> bool:
        return not (self.is_target(i) and self.value_mode in NO_WV_ON_TARGET)

    # --- FLOPs (port of src/model/flops.cc)
    def matmul_params(self) -> int:
        C = self.n_embd
        n = 0
        for i in range(self.n_layer):
            n += C * self.q_dim + C * self.kv_dim + self.q_dim * C
            if self.has_wv(i):
                n += C * self.kv_dim
            n += 2 * C * self.hidden
            if self.is_target(i) and self.value_mode == "value-embed":
                n += self.value_embed_gate_channels * self.n_kv_head
        n += C * self.vocab_size
        return n

    def flops_per_token(self) -> float:
        attn = sum(12.0 * self.n_head * self.head_dim * min(self.layer_window(i), self.seq_len)
                   for i in range(self.n_layer))
        return 6.0 * float(self.matmul_params()) + attn

    def param_shapes(self) -> dict:
        """{name: shape} exactly as vtrain registers them (docs/model.md)."""
        C, Vp, K = self.n_embd, self.vocab_padded, self.kv_dim
        out = {"wte": (Vp, C)}
        if self.smear_gate:
            out["smear.gate_w"] = (SMEAR_CHANNELS, 1)
            out["smear.lambda"] = (1,)
        for i in range(self.n_layer):
            out.update({f"blocks.{i}.{n}": shape for n, shape in _block_param_shapes(self, i).items()})
        if self.target_layers and self.value_mode == "resformer-plus":
            out["value_plus.logits"] = (len(self.target_layers),)
            if self.plus_scale_learnable:
                out["value_plus.scale"] = (1,)
        if self.target_layers and self.shared_table:
            out["value.table"] = (Vp, K)
        out["lm_head"] = (C, Vp)
        return out

    def reparameterized(self, i: int) -> list:
        """The projections ("v", "o") of layer i stored as s W0 + r dW (W0 fixed, in the export
        as fixed.blocks.i.attn.wv_base / wo_base)."""
        if self.block not in SIMPLIFIED:
            return []
        out = []
        for what, present in (("v", self.has_wv(i)), ("o", True)):
            if present and (self.reparam_init or (i == 0 and (what == "v" or self.proj_gains))):
                out.append(what)
        return out


def _block_param_shapes(cfg: Config, i: int) -> dict:
    """Layer i's parameters, {name after "blocks.i.": shape}, in vtrain's order: the
    projections of its block shape, the MLP, the gains, DenseFormer's weights, the value path."""
    C, K, Q, Hm, H = cfg.n_embd, cfg.kv_dim, cfg.q_dim, cfg.hidden, cfg.n_head
    out = {"attn.wq": (C, Q), "attn.wk": (C, K)}
    has_v = cfg.has_wv(i)
    gains = {}
    if cfg.block in SIMPLIFIED:
        rep = cfg.reparameterized(i)
        for what, present in (("v", has_v), ("o", True)):
            if what in rep:
                out[f"attn.w{what}"] = (C, C)
                out[f"attn.{what}_skip"] = (1,)
                out[f"attn.{what}_resid"] = (1,)
            elif present and cfg.proj_gains:
                out[f"attn.{what}_skip"] = (1,)
        gains = {"attn.alpha": (H,), "attn.beta": (H,), "attn.gamma": (H,), "attn_gain": (1,),
                 "mlp_gain": (1,)}
        if cfg.block == "sas":
            gains["mlp_skip"] = (1,)
    else:
        if has_v:
            out["attn.wv"] = (C, K)
        out["attn.wo"] = (Q, C)
        if cfg.block == "vskipinit":
            gains = {"attn.alpha": (H,), "attn.beta": (H,), "mlp_gain": (1,)}
    out["mlp.fc"] = (C, Hm)
    out["mlp.proj"] = (Hm, C)
    out.update(gains)
    if cfg.dense_inputs(i):
        out["dwa"] = (len(cfg.dense_inputs(i)),)
    out.update({"value." + n: shape for n, shape in _value_param_shapes(cfg, i).items()})
    return out


def resolve_target_layers(mode: str, spec: str, n_layer: int) -> list:
    """Port of resolve_target_layers (src/model/config.cc)."""
    if mode == "baseline":
        if spec not in ("default", "none", "", None):
            raise ValueError("value_layers has no meaning for value mode baseline")
        return []
    reads_v1 = mode in V1_MODES
    first = 1 if reads_v1 else 0
    s = spec
    if s == "default":
        if mode in ("resformer-sparse", "v1", "x0v", "bov", "bov-add"):
            s = "last-third"
        elif mode == "value-embed":
            s = "alternate"
        else:
            s = "all"
    L = n_layer
    if s == "all":
        out = list(range(first, L))
    elif s == "last-third":
        out = list(range(max(first, 2 * L // 3), L))
    elif s == "every-other":
        out = list(range(1, L, 2))
    elif s == "alternate":
        out = [i for i in range(L) if (L - 1 - i) % 2 == 0 and i >= first]
    else:
        items = [int(x) for x in str(s).split(",")]
        for i in items:
            if not 0 <= i < L:
                raise ValueError(f"value layer {i} out of range")
            if i == 0 and reads_v1:
                raise ValueError(f"layer 0 cannot be a target of {mode}")
        if len(set(items)) != len(items):
            raise ValueError("a value layer is listed twice")
        out = sorted(items)
    if not out:
        raise ValueError(f"value_layers {spec!r} selects no layer for {mode} on {L} layers")
    return out


def _value_param_shapes(cfg: Config, i: int) -> dict:
    if not cfg.is_target(i):
        return {}
    m, K, Vp = cfg.value_mode, cfg.kv_dim, cfg.vocab_padded
    if m == "resformer-learnable":
        return {"lambda1": (1,), "lambda2": (1,)}
    if m == "resformer-plus":
        return {"lambda2": (1,)}
    if m == "resformer-dense":
        return {"dense": (i + 1,)}
    if m in ("v1", "x0v"):
        return {} if cfg.value_coef_fixed else {"gain": (1,)}
    if m == "bov":
        return {"gain": (1,)} if cfg.shared_table else {"gain": (1,), "table": (Vp, K)}
    if m == "bov-add":
        d = {} if cfg.bov_add_fixed else {"a": (1,), "b": (1,)}
        d["table"] = (Vp, K)
        return d
    if m == "value-embed":
        return {"table": (Vp, K), "gate_w": (cfg.value_embed_gate_channels, cfg.n_kv_head)}
    return {}


def param_group(name: str) -> str:
    """Optimizer group, as vtrain registers it (src/model/gpt.cc): embedding, lm_head,
    value_table, the coefficient groups coef_main / coef_skip / coef_model (AdamW; docs/model.md
    "Optimizer groups") or matrix (Muon: every 2-D block matrix, value-embed's gate_w)."""
    if name == "wte":
        return "embedding"
    if name == "lm_head":
        return "lm_head"
    if name.endswith("value.table"):
        return "value_table"
    last = name.rsplit(".", 1)[-1]
    if name in ("value_plus.logits", "value_plus.scale") or last in ("lambda1", "lambda2",
                                                                      "dense"):
        return "coef_model"
    if last in ("gain", "b"):
        return "coef_skip"
    if last == "a":
        return "coef_main"
    if name.rsplit(".", 1)[-1] in ("wq", "wk", "wv", "wo", "fc", "proj", "gate_w") and \
            not name.startswith("smear."):
        return "matrix"
    raise ValueError(f"{name}: the optimizer groups here cover the value modes on pre-norm blocks "
                     f"(Config.plain()); the block gains, DenseFormer and the smear gate are "
                     f"vtrain's only")


# ------------------------------------------------------------------------------------ model

def _rms(x, eps):
    return F.rms_norm(x, (x.size(-1),), eps=eps)


def _rope(x, cos, sin):
    """Rotate-half RoPE on (B, T, h, hd); cos/sin (T, hd/2). y[j] = x[j] c - x[j+h] s,
    y[j+h] = x[j+h] c + x[j] s."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    c = cos[None, :, None, :].to(x.dtype)
    s = sin[None, :, None, :].to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def flex_attention_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa
        return True
    except Exception:  # noqa: BLE001
        return False


class _Holder(nn.Module):
    """A bag of parameters, so that named_parameters() yields vtrain's dotted names."""

    def __init__(self, shapes: dict, device, dtype):
        super().__init__()
        for n, shape in shapes.items():
            self.register_parameter(n, nn.Parameter(torch.empty(shape, device=device, dtype=dtype)))


class Block(nn.Module):
    """Layer i's parameters under vtrain's names: attn.*, mlp.*, value.* in holders, the block
    gains (attn_gain, mlp_gain, mlp_skip) and DenseFormer's dwa directly."""

    def __init__(self, cfg: Config, i: int, device, dtype):
        super().__init__()
        groups = {}
        for name, shape in _block_param_shapes(cfg, i).items():
            head, _, rest = name.partition(".")
            if rest:
                groups.setdefault(head, {})[rest] = shape
            else:
                self.register_parameter(name, nn.Parameter(torch.empty(shape, device=device,
                                                                        dtype=dtype)))
        for head, shapes in groups.items():
            self.add_module(head, _Holder(shapes, device, dtype))


def _spa_rho(layer: int, L: int, schedule: str) -> float:
    """docs/model.md E-SPA/U-SPA depth schedule, rho_{-1} = 0."""
    if layer < 0:
        return 0.0
    if schedule == "simplest":
        gamma_l = -0.5 * math.log(1.0 - (1.0 - math.exp(-2 * 0.005)) ** ((layer + 1) / L))
        return math.exp(-gamma_l)
    return 0.8 * (layer + 1) / L


def _spa_cholesky(kind: str, rho: float, T: int):
    i = torch.arange(T, dtype=torch.float64)
    if kind == "uspa":
        S = (1.0 - rho) * torch.eye(T, dtype=torch.float64) + rho
    elif rho == 0.0:
        S = torch.eye(T, dtype=torch.float64)
    else:  # espa: exp(-gamma |i - j|) with exp(-gamma) = rho
        S = torch.exp(math.log(rho) * (i[:, None] - i[None, :]).abs())
    return torch.linalg.cholesky(S)


def _spa_matrix(cfg: Config, layer: int, T: int):
    """A_l = L_l L_{l-1}^{-1} (T x T, float64)."""
    sched = cfg.spa_schedule or "ours"
    Lc = _spa_cholesky(cfg.attn_bias, _spa_rho(layer, cfg.n_layer, sched), T)
    Lp = _spa_cholesky(cfg.attn_bias, _spa_rho(layer - 1, cfg.n_layer, sched), T)
    return torch.linalg.solve_triangular(Lp, Lc, upper=False, left=False)  # A Lp = Lc


class _VtrainCore:
    """The model, shared by GPT (an nn.Module) and VtrainForCausalLM (a transformers
    PreTrainedModel): `_build` registers the parameters on self, `_logits` is the forward pass."""

    def _build(self, cfg: Config, attn_impl: str, device, dtype, lazy_tables: bool = False):
        self.cfg = cfg
        # device None: the CPU, or under lazy_tables torch's current default device
        # (transformers builds the model on the meta device, then loads the weights).
        if device is not None:
            device = torch.device(device)
        elif not lazy_tables:
            device = torch.device("cpu")
        if attn_impl == "auto":
            attn_impl = "flex" if flex_attention_available() else "sdpa"
        if attn_impl not in ("math", "sdpa", "flex"):
            raise ValueError(f"attn_impl {attn_impl!r}: choose math, sdpa, flex or auto")
        self.attn_impl = attn_impl
        C, Vp, K = cfg.n_embd, cfg.vocab_padded, cfg.kv_dim
        self.wte = nn.Parameter(torch.empty(Vp, C, device=device, dtype=dtype))
        if cfg.smear_gate:
            self.smear = _Holder({"gate_w": (SMEAR_CHANNELS, 1), "lambda": (1,)}, device, dtype)
        self.blocks = nn.ModuleList(Block(cfg, i, device, dtype) for i in range(cfg.n_layer))
        if cfg.target_layers and cfg.value_mode == "resformer-plus":
            self.value_plus = _Holder({"logits": (len(cfg.target_layers),), **(
                {"scale": (1,)} if cfg.plus_scale_learnable else {})}, device, dtype)
        if cfg.target_layers and cfg.shared_table:
            self.value = _Holder({"table": (Vp, K)}, device, dtype)
        self.lm_head = nn.Parameter(torch.empty(C, Vp, device=device, dtype=dtype))
        # The fixed W0 of reparameterized projections (persistent buffers named as in the export,
        # fixed.blocks.i.attn.wv_base / wo_base; the identity until loaded).
        if any(cfg.reparameterized(i) for i in range(cfg.n_layer)):
            self.fixed = nn.Module()
            self.fixed.blocks = nn.ModuleList(nn.Module() for _ in range(cfg.n_layer))
            for i, fb in enumerate(self.fixed.blocks):
                if cfg.reparameterized(i):
                    fb.attn = nn.Module()
                    for what in cfg.reparameterized(i):
                        fb.attn.register_buffer(f"w{what}_base", torch.eye(C, device=device,
                                                                           dtype=dtype))
        self._lazy_tables = lazy_tables
        self._tables = {}  # (what, T, W or layer, device, dtype) -> tensor, built on first use
        self._masks = {}        # window -> (T, T) bool mask (math / sdpa)
        self._block_masks = {}  # window -> flex BlockMask
        if lazy_tables:  # transformers builds modules on the meta device: no tensors here
            return
        # RoPE tables in float64, kept as fp32 buffers (fp64 when the model is fp64).
        cos, sin = self._rope_tables(cfg.seq_len, device, dtype)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        T = cfg.seq_len
        for i in range(cfg.n_layer):
            W = cfg.layer_window(i)
            if W in self._masks:
                continue
            self._masks[W] = _window_mask(T, W, device)
            if attn_impl == "flex" and W < T:
                from torch.nn.attention.flex_attention import create_block_mask

                def mask_mod(b, h, q_idx, kv_idx, W=W):
                    return (q_idx >= kv_idx) & (q_idx - kv_idx < W)

                self._block_masks[W] = create_block_mask(mask_mod, B=None, H=None, Q_LEN=T,
                                                         KV_LEN=T, device=device)

    def _rope_tables(self, T, device, dtype):
        cfg = self.cfg
        half = cfg.head_dim // 2
        inv = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / cfg.head_dim)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        bdt = torch.float64 if dtype == torch.float64 else torch.float32
        return (torch.cos(ang).to(device=device, dtype=bdt),
                torch.sin(ang).to(device=device, dtype=bdt))

    def _cached(self, key, make):
        if key not in self._tables:
            self._tables[key] = make()
        return self._tables[key]

    def _mask(self, T, W, device):
        if not self._lazy_tables and T == self.cfg.seq_len:
            return self._masks[W]
        return self._cached(("mask", T, W, device), lambda: _window_mask(T, W, device))

    # --- attention
    def _attend(self, q, k, v, W: int):
        """q (B,T,H,hd), k/v (B,T,Hkv,hd) -> (B,T,H*hd): softmax attention, the fast path."""
        B, T, H, hd = q.shape
        Hkv = k.size(2)
        scale = 1.0 / math.sqrt(hd)
        if self.attn_impl == "math":
            rep = H // Hkv
            if rep > 1:
                k = k.repeat_interleave(rep, dim=2)
                v = v.repeat_interleave(rep, dim=2)
            scores = torch.einsum("bthd,bshd->bhts", q, k) * scale
            scores = scores.masked_fill(~self._mask(T, W, q.device), float("-inf"))
            y = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), v)
            return y.reshape(B, T, H * hd)
        gqa = Hkv != H
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if W >= T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
        elif self.attn_impl == "flex" and T == self.cfg.seq_len and not self._lazy_tables:
            from torch.nn.attention.flex_attention import flex_attention
            y = flex_attention(q, k, v, block_mask=self._block_masks[W], scale=scale,
                               enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self._mask(T, W, q.device),
                                               scale=scale, enable_gqa=gqa)
        return y.transpose(1, 2).reshape(B, T, H * hd)

    def _shaped_tables(self, i, W, T, device, dtype):
        """Layer i's (additive logit mask with the E-SPA/U-SPA bias, (T, T); the rescaling D (T,)
        or None; the centring matrix C (T, T)) for T positions (docs/model.md "Block shapes")."""
        cfg = self.cfg

        def make():
            mask = _window_mask(T, W, "cpu")
            add = torch.zeros(T, T, dtype=torch.float64).masked_fill(~mask, float("-inf"))
            D = None
            C = mask.double() / mask.sum(dim=1, keepdim=True)
            if cfg.attn_bias:
                A = _spa_matrix(cfg, i, T)
                bias = torch.where(A > 0, torch.log(torch.where(A > 0, A, 1.0)),
                                   float("-inf")).tril()
                add = add + bias
                if cfg.spa_rescale == "on":
                    D = torch.where(mask, A, 0.0).sum(dim=1)
                if cfg.spa_centre == "bias":
                    C = torch.softmax(add, dim=1)
            cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
            return cast(add), cast(D), cast(C)

        return self._cached(("shaped", T, i, device, dtype), make)

    def _attend_shaped(self, q, k, v, i, W, gains):
        """alpha I + D (beta softmax(q.k/sqrt(hd) + B) - gamma C), applied to v; a missing gain
        is alpha = 0, beta = 1, gamma = 0."""
        B, T, H, hd = q.shape
        rep = H // k.size(2)
        if rep > 1:
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        add, D, C = self._shaped_tables(i, W, T, q.device, q.dtype)
        if self.attn_impl == "math":
            scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd) + add
            y = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), v)
        else:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), attn_mask=add,
                                               scale=1.0 / math.sqrt(hd)).transpose(1, 2)
        alpha, beta, gamma = gains
        if beta is not None:
            y = beta.view(1, 1, H, 1).to(y.dtype) * y
        if gamma is not None:
            y = y - gamma.view(1, 1, H, 1).to(y.dtype) * torch.einsum("ts,bshd->bthd", C, v)
        if D is not None:
            y = D.view(1, T, 1, 1) * y
        if alpha is not None:
            y = y + alpha.view(1, 1, H, 1).to(y.dtype) * v
        return y.reshape(B, T, H * hd)

    def _project(self, x, i, what):
        """The V ("v") or O ("o") projection of layer i: a matrix, s W0 + r dW with W0 fixed,
        the identity times a gain, or the plain identity (docs/model.md "Block shapes")."""
        a = self.blocks[i].attn
        names = a._parameters
        if what + "_resid" in names:
            W0 = self.fixed.blocks[i].attn.get_buffer(f"w{what}_base").to(x.dtype)
            return x @ (names[what + "_skip"] * W0 + names[what + "_resid"] * names["w" + what])
        if what + "_skip" in names:
            return names[what + "_skip"] * x
        if "w" + what in names:
            return x @ names["w" + what]
        return x

    # --- forward
    def _logits(self, idx):
        """idx (B, T) int64 -> the soft-capped logits over the real vocabulary (B, T, V)."""
        cfg = self.cfg
        B, T = idx.shape
        H, Hkv, hd, eps = cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.norm_eps
        mode, L = cfg.value_mode, cfg.n_layer
        if self._lazy_tables:
            cos, sin = self._cached(("rope", T, idx.device, self.wte.dtype),
                                    lambda: self._rope_tables(T, idx.device, self.wte.dtype))
        else:
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        tpos = {layer: k for k, layer in enumerate(cfg.target_layers)}
        x0 = _rms(F.embedding(idx, self.wte), eps)
        if cfg.smear_gate:  # y[t] = x0[t] + lambda sigmoid(x0[t, :24] w) x0[t-1], t >= 1
            gate = getattr(self.smear, "lambda") * torch.sigmoid(
                x0[:, 1:, :SMEAR_CHANNELS] @ self.smear.gate_w)
            x0 = torch.cat([x0[:, :1], x0[:, 1:] + gate * x0[:, :-1]], dim=1)
        x = x0
        xs = [x0]  # DenseFormer: x_0 and the block outputs
        v1 = None
        ctx_values = []
        blk_shape = cfg.block
        for i, blk in enumerate(self.blocks):
            a = blk.attn
            keep_norm = not (cfg.norm_none and i > 0)
            n = _rms(x, eps) if keep_norm else x
            target = i in tpos
            # resformer-hidden: a target's attention (q, k and v) reads 0.5 n + 0.5 x0.
            m = 0.5 * n + 0.5 * x0 if target and mode == "resformer-hidden" else n
            ctx = None
            if cfg.has_wv(i) and not (target and mode == "x0v"):
                ctx = self._project(m, i, "v")
            if i == 0 and mode in V1_MODES:
                v1 = ctx.detach() if cfg.detach_v1 else ctx
            if not target:
                v = ctx
            else:
                vp = blk.value if hasattr(blk, "value") else None
                if mode in FIXED_COEFFS:
                    l1, l2 = FIXED_COEFFS[mode]
                    v = l1 * v1 + l2 * ctx
                elif mode == "resformer-learnable":
                    v = vp.lambda1 * v1 + vp.lambda2 * ctx
                elif mode == "resformer-plus":
                    w = torch.softmax(self.value_plus.logits, dim=0)
                    s = self.value_plus.scale if cfg.plus_scale_learnable else float(L)
                    v = (s * w[tpos[i]]) * v1 + vp.lambda2 * ctx
                elif mode == "resformer-dense":
                    lam = vp.dense
                    v = lam[i] * ctx
                    for j in range(i):
                        v = v + lam[j] * ctx_values[j]
                elif mode == "svformer":
                    v = v1
                elif mode == "v1":
                    v = (cfg.value_coef if cfg.value_coef_fixed else vp.gain) * v1
                elif mode == "x0v":  # under the smear gate from norm(x0), as gpt_base.py
                    ctx = self._project(_rms(x0, eps) if cfg.smear_gate else x0, i, "v")
                    v = (cfg.value_coef if cfg.value_coef_fixed else vp.gain) * ctx
                elif mode == "bov":
                    table = self.value.table if cfg.shared_table else vp.table
                    v = vp.gain * F.embedding(idx, table)
                elif mode == "bov-add":
                    if cfg.bov_add_fixed:
                        ca, cb = BOV_ADD_FIXED
                    else:
                        ca, cb = vp.a, vp.b
                    v = ca * ctx + cb * F.embedding(idx, vp.table)
                elif mode == "value-embed":
                    gc = cfg.value_embed_gate_channels
                    gate = cfg.value_embed_gate_scale * torch.sigmoid(m[..., :gc] @ vp.gate_w)
                    emb = F.embedding(idx, vp.table).view(B, T, Hkv, hd)
                    v = ctx + (gate[..., None] * emb).reshape(B, T, Hkv * hd)
                elif mode in ("neutreno", "resformer-hidden"):
                    v = ctx  # NeuTRENO acts on the attention output; hidden on the input m
                else:
                    raise AssertionError(mode)
            if mode == "resformer-dense":
                ctx_values.append(v1 if i == 0 else ctx)
            q = (m @ a.wq).view(B, T, H, hd)
            k = (m @ a.wk).view(B, T, Hkv, hd)
            cdt = q.dtype  # the matmul dtype: bf16 under autocast, else the parameters'
            # q, k, v enter attention in one dtype whatever autocast does with rms_norm (flex
            # takes no autocast; tables and the fp32 residual give fp32 values).
            if cfg.qk_norm:
                q = (cfg.qk_norm_scale * _rms(_rope(q, cos, sin), eps)).to(cdt)
                k = (cfg.qk_norm_scale * _rms(_rope(k, cos, sin), eps)).to(cdt)
            else:
                q = _rope(q, cos, sin).to(cdt)
                k = _rope(k, cos, sin).to(cdt)
            v = v.view(B, T, Hkv, hd).to(cdt)
            W = cfg.layer_window(i)
            gains = tuple(a._parameters.get(g) for g in ("alpha", "beta", "gamma"))
            if gains == (None, None, None) and not cfg.attn_bias:
                y = self._attend(q, k, v, W)
            else:
                y = self._attend_shaped(q, k, v, i, W, gains)
            if target and mode == "neutreno":  # A v + lam (V1 - v), per query head from its KV head
                rep = H // Hkv
                d = (v1.view(B, T, Hkv, hd).to(cdt) - v).repeat_interleave(rep, dim=2)
                y = y + cfg.neutreno_lambda * d.reshape(B, T, H * hd)
            att = self._project(y, i, "o")
            if blk_shape == "prenorm":
                x = x + att
                x = x + self._mlp(blk, _rms(x, eps) if keep_norm else x)
            elif blk_shape == "parallel":
                x = x + att + self._mlp(blk, n)
            elif blk_shape == "vskipinit":
                x = att
                x = x + blk.mlp_gain * self._mlp(blk, _rms(x, eps) if keep_norm else x)
            elif blk_shape == "sas":
                x = blk.attn_gain * att
                x = blk.mlp_skip * x + blk.mlp_gain * self._mlp(blk, _rms(x, eps) if keep_norm else x)
            else:  # sas-p
                x = blk.attn_gain * att + blk.mlp_gain * self._mlp(blk, n)
            if cfg.dense:
                xs.append(x)
                inputs_i = cfg.dense_inputs(i)
                if inputs_i:
                    x = sum(blk.dwa[k] * xs[j] for k, j in enumerate(inputs_i))
        lm = self.lm_head if cfg.vocab_padded == cfg.vocab_size else self.lm_head[:, :cfg.vocab_size]
        logits = _rms(x, eps) @ lm
        if logits.dtype in (torch.bfloat16, torch.float16):
            logits = logits.float()
        cap = cfg.logit_softcap
        return cap * torch.tanh(logits / cap)

    def _mlp(self, blk, z):
        h = torch.relu(z @ blk.mlp.fc)
        return (h if self.cfg.mlp_act == "relu" else h.square()) @ blk.mlp.proj


class GPT(_VtrainCore, nn.Module):
    def __init__(self, cfg: Config, attn_impl: str = "auto", device=None,
                 dtype: torch.dtype = torch.float32):
        nn.Module.__init__(self)
        self._build(cfg, attn_impl, device, dtype)

    # --- parameters
    def named_vtrain_params(self) -> dict:
        return dict(self.named_parameters())

    def check_param_names(self):
        have = {n: tuple(p.shape) for n, p in self.named_parameters()}
        want = self.cfg.param_shapes()
        if have != want:
            raise AssertionError(f"parameter set differs from vtrain's: have-only "
                                 f"{sorted(set(have) - set(want))}, want-only "
                                 f"{sorted(set(want) - set(have))}, shapes "
                                 f"{[(n, have[n], want[n]) for n in have if n in want and have[n] != want[n]]}")

    @torch.no_grad()
    def init_weights(self, seed: int = 0):
        """docs/model.md "Initialization" distributions (not vtrain's random streams: the same laws,
        other draws). bov/bov-add tables are 'aligned': E_i = norm(wte) W_V^i with a fresh
        W_V draw for layers that store none."""
        cfg = self.cfg
        if not cfg.plain():
            raise ValueError("init_weights covers the value modes on pre-norm blocks only "
                             "(Config.plain()); block shapes and options are vtrain's to train")
        g = torch.Generator(device=self.wte.device).manual_seed(seed)
        s = math.sqrt(3.0 / cfg.n_embd)

        def uni(p, lo, hi):
            p.copy_(torch.rand(p.shape, generator=g, device=p.device, dtype=torch.float32)
                    .mul_(hi - lo).add_(lo))

        def normal(p, std):
            p.copy_(torch.randn(p.shape, generator=g, device=p.device, dtype=torch.float32) * std)

        normal(self.wte, 0.8)
        normal(self.lm_head, 0.001)
        xwte = None
        if cfg.value_mode in ("bov", "bov-add") and cfg.target_layers:
            xwte = _rms(self.wte.double(), cfg.norm_eps)
        shared_done = False
        for i, blk in enumerate(self.blocks):
            a = blk.attn
            uni(a.wq, -s, s)
            uni(a.wk, -s, s)
            wv = torch.empty(cfg.n_embd, cfg.kv_dim, device=self.wte.device)
            uni(wv, -s, s)
            if cfg.has_wv(i):
                a.wv.copy_(wv)
            a.wo.zero_()
            uni(blk.mlp.fc, -0.4 * s, 0.4 * s)
            blk.mlp.proj.zero_()
            if not cfg.is_target(i):
                continue
            v = getattr(blk, "value", None)  # fixed-coefficient modes have no value parameters
            for n, p in (v.named_parameters() if v is not None else ()):
                if n in ("gain", "a"):
                    p.fill_(1.0)
                elif n == "b":
                    p.fill_(0.0)
                elif n in ("lambda1", "lambda2"):
                    p.fill_(0.5)
                elif n == "dense":
                    p.fill_(1.0 / i)
                    p[-1] = 1.0
                elif n == "gate_w":
                    uni(p, 0.0, 0.02)
                elif n == "table":
                    if cfg.value_mode == "value-embed":
                        uni(p, -s, s)
                    else:
                        p.copy_(xwte @ wv.double())
            if cfg.shared_table and not shared_done:
                self.value.table.copy_(xwte @ wv.double())
                shared_done = True
        if cfg.value_mode == "resformer-plus" and cfg.target_layers:
            if cfg.plus_init == "paper":  # a_k = ln(i_k) (docs/model.md)
                self.value_plus.logits.copy_(torch.log(torch.tensor(
                    [float(i) for i in cfg.target_layers])))
            else:  # blagpt (and configs written before the option)
                normal(self.value_plus.logits, 0.1)
            if cfg.plus_scale_learnable:
                self.value_plus.scale.fill_(float(cfg.n_layer))

    def load_vtrain_checkpoint(self, path: str, optimizer: "Optimizer | None" = None) -> dict:
        """Loads /model/<name> of a vtrain checkpoint (and, given an optimizer, its states and
        step count). Returns {"step", "tokens", "loader_state", "extra", "config"}."""
        try:  # (a try block: transformers' remote-code import check skips it)
            import h5py
        except ImportError as e:
            raise ImportError("load_vtrain_checkpoint needs h5py") from e
        import numpy as np

        def attr(f, k):
            v = f.attrs[k]
            if isinstance(v, np.ndarray):
                v = v.item() if v.shape == () else v[0]
            if isinstance(v, (bytes, np.bytes_)):
                v = v.decode()
            return v

        if self.cfg.reparam_init == "orth":
            raise ValueError("reparam_init orth: the orthogonal W0 is not in checkpoints; load "
                             "a `vtrain export` directory with load_export")
        with h5py.File(path, "r") as f:
            cfg_j = json.loads(attr(f, "config"))
            ck = Config.from_vtrain_json(cfg_j)
            diff = [fl.name for fl in dataclasses.fields(Config)
                    if _norm_field(ck, fl.name) != _norm_field(self.cfg, fl.name)]
            if diff:
                raise ValueError(f"checkpoint config differs from the model's in {diff}")
            params = dict(self.named_parameters())
            names = set(f["model"].keys())
            if names != set(params):
                raise ValueError(f"checkpoint parameters differ: only in file "
                                 f"{sorted(names - set(params))}, only in model "
                                 f"{sorted(set(params) - names)}")
            with torch.no_grad():
                for n, p in params.items():
                    a = np.asarray(f["model"][n][...])
                    if tuple(a.shape) != tuple(p.shape):
                        raise ValueError(f"{n}: checkpoint shape {a.shape}, model {tuple(p.shape)}")
                    p.copy_(torch.from_numpy(a).to(p.dtype))
            step = int(attr(f, "step"))
            meta = dict(step=step, tokens=int(attr(f, "tokens")),
                        loader_state=json.loads(attr(f, "loader_state")),
                        extra=json.loads(attr(f, "extra")), config=cfg_j)
            if optimizer is not None:
                states = {}
                for n in params:
                    if "optim" in f and n in f["optim"]:
                        states[n] = {k: np.asarray(f["optim"][n][k][...]) for k in f["optim"][n]}
                optimizer.load_states(states, step)
        return meta

    def forward(self, idx, targets=None):
        """idx (B, T) int64. Returns the mean soft-capped cross-entropy when targets are given,
        else the soft-capped logits over the real vocabulary (B, T, V)."""
        logits = self._logits(idx)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def _norm_field(cfg: Config, name: str):
    if name == "short_window":
        return cfg.effective_short_window()
    v = getattr(cfg, name)
    return tuple(v) if isinstance(v, list) else v


def _window_mask(T, W, device):
    t = torch.arange(T, device=device)
    diff = t[:, None] - t[None, :]
    return (diff >= 0) & (diff < W)


# ------------------------------------------------------------------------------------ optimizers

NS_STANDARD = dict(abc=((3.4445, -4.7750, 2.0315),), norm_scale=1.0, norm_eps=1e-7)
NS_POLAR_EXPRESS = dict(abc=(
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
), norm_scale=1.02, norm_eps=1e-6)


def newton_schulz(G, steps: int = 5, abc=NS_STANDARD["abc"], norm_scale: float = 1.0,
                  norm_eps: float = 1e-7):
    """Batched Newton-Schulz on (..., r, c) with r <= c (the caller transposes tall matrices):
    X = G / (||G||_F * norm_scale + norm_eps); per iteration A = X X^T, B = b A + c A A,
    X = a X + B X. Runs in G's dtype (bf16 in the bench, fp64 in the checks)."""
    X = G / (torch.linalg.vector_norm(G, dim=(-2, -1), keepdim=True) * norm_scale + norm_eps)
    for k in range(steps):
        a, b, c = abc[min(k, len(abc) - 1)]
        A = X @ X.mT
        Bm = b * A + c * (A @ A)
        X = a * X + Bm @ X
    return X


@dataclasses.dataclass
class Hyper:
    """vtrain's optimizer defaults (src/optim/*.h, docs/model.md "Optimizer groups") and trainer
    options."""
    matrix_lr: float = 0.02
    lr_scale: float = 1.0
    muon_wd: float = 0.0
    ns_steps: int = 5
    polar_express: bool = False
    warmup_steps: int = 40
    warmdown_frac: float = 0.65
    final_lr_frac: float = 0.05
    momentum_start: float = 0.85
    momentum_end: float = 0.95
    momentum_steps: int = 300
    max_grad_norm: float = 0.0
    # AdamW groups: (lr, beta1, beta2, wd); lrs of the first three scaled by (d/768)^-0.5.
    embedding: tuple = (0.3, 0.8, 0.995, 0.001)
    lm_head: tuple = (0.008, 0.8, 0.96, 0.01)
    value_table: tuple = (0.15, 0.8, 0.995, 0.01)
    scalar: tuple = (0.5, 0.8, 0.95, 0.0)
    adam_eps: float = 1e-10
    # The coefficient groups (--coef-optim paper; "vtrain": every one is `scalar`): the BoV
    # authors' alpha and beta groups, and the model's weights' settings for ResFormer's
    # coefficients (lr: matrix_lr, eps 1e-8; src/train/optimizer_setup.cc).
    coef_optim: str = "paper"
    coef_main: tuple = (0.005, 0.8, 0.95, 0.05)
    coef_skip: tuple = (0.5, 0.96, 0.95, 0.0)
    coef_model_betas: tuple = (0.9, 0.95)

    @staticmethod
    def from_vtrain_extra(extra: dict) -> "Hyper":
        """From the train options vtrain stores in a checkpoint's `extra` attribute."""
        return Hyper(matrix_lr=extra.get("matrix_lr", 0.02), lr_scale=extra.get("lr_scale", 1.0),
                     warmup_steps=extra.get("warmup_steps", 40),
                     warmdown_frac=extra.get("warmdown_frac", 0.65),
                     max_grad_norm=extra.get("max_grad_norm", 0.0),
                     polar_express=bool(extra.get("polar_express", False)),
                     coef_optim=extra.get("coef_optim", "vtrain"))

    def adam_group(self, group: str, d_model: int) -> tuple:
        """(lr, beta1, beta2, wd, eps) of an AdamW group."""
        eps = self.adam_eps
        if group.startswith("coef_") and self.coef_optim == "vtrain":
            group = "scalar"
        if group == "coef_model":
            (b1, b2), lr, wd, eps = self.coef_model_betas, self.matrix_lr, 0.0, 1e-8
        else:
            lr, b1, b2, wd = getattr(self, group)
        if group in ("embedding", "lm_head", "value_table"):
            lr *= (d_model / 768.0) ** -0.5
        return lr * self.lr_scale, b1, b2, wd, eps


def lr_multiplier(h: Hyper, step: int, total: int) -> float:
    """optim::lr_multiplier (0-based step)."""
    warm = (step + 1) / h.warmup_steps if h.warmup_steps > 0 and step < h.warmup_steps else 1.0
    d = int(math.floor(h.warmdown_frac * total + 0.5))  # llround of a non-negative value
    down = 1.0
    if d > 0 and step > total - d:
        p = max((total - step) / d, 0.0)
        down = p + (1.0 - p) * h.final_lr_frac
    return min(warm, down)


def muon_momentum(h: Hyper, step: int) -> float:
    frac = min(step / h.momentum_steps, 1.0) if h.momentum_steps > 0 else 1.0
    return (1.0 - frac) * h.momentum_start + frac * h.momentum_end


def muon_scale(rows: int, cols: int) -> float:
    """max(1, fan_out / fan_in)^0.5 for (in, out) storage (MuonAspect::kFanOutOverFanIn)."""
    return math.sqrt(max(1.0, cols / rows))


class Optimizer:
    """Muon (block matrices) + AdamW (everything else) with vtrain's groups and schedules.

    AdamW is torch.optim.AdamW (fused on CUDA, foreach elsewhere): its update is exactly
    vtrain's (decoupled decay p *= 1 - lr*wd first, then p -= lr/(1-b1^t) * m /
    (sqrt(v)/sqrt(1-b2^t) + eps)). Muon: momentum in the lerp form (foreach), then Newton-Schulz
    batched over all matrices of one (orientation-normalized) shape, in `ns_dtype` (bf16 in the
    nanochat style; None: the parameters' dtype), optionally torch.compile'd."""

    def __init__(self, model: GPT, hyper: Hyper | None = None, ns_dtype: torch.dtype | None = None,
                 compile_ns: bool = False, fused_adamw: bool | None = None):
        self.model = model
        self.h = hyper or Hyper()
        d = model.cfg.n_embd
        self.params = dict(model.named_parameters())
        groups = {}
        self.matrices = []
        for n, p in self.params.items():
            g = param_group(n)
            if g == "matrix":
                self.matrices.append((n, p))
            else:
                groups.setdefault(g, []).append(p)
        dev = model.wte.device
        if fused_adamw is None:
            fused_adamw = dev.type == "cuda"
        adam_groups = []
        for g, ps in groups.items():
            lr, b1, b2, wd, eps = self.h.adam_group(g, d)
            adam_groups.append(dict(params=ps, lr=lr, base_lr=lr, betas=(b1, b2), weight_decay=wd,
                                    eps=eps, name=g))
        kw = dict(fused=True) if fused_adamw else dict(foreach=True)
        self.adamw = torch.optim.AdamW(adam_groups, eps=self.h.adam_eps, **kw)
        self.momentum = {n: torch.zeros_like(p) for n, p in self.matrices}
        # Batches of matrices sharing a (short side, long side) shape.
        self.ns_batches = {}
        for n, p in self.matrices:
            r, c = p.shape
            key = (min(r, c), max(r, c))
            self.ns_batches.setdefault(key, []).append((n, p, r > c, muon_scale(r, c)))
        self.ns_dtype = ns_dtype
        ns = NS_POLAR_EXPRESS if self.h.polar_express else NS_STANDARD
        self._ns_kw = dict(steps=self.h.ns_steps, abc=ns["abc"], norm_scale=ns["norm_scale"],
                           norm_eps=ns["norm_eps"])
        self._ns = torch.compile(newton_schulz, dynamic=False) if compile_ns else newton_schulz
        self.step_count = 0

    def load_states(self, states: dict, step: int):
        """states: {name: {"momentum_buffer" | "exp_avg" | "exp_avg_sq": array}} (vtrain's
        /optim datasets); step: updates applied so far (AdamW's bias-correction count)."""
        self.step_count = step
        with torch.no_grad():
            for n, p in self.params.items():
                st = states.get(n, {})
                if param_group(n) == "matrix":
                    if "momentum_buffer" in st:
                        self.momentum[n].copy_(torch.as_tensor(st["momentum_buffer"]).to(p.dtype))
                else:
                    if "exp_avg" not in st:
                        continue
                    dev_step = p.device if self.adamw.defaults.get("fused") else "cpu"
                    self.adamw.state[p] = {
                        "step": torch.tensor(float(step), dtype=torch.float32, device=dev_step),
                        "exp_avg": torch.as_tensor(st["exp_avg"]).to(device=p.device, dtype=p.dtype),
                        "exp_avg_sq": torch.as_tensor(st["exp_avg_sq"]).to(device=p.device,
                                                                            dtype=p.dtype),
                    }

    def grad_norm(self):
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    @torch.no_grad()
    def step(self, step_index: int, total_steps: int, grad_norm=None) -> dict:
        """One update at 0-based step `step_index` of `total_steps` (vtrain's DistributedOptimizer::step)."""
        h = self.h
        mult = lr_multiplier(h, step_index, total_steps)
        m = muon_momentum(h, step_index)
        if h.max_grad_norm > 0:
            gn = self.grad_norm() if grad_norm is None else grad_norm
            scale = torch.where(gn > h.max_grad_norm, h.max_grad_norm / (gn + 1e-6), 1.0)
            torch._foreach_mul_([p.grad for p in self.params.values()], scale)
        for g in self.adamw.param_groups:
            g["lr"] = g["base_lr"] * mult
        self.adamw.step()
        lr = h.matrix_lr * h.lr_scale * mult
        for key, items in self.ns_batches.items():
            grads = [p.grad for _, p, _, _ in items]
            bufs = [self.momentum[n] for n, _, _, _ in items]
            torch._foreach_lerp_(bufs, grads, 1.0 - m)        # buf = m buf + (1-m) g
            us = torch._foreach_lerp(grads, bufs, m)           # u = (1-m) g + m buf
            U = torch.stack([u.mT if tall else u for u, (_, _, tall, _) in zip(us, items)])
            if self.ns_dtype is not None:
                U = U.to(self.ns_dtype)
            X = self._ns(U, **self._ns_kw)
            for x, (_, p, tall, sc) in zip(X.unbind(0), items):
                if h.muon_wd:
                    p.mul_(1.0 - lr * h.muon_wd)
                p.add_((x.mT if tall else x).to(p.dtype), alpha=-lr * sc)
        self.step_count += 1
        return dict(lr_multiplier=mult, matrix_lr=lr, momentum=m)

    def zero_grad(self):
        for p in self.params.values():
            p.grad = None


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def iter_names(model: nn.Module) -> Iterable[str]:
    return (n for n, _ in model.named_parameters())


# ------------------------------------------------------------------------------ exported models

# config.json keys of a `vtrain export` that are not Config fields: metadata, derived sizes, the
# W0 seed (the W0 themselves are in model.safetensors) and what transformers adds. Any other key
# is refused by name: this module never computes a model it does not know.
EXPORT_META_KEYS = frozenset({
    "model_type", "architectures", "auto_map", "torch_dtype", "dtype", "bos_token_id",
    "eos_token_id", "pad_token_id", "vtrain_step", "vtrain_tokens", "vocab_padded",
    "target_layers", "reparam_seed", "transformers_version", "max_position_embeddings",
    "use_cache", "num_hidden_layers", "tie_word_embeddings", "output_attentions", "output_hidden_states",
    "return_dict", "is_encoder_decoder", "chunk_size_feed_forward", "problem_type", "id2label",
    "label2id", "tokenizer_class"})
VTRAIN_CONFIG_KEYS = frozenset({f.name for f in dataclasses.fields(Config)} |
                               {"vocab_padded", "target_layers", "reparam_seed", "vtrain_step",
                                "vtrain_tokens"})


def config_from_export(j: dict) -> Config:
    """The Config of an export's config.json; keys this module does not implement are refused."""
    if j.get("model_type") != "vtrain":
        raise ValueError(f"config.json is not a vtrain export (model_type {j.get('model_type')!r})")
    unknown = sorted(k for k in j if k not in VTRAIN_CONFIG_KEYS and k not in EXPORT_META_KEYS)
    if unknown:
        raise ValueError(f"this PyTorch module does not implement the config keys {unknown}; the "
                         f"JAX reference (tests/reference/reference_model.py) may")
    cfg = Config.from_vtrain_json(j)
    if "vocab_padded" in j and int(j["vocab_padded"]) != cfg.vocab_padded:
        raise ValueError(f"vocab_padded {j['vocab_padded']} != {cfg.vocab_padded} computed here")
    return cfg


def load_export(directory: str, attn_impl: str = "math", dtype=None, device=None) -> "GPT":
    """The model of a `vtrain export` directory (config.json, model.safetensors), in eval mode:
    every value mode, block shape and option of docs/model.md (W0 of reparameterized
    projections from the file's fixed.* tensors)."""
    import os

    from safetensors.torch import load_file  # (numpy has no bfloat16: --dtype bf16 exports)

    with open(os.path.join(directory, "config.json")) as f:
        j = json.load(f)
    model = GPT(config_from_export(j), attn_impl=attn_impl, device=device,
                dtype=dtype or torch.float32)
    weights = load_file(os.path.join(directory, "model.safetensors"))
    params = dict(model.named_parameters())
    buffers = {n: b for n, b in model.named_buffers() if n.startswith("fixed.")}
    want = set(params) | set(buffers)
    if set(weights) != want:
        raise ValueError(f"model.safetensors and this module's tensors differ: only in the file "
                         f"{sorted(set(weights) - want)}, only here {sorted(want - set(weights))}")
    with torch.no_grad():
        for n, p in {**params, **buffers}.items():
            if tuple(weights[n].shape) != tuple(p.shape):
                raise ValueError(f"{n}: file shape {weights[n].shape}, module {tuple(p.shape)}")
            p.copy_(weights[n].to(p.dtype))
    return model.eval()


# ------------------------------------------------------------------------ transformers wrapper
# AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True): config.json's auto_map names
# modeling_vtrain.VtrainConfig / VtrainForCausalLM. transformers is optional: without it
# load_export still works. Generation recomputes the whole prefix each step (no KV cache).
try:
    import transformers as _tf
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithPast
except Exception:  # noqa: BLE001  (no transformers, or one that lacks these names)
    _tf = None

if _tf is not None:
    class VtrainConfig(PretrainedConfig):
        """config.json of a vtrain export; vtrain's keys are kept as attributes."""
        model_type = "vtrain"

        def __init__(self, **kwargs):
            vt = {k: kwargs.pop(k) for k in list(kwargs) if k in VTRAIN_CONFIG_KEYS}
            kwargs.setdefault("tie_word_embeddings", False)  # wte and lm_head are separate
            super().__init__(**kwargs)
            for k, v in vt.items():
                setattr(self, k, v)
            if "seq_len" in vt:
                self.max_position_embeddings = vt["seq_len"]  # what lm_eval's HFLM truncates to
            if "n_layer" in vt:
                self.num_hidden_layers = vt["n_layer"]
            self.use_cache = False  # no KV cache: generation recomputes the prefix

        def vtrain_config(self) -> Config:
            j = {k: getattr(self, k) for k in VTRAIN_CONFIG_KEYS if hasattr(self, k)}
            return config_from_export({**j, "model_type": "vtrain"})

    class VtrainForCausalLM(_VtrainCore, PreTrainedModel, GenerationMixin):
        """The exported model as a transformers causal LM: forward(input_ids) returns
        CausalLMOutputWithPast whose logits are vtrain's soft-capped logits over the real
        vocabulary (loss with labels: next-token cross-entropy, labels shifted here)."""
        config_class = VtrainConfig
        base_model_prefix = "vtrain"
        main_input_name = "input_ids"
        _supports_cache_class = False

        def __init__(self, config):
            PreTrainedModel.__init__(self, config)
            self._build(config.vtrain_config(), "sdpa", None, torch.get_default_dtype(),
                        lazy_tables=True)
            self.post_init()

        def _init_weights(self, module):
            pass  # every tensor comes from model.safetensors

        def get_input_embeddings(self):
            return None

        def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
            if attention_mask is not None and not bool(attention_mask.bool().all()):
                raise ValueError("attention_mask with padding: this model computes every position "
                                 "of every row (no padding support); use batch size 1")
            if input_ids.size(1) > self.cfg.seq_len:
                raise ValueError(f"{input_ids.size(1)} tokens: the model's seq_len is "
                                 f"{self.cfg.seq_len}")
            logits = self._logits(input_ids)
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                       labels[:, 1:].reshape(-1), ignore_index=-100)
            return CausalLMOutputWithPast(loss=loss, logits=logits)

        @classmethod
        def _supports_default_dynamic_cache(cls) -> bool:
            return False

        def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
            return {"input_ids": input_ids, "attention_mask": attention_mask}


if __name__ == "__main__":
    # python modeling_vtrain.py EXPORT_DIR: checks this module against export_check.safetensors
    # (and, where transformers imports, AutoModelForCausalLM.from_pretrained(EXPORT_DIR)).
    import os
    import sys

    from safetensors.numpy import load_file

    d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    m = load_export(d, dtype=torch.float64)
    check = load_file(os.path.join(d, "export_check.safetensors"))
    with torch.no_grad():
        got = m(torch.from_numpy(check["inputs"]).long())[0].numpy()
    want = check["logits"]
    err = float(abs(got - want).max() / max(1e-30, abs(want).max()))
    # export_check holds the fp32 model's logits: a --dtype bf16 export differs by its rounding,
    # so its bound is 1e-2 (ours), the fp32 export's 1e-4.
    with open(os.path.join(d, "config.json")) as f:
        bf16 = json.load(f).get("torch_dtype") == "bfloat16"
    bound = 1e-2 if bf16 else 1e-4
    print(f"max |logits - vtrain's| / max |vtrain's| = {err:.3e} over {want.shape[0]} positions"
          + (" (bf16 weights against the fp32 model's logits: bound 1e-2)" if bf16 else ""))
    sys.exit(0 if err < bound else 1)
