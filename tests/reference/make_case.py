"""Dev/test tool: write a case file (FORMAT.md layout) entirely from Python.

Parameters are random float32 (names and shapes from expected_param_shapes, values chosen so
that every gradient is non-zero), tokens are random, and /loss and /grads come from the
reference itself. Used to validate compare_case.py without the C++ exporter.

    python make_case.py --mode bov --out /tmp/bov.h5 [--value-layers SPEC] [--detach-v1]
                        [--shared-table] [--bov-add-fixed] [--seed N] [--batch B]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference_model as rm  # noqa: E402


def random_params(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 parameters: near the documented init for coefficients, but with every
    zero-initialised quantity (W_O, W_proj, bov-add b, ...) moved away from zero."""
    rng = np.random.default_rng(seed)
    shapes = rm.expected_param_shapes(config)
    d = int(config["n_embd"])
    s = math.sqrt(3.0 / d)
    out = {}
    for name, shape in sorted(shapes.items()):
        last = name.rsplit(".", 1)[-1]
        if name == "wte":
            a = rng.normal(0.0, 1.0, shape)
        elif name == "lm_head":
            a = rng.normal(0.0, 0.2, shape)
        elif last in ("wq", "wk", "wv", "fc"):
            a = rng.uniform(-s, s, shape)
        elif last in ("wo", "proj"):
            si = math.sqrt(3.0 / shape[0])
            a = rng.uniform(-si, si, shape) * 0.5
        elif last in ("lambda1", "lambda2", "lambda"):  # "lambda": the smear gate's
            a = 0.5 + 0.2 * rng.normal(size=shape)
        elif last == "logits":
            a = rng.normal(0.0, 0.3, shape)
        elif name == "value_plus.scale":
            a = float(config["n_layer"]) + 0.5 * rng.normal(size=shape)
        elif last == "dense":
            i = shape[0] - 1
            a = np.full(shape, 1.0 / i) + 0.2 * rng.normal(size=shape)
            a[-1] = 1.0 + 0.2 * rng.normal()
        elif last in ("gain", "a"):
            a = 1.0 + 0.2 * rng.normal(size=shape)
        elif last == "b":
            a = 0.5 + 0.2 * rng.normal(size=shape)
        elif last == "table":
            a = rng.normal(0.0, 1.0, shape)
        elif last == "gate_w":
            a = rng.uniform(-0.5, 0.5, shape)
        elif last in ("alpha", "beta", "gamma", "v_skip", "v_resid", "o_skip", "o_resid",
                      "attn_gain", "mlp_skip"):
            a = 1.0 + 0.2 * rng.normal(size=shape)
        elif last == "mlp_gain":
            a = 0.1 + 0.05 * rng.normal(size=shape)
        elif last == "dwa":
            a = 0.3 * rng.normal(size=shape)
            a[-1] = 1.0 + 0.2 * rng.normal()
        else:
            raise ValueError(f"no random init for {name}")
        out[name] = np.asarray(a, dtype=np.float32)
    return out


def random_tokens(config: dict, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed + 1_000_003)
    T = int(config["seq_len"])
    V = int(config["vocab_size"])
    seq = rng.integers(0, V, size=(batch, T + 1), dtype=np.int64)
    return seq[:, :-1].astype(np.int32), seq[:, 1:].astype(np.int32)


def write_case(path, config, inputs, targets, params, grads, loss):
    with h5py.File(path, "w") as f:
        f.attrs["config"] = json.dumps(config)
        f.create_dataset("inputs", data=np.asarray(inputs, dtype=np.int32))
        f.create_dataset("targets", data=np.asarray(targets, dtype=np.int32))
        gp = f.create_group("params")
        gg = f.create_group("grads")
        for name in sorted(params):
            gp.create_dataset(name, data=np.asarray(params[name], dtype=np.float32))
        for name in sorted(grads):
            gg.create_dataset(name, data=np.asarray(grads[name], dtype=np.float32))
        f.create_dataset("loss", data=np.float64(loss))


def make_case(path, config: dict, seed: int = 0, batch: int = 2, overrides=None):
    """Write a case file; `overrides` ({name: array}) replaces chosen parameters before the
    loss/grads are computed. Returns (config, inputs, targets, params, loss, grads)."""
    config = dict(config)
    config["target_layers"] = rm.resolve_targets(config)
    params = random_params(config, seed)
    for k, v in (overrides or {}).items():
        params[k] = np.asarray(v, dtype=np.float32).reshape(params[k].shape)
    inputs, targets = random_tokens(config, batch, seed)
    loss, grads = rm.loss_and_grads(params, inputs, targets, config)
    write_case(path, config, inputs, targets, params, grads, loss)
    return config, inputs, targets, params, loss, grads


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mode", required=True, choices=rm.VALUE_MODES)
    ap.add_argument("--out", required=True)
    ap.add_argument("--value-layers", default="default")
    ap.add_argument("--detach-v1", action="store_true")
    ap.add_argument("--shared-table", action="store_true")
    ap.add_argument("--bov-add-fixed", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args(argv)
    cfg = rm.default_config(a.mode, value_layers=a.value_layers, detach_v1=a.detach_v1,
                            shared_table=a.shared_table, bov_add_fixed=a.bov_add_fixed)
    _, _, _, _, loss, _ = make_case(a.out, cfg, seed=a.seed, batch=a.batch)
    print(f"wrote {a.out}: mode={a.mode} targets={cfg['target_layers']} loss={loss:.6f}")


if __name__ == "__main__":
    main()
