"""Fixtures of the cluster tests: live progress output, the compiled stand-in training binary and
a small data directory, shared by the Slurm and the network-namespace tests."""
import os

import pytest

import cluster_util as cu


@pytest.fixture(autouse=True, scope="session")
def _live_progress(request):
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def write(line):
        if capman is None:
            print(line, flush=True)
            return
        with capman.global_and_fixture_disabled():
            print(line, flush=True)

    cu.set_progress_writer(write)
    yield
    cu.set_progress_writer(None)


@pytest.fixture(scope="session")
def need_root():
    if os.geteuid() != 0:
        pytest.skip("the cluster tests need root (Slurm daemons as SlurmUser=root, network "
                    "namespaces); run them as root or in a container")


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    path = cu.build_standin(tmp_path_factory.mktemp("standin"))
    cu.progress(f"built the stand-in training job {path} (multi-rank runs use: {cu.MULTIRANK_TRAIN})")
    return path


@pytest.fixture(scope="session")
def datadir(tmp_path_factory):
    return cu.prepare_data(tmp_path_factory.mktemp("cluster_data"))
