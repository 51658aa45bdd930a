"""What the compiled CUDA kernels use, read from the nvcc build (no GPU needed).

Two sources, both from the objects of vtrain_kernels_sm90 (the sm_90 code a GPU runs):
  - the ptxas -v report kept next to each object (<object>.ptxas.txt, written at build time by
    scripts/ptxas_log.sh): registers, spill stores/loads, stack frame, static shared memory;
  - the SASS, disassembled by cuobjdump (PyPI nvidia-cuda-cuobjdump, with nvidia-cuda-nvdisasm,
    both in scripts/requirements.txt): instruction counts per kernel (HMMA tensor-core products,
    LDSM ldmatrix, LDGSTS cp.async, FFMA, LDS, ...).
Used by tests/sass/test_sass.py (the CI check) and bench/static_report.py.
"""
from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import subprocess
import sys


def objects_dir(build: str) -> str:
    return os.path.join(build, "CMakeFiles", "vtrain_kernels_sm90.dir", "kernels")


def kernel_objects(build: str) -> list[str]:
    """The nvcc objects of kernels/*.cu, sorted."""
    return sorted(glob.glob(os.path.join(objects_dir(build), "*.cu.o")))


def find_cuobjdump() -> tuple[str, dict]:
    """cuobjdump and an environment in which it finds nvdisasm (the venv's nvidia/cu13/bin first,
    then PATH). Raises FileNotFoundError naming what to install."""
    cands = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia",
                                   "cu*", "bin"))
    env = dict(os.environ)
    for d in cands:
        if os.path.exists(os.path.join(d, "cuobjdump")) and os.path.exists(
                os.path.join(d, "nvdisasm")):
            env["PATH"] = d + os.pathsep + env.get("PATH", "")
            return os.path.join(d, "cuobjdump"), env
    exe = shutil.which("cuobjdump")
    if exe and shutil.which("nvdisasm"):
        return exe, env
    raise FileNotFoundError(
        "cuobjdump and nvdisasm not found: install scripts/requirements.txt into the venv "
        "(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")


def demangle(names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    exe = shutil.which("c++filt")
    if not exe:
        return {n: n for n in names}
    out = subprocess.run([exe], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def short_name(demangled: str) -> str:
    """'void vt::cuda::(anonymous namespace)::attn_tc_fwd_kernel<128>(...)' -> 'attn_tc_fwd_kernel<128>'."""
    s = demangled.replace("(anonymous namespace)::", "")
    s = s.split("(")[0]
    s = re.sub(r"^void\s+", "", s)
    s = re.sub(r"\bvt::cuda::", "", s)
    return s.replace("__nv_bfloat16", "bf16")


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for 'sm_(\d+)'")
_PROPS_FOR = re.compile(r"Function properties for (\S+)")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


def ptxas_report(obj: str) -> dict[str, dict]:
    """Per kernel (mangled name) of one object's ptxas -v report: regs, spill_stores, spill_loads,
    stack, smem (static shared bytes), barriers. Spills of device functions compiled with a kernel
    (e.g. the slow path of double-precision trigonometry) count for that kernel. Raises
    FileNotFoundError when the object has no report."""
    with open(obj + ".ptxas.txt") as f:
        lines = f.read().splitlines()
    out: dict[str, dict] = {}
    entry = None  # the kernel being compiled
    own = False   # the properties being read are the kernel's own (not a callee's)
    for line in lines:
        m = _ENTRY.search(line)
        if m:
            entry = m.group(1)
            out[entry] = {"regs": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "smem": 0,
                          "barriers": 0, "object": os.path.basename(obj)}
            continue
        m = _PROPS_FOR.search(line)
        if m:
            own = m.group(1) == entry
            continue
        if entry is None:
            continue
        m = _PROPS.search(line)
        if m:
            if own:
                out[entry]["stack"] = int(m.group(1))
            out[entry]["spill_stores"] += int(m.group(2))
            out[entry]["spill_loads"] += int(m.group(3))
            continue
        m = _USED.search(line)
        if m:
            out[entry]["regs"] = int(m.group(1))
            out[entry]["barriers"] = int(m.group(2) or 0)
            out[entry]["smem"] = int(m.group(4) or 0)
    return out


def ptxas_reports(build: str) -> dict[str, dict]:
    """ptxas_report of every kernel object, merged."""
    out: dict[str, dict] = {}
    for obj in kernel_objects(build):
        out.update(ptxas_report(obj))
    return out


_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_opcodes(obj: str, cuobjdump: str | None = None, env: dict | None = None
                 ) -> dict[str, collections.Counter]:
    """Per kernel (mangled name) of an object: Counter of SASS opcodes, both the full mnemonic
    ('HMMA.16816.F32.BF16') and its base ('HMMA')."""
    if cuobjdump is None:
        cuobjdump, env = find_cuobjdump()
    text = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env,
                          check=True).stdout
    out: dict[str, collections.Counter] = {}
    cur = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            cur = m.group(1)
            out[cur] = collections.Counter()
            continue
        if cur is None:
            continue
        m = _INSN.match(line)
        if m:
            full = m.group(1)
            out[cur][full] += 1
            base = full.split(".")[0]
            if base != full:
                out[cur][base] += 1
    return out


_RES_FUNC = re.compile(r"^\s*Function (\S+):")
_RES = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def res_usage(obj: str, cuobjdump: str | None = None, env: dict | None = None
              ) -> dict[str, dict]:
    """Per kernel (mangled name): REG, STACK, SHARED (static, incl. the reserved 1 KiB on sm_90),
    LOCAL (bytes of local memory per thread: spills and local arrays) as the binary records them
    (cuobjdump -res-usage)."""
    if cuobjdump is None:
        cuobjdump, env = find_cuobjdump()
    text = subprocess.run([cuobjdump, "-res-usage", obj], capture_output=True, text=True,
                          env=env, check=True).stdout
    out: dict[str, dict] = {}
    cur = None
    for line in text.splitlines():
        m = _RES_FUNC.match(line)
        if m:
            cur = m.group(1)
            continue
        m = _RES.search(line)
        if m and cur:
            out[cur] = {"regs": int(m.group(1)), "stack": int(m.group(2)),
                        "shared": int(m.group(3)), "local": int(m.group(4))}
            cur = None
    return out
