"""Saves survive a full disk: with --ckpt-dir on a small tmpfs, a checkpoint that does not fit
ends the run with one clean, named error and exit code 2 on 1, 2 and 4 ranks (no crash at exit,
no MPI abort), the previous checkpoint stays `latest` and verifies, and no .tmp is left or
promoted. Two ways in: the free-space check before writing (the usual case), and a save that
runs into the full disk for real (VTRAIN_SKIP_SPACE_CHECK=1: the reservation of the laid-out
file fails; no rank may be left waiting in a collective). Also a read-only --ckpt-dir is refused
before any work."""
import hashlib
import os
import re
import subprocess

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "1", "--global-batch", "128", "--eval-tokens", "512"]


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    text = subprocess.run(["bible", "Gen1:1-Gen10:32"], capture_output=True, text=True).stdout
    (d / "c.txt").write_text(text)
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "c.txt"), "--out", str(d / "data"),
                        "--tokenizer", "bpe:300", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / "data"


@pytest.fixture
def small_fs(tmp_path):
    """A 2.5 MB tmpfs: room for a few checkpoints of the model above (0.6 MB each), not more."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2500k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("real_failure", [False, True], ids=["space-check", "write-fails"])
def test_full_disk_is_a_clean_error_and_keeps_latest(datadir, small_fs, ranks, real_failure):
    ckpt = small_fs / "ckpt"
    pp = 2 if ranks == 4 else 1
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "12", "--pp", str(pp),
           "--ckpt-dir", str(ckpt), "--ckpt-every", "2", "--keep-last", "0"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
    env = dict(ENV, VTRAIN_SKIP_SPACE_CHECK="1" if real_failure else "0")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout[-1500:], r.stderr[-3000:])
    err = r.stderr
    # The write failure names the full file system (the HDF5 stack names errno 28 on one rank,
    # only "file write failed" under MPI-IO); the check before writing names both sizes.
    want = "it is full" if real_failure else "not enough space for checkpoint"
    assert want in err and "stays latest" in err, err
    # One agreed message, no crash, no abort of the job.
    assert err.count("error:") == 1, err
    for bad in ("crashed", "signal 11", "MPI_ABORT", "Segmentation"):
        assert bad not in err, err
    names = sorted(p.name for p in ckpt.iterdir())
    assert not [n for n in names if n.endswith(".tmp")], names
    steps = sorted(int(n[5:13]) for n in names if n.startswith("step_"))
    assert steps and steps == list(range(2, 2 * len(steps) + 1, 2)), names
    latest = (ckpt / "latest").read_text().strip()
    assert latest == f"step_{steps[-1]:08d}.h5", (latest, names)
    v = subprocess.run([VTRAIN, "ckpt", "verify", str(ckpt / latest)], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr


def test_read_only_checkpoint_directory_is_refused_up_front(datadir, small_fs):
    ckpt = small_fs / "ckpt"
    ckpt.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "2",
                            "--ckpt-dir", str(ckpt)], capture_output=True, text=True, env=ENV,
                           timeout=120)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "cannot create the lock file in --ckpt-dir" in r.stderr, r.stderr
    assert "step 1/" not in r.stdout  # refused before training


def test_read_only_mount_names_the_directory_not_writable(datadir, small_fs):
    """A --ckpt-dir that does not exist yet on a read-only mount (issue 25, item 13: it said "No
    such file or directory"): refused, saying the directory is not writable."""
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "2",
                            "--ckpt-dir", str(small_fs / "new" / "ckpt")], capture_output=True,
                           text=True, env=ENV, timeout=120)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "is not writable (it is on a read-only file system)" in r.stderr, r.stderr
    assert "No such file or directory" not in r.stderr, r.stderr
    assert "step 1/" not in r.stdout


def sha(path):
    return hashlib.sha1(open(path, "rb").read()).hexdigest() if os.path.lexists(path) else None


@pytest.mark.parametrize("ranks", [1, 2])
def test_saves_never_follow_links_planted_in_the_checkpoint_directory(datadir, tmp_path, ranks):
    """Issue 25, item 3: `ln -s ../victim ck/step_00000002.h5.tmp; ln -s ../victim1 ck/latest.tmp`
    made a save write the checkpoint into victim and "step_00000002.h5" into victim1. Every file a
    save creates in the directory is a new file: the planted links (and links under the final
    step name, tokenizer.json's temporary and an earlier step's .tmp) are replaced or removed,
    never written through; the victims keep their bytes, a missing victim is never created, and
    the checkpoint is a regular file that verifies."""
    ck = tmp_path / "ck"
    ck.mkdir()
    victims = {}
    for k, name in enumerate(["step_00000002.h5.tmp", "latest.tmp", "step_00000001.h5",
                              "tokenizer.json.tmp", "latest", "step_00000007.h5.tmp"]):
        v = tmp_path / f"victim{k}"
        if k != 1:  # victim1 does not exist: nothing may create it
            v.write_bytes(b"precious bytes %d\n" % k)
        os.symlink(f"../victim{k}", ck / name)
        victims[v] = sha(v)
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "2", "--ckpt-every", "1",
           "--ckpt-dir", str(ck), "--final-eval-tokens", "0"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, (r.stdout[-1500:], r.stderr[-3000:])
    for v, before in victims.items():
        assert sha(v) == before, f"{v} changed"
    for name in ("step_00000001.h5", "step_00000002.h5", "latest", "tokenizer.json"):
        assert (ck / name).is_file() and not (ck / name).is_symlink(), name
    assert (ck / "latest").read_text().strip() == "step_00000002.h5"
    assert not [p.name for p in ck.iterdir() if p.name.endswith(".tmp") and p.name != "step_00000007.h5.tmp"]
    v = subprocess.run([VTRAIN, "ckpt", "verify", str(ck / "step_00000002.h5")], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr


def test_a_lock_file_that_is_a_link_is_refused(datadir, tmp_path):
    """A `.vtrain.lock` planted as a link (to a file that does not exist, and to one that does):
    the run is refused naming it, exit 2, nothing created or changed outside the directory."""
    for exists in (False, True):
        ck = tmp_path / f"ck{int(exists)}"
        ck.mkdir()
        victim = tmp_path / f"victim{int(exists)}"
        if exists:
            victim.write_bytes(b"precious\n")
        os.symlink(str(victim), ck / ".vtrain.lock")
        r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "1",
                            "--ckpt-dir", str(ck)], capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert re.search(r"the lock file \S+\.vtrain\.lock is a symbolic link; vtrain does not follow "
                         r"links in a directory it writes: remove it", r.stderr), r.stderr
        assert victim.exists() == exists and (not exists or victim.read_bytes() == b"precious\n")
        assert sorted(p.name for p in ck.iterdir()) == [".vtrain.lock"]
