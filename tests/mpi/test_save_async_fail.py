"""A save that fails names the checkpoint that really stays `latest` (issue 25, item 13): with
--async-save the failure of step N's background write surfaces at the next save or at the end,
when step N is no longer the newest complete checkpoint; the message must name the step `latest`
points to, on a full file system (a 2.5 MB tmpfs, writes failing for real), with and without
--async-save."""
import os
import re
import subprocess

import pytest

from test_save_faults import MODEL, VTRAIN, datadir, small_fs  # noqa: F401 (fixtures)

ENV = dict(os.environ, OMP_NUM_THREADS="1", VTRAIN_SKIP_SPACE_CHECK="1")


@pytest.mark.parametrize("async_save", [True, False], ids=["async", "sync"])
def test_a_failed_save_names_the_checkpoint_that_stays_latest(datadir, small_fs, async_save):
    ckpt = small_fs / "ckpt"
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "12", "--ckpt-dir",
           str(ckpt), "--ckpt-every", "2", "--keep-last", "0"] + (["--async-save"] if async_save else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 2, (r.stdout[-1500:], r.stderr[-3000:])
    m = re.search(r"the checkpoint of step (\d+) stays latest", r.stderr)
    assert m, r.stderr[-3000:]
    latest = (ckpt / "latest").read_text().strip()
    assert latest == f"step_{int(m.group(1)):08d}.h5", (latest, r.stderr[-2000:])
