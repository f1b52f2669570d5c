"""Benchmark machines and workloads: container specs, their policy and NRI forms, churn traces.

One `Spec` describes a container the way a pod manifest would (QoS class, CPU request and limit,
memory, memory type); `policy_pair` and `nri_pair` turn it into what the policy facade and the
runtime peer take, with the Linux resources a kubelet would set (`kubelet.linux_resources`). The
oom_score_adj is left out: a Burstable spec's memory request is its limit, which the policy
charges when it has no estimate. Traces are seeded, so two runs (and ours and the baseline within
one run) see exactly the same arrivals and departures.
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.nri import api_pb2
from nri_topology.policy.intake.annotations import DOMAIN
from nri_topology.policy.types import ContainerInfo, PodInfo, QoS, Resources
from nri_topology.topology.model import Machine

MI = 1 << 20

# The two shared dumps of the issue and the synthetic 256-CPU, 8-NUMA machine.
MACHINES = ("4-socket", "server", "synthetic-256")


@dataclass(frozen=True, slots=True)
class Spec:
    """One container as its manifest asks for it."""

    qos: QoS
    cpu: int = 0  # request, milli-CPU
    cpu_limit: int = 0  # milli-CPU, 0 = none
    memory: int = 0  # limit in bytes and the request (left out, so it is the limit), 0 = none
    memory_type: str = ""  # value of the memory-type annotation, "" = none

    def amounts(self) -> Amounts:
        """Requests and limits as the API server stores them (a memory request is the limit)."""
        if self.qos is QoS.GUARANTEED:
            return Amounts(self.cpu, self.cpu, self.memory, self.memory)
        return Amounts(self.cpu, self.cpu_limit, self.memory, self.memory)

    @property
    def whole_cpus(self) -> int:
        """CPUs the request occupies when rounded up (what must fit on one node)."""
        return -(-self.cpu // 1000)


def resources(spec: Spec) -> Resources:
    """The Linux resources a kubelet gives the container."""
    return kubelet.resources(spec.amounts())


def _annotations(spec: Spec) -> dict[str, str]:
    return {f"memory-type.{DOMAIN}/pod": spec.memory_type} if spec.memory_type else {}


def policy_pair(cid: str, spec: Spec) -> tuple[PodInfo, ContainerInfo]:
    """Pod and container as the daemon hands them to the policy (one container per pod)."""
    pod = PodInfo(
        id=f"pod-{cid}",
        name=f"pod-{cid}",
        namespace="bench",
        uid=f"uid-{cid}",
        annotations=_annotations(spec),
        cgroup_parent=kubelet.cgroup_parent(spec.qos, f"uid-{cid}"),
    )
    ctr = ContainerInfo(id=cid, pod_id=pod.id, name="app", resources=resources(spec))
    return pod, ctr


def nri_pair(cid: str, spec: Spec) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    """Pod and container as the runtime sends them over NRI."""
    pod = api_pb2.PodSandbox(
        id=f"pod-{cid}", name=f"pod-{cid}", namespace="bench", uid=f"uid-{cid}"
    )
    pod.annotations.update(_annotations(spec))
    pod.linux.cgroup_parent = kubelet.cgroup_parent(spec.qos, f"uid-{cid}")
    ctr = api_pb2.Container(
        id=cid, pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    r = resources(spec)
    res = ctr.linux.resources
    res.cpu.shares.value = r.cpu_shares or 2
    res.cpu.period.value = r.cpu_period or kubelet.PERIOD_US
    if r.cpu_quota:
        res.cpu.quota.value = r.cpu_quota
    if r.memory_limit:
        res.memory.limit.value = r.memory_limit
    return pod, ctr


# --- machines -----------------------------------------------------------------------------------


def load_machine(name: str, workdir: Path | None = None) -> Machine:
    """A benchmark machine: a shared dump (read through sysfs) or the synthetic 256-CPU one."""
    from tests import machines

    if name == "synthetic-256":
        spec = machines.SyntheticSpec(sockets=2, nodes=4, cores=16, threads=2, memory=64 << 30)
        root = workdir or Path(tempfile.mkdtemp(prefix="nri-topology-bench-"))
        return machines.synthetic(root, spec)
    return machines.load(name)


def sysfs_root(name: str, workdir: Path) -> Path:
    """The sysfs root of a benchmark machine, for running the real daemon on it."""
    from tests import machines

    if name == "synthetic-256":
        spec = machines.SyntheticSpec(sockets=2, nodes=4, cores=16, threads=2, memory=64 << 30)
        return machines.write_sysfs(workdir, spec)
    return machines.write_machine_sysfs(workdir, machines.load(name))


def daemon_command(
    sock: Path | str, sysfs: Path, state_dir: Path | str, log_level: str
) -> list[str]:
    """`nri-topology run` as the benchmarks start it: a private socket and state, no metrics."""
    return [
        sys.executable,
        "-m",
        "nri_topology.cli",
        "run",
        f"--socket={sock}",
        f"--sysfs={sysfs}",
        f"--state={state_dir}/state.json",
        "--metrics-port=0",
        f"--log-level={log_level}",
        f"--log-file={state_dir}/plugin.log",
    ]


def node_cpus(machine: Machine) -> int:
    return max(len(machine.nodes[n].cpus) for n in machine.cpu_nodes)


def has_pmem(machine: Machine) -> bool:
    return any(n.tier == "pmem" and n.memory for n in machine.nodes.values())


# --- workloads ----------------------------------------------------------------------------------


def fill_spec(i: int) -> Spec:
    """The i-th container of a dense fill: 1 in 20 Guaranteed with 1 CPU, the rest small."""
    if i % 20 == 0:
        return Spec(QoS.GUARANTEED, cpu=1000, memory=128 * MI)
    if i % 3 == 0:
        return Spec(QoS.BEST_EFFORT)
    return Spec(QoS.BURSTABLE, cpu=25, cpu_limit=500, memory=64 * MI)


def probe_specs(machine: Machine) -> list[Spec]:
    """The mix whose decision latency is measured: one of each kind of request."""
    probes = [
        Spec(QoS.BEST_EFFORT),
        Spec(QoS.BURSTABLE, cpu=250, cpu_limit=1000, memory=256 * MI),
        Spec(QoS.GUARANTEED, cpu=1500, memory=512 * MI),
        Spec(QoS.GUARANTEED, cpu=2000, memory=1024 * MI),
        Spec(QoS.GUARANTEED, cpu=4000, memory=2048 * MI),
    ]
    if has_pmem(machine):
        probes.append(Spec(QoS.GUARANTEED, cpu=2000, memory=1024 * MI, memory_type="pmem"))
    return probes


def random_spec(rng: random.Random, machine: Machine) -> Spec:
    """A container of a mixed cluster: every QoS class, fractional and multi-node sizes."""
    per_node = node_cpus(machine)
    roll = rng.random()
    memory = rng.choice((128, 256, 512, 1024, 2048, 4096)) * MI
    if roll < 0.15:
        return Spec(QoS.BEST_EFFORT)
    if roll < 0.45:
        cpu = rng.choice((100, 250, 500, 1000, 2000))
        return Spec(QoS.BURSTABLE, cpu=cpu, cpu_limit=cpu * 2, memory=memory)
    if roll < 0.55:
        return Spec(QoS.GUARANTEED, cpu=rng.choice((500, 1500, 2500, 3500)), memory=memory)
    if roll < 0.58:  # needs more than one NUMA node
        cpu = rng.choice((per_node + 2, per_node + per_node // 2)) * 1000
        return Spec(QoS.GUARANTEED, cpu=cpu, memory=memory)
    cpus = rng.choice((1, 1, 2, 2, 2, 4, 4, 6, 8, 12, 16))
    memory_type = ""
    if has_pmem(machine) and rng.random() < 0.2:
        memory_type = rng.choice(("pmem", "dram,pmem"))
    return Spec(QoS.GUARANTEED, cpu=cpus * 1000, memory=memory, memory_type=memory_type)


@dataclass(frozen=True, slots=True)
class Event:
    """A pod arriving (`spec` set) or leaving (`spec` None)."""

    container_id: str
    spec: Spec | None


def churn(machine: Machine, seed: int, steps: int, load: float = 0.85) -> Iterator[Event]:
    """Seeded arrivals and departures keeping the requested CPU under `load` of the machine.

    Like a scheduler, arrivals never take the total request beyond that share of the CPUs, so
    a placement that fails is the placer's doing (fragmentation), not an overfull node. Leaving
    pods are picked at random among the live ones.
    """
    rng = random.Random(seed)
    budget = int(load * (len(machine.cpus) - 1) * 1000)
    live: dict[str, Spec] = {}
    requested = 0
    for step in range(steps):
        spec = random_spec(rng, machine) if rng.random() < 0.55 or not live else None
        if spec is not None and requested + spec.cpu <= budget:
            cid = f"c{step:05}"
            live[cid] = spec
            requested += spec.cpu
            yield Event(cid, spec)
        elif live:
            cid = rng.choice(sorted(live))
            requested -= live.pop(cid).cpu
            yield Event(cid, None)
