"""`vtrain export --out` never destroys what it should protect (issue 39, items 1 and 2): --out is
resolved before anything is touched, and an --out that is, contains or lies inside a checkpoint
directory is refused by name with or without --force, in every spelling (trailing '/', '/.',
'..', symbolic links, relative paths from inside the checkpoint directory); --force replaces only
a directory holding an earlier export; the new export replaces the old one only once complete,
and a kill at each point of the swap (VTRAIN_TEST_EXPORT_KILL) leaves the old or the new export
whole, its leftovers named and cleared by the next export; two exports into one --out are never
mixed: the loser is refused naming the winner."""
import hashlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.abspath(os.path.join(BUILD, "vtrain"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--eval-tokens", "256"]
EXPORT_FILES = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                "vtrain_tokenizer.json", "modeling_vtrain.py", "export_check.safetensors"}


def vt(*args, cwd=None, env=None):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env or ENV, timeout=300)


def snapshot(root: Path) -> dict:
    """Every file under `root` (links as links) with its bytes' hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def weights(d: Path) -> str:
    return hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory: data/, ckpt/ (steps 2 and 4, latest, tokenizer.json) and a sibling file."""
    root = tmp_path_factory.mktemp("exp")
    text = subprocess.run(["bible", "Gen1:1-Gen4:26"], capture_output=True, text=True).stdout
    (root / "c.txt").write_text(text)
    r = vt("prepare", "--input", root / "c.txt", "--out", root / "data", "--tokenizer", "bpe:300",
           "--quiet")
    assert r.returncode == 0, r.stderr
    r = vt("train", "--data", root / "data", *MODEL, "--steps", 4, "--ckpt-dir", root / "ckpt",
           "--ckpt-every", 2, "--keep-last", 0)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


@pytest.fixture
def ws(run, tmp_path):
    """A private copy of the run (tests damage nothing shared), and its snapshot."""
    subprocess.run(["cp", "-a", str(run) + "/.", str(tmp_path)], check=True)
    (tmp_path / "notes.txt").write_text("the user's own file beside the checkpoints\n")
    return tmp_path


CKPT = "ckpt/step_00000004.h5"


@pytest.mark.parametrize("cwd,ckpt,out,why", [
    # --out is the checkpoint directory, in every spelling.
    (".", CKPT, "ckpt", "is the checkpoint's directory"),
    (".", CKPT, "ckpt/", "is the checkpoint's directory"),
    (".", CKPT, "./ckpt/.", "is the checkpoint's directory"),
    (".", CKPT, "ckpt/../ckpt", "is the checkpoint's directory"),
    (".", CKPT, "data/../ckpt/", "is the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", ".", "is the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", "./", "is the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", "../ckpt", "is the checkpoint's directory"),
    ("{abs}", "{abs}/" + CKPT, "{abs}/ckpt", "is the checkpoint's directory"),
    # the checkpoint file itself
    (".", CKPT, CKPT, "is the checkpoint --ckpt"),
    ("ckpt", "step_00000004.h5", "step_00000004.h5", "is the checkpoint --ckpt"),
    (".", CKPT, "ckpt/step_00000002.h5", "lies inside the checkpoint's directory"),
    # inside it
    (".", CKPT, "ckpt/export", "lies inside the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", "export/", "lies inside the checkpoint's directory"),
    # containing it (the parent emptied before: everything lost)
    ("ckpt", "step_00000004.h5", "..", "contains the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", "../", "contains the checkpoint's directory"),
    ("ckpt", "step_00000004.h5", "../.", "contains the checkpoint's directory"),
    (".", CKPT, ".", "contains the checkpoint's directory"),
    # through a symbolic link to the checkpoint directory
    (".", CKPT, "cklink", "(it holds latest)"),
    (".", CKPT, "cklink/", "(it holds latest)"),
    (".", CKPT, "cklink/.", "(it holds latest)"),
    (".", CKPT, "cklink/sub", "lies inside"),
    (".", "cklink/step_00000004.h5", "ckpt", "is the checkpoint's directory"),
])
@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_an_out_among_checkpoints_is_refused_and_nothing_is_touched(ws, cwd, ckpt, out, why, force):
    (ws / "cklink").symlink_to("ckpt")
    before = snapshot(ws)
    cwd = ws if cwd == "{abs}" else ws / cwd
    ckpt, out = ckpt.replace("{abs}", str(ws)), out.replace("{abs}", str(ws))
    r = vt("export", "--ckpt", ckpt, "--out", out, *(["--force"] if force else []), cwd=cwd)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert f"--out {out}" in r.stderr and why in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1, r.stderr
    assert snapshot(ws) == before  # not a byte changed, nothing made
    assert (ws / "ckpt" / "latest").read_text().strip() == "step_00000004.h5"


def test_a_directory_with_latest_or_a_lock_anywhere_above_is_refused(ws):
    other = ws / "other_run" / "ckpt"
    other.mkdir(parents=True)
    (other / ".vtrain.lock").write_text("")
    before = snapshot(ws)
    for out in (other, other / "x", other / "x" / "y"):
        r = vt("export", "--ckpt", ws / CKPT, "--out", out, "--force")
        assert r.returncode == 2 and "(it holds .vtrain.lock)" in r.stderr, r.stderr
    assert snapshot(ws) == before


@pytest.mark.parametrize("spelling", ["new", "new/", "./new/.", "sub/../new", "new//"])
def test_trailing_slash_and_dot_spellings_export_and_replace(ws, spelling):
    (ws / "sub").mkdir()
    r = vt("export", "--ckpt", "ckpt/step_00000002.h5", "--out", spelling, cwd=ws)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (ws / "new").iterdir()} == EXPORT_FILES
    first = weights(ws / "new")
    r = vt("export", "--ckpt", CKPT, "--out", spelling, cwd=ws)
    assert r.returncode == 2 and "exists; choose another directory or pass --force" in r.stderr
    assert weights(ws / "new") == first
    r = vt("export", "--ckpt", CKPT, "--out", spelling, "--force", cwd=ws)
    assert r.returncode == 0, r.stderr
    assert weights(ws / "new") != first
    assert {p.name for p in (ws / "new").iterdir()} == EXPORT_FILES
    assert not [p for p in ws.iterdir() if "export-" in p.name], list(ws.iterdir())


@pytest.mark.parametrize("what", ["foreign-file", "subdir", "file-out", "link-out", "data"])
def test_force_replaces_only_an_earlier_export(ws, what):
    out = ws / "out"
    if what == "data":
        out = ws / "data"
    elif what == "file-out":
        out.write_text("a user's file\n")
    elif what == "link-out":
        assert vt("export", "--ckpt", CKPT, "--out", ws / "real", cwd=ws).returncode == 0
        out.symlink_to("real")
    else:
        assert vt("export", "--ckpt", CKPT, "--out", out, cwd=ws).returncode == 0
        if what == "foreign-file":
            (out / "my_notes.md").write_text("mine\n")
        else:
            (out / "ckpt").mkdir()
    before = snapshot(ws)
    r = vt("export", "--ckpt", CKPT, "--out", out, "--force", cwd=ws)
    assert r.returncode == 2, r.stderr
    want = {"foreign-file": "my_notes.md, which an export does not write",
            "subdir": "ckpt, which an export does not write",
            "data": "which an export does not write", "file-out": "is a regular file",
            "link-out": "is a symbolic link"}[what]
    assert want in r.stderr and "--out" in r.stderr, r.stderr
    assert snapshot(ws) == before


def test_a_pycache_of_the_export_is_replaced_with_it(ws):
    out = ws / "out"
    assert vt("export", "--ckpt", "ckpt/step_00000002.h5", "--out", out, cwd=ws).returncode == 0
    (out / "__pycache__").mkdir()
    (out / "__pycache__" / "modeling_vtrain.cpython-311.pyc").write_bytes(b"\0")
    r = vt("export", "--ckpt", CKPT, "--out", out, "--force", cwd=ws)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} == EXPORT_FILES


@pytest.mark.parametrize("point", ["staged", "aside", "swapped", "fallback"])
def test_a_kill_during_the_swap_leaves_one_export_whole(ws, point):
    """Old export from step 2, new from step 4 (bf16): killed with SIGKILL at each point of the
    replacement, --out holds one of them whole (or, between the two renames of the path without
    an atomic exchange, the old one waits aside), and the next export names every leftover,
    puts the old one back where needed, and finishes."""
    out = ws / "out"
    assert vt("export", "--ckpt", "ckpt/step_00000002.h5", "--out", out, cwd=ws).returncode == 0
    old = snapshot(out)
    r = vt("export", "--ckpt", CKPT, "--out", out, "--force", "--dtype", "bf16", cwd=ws,
           env=dict(ENV, VTRAIN_TEST_EXPORT_KILL=point))
    leftovers = sorted(p.name for p in ws.iterdir() if p.name.startswith(".out.export-"))
    if point == "fallback":  # no kill: the path without an exchange, to its end
        assert r.returncode == 0, r.stderr
        assert weights(out) != old["model.safetensors"] and not leftovers
        return
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    if point == "aside":
        assert not out.exists() and leftovers == [".out.export-new", ".out.export-old"]
        assert snapshot(ws / ".out.export-old") == old
        assert {p.name for p in (ws / ".out.export-new").iterdir()} == EXPORT_FILES
    else:
        now = snapshot(out)
        assert set(now) == EXPORT_FILES
        assert (now == old) == (point == "staged"), point  # old before the swap, new after
        assert leftovers == [".out.export-new"]
    r = vt("export", "--ckpt", "ckpt/step_00000002.h5", "--out", out, "--force", cwd=ws)
    assert r.returncode == 0, r.stderr
    for name in leftovers:
        assert name in r.stdout, r.stdout  # named
    if point == "aside":
        assert f"put the previous export back at {out}" in r.stdout, r.stdout
    assert snapshot(out) == old  # step 2's export again, whole
    assert not [p for p in ws.iterdir() if p.name.startswith(".out.export-")]


def hold_export_lock(out, holder="pid 4242 on otherhost"):
    import fcntl
    f = open(str(out) + ".export-lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0)
    f.write(holder + "\n")
    f.flush()
    return f


def test_an_export_another_export_holds_is_refused_naming_it(ws):
    out = ws / "out"
    assert vt("export", "--ckpt", CKPT, "--out", out, cwd=ws).returncode == 0
    before = snapshot(ws)
    lock = hold_export_lock(out)
    try:
        for spelling in (str(out), str(out) + "/", str(out) + "/."):
            r = vt("export", "--ckpt", "ckpt/step_00000002.h5", "--out", spelling, "--force",
                   cwd=ws)
            assert r.returncode == 2, r.stderr
            assert re.search(r"another vtrain export \(pid 4242 on otherhost\) is writing --out "
                             r"\S+ \(it holds \S+out\.export-lock\)", r.stderr), r.stderr
        lock_text = (ws / "out.export-lock").read_text()
    finally:
        lock.close()
    assert lock_text == "pid 4242 on otherhost\n"
    os.unlink(ws / "out.export-lock")
    assert snapshot(ws) == before


def test_two_exports_at_once_never_mix(ws):
    """The reproduction: f32 and bf16 exports into one --out at the same time, ten times. A
    process that says it exported left its own weights (its dtype) unless the other finished
    after it; one that lost the race is refused naming the winner's pid."""
    out = ws / "out"
    for attempt in range(10):
        procs = [subprocess.Popen([VTRAIN, "export", "--ckpt", CKPT, "--out", str(out),
                                   "--force", "--dtype", dt], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENV, cwd=ws)
                 for dt in ("f32", "bf16")]
        res = [(p, *p.communicate(timeout=300)) for p in procs]
        ok = [(p, o) for p, o, e in res if p.returncode == 0]
        assert ok, [e for _, _, e in res]
        for p, o, e in res:
            if p.returncode != 0:
                assert p.returncode == 2 and "another vtrain export (pid " in e, e
                winner = re.search(r"\(pid (\d+) on", e).group(1)
                assert int(winner) in [q.pid for q in procs if q is not p], e
        dtype = "BF16" if b'"BF16"' in (out / "model.safetensors").read_bytes()[:4096] else "F32"
        if len(ok) == 1:
            assert f"({dtype.lower()})" in ok[0][1], (ok[0][1], dtype)
        assert {p.name for p in out.iterdir()} == EXPORT_FILES
        assert not [p for p in ws.iterdir() if "export-" in p.name], list(ws.iterdir())
