"""Compare a vtrain case file (FORMAT.md) with the independent JAX reference.

    python compare_case.py CASE.h5 [CASE.h5 ...] [--verbose]

Checks, each a failure when it does not hold:
  * the config's fixed constants equal docs/model.md's (RoPE base, eps, QK-norm scale, soft-cap,
    ...) and vocab_padded = ceil(vocab_size/64)*64;
  * `target_layers` in the config equals reference_model.resolve_targets(config);
  * the names and shapes under /params equal expected_param_shapes(config), and /grads has the
    same names and shapes;
  * /inputs and /targets are int (B, seq_len) with ids in [0, vocab_size);
  * loss: |loss_vtrain - loss_ref| / |loss_ref| <= 1e-5 (reference recomputed in float64 from
    the stored float32 parameters);
  * every parameter: max|g_vtrain - g_ref| / max(max|g_ref|, 1e-2 * G) <= 1e-4, where G is the
    largest reference gradient element of the whole model. vtrain computes in float32, so a
    gradient's absolute error is set by the model's gradient scale, not by that tensor's own:
    a scalar coefficient whose gradient cancels down to 1e-4 of its terms (seen: a
    resformer-learnable lambda1 at 1e-4 while the largest gradient is 7e-2) cannot be matched to
    1e-4 of itself in fp32. The floor keeps every tensor of ordinary size at 1e-4 of its own
    magnitude;
  * every reference gradient tensor is non-zero (an all-zero gradient tests nothing).
Exit status 0 when every file passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference_model as rm  # noqa: E402

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
GRAD_FLOOR = 1e-2  # fraction of the model's largest gradient used as the smallest scale


@dataclasses.dataclass
class ParamRow:
    name: str
    shape: tuple
    max_ref: float
    max_vtrain: float
    max_abs_err: float
    rel_err: float
    ok: bool
    note: str = ""


@dataclasses.dataclass
class Report:
    path: str
    ok: bool = True
    errors: list = dataclasses.field(default_factory=list)
    config: dict | None = None
    loss_vtrain: float = float("nan")
    loss_ref: float = float("nan")
    loss_rel_err: float = float("nan")
    rows: list = dataclasses.field(default_factory=list)

    def fail(self, msg: str):
        self.ok = False
        self.errors.append(msg)

    def table(self) -> str:
        if not self.rows:
            return "(no per-parameter comparison)"
        w = max(len(r.name) for r in self.rows)
        lines = [f"{'parameter':<{w}}  {'shape':<14} {'max|g_ref|':>11} {'max|g_vt|':>11} "
                 f"{'max|diff|':>11} {'rel_err':>10}  status"]
        for r in self.rows:
            status = "ok" if r.ok else "FAIL"
            if r.note:
                status += f" ({r.note})"
            lines.append(f"{r.name:<{w}}  {str(r.shape):<14} {r.max_ref:11.4e} {r.max_vtrain:11.4e} "
                         f"{r.max_abs_err:11.4e} {r.rel_err:10.3e}  {status}")
        return "\n".join(lines)

    def summary(self) -> str:
        mode = (self.config or {}).get("value_mode", "?")
        head = f"{'PASS' if self.ok else 'FAIL'} {self.path} (mode {mode})"
        if not math.isnan(self.loss_ref):
            head += (f": loss vtrain {self.loss_vtrain:.8f} ref {self.loss_ref:.8f} "
                     f"rel_err {self.loss_rel_err:.3e}")
        if self.rows:
            worst = max(self.rows, key=lambda r: (not math.isfinite(r.rel_err), r.rel_err))
            head += f"; worst grad {worst.name} rel_err {worst.rel_err:.3e}"
        return head

    def __str__(self) -> str:
        parts = [self.summary()]
        parts += [f"  error: {e}" for e in self.errors]
        if not self.ok:
            parts.append(self.table())
        return "\n".join(parts)


def _read_config(f) -> dict:
    raw = f.attrs["config"]
    if isinstance(raw, np.ndarray):
        raw = raw.item() if raw.shape == () else raw[0]
    if isinstance(raw, (bytes, np.bytes_)):
        raw = raw.decode("utf-8")
    return json.loads(str(raw))


def _check_config(cfg: dict, rep: Report):
    required = ["n_layer", "n_embd", "n_head", "n_kv_head", "head_dim", "vocab_size",
                "vocab_padded", "seq_len", "window_pattern", "short_window", "rope_base",
                "norm_eps", "qk_norm_scale", "logit_softcap", "mlp_ratio", "value_mode",
                "value_layers", "target_layers", "detach_v1", "shared_table", "bov_add_fixed",
                "value_embed_gate_channels", "value_embed_gate_scale"]
    missing = [k for k in required if k not in cfg]
    if missing:
        rep.fail(f"config lacks keys {missing}")
    for k, want in rm.SPEC_CONSTANTS.items():
        if k in cfg and not math.isclose(float(cfg[k]), float(want), rel_tol=1e-12):
            rep.fail(f"config {k} = {cfg[k]!r} but docs/model.md fixes {want!r}")
    if "vocab_size" in cfg and "vocab_padded" in cfg:
        want = rm.padded_vocab(int(cfg["vocab_size"]))
        if int(cfg["vocab_padded"]) != want:
            rep.fail(f"config vocab_padded = {cfg['vocab_padded']} but ceil(V/64)*64 = {want}")
    if int(cfg.get("n_head", 1)) % max(int(cfg.get("n_kv_head", 1)), 1) != 0:
        rep.fail("n_kv_head does not divide n_head")


def compare(path, loss_rtol: float = LOSS_RTOL, grad_rtol: float = GRAD_RTOL) -> Report:
    rep = Report(path=str(path))
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        rep.fail(f"cannot open case file: {e}")
        return rep
    with f:
        try:
            cfg = _read_config(f)
        except Exception as e:  # noqa: BLE001
            rep.fail(f"cannot read the JSON config attribute: {e!r}")
            return rep
        rep.config = cfg
        for key in ("inputs", "targets", "params", "grads", "loss"):
            if key not in f:
                rep.fail(f"case file lacks /{key}")
        if not rep.ok:
            return rep
        inputs = np.asarray(f["inputs"][...])
        targets = np.asarray(f["targets"][...])
        params = {k: np.asarray(f["params"][k][...]) for k in f["params"].keys()}
        vgrads = {k: np.asarray(f["grads"][k][...]) for k in f["grads"].keys()}
        loss_vt = float(np.asarray(f["loss"][...]).reshape(()))
        fixed = ({k: np.asarray(f["fixed"][k][...]) for k in f["fixed"].keys()}
                 if "fixed" in f else {})

    _check_config(cfg, rep)

    # Targets resolved independently.
    try:
        ref_targets = rm.resolve_targets(cfg)
    except ValueError as e:
        rep.fail(f"reference cannot resolve targets: {e}")
        return rep
    file_targets = [int(t) for t in cfg.get("target_layers", [])]
    if file_targets != ref_targets:
        rep.fail(f"target_layers: file {file_targets} != reference {ref_targets} "
                 f"(mode {cfg.get('value_mode')}, spec {cfg.get('value_layers')!r})")

    # Parameter names and shapes.
    try:
        want = rm.expected_param_shapes(cfg)
    except ValueError as e:
        rep.fail(f"reference cannot build the parameter list: {e}")
        return rep
    have = {k: tuple(v.shape) for k, v in params.items()}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    if missing:
        rep.fail(f"/params lacks {missing}")
    if extra:
        rep.fail(f"/params has unexpected {extra}")
    for k in sorted(set(want) & set(have)):
        if tuple(want[k]) != have[k]:
            rep.fail(f"/params/{k} has shape {have[k]}, expected {tuple(want[k])}")
    for k, v in params.items():
        if v.dtype != np.float32:
            rep.fail(f"/params/{k} is {v.dtype}, expected float32")
        if not np.all(np.isfinite(v)):
            rep.fail(f"/params/{k} has non-finite values")
    gmiss = sorted(set(params) - set(vgrads))
    gextra = sorted(set(vgrads) - set(params))
    if gmiss:
        rep.fail(f"/grads lacks {gmiss}")
    if gextra:
        rep.fail(f"/grads has names not in /params: {gextra}")
    for k in sorted(set(params) & set(vgrads)):
        if vgrads[k].shape != params[k].shape:
            rep.fail(f"/grads/{k} has shape {vgrads[k].shape}, /params/{k} {params[k].shape}")

    # Tokens.
    T = int(cfg.get("seq_len", -1))
    V = int(cfg.get("vocab_size", 0))
    if inputs.ndim != 2 or inputs.shape != targets.shape:
        rep.fail(f"/inputs {inputs.shape} and /targets {targets.shape} must both be (B, T)")
    elif inputs.shape[1] != T:
        rep.fail(f"/inputs has T = {inputs.shape[1]} but config seq_len = {T}")
    if not (np.issubdtype(inputs.dtype, np.integer) and np.issubdtype(targets.dtype, np.integer)):
        rep.fail(f"token arrays must be integer, got {inputs.dtype}/{targets.dtype}")
    elif inputs.size and (inputs.min() < 0 or inputs.max() >= V or targets.min() < 0
                          or targets.max() >= V):
        rep.fail(f"token ids outside [0, {V})")
    if not rep.ok:
        return rep

    # Fixed tensors: the W0 of every reparameterized projection, and nothing else; the identity
    # under reparam_init "" / "id", an orthogonal matrix under "orth" (the reference cannot
    # redraw vtrain's random stream, so it checks the property instead).
    want_fixed = sorted(k.replace("_resid", "").replace("attn.v", "attn.wv").replace(
        "attn.o", "attn.wo") + "_base" for k in want if k.endswith(("v_resid", "o_resid")))
    if sorted(fixed) != want_fixed:
        rep.fail(f"/fixed holds {sorted(fixed)}, expected {want_fixed}")
        return rep
    for k, w0 in fixed.items():
        w0 = w0.astype(np.float64)
        if cfg.get("reparam_init") == "orth":
            err = float(np.max(np.abs(w0 @ w0.T - np.eye(w0.shape[0]))))
            if not err <= 1e-5:
                rep.fail(f"/fixed/{k} is not orthogonal (max |W W^T - I| = {err:.2e})")
        elif not np.array_equal(w0, np.eye(w0.shape[0])):
            rep.fail(f"/fixed/{k} is not the identity")

    # Recompute in float64 from the stored float32 parameters.
    loss_ref, rgrads = rm.loss_and_grads(params, inputs, targets, cfg, fixed=fixed)
    rep.loss_vtrain, rep.loss_ref = loss_vt, loss_ref
    rep.loss_rel_err = abs(loss_vt - loss_ref) / max(abs(loss_ref), 1e-30)
    if not rep.loss_rel_err <= loss_rtol:
        rep.fail(f"loss: vtrain {loss_vt:.10g} vs reference {loss_ref:.10g}, relative error "
                 f"{rep.loss_rel_err:.3e} > {loss_rtol:g}")

    bad = []
    global_max = max(float(np.max(np.abs(rgrads[n]))) for n in want)
    for name in sorted(want):
        gr = rgrads[name]
        gv = vgrads[name].astype(np.float64)
        max_ref = float(np.max(np.abs(gr)))
        max_vt = float(np.max(np.abs(gv))) if np.all(np.isfinite(gv)) else float("inf")
        diff = float(np.max(np.abs(gv - gr))) if np.all(np.isfinite(gv)) else float("inf")
        rel = diff / max(max_ref, GRAD_FLOOR * global_max, 1e-30)
        note, ok = "", True
        if not np.all(np.isfinite(gv)):
            ok, note = False, "vtrain grad not finite"
        elif max_ref == 0.0:
            ok, note = False, "reference grad is all zero: case tests nothing"
        elif not rel <= grad_rtol:
            ok, note = False, f"> {grad_rtol:g}"
        rep.rows.append(ParamRow(name, tuple(gr.shape), max_ref, max_vt, diff, rel, ok, note))
        if not ok:
            bad.append(f"{name} ({note})")
    zero = [r.name for r in rep.rows if r.max_ref == 0.0]
    if zero:
        rep.fail(f"reference gradient is identically zero for {zero}: the case does not test "
                 f"these parameters (perturb them away from their init in the exporter)")
    other = [b for b in bad if "all zero" not in b]
    if other:
        rep.fail(f"gradient mismatch for {len(other)} parameter(s): {other}")
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Compare vtrain case files with the JAX reference.")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--verbose", "-v", action="store_true", help="print the table also on pass")
    a = ap.parse_args(argv)
    all_ok = True
    for path in a.cases:
        rep = compare(path)
        print(rep)
        if a.verbose and rep.ok:
            print(rep.table())
        all_ok &= rep.ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
