"""Multi-host runs without a cluster: three "hosts" made of network namespaces (each with its own
hostname through a UTS namespace) on a private /24 that this test creates, joined by veth pairs
to a bridge that lives in a fourth, address-less "switch" namespace, so no traffic can leave
them. OpenMPI runs across them over TCP with a plm_rsh_agent that turns `ssh HOST CMD` into
`ip netns exec HOST ... sh -c CMD` (no sshd). Checks: (a) a run across the hosts completes;
(b) kill -9 of one host's processes (the whole host, or only its ranks) stops the job with a
clear error within a bounded time instead of hanging; (c) a rerun on the surviving hosts resumes
from the last checkpoint and loses no more than the steps since it. Then a real multi-node
Slurm on the same hosts (one slurmd per host): launch/vtrain.sbatch across three nodes (mpirun
starts its daemons with srun), with the time-limit signal, requeue and resume. The namespaces,
the daemons and every process in them are always removed.

The training job is cluster_util.MULTIRANK_TRAIN (the real build/vtrain unless
VTRAIN_CLUSTER_TRAIN names the stand-in)."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import cluster_util as cu
import slurm_cluster as sc
from netns_hosts import NetnsHosts, sh

HOSTS = ["h0", "h1", "h2"]
# A dead host must stop the job by mpirun's own detection: the survivors' communication
# watchdog (VTRAIN_COMM_TIMEOUT, 300 s by default) would otherwise end it with "stuck for", so
# that is what the tests check, not a stopwatch; the seconds are reported. SAFETY_S only keeps a
# hang from holding the suite.
SAFETY_S = 900
STEP_MS = 200      # stand-in step time: runs long enough to be killed mid-way


@pytest.fixture(scope="module")
def net(need_root, tmp_path_factory):
    for t in ("ip", "unshare", "nsenter", "mpirun"):
        if not cu.tool(t):
            pytest.skip(f"{t} not found (iproute2, util-linux, openmpi-bin)")
    hosts = NetnsHosts(tmp_path_factory.mktemp("netns"), HOSTS)
    try:
        hosts.create()
        yield hosts
    finally:
        hosts.destroy()


def mpirun_argv(net, hosts, binary, args, ranks_per_host=1):
    hostfile = net.base / f"hostfile_{'_'.join(hosts)}"
    hostfile.write_text("".join(f"{h} slots={ranks_per_host}\n" for h in hosts))
    return ["mpirun", "--allow-run-as-root", "-np", len(hosts) * ranks_per_host,
            "--hostfile", hostfile, "--map-by", f"ppr:{ranks_per_host}:node", "--bind-to", "none",
            "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", net.agent,
            "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", net.subnet, "--mca", "oob_tcp_if_include", net.subnet,
            "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", "-x", "STANDIN_STEP_MS",
            binary, *args]


def train_args(datadir, run, steps, ckpt_every):
    return ["train", "--data", datadir, *cu.MODEL_ARGS, "--tp", "1", "--pp", "1",
            "--micro-batch", "1", "--global-batch", "384",  # 6 rows: 3 or 2 data-parallel hosts
            "--steps", steps, "--ckpt-dir", run / "ckpt",
            "--ckpt-every", ckpt_every, "--resume", "auto", "--metrics", run / "metrics.jsonl",
            "--eval-tokens", "1024", "--log-every", "5"]


def start_job(net, hosts, binary, args, log):
    """mpirun started inside hosts[0]; returns the Popen (output in `log`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env["STANDIN_STEP_MS"] = str(STEP_MS)
    cmd = net.in_host(hosts[0], mpirun_argv(net, hosts, binary, args))
    cu.progress(f"mpirun from {hosts[0]} across {hosts}: {Path(binary).name} {' '.join(map(str, args[:1]))} ...")
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def wait_job(proc, timeout, log):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"mpirun still running after {timeout}s:\n{Path(log).read_text()[-3000:]}")


def wait_for_step(metrics, step, proc, log, timeout=SAFETY_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if max(cu.train_steps(metrics), default=0) >= step:
            return max(cu.train_steps(metrics))
        assert proc.poll() is None, f"the run ended early:\n{Path(log).read_text()[-3000:]}"
        time.sleep(0.1)
    pytest.fail(f"the run never reached step {step}:\n{Path(log).read_text()[-3000:]}")


def test_hosts_are_isolated(net):
    """Each host sees only lo and its eth0 on the test subnet, and has no route elsewhere."""
    for h in net.hosts:
        addrs = sh("ip", "-n", net.ns(h), "-o", "-4", "addr").stdout
        assert sorted(re.findall(r"inet (\S+)", addrs)) == sorted(["127.0.0.1/8", f"{net.addr(h)}/24"])
        routes = sh("ip", "-n", net.ns(h), "route").stdout
        assert "default" not in routes and routes.strip().startswith(net.subnet), routes
    assert not re.search(r"inet ", sh("ip", "-n", net.switch, "-o", "-4", "addr").stdout)


def test_run_across_hosts_completes(net, datadir, standin, tmp_path):
    """(a) one rank on each of three hosts, talking TCP over the test subnet only."""
    binary = cu.multirank_bin(standin)
    log = tmp_path / "run.log"
    t0 = time.time()
    proc = start_job(net, net.hosts, binary, train_args(datadir, tmp_path, 10, 5), log)
    rc = wait_job(proc, SAFETY_S, log)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-3000:]
    cu.progress(f"3-host run finished in {time.time() - t0:.1f}s")
    if cu.MULTIRANK_TRAIN == "standin":  # the stand-in says where each rank ran
        assert sorted(re.findall(r"rank \d+/3 on (h\d)", text)) == net.hosts, text[:2000]
    cu.check_contiguous_steps(tmp_path / "metrics.jsonl", 10)
    assert cu.latest_step(tmp_path / "ckpt") == 10
    cu.check_checkpoint(tmp_path / "ckpt", 10, cu.MULTIRANK_TRAIN)


def kill_mid_run(net, datadir, binary, run, victim, only_ranks):
    """Starts a 3-host run, kills `victim`'s processes at step >= 12; returns (rc, seconds from
    the kill to mpirun's exit, last step logged, log text)."""
    log = run / "run.log"
    proc = start_job(net, net.hosts, binary, train_args(datadir, run, 60, 5), log)
    step = wait_for_step(run / "metrics.jsonl", 12, proc, log)
    if only_ranks:
        name = Path(binary).name
        pids = [p for p in net.pids(victim)
                if name in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    else:
        pids = net.pids(victim)
    assert pids, f"no processes on {victim}"
    cu.progress(f"step {step}: kill -9 {'the ranks' if only_ranks else 'every process'} on "
                f"{victim}: {pids}")
    t_kill = time.time()
    for p in pids:
        os.kill(p, signal.SIGKILL)
    rc = wait_job(proc, SAFETY_S, log)
    dt = time.time() - t_kill
    last = max(cu.train_steps(run / "metrics.jsonl"))
    cu.progress(f"mpirun exited with {rc} {dt:.1f}s after the kill (last step logged {last})")
    return rc, dt, last, log.read_text(errors="replace")


@pytest.fixture(scope="module")
def host_lost(net, datadir, standin, tmp_path_factory):
    run = tmp_path_factory.mktemp("host_lost")
    return run, *kill_mid_run(net, datadir, cu.multirank_bin(standin), run, "h2", only_ranks=False)


def test_dead_host_stops_job_quickly(host_lost):
    """(b) kill -9 of every process on one host (its orted and ranks): mpirun ends the job with a
    clear error instead of hanging (not the survivors' watchdog)."""
    run, rc, dt, last, text = host_lost
    assert rc != 0, text[-3000:]
    assert "stuck for" not in text, f"the watchdog, not mpirun, ended the job ({dt:.1f}s):\n{text[-3000:]}"
    assert re.search(r"lost communication with a remote daemon|unexpectedly disconnected|"
                     r"exited on signal 9", text), text[-3000:]
    assert last < 60, "the run finished before the kill"


def test_dead_ranks_stop_job_quickly(net, datadir, standin, tmp_path):
    """(b) kill -9 of only one host's ranks (its orted lives): same bounded, clear stop."""
    rc, dt, last, text = kill_mid_run(net, datadir, cu.multirank_bin(standin), tmp_path, "h1",
                                      only_ranks=True)
    assert rc != 0 and "stuck for" not in text, (rc, dt, text[-3000:])
    assert re.search(r"exited on signal 9|unexpectedly disconnected|lost communication", text), \
        text[-3000:]


def test_resume_on_surviving_hosts(net, datadir, standin, host_lost):
    """(c) the same command on the two hosts left resumes from the latest checkpoint, losing no
    more than the steps since it (at most --ckpt-every = 5), and finishes."""
    run, _, _, last_before, _ = host_lost
    ckpt_step = cu.latest_step(run / "ckpt")
    assert 0 < ckpt_step <= last_before
    assert last_before - ckpt_step <= 5, (last_before, ckpt_step)
    log = run / "resume.log"
    proc = start_job(net, net.hosts[:2], cu.multirank_bin(standin), train_args(datadir, run, 30, 5), log)
    rc = wait_job(proc, SAFETY_S, log)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-3000:]
    res = cu.resumes(text)
    assert [s for _, s in res] == [ckpt_step], text[:3000]
    cu.progress(f"resumed at step {ckpt_step} on {net.hosts[:2]} (lost {last_before - ckpt_step} "
                f"step(s) since the checkpoint) and finished")
    cu.check_contiguous_steps(run / "metrics.jsonl", 30, resumed_at=[ckpt_step])
    cu.check_checkpoint(run / "ckpt", 30, cu.MULTIRANK_TRAIN)


@pytest.fixture(scope="module")
def slurm_hosts(net, tmp_path_factory):
    """A three-node Slurm: slurmctld on h0, one slurmd per host, clients run on h0."""
    sc.skip_unless_installed()
    cluster = sc.SlurmCluster(tmp_path_factory.mktemp("slurm_hosts"), hosts=net)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_slurm_multinode_requeue_resumes(slurm_hosts, net, datadir, standin, tmp_path):
    """vtrain.sbatch on three Slurm nodes (one rank each, mpirun's daemons started by srun on h1
    and h2, TCP restricted to the test subnet). The time-limit signal reaches the ranks on every
    node through mpirun and its daemons; the job saves, requeues, resumes at that step and
    finishes with the exact state of an uninterrupted run."""
    kind, binary = cu.MULTIRANK_TRAIN, cu.multirank_bin(standin)
    mca = (f"--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include {net.subnet} "
           f"--mca oob_tcp_if_include {net.subnet}")
    knobs = sc.vtrain_knobs(datadir, 40, 10, VTRAIN_BIN=binary, STANDIN_STEP_MS=STEP_MS,
                            VTRAIN_MPIRUN_ARGS=mca)
    job, log = slurm_hosts.submit(tmp_path, 0, knobs, "--nodes=3", "--ntasks-per-node=1")
    signalled_at, info = sc.signal_and_wait_requeue(slurm_hosts, job, log,
                                                    tmp_path / "metrics.jsonl", 8)
    text = sc.assert_completed(info, log)
    assert "on 3 node(s) h[0-2]: 3 ranks = 1/node" in text, text[:3000]
    if kind == "standin":
        assert sorted(set(re.findall(r"rank \d+/3 on (h\d)", text))) == net.hosts, text[:3000]
    res = cu.resumes(text)
    assert len(res) == 1 and res[0][1] >= signalled_at, (signalled_at, res)
    assert cu.train_steps(tmp_path / "metrics.jsonl") == list(range(1, 41)), \
        "a step was lost or redone across the requeue"
    cu.check_checkpoint(tmp_path / "ckpt", 40, kind)
