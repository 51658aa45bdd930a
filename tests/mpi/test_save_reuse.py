"""Saves reuse memory instead of waiting for fresh pages (docs/design.md "Checkpoints").

The page cache: a save first drops the cache of the older checkpoints in its directory, on 1 and
2 ranks, synchronous and background saves: after a run saving every step, the older files hold no
page in the cache while the newest one, just written and verified, does (the control that shows
residency is seen), and every file still verifies. The directory lives in the build tree, on the
disk: a tmpfs keeps every page of its files in memory whatever the advice.

The snapshot: each save's parameters and optimizer states are copied into the buffers of the save
before (CheckpointWriter::take_buffers); every checkpoint of a run saving each step, background
or synchronous, on the CPU or the emulated device, on 1 rank and over dp 2 (ZeRO-1 states
gathered), holds exactly the arrays of the synchronous CPU run's."""
import ctypes
import mmap
import os
import subprocess
import tempfile

import h5py
import numpy as np
import pytest

from test_save_faults import datadir  # noqa: F401 (a small corpus; the fixture)

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
MODEL = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "1", "--global-batch", "64", "--final-eval-tokens", "0"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def resident_fraction(path):
    """The fraction of the file's pages in the page cache (mincore of a shared read-only map;
    mapping reads nothing)."""
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = (ctypes.c_ubyte * pages)()
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(v & 1 for v in vec) / pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def train_saving_each_step(datadir, ckpt, ranks, async_save, flags):
    """Four steps, a checkpoint after each; the run's output."""
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "4", "--ckpt-dir",
           str(ckpt), "--ckpt-every", "1", *flags] + (["--async-save"] if async_save else [])
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.mark.parametrize("ranks,async_save", [(1, False), (2, False), (2, True)],
                         ids=["1rank", "2ranks", "2ranks-async"])
def test_a_save_drops_the_cache_of_older_checkpoints(datadir, ranks, async_save):
    with tempfile.TemporaryDirectory(prefix="save-cache-", dir=os.path.abspath(BUILD)) as work:
        ckpt = os.path.join(work, "ckpt")
        r = train_saving_each_step(datadir, ckpt, ranks, async_save,
                                   ["--tp", str(ranks), "--keep-last", "4"])
        assert "cache of older files dropped" in r.stdout, r.stdout[-2000:]
        files = [os.path.join(ckpt, f"step_{s:08d}.h5") for s in range(1, 5)]
        resident = [resident_fraction(f) for f in files]
        assert resident[-1] > 0.5, resident  # the newest: written and read back, still cached
        assert all(x == 0 for x in resident[:-1]), resident
        for f in files:
            v = subprocess.run([VTRAIN, "ckpt", "verify", f], capture_output=True, text=True)
            assert v.returncode == 0, (f, v.stderr)


def arrays_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("ranks", [1, 2], ids=["1rank", "dp2"])
def test_reused_snapshot_buffers_write_each_steps_state(datadir, tmp_path, ranks):
    def run(tag, device, async_save):
        ckpt = tmp_path / tag
        flags = ["--value", "resformer-learnable", "--device", device, "--keep-last", "0"]
        train_saving_each_step(datadir, ckpt, ranks, async_save,
                               flags + (["--act-dtype", "f32"] if device == "emulated" else []))
        return [arrays_of(ckpt / f"step_{s:08d}.h5") for s in range(1, 5)]

    ref = run("cpu-sync", "cpu", False)
    # The states change from step to step, so a stale buffer would show.
    assert not np.array_equal(ref[1]["optim/wte/exp_avg"], ref[2]["optim/wte/exp_avg"])
    for tag, device, async_save in [("cpu-async", "cpu", True), ("emu-sync", "emulated", False),
                                    ("emu-async", "emulated", True)]:
        got = run(tag, device, async_save)
        for step, (a, b) in enumerate(zip(ref, got), start=1):
            assert sorted(a) == sorted(b), (tag, step)
            bad = [k for k in a if not np.array_equal(a[k], b[k])]
            assert not bad, (tag, step, bad[:5])
