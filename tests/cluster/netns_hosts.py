"""NetnsHosts: "hosts" for the cluster tests made of network namespaces on one machine. Each
host is a namespace with one interface, eth0 on a private /24 that this module picks and creates,
joined by veth pairs to a bridge in a separate, address-less "switch" namespace, so no traffic
can leave them; commands run there with their own hostname (a UTS namespace). Also writes the
plm_rsh_agent that lets OpenMPI start its daemons on these hosts without ssh, and removes every
namespace (and every process in them) it made, or that a killed earlier run left."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import cluster_util as cu


def sh(*argv, check=True, timeout=30):
    r = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, argv))} failed: {r.stderr.strip()}"
    return r


def pick_subnet():
    """A 10.213.X.0/24 that no interface of this machine uses (not needed for isolation, which
    the namespaces give, but keeps the addresses unambiguous)."""
    used = sh("ip", "-o", "-4", "addr").stdout
    for k in range(os.getpid() % 200, os.getpid() % 200 + 200):
        prefix = f"10.213.{20 + k % 200}"
        if f" {prefix}." not in used:
            return prefix
    pytest.skip("no free 10.213.X.0/24 subnet")


class NetnsHosts:
    """hosts h0..hN-1 = namespaces <tag>-hI with eth0 = PREFIX.(I+1)/24 on the bridge of <tag>-sw."""

    def __init__(self, base, hosts):
        self.base = Path(base)
        self.tag = f"vtn{os.getpid()}"
        self.hosts = hosts
        self.prefix = pick_subnet()
        self.subnet = f"{self.prefix}.0/24"
        self.switch = f"{self.tag}-sw"
        self.created = []
        self.agent = self.base / "netns_rsh_agent.sh"

    def ns(self, host):
        return f"{self.tag}-{host}"

    def addr(self, host):
        return f"{self.prefix}.{self.hosts.index(host) + 1}"

    def _add_ns(self, name):
        r = sh("ip", "netns", "add", name, check=False)
        if r.returncode != 0:
            pytest.skip(f"`ip netns add {name}` failed here: {r.stderr.strip()} (needs root and "
                        "network namespaces)")
        self.created.append(name)

    @staticmethod
    def remove_stale():
        """Namespaces an earlier, killed run of this test left (vtn<pid>-*, pid gone)."""
        names = re.findall(r"^(vtn(\d+)-\w+)", sh("ip", "netns", "list").stdout, re.M)
        for name, pid in names:
            if not Path(f"/proc/{pid}").exists():
                cu.progress(f"removing stale namespace {name} of an earlier run")
                for p in sh("ip", "netns", "pids", name, check=False).stdout.split():
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except OSError:
                        pass
                sh("ip", "netns", "del", name, check=False)

    def create(self):
        self.remove_stale()
        cu.progress(f"creating hosts {self.hosts} on {self.subnet} (namespaces {self.tag}-*)")
        self._add_ns(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, h in enumerate(self.hosts):
            ns = self.ns(h)
            self._add_ns(ns)
            # Both ends are created inside their namespaces: nothing appears in the root one.
            r = sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                   f"p{i}", "netns", self.switch, check=False)
            if r.returncode != 0:
                pytest.skip(f"cannot create a veth pair between namespaces: {r.stderr.strip()}")
            sh("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0")
            sh("ip", "-n", self.switch, "link", "set", f"p{i}", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(h)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        # The rsh agent OpenMPI calls as `AGENT HOST CMD...` (like ssh: CMD is shell text).
        cases = "\n".join(f"  {h}) ns={self.ns(h)} ;;" for h in self.hosts)
        self.agent.write_text(f"""#!/bin/sh
# plm_rsh_agent for tests/cluster/test_netns_hosts.py: runs CMD in HOST's namespaces.
host=$1; shift
case "$host" in
{cases}
  *) echo "netns agent: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $host && $*"
""")
        self.agent.chmod(0o755)

    def in_host(self, host, argv):
        """argv run inside `host` (its network namespace and hostname), like the rsh agent."""
        return ["ip", "netns", "exec", self.ns(host), "unshare", "--uts", "sh", "-c",
                f'hostname {host} && exec "$@"', "sh", *map(str, argv)]

    def enter(self, host, argv):
        """Like in_host, but through nsenter, which keeps the mounts as they are (`ip netns exec`
        mounts a fresh /sys, hiding /sys/fs/cgroup, which slurmd needs)."""
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", "unshare", "--uts", "sh", "-c",
                f'hostname {host} && exec "$@"', "sh", *map(str, argv)]

    def pids(self, host):
        r = sh("ip", "netns", "pids", self.ns(host), check=False)
        return [int(p) for p in r.stdout.split()]

    def kill_all(self, host):
        for pid in self.pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def destroy(self):
        cu.progress(f"removing namespaces {self.created}")
        for name in self.created:
            if name != self.switch:
                self.kill_all(name.rsplit("-", 1)[1])
        time.sleep(0.2)
        for name in reversed(self.created):
            sh("ip", "netns", "del", name, check=False)
        self.created = []
