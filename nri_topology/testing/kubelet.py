"""What the kubelet admits, to check that the policy never refuses it (admission parity).

`KubeletAdmission` keeps the running totals the scheduler and the kubelet judge a pod by:

* CPU: the sum of CPU requests within the allocatable CPU (capacity - reservation, exact in
  milli-CPU, as the scheduler counts it); a Guaranteed integer request within the CPUs the static
  CPU manager can still assign (all - ceil(reservation) - exclusive ones held);
* `full_pcpus_only`: an integer request must be a multiple of the threads per core and fit the
  free whole cores outside the reserved CPUs' cores (SMTAlignmentError otherwise);
* `strict_reserved_cpus`: the exclusive CPUs leave at least one CPU for the shared pool (with
  strict reservation the kubelet's shared pool could otherwise be empty, and no runtime can pin a
  container to no CPU);
* memory: the sum of memory requests (a request left out is the limit, as the API server
  defaults it) within the machine's memory that the policy may widen into (every tier but HBM,
  which is used only when asked for). A Burstable container's request reaches the runtime only
  through the oom_score_adj the kubelet derives from it; a small one reads as none, and the
  policy charges the limit, which must not make it refuse what the kubelet admits.

The Linux resources the pods reach the policy with are the kubelet's (`kubelet.linux_resources`).

Kernel-isolated CPUs are allocatable and assignable CPUs for the kubelet, which does not know
them, and are counted so here: the policy keeps them for containers that prefer them, but gives
them (alone or next to ordinary ones) to an exclusive container that fits nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nri_topology.kubelet import linux_resources as kubelet
from nri_topology.kubelet.linux_resources import Amounts
from nri_topology.policy.allocator import cpuallocator
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo, PolicyError, QoS
from nri_topology.testing.invariants import InvariantError, RuntimeView, check
from nri_topology.topology.model import Machine, MemoryTier


@dataclass(frozen=True, slots=True)
class Pod:
    """One single-container pod as its manifest asks for it."""

    qos: QoS
    cpu: int = 0  # request, milli-CPU
    cpu_limit: int = 0  # Burstable only; 0 = none
    memory: int = 0  # limit in bytes (= request for Guaranteed), 0 = none
    memory_request: int | None = None  # Burstable only; None = the limit

    def requested_memory(self) -> int:
        """The memory request the kubelet admits on."""
        return self.memory if self.memory_request is None else self.memory_request

    def amounts(self) -> Amounts:
        """Requests and limits as the API server stores them."""
        if self.qos is QoS.GUARANTEED:
            return Amounts(self.cpu, self.cpu, self.memory, self.memory)
        if self.qos is QoS.BEST_EFFORT:
            return Amounts()
        return Amounts(self.cpu, self.cpu_limit, self.requested_memory(), self.memory)

    def exclusive(self) -> int:
        """Whole CPUs the static CPU manager pins: Guaranteed integer requests only."""
        if self.qos is QoS.GUARANTEED and self.cpu % 1000 == 0:
            return self.cpu // 1000
        return 0


def policy_pair(cid: str, pod: Pod, capacity: int) -> tuple[PodInfo, ContainerInfo]:
    """Pod and container with the Linux resources the kubelet gives them (`capacity`: the
    machine's memory, which oom_score_adj is relative to)."""
    amounts = pod.amounts()
    info = PodInfo(
        id=f"pod-{cid}",
        name=f"pod-{cid}",
        namespace="admission",
        uid=f"uid-{cid}",
        cgroup_parent=kubelet.cgroup_parent(pod.qos, f"uid-{cid}"),
    )
    return info, ContainerInfo(
        id=cid,
        pod_id=info.id,
        name="app",
        resources=kubelet.resources(amounts),
        oom_score_adj=kubelet.oom_score_adj(pod.qos, amounts.memory_request, capacity),
    )


class KubeletAdmission:
    """The admission totals of one node (see the module docstring)."""

    def __init__(self, machine: Machine, options: Options) -> None:
        amount = options.reserved_resources
        cpus = len(machine.cpus)
        if amount.cpus is not None:
            reserved_milli = 1000 * len(amount.cpus)
            reserved_cpus = amount.cpus
        else:
            reserved_milli = amount.milli or 0
            count = -(-reserved_milli // 1000)
            usable = machine.all_cpus - machine.isolated  # where the policy takes them from
            reserved_cpus = cpuallocator.take_cpus(machine, usable, count) if count else frozenset()
        self.allocatable = 1000 * cpus - reserved_milli
        self.assignable = cpus - -(-reserved_milli // 1000)
        siblings = frozenset().union(*(machine.cpus[c].threads for c in reserved_cpus))
        self.whole_core_cpus = cpus - len(siblings)
        self.tpc = machine.threads_per_core
        self.options = options
        self.memory = sum(n.memory for n in machine.nodes.values() if n.tier is not MemoryTier.HBM)
        self.live: dict[str, Pod] = {}
        self.requested = 0
        self.exclusive = 0
        self.charged = 0

    def admits(self, pod: Pod) -> bool:
        n = pod.exclusive()
        if self.requested + pod.cpu > self.allocatable:
            return False
        if self.charged + pod.requested_memory() > self.memory:
            return False
        if n and self.exclusive + n > self.assignable - int(self.options.strict_reserved_cpus):
            return False
        if n and self.options.full_pcpus_only:
            return n % self.tpc == 0 and self.exclusive + n <= self.whole_core_cpus
        return True

    def add(self, cid: str, pod: Pod) -> None:
        self.live[cid] = pod
        self.requested += pod.cpu
        self.exclusive += pod.exclusive()
        self.charged += pod.requested_memory()

    def remove(self, cid: str) -> None:
        pod = self.live.pop(cid)
        self.requested -= pod.cpu
        self.exclusive -= pod.exclusive()
        self.charged -= pod.requested_memory()


def run(machine: Machine, options: Options, steps: Iterable[Pod | int]) -> int:
    """Drive the policy with the pods the kubelet admits and check every rule after each step.

    A `Pod` is created when the kubelet admits it (skipped otherwise); an int removes the live
    container at that index (modulo their number). Raises `InvariantError` when an admitted pod
    is refused or an invariant breaks; returns the number of pods created.
    """
    policy = Policy(machine, options)
    kubelet = KubeletAdmission(machine, options)
    runtime = RuntimeView()
    capacity = sum(n.memory for n in machine.nodes.values())
    created = 0
    for n, step in enumerate(steps):
        if isinstance(step, Pod):
            if not kubelet.admits(step):
                continue
            cid = f"c{n:04}"
            try:
                decision = policy.create(*policy_pair(cid, step, capacity))
            except PolicyError as e:
                raise InvariantError(f"step {n}: admitted pod {step} refused: {e}") from None
            kubelet.add(cid, step)
            runtime.created(decision)
            created += 1
        elif kubelet.live:
            cid = sorted(kubelet.live)[step % len(kubelet.live)]
            runtime.removed(cid, policy.release(cid))
            kubelet.remove(cid)
        check(policy, machine)
        runtime.agrees(policy)
    return created
