"""A save first drops the page cache of the older checkpoints in its directory (so the new file is
written into pages just freed; docs/design.md "Checkpoints"), on 1 and 2 ranks, synchronous and
background saves: after a run saving every step, the older files hold no page in the cache while
the newest one, just written and verified, does (the control that shows residency is seen), and
every file still verifies. The directory lives in the build tree, on the disk: a tmpfs keeps
every page of its files in memory whatever the advice."""
import ctypes
import mmap
import os
import subprocess
import tempfile

import pytest

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


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache")
    text = subprocess.run(["bible", "Gen1:1-Gen10:32"], capture_output=True, text=True).stdout
    (d / "c.txt").write_text(text)
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "c.txt"), "--out", str(d / "data"),
                        "--tokenizer", "bpe:300", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / "data"


@pytest.mark.parametrize("ranks,async_save", [(1, False), (2, False), (2, True)],
                         ids=["1rank", "2ranks", "2ranks-async"])
def test_a_save_drops_the_cache_of_older_checkpoints(datadir, ranks, async_save):
    with tempfile.TemporaryDirectory(prefix="save-cache-", dir=os.path.abspath(BUILD)) as work:
        ckpt = os.path.join(work, "ckpt")
        cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "4", "--tp", str(ranks),
               "--ckpt-dir", ckpt, "--ckpt-every", "1", "--keep-last", "4"]
        if async_save:
            cmd.append("--async-save")
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks)] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "cache of older files dropped" in r.stdout, r.stdout[-2000:]
        files = [os.path.join(ckpt, f"step_{s:08d}.h5") for s in range(1, 5)]
        resident = [resident_fraction(f) for f in files]
        assert resident[-1] > 0.5, resident  # the newest: written and read back, still cached
        assert all(x == 0 for x in resident[:-1]), resident
        for f in files:
            v = subprocess.run([VTRAIN, "ckpt", "verify", f], capture_output=True, text=True)
            assert v.returncode == 0, (f, v.stderr)
