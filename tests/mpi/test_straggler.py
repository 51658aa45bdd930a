"""Per-rank health (train/rank_health.h): on 4 data-parallel ranks, one rank slowed on purpose
(VTRAIN_INJECT_SLOW_RANK sleeps it every step) is named a straggler with its host, in the log
and in the metrics, and the others are not; the health lines carry every rank's compute,
communication wait and data time, and the others' wait shows the slow rank's delay. A bad
injection spec is refused by name."""
import json
import os
import socket
import subprocess

import pytest

from bible_data import prepare_bible, VTRAIN

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "16", "--window", "8",
         "--micro-batch", "2", "--final-eval-tokens", "0", "--seed", "5"]
SLOW_S = 1.0


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    return prepare_bible(tmp_path_factory.mktemp("straggler"))


def run(datadir, tmp_path, env_extra, steps=4, every=2):
    metrics = tmp_path / "m.jsonl"
    r = subprocess.run(["mpirun", "-np", "4", VTRAIN, "train", "--data", str(datadir), *MODEL,
                        "--global-batch", str(4 * 2 * 16), "--steps", str(steps),
                        "--metrics", str(metrics), "--health-every", str(every),
                        "--straggler-min-s", str(SLOW_S / 2)],
                       capture_output=True, text=True, env=dict(ENV, **env_extra), timeout=600)
    return r, metrics


def test_a_slowed_rank_is_named_with_its_host(datadir, tmp_path):
    r, metrics = run(datadir, tmp_path, {"VTRAIN_INJECT_SLOW_RANK": f"2:{SLOW_S}"})
    assert r.returncode == 0, r.stdout + r.stderr
    host = socket.gethostname()
    for step in (2, 4):
        assert f"straggler at step {step}: rank 2 (host {host})" in r.stdout, r.stdout
    for other in (0, 1, 3):
        assert f": rank {other} (host" not in r.stdout, r.stdout
    lines = [json.loads(l) for l in open(metrics) if '"health"' in l]
    assert [l["step"] for l in lines] == [2, 4]
    for l in lines:
        h = l["health"]
        assert len(h["compute_s"]) == len(h["comm_s"]) == len(h["data_s"]) == 4
        assert h["hosts"] == [host] * 4
        assert [s["rank"] for s in l["straggler"]] == [2]
        assert l["straggler"][0]["host"] == host
        # The slow rank computes about SLOW_S more per step; the others wait that long.
        assert h["compute_s"][2] > SLOW_S * 0.9
        assert h["compute_s"][2] - h["median_compute_s"] > SLOW_S / 2
        for q in (0, 1, 3):
            assert h["comm_s"][q] > SLOW_S * 0.5, h
        # 4 ranks on one host: oversubscribed where it has fewer CPUs (this 2-core machine), and
        # the straggler lines say that the ranks share its CPUs.
        cpus = os.cpu_count()
        assert h["oversubscribed"] == ([f"{host}: 4 ranks on {cpus} CPUs"] if cpus < 4 else []), h
    assert (f"(oversubscribed: {host}: 4 ranks on {os.cpu_count()} CPUs;" in r.stdout) == \
        (os.cpu_count() < 4), r.stdout


def test_a_bad_injection_is_refused_by_name(datadir, tmp_path):
    r, _ = run(datadir, tmp_path, {"VTRAIN_INJECT_SLOW_RANK": "two:1"}, steps=1)
    assert r.returncode != 0
    assert "VTRAIN_INJECT_SLOW_RANK=two:1: expected RANK:SECONDS" in r.stdout + r.stderr
