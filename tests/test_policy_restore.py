"""The facade end to end: requests from pod data, restore after a restart, reconfigure."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import (
    ContainerInfo,
    CpuKind,
    PodInfo,
    PolicyError,
    Resources,
    Update,
)
from nri_topology.simulate.machine_spec import load_bundled
from nri_topology.topology import cpuset
from nri_topology.topology.model import Machine, MemoryTier
from tests import machines

MiB = 1 << 20
CGROUPS = {"g": "kubepods", "b": "kubepods-burstable", "be": "kubepods-besteffort"}


def workload(i: int, qos: str, milli: int, ns: str = "default") -> tuple[PodInfo, ContainerInfo]:
    pod = PodInfo(
        id=f"pod{i}", name=f"pod{i}", namespace=ns, uid=f"u{i}", cgroup_parent=CGROUPS[qos]
    )
    shares = milli * 1024 // 1000 if milli else 2
    res = Resources(
        cpu_shares=shares,
        cpu_quota=milli * 100 if qos == "g" else None,
        cpu_period=100_000,
        memory_limit=64 * MiB,
    )
    return pod, ContainerInfo(id=f"c{i}", pod_id=pod.id, name="main", resources=res, created_at=i)


def holding(machine: Machine, options: Options, *held: frozenset[int]) -> Policy:
    """A policy restarted beside Guaranteed containers (c100, c101, ...) that the runtime
    reports on each of the `held` CPU sets, all adopted as they run."""
    pods, containers = [], []
    for n, cpus in enumerate(held):
        pod, ctr = workload(100 + n, "g", 1000 * len(cpus))
        res = replace(ctr.resources, cpuset_cpus=cpuset.format(cpus))
        pods.append(pod)
        containers.append(replace(ctr, resources=res))
    policy = Policy(machine, options)
    report = policy.restore(pods, containers)
    assert len(report.adopted) == len(containers)
    assert all(u.placement.cpus is None for u in report.updates)  # only their memory nodes
    return policy


class Runtime:
    """What the runtime knows: each container's current cpuset and memset."""

    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self.ctrs: dict[str, ContainerInfo] = {}

    def pin(self, cid: str, cpus: frozenset[int] | None, mems: frozenset[int] | None) -> None:
        c = self.ctrs[cid]
        res = c.resources
        if cpus is not None:
            res = replace(res, cpuset_cpus=cpuset.format(cpus))
        if mems is not None:
            res = replace(res, cpuset_mems=cpuset.format(mems))
        self.ctrs[cid] = replace(c, resources=res)

    def apply(self, updates: tuple[Update, ...]) -> None:
        for u in updates:
            self.pin(u.container_id, u.placement.cpus, u.placement.mems)

    def create(self, policy: Policy, pod: PodInfo, ctr: ContainerInfo) -> None:
        self.pods[pod.id] = pod
        self.ctrs[ctr.id] = ctr
        d = policy.create(pod, ctr)
        self.pin(ctr.id, d.placement.cpus, d.placement.mems)
        self.apply(d.updates)

    def cpus(self, cid: str) -> frozenset[int]:
        return cpuset.parse(self.ctrs[cid].resources.cpuset_cpus)


def populated(n: int, *, with_mixed: bool = True) -> tuple[Policy, Runtime]:
    m = machines.load("4-socket")
    policy = Policy(m, Options())
    rt = Runtime()
    for i in range(n):
        kind = i % 10
        if kind == 0:
            pod, ctr = workload(i, "g", 2000)
        elif kind == 1 and with_mixed:
            pod, ctr = workload(i, "g", 1500)
        elif kind in (2, 3):
            pod, ctr = workload(i, "be", 0)
        else:
            pod, ctr = workload(i, "b", 100)
        rt.create(policy, pod, ctr)
    return policy, rt


def exclusive_of(policy: Policy) -> dict[str, frozenset[int]]:
    return {cid: a.exclusive for cid, a in policy.assignments().items() if a.exclusive}


def test_restart_with_saved_state_adopts_all_300_and_moves_nothing() -> None:
    policy, rt = populated(300)
    saved = json.loads(json.dumps(policy.snapshot()))
    before = policy.assignments()
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
    assert sorted(report.adopted) == sorted(before)
    assert report.replaced == {} and report.failed == {}
    assert report.updates == ()
    after = fresh.assignments()
    assert {c: (a.pool, a.cpus, a.mems, a.exclusive) for c, a in after.items()} == {
        c: (a.pool, a.cpus, a.mems, a.exclusive) for c, a in before.items()
    }


def policy_machine():  # the machine of `populated`
    return machines.load("4-socket")


def test_restart_without_saved_state_keeps_exclusive_cpus() -> None:
    policy, rt = populated(300, with_mixed=False)
    before = exclusive_of(policy)
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    assert report.failed == {}
    assert exclusive_of(fresh) == before
    assert set(report.adopted) == set(policy.assignments())


def test_mixed_containers_without_saved_state_keep_their_exclusive_cpus() -> None:
    """A mixed container's exclusive CPUs are those of its cpuset no other container runs on."""
    policy, rt = populated(30)
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    mixed = {cid for cid, a in policy.assignments().items() if a.kind is CpuKind.MIXED}
    assert mixed and mixed <= set(report.adopted)
    assert report.replaced == {} and report.updates == () and report.decisions == {}
    assert exclusive_of(fresh) == exclusive_of(policy)


def test_a_mixed_container_alone_in_its_pool_is_re_placed_with_a_reason() -> None:
    policy, rt = populated(2)  # c0 exclusive, c1 mixed: no other container shares c1's CPUs
    assert policy.assignments()["c1"].kind is CpuKind.MIXED
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    assert set(report.replaced) == {"c1"} and "saved state" in report.replaced["c1"]
    assert set(report.decisions) == {"c1"}  # decisions are made for the re-placed ones only


def test_entries_contradicting_the_runtime_are_dropped() -> None:
    policy, rt = populated(20)
    saved = policy.snapshot()
    ids = sorted(exclusive_of(policy), key=lambda c: int(c[1:]))
    a, b = ids[0], ids[2]
    saved["containers"][b]["exclusive"] = saved["containers"][a]["exclusive"]
    saved["containers"][b]["pool"] = saved["containers"][a]["pool"]
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
    assert set(report.dropped) == {b} and "runtime reports cpuset" in report.dropped[b]
    assert report.replaced == {} and report.updates == ()
    assert exclusive_of(fresh) == exclusive_of(policy)


def test_forged_checkpoint_with_a_valid_checksum_moves_nothing() -> None:
    """Every entry "exclusive 0-111 in pool nowhere" (the checksum says nothing about sense)."""
    m = load_bundled("server")[1]
    policy, rt = Policy(m, Options()), Runtime()
    for i in range(20):
        qos = ("g", "b", "be", "g")[i % 4]
        milli = {"g": 2000 if i % 8 == 0 else 1500, "b": 300, "be": 0}[qos]
        rt.create(policy, *workload(i, qos, milli))
    saved = policy.snapshot()
    for entry in saved["containers"].values():
        entry.update(exclusive="0-111", pool="nowhere")
    fresh = Policy(m, Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
    assert len(report.dropped) == 20
    assert all("nowhere" in why for why in report.dropped.values())
    assert report.replaced == {} and report.updates == ()
    assert placements(fresh) == placements(policy)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("pool", "NUMA node #9", "does not exist"),
        ("exclusive", "500-501", "not on this machine"),
        ("exclusive", "0-999999999999", "beyond the largest id 143"),
        ("exclusive", "0," * 40_000, "longer than"),
        ("zone", "77", "memory nodes not on this machine"),
        ("exclusive", "zero", "malformed"),
        ("isolated", None, "malformed (KeyError"),
        ("memory", -1, "malformed (ValueError"),
        ("memory", "1Gi", "malformed (ValueError"),
    ],
    ids=[
        "pool",
        "cpus",
        "huge-range",
        "long-list",
        "nodes",
        "malformed",
        "missing-key",
        "negative-memory",
        "memory-text",
    ],
)
def test_entries_naming_what_the_machine_lacks_are_dropped(
    field: str, value: str | int | None, problem: str
) -> None:
    policy, rt = populated(10, with_mixed=False)
    saved = policy.snapshot()
    cid = next(iter(exclusive_of(policy)))
    if value is None:
        del saved["containers"][cid][field]
    else:
        saved["containers"][cid][field] = value
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
    assert list(report.dropped) == [cid] and problem in report.dropped[cid]
    assert report.replaced == {} and exclusive_of(fresh) == exclusive_of(policy)


def test_overlapping_runtime_cpusets_are_resolved_deterministically() -> None:
    policy, rt = populated(20)
    saved = policy.snapshot()
    # two containers claim the same exclusive CPUs, and the runtime agrees with both:
    # neither entry is believed and the first in restore order keeps them
    ids = sorted(exclusive_of(policy), key=lambda c: int(c[1:]))
    a, b = ids[0], ids[2]
    saved["containers"][b]["exclusive"] = saved["containers"][a]["exclusive"]
    saved["containers"][b]["pool"] = saved["containers"][a]["pool"]
    rt.pin(b, rt.cpus(a), None)

    def run() -> tuple[dict[str, str], dict[str, str], dict[str, frozenset[int]]]:
        fresh = Policy(policy_machine(), Options())
        report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
        return dict(report.dropped), dict(report.replaced), exclusive_of(fresh)

    dropped, replaced, excl = run()
    assert set(dropped) == {a, b} and "claimed by" in dropped[a]
    assert set(replaced) == {b} and "inconsistent" in replaced[b]
    assert excl[a] == exclusive_of(policy)[a]
    assert run() == (dropped, replaced, excl)


def test_bad_saved_state_falls_back_to_runtime_view() -> None:
    policy, rt = populated(10, with_mixed=False)
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), {"version": 99})
    assert report.failed == {}
    assert exclusive_of(fresh) == exclusive_of(policy)


def test_unknown_pod_fails_that_container_only() -> None:
    policy, rt = populated(5)
    ctrs = [*rt.ctrs.values(), ContainerInfo(id="orphan", pod_id="nope", name="x")]
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), ctrs, policy.snapshot())
    assert set(report.failed) == {"orphan"}
    assert len(report.adopted) == 5


def test_release_resize_and_cold_start_through_the_facade() -> None:
    policy, rt = populated(6)
    pod, ctr = rt.pods["pod0"], rt.ctrs["c0"]
    d = policy.resize(pod, ctr, replace(ctr.resources, cpu_shares=3 * 1024, cpu_quota=300_000))
    assert len(d.exclusive) == 3
    policy.release("c0")
    assert "c0" not in policy.assignments()
    assert policy.release("c0") == ()
    assert policy.cold_start_done("c1") == ()


def test_reconfigure_keeps_valid_placements_and_moves_the_rest() -> None:
    policy, _ = populated(30)
    before = exclusive_of(policy)
    reserved = CpuAmount(cpus=frozenset({0, 72}))
    clash = {cid for cid, cpus in before.items() if cpus & {0, 72}}
    report = policy.reconfigure(Options(reserved_resources=reserved))
    after = exclusive_of(policy)
    for cid, cpus in before.items():
        if cid not in clash:
            assert after[cid] == cpus
        assert not after[cid] & {0, 72}
    assert clash and set(report.replaced) == clash
    assert policy.options.reserved_resources == reserved
    for u in report.updates:
        assert u.container_id in policy.assignments()


def test_reconfigure_that_cannot_hold_everyone_changes_nothing() -> None:
    policy, _ = populated(30)
    before = policy.assignments()
    tiny = CpuAmount(cpus=frozenset(range(4)))
    with pytest.raises(PolicyError, match="cannot hold every container"):
        policy.reconfigure(
            Options(available_resources=tiny, reserved_resources=CpuAmount(cpus=frozenset({0})))
        )
    assert policy.assignments() == before


def test_pool_views_account_capacity_and_memory() -> None:
    policy, _ = populated(20)
    views = {v.name: v for v in policy.pools()}
    root = views["root"]
    assert root.parent is None and root.depth == 0
    assert root.capacity_milli == 144 * 1000 - 750
    assert sum(v.containers for v in views.values()) == 20
    assert root.assigned_milli == sum(
        a.shared
        for a in policy.assignments().values()
        if a.kind is not CpuKind.EXCLUSIVE and a.kind is not CpuKind.RESERVED
    )
    for v in views.values():
        assert 0 <= v.free_milli <= v.capacity_milli
        for tier in v.memory.values():
            assert tier.capacity == tier.assigned + tier.free


def test_runtime_pinning_that_drifted_from_saved_state_gets_an_update() -> None:
    policy, rt = populated(10, with_mixed=False)
    saved = policy.snapshot()
    cid = next(iter(exclusive_of(policy)))
    want = policy.assignments()[cid].cpus
    rt.pin(cid, frozenset(range(144)), None)
    fresh = Policy(policy_machine(), Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), saved)
    assert cid in report.adopted
    assert [(u.container_id, u.placement.cpus) for u in report.updates] == [(cid, want)]


# --- the pool tree changes under a restore: only what left the usable set moves ------------------


def server_one_per_node() -> tuple[Policy, Runtime, dict[int, frozenset[int]]]:
    """Four 4-CPU Guaranteed containers on "server", one per NUMA node (c<n> on node n)."""
    m = load_bundled("server")[1]
    nodes = {n: frozenset(c for c in m.cpus if m.cpus[c].node == n) for n in range(4)}
    rt = Runtime()
    for n in range(4):
        pod, ctr = workload(n, "g", 4000)
        rt.pods[pod.id], rt.ctrs[ctr.id] = pod, ctr
        rt.pin(ctr.id, frozenset(sorted(nodes[n])[4:8]), frozenset({n}))
    policy = Policy(m, Options())
    report = policy.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    assert sorted(report.adopted) == ["c0", "c1", "c2", "c3"]
    assert {a.pool for a in policy.assignments().values()} == {f"NUMA node #{n}" for n in range(4)}
    return policy, rt, nodes


def without_node(nodes: dict[int, frozenset[int]], *gone: int) -> Options:
    usable = frozenset().union(*(c for n, c in nodes.items() if n not in gone))
    return Options(available_resources=CpuAmount(cpus=usable))


def placements(policy: Policy) -> dict[str, tuple[frozenset[int] | None, frozenset[int] | None]]:
    return {cid: (a.cpus, a.mems) for cid, a in policy.assignments().items()}


def test_reload_excluding_a_node_moves_only_that_nodes_container() -> None:
    policy, _, nodes = server_one_per_node()
    before = placements(policy)
    report = policy.reconfigure(without_node(nodes, 1))
    # socket #1 keeps a single NUMA node, so its NUMA pool collapses into the socket pool;
    # the container there still holds valid CPUs and memory and is adopted
    assert "NUMA node #3" not in {v.name for v in policy.pools()}
    assert set(report.replaced) == {"c1"} and sorted(report.adopted) == ["c0", "c2", "c3"]
    assert "17" in report.replaced["c1"] or "no longer" in report.replaced["c1"]
    assert [u.container_id for u in report.updates] == ["c1"]
    assert set(report.decisions) == {"c1"}
    after = placements(policy)
    for cid in ("c0", "c2", "c3"):
        assert after[cid] == before[cid]
    cpus, mems = after["c1"]
    assert cpus is not None and not cpus & nodes[1] and mems is not None and 1 not in mems


@pytest.mark.parametrize("saved", [True, False], ids=["checkpoint", "synchronize-only"])
def test_restart_excluding_a_node_moves_only_that_nodes_container(saved: bool) -> None:
    policy, rt, nodes = server_one_per_node()
    before = placements(policy)
    snapshot = json.loads(json.dumps(policy.snapshot())) if saved else None
    fresh = Policy(load_bundled("server")[1], without_node(nodes, 1))
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), snapshot)
    assert set(report.replaced) == {"c1"} and sorted(report.adopted) == ["c0", "c2", "c3"]
    assert [u.container_id for u in report.updates] == ["c1"]
    after = placements(fresh)
    assert {c: after[c] for c in ("c0", "c2", "c3")} == {c: before[c] for c in ("c0", "c2", "c3")}


def server_on_the_reservations_picks() -> tuple[Policy, Runtime, dict[int, frozenset[int]]]:
    """As `server_one_per_node`, but c1-c3 hold the first CPUs of their node: the CPU a 750m
    reservation takes when another node is excluded (2 without node 0, 3 without node 1)."""
    m = load_bundled("server")[1]
    nodes = {n: frozenset(c for c in m.cpus if m.cpus[c].node == n) for n in range(4)}
    rt = Runtime()
    for n in range(4):
        pod, ctr = workload(n, "g", 4000)
        rt.pods[pod.id], rt.ctrs[ctr.id] = pod, ctr
        rt.pin(ctr.id, frozenset(sorted(nodes[n])[4:8] if n == 0 else sorted(nodes[n])[:4]), None)
        rt.pin(ctr.id, None, frozenset({n}))
    policy = Policy(m, Options())
    report = policy.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    assert sorted(report.adopted) == ["c0", "c1", "c2", "c3"]
    assert set(policy.pools()[0].reserved) == {0}
    return policy, rt, nodes


def reserved(policy: Policy) -> frozenset[int]:
    return policy.pools()[0].reserved


@pytest.mark.parametrize("path", ["reload", "checkpoint", "synchronize-only"])
@pytest.mark.parametrize("gone", [1, 0])
def test_a_changed_configuration_moves_only_containers_whose_cpus_it_took(
    path: str, gone: int
) -> None:
    """The 750m reservation keeps CPU 0 while it is usable, and never lands on a CPU a running
    exclusive container holds (it would pick 3 without node 1, 2 without node 0, both held)."""
    policy, rt, nodes = server_on_the_reservations_picks()
    m = load_bundled("server")[1]
    options = without_node(nodes, gone)
    pick = Policy(m, options).pools()[0].reserved  # what a fresh node would reserve
    assert pick & (rt.cpus("c3") | rt.cpus("c2"))
    before = placements(policy)
    if path == "reload":
        report = policy.reconfigure(options)
        after = policy
    else:
        snapshot = json.loads(json.dumps(policy.snapshot())) if path == "checkpoint" else None
        after = Policy(m, options)
        report = after.restore(list(rt.pods.values()), list(rt.ctrs.values()), snapshot)
    moved = f"c{gone}"
    assert set(report.replaced) == {moved}, report.replaced
    assert [u.container_id for u in report.updates] == [moved]
    now = placements(after)
    assert {c: now[c] for c in now if c != moved} == {c: before[c] for c in now if c != moved}
    held = frozenset().union(*(a.cpus or () for a in after.assignments().values()))
    assert not reserved(after) & held
    if gone != 0 and path != "synchronize-only":  # still usable, and known: kept
        assert reserved(after) == {0}


def test_a_restart_keeps_the_reservation_a_fresh_start_would_not_pick() -> None:
    """Restored with its checkpoint, the reservation stays on its CPU while nothing holds it."""
    policy, rt, nodes = server_one_per_node()
    m = load_bundled("server")[1]
    options = without_node(nodes, 1)
    assert Policy(m, options).pools()[0].reserved == {3}
    assert not rt.cpus("c3") & {3}
    fresh = Policy(m, options)
    fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), policy.snapshot())
    assert reserved(fresh) == {0} == reserved(policy)
    again = Policy(m, options)  # and again, from the checkpoint the restored policy writes
    again.restore(list(rt.pods.values()), list(rt.ctrs.values()), fresh.snapshot())
    assert reserved(again) == {0}


def test_memory_node_no_longer_usable_moves_the_container() -> None:
    policy, rt, nodes = server_one_per_node()
    rt.pin("c0", None, frozenset({0, 1}))  # memory on node 1 too
    snapshot = policy.snapshot()
    snapshot["containers"]["c0"]["zone"] = "0-1"
    fresh = Policy(load_bundled("server")[1], without_node(nodes, 1))
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), snapshot)
    assert set(report.replaced) == {"c0", "c1"}
    assert "memory nodes 1" in report.replaced["c0"]


def test_re_placed_containers_keep_their_cold_start_state() -> None:
    """A cold start belongs to the container: re-placing a warm one does not start it again."""
    m = load_bundled("server")[1]
    policy, rt = Policy(m, Options()), Runtime()
    for i in range(2):
        pod, ctr = workload(i, "g", 2000)
        pod = replace(pod, annotations={"cold-start.resource-policy.nri.io/pod": "duration: 60s"})
        rt.create(policy, pod, ctr)
    restarted = policy.restore(list(rt.pods.values()), list(rt.ctrs.values()), policy.snapshot())
    assert set(restarted.cold_starts) == {"c0", "c1"} and restarted.replaced == {}
    rt.apply(policy.cold_start_done("c0"))
    nodes = {n: frozenset(c for c in m.cpus if m.cpus[c].node == n) for n in range(4)}
    dram = {n for n, x in m.nodes.items() if x.tier is MemoryTier.DRAM}

    def node_of(cid: str) -> int:
        return m.cpus[min(policy.assignments()[cid].cpus or ())].node

    report = policy.reconfigure(without_node(nodes, node_of("c0")))
    assert "c0" in report.replaced and set(report.cold_starts) == {"c1"}
    assert report.decisions["c0"].cold_start is None  # its cold start was over
    assert (policy.assignments()["c0"].mems or frozenset()) & dram
    report = policy.reconfigure(without_node(nodes, node_of("c1")))
    assert "c1" in report.replaced and set(report.cold_starts) == {"c1"}  # still cold
    assert not (policy.assignments()["c1"].mems or frozenset()) & dram


def test_hidden_hyperthreads_are_adopted_as_whole_cores_without_saved_state() -> None:
    m = load_bundled("server")[1]
    policy, rt = Policy(m, Options()), Runtime()
    pod, ctr = workload(0, "g", 4000)
    pod = replace(pod, annotations={"hide-hyperthreads.resource-policy.nri.io/pod": "true"})
    rt.create(policy, pod, ctr)
    held = policy.assignments()["c0"]
    assert held.cpus is not None and len(held.cpus) == 2 and len(held.exclusive) == 4
    fresh = Policy(m, Options())
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()))
    assert report.adopted == ("c0",) and report.updates == ()
    assert fresh.assignments()["c0"].exclusive == held.exclusive


@pytest.mark.parametrize("saved", [True, False])
def test_a_restart_keeps_the_reservation_beside_a_fractional_guaranteed_container(
    saved: bool,
) -> None:
    """Under full_pcpus_only a 1500m Guaranteed container gets no exclusive CPU: it shares
    node 0, CPU 0 included, with the 750m reservation. Restored, it holds no exclusive CPU, so
    the reservation stays on CPU 0 rather than moving to a CPU left free on another node."""
    m = load_bundled("server")[1]
    options = Options(full_pcpus_only=True, strict_reserved_cpus=True)
    policy = Policy(m, options)
    rt = Runtime()
    for n in (1, 2, 3):  # 24 exclusive CPUs on each other node, two left free there
        rt.create(policy, *workload(10 + n, "g", 24000))
    rt.create(policy, *workload(1, "g", 1500))
    assert policy.assignments()["c1"].kind is CpuKind.SHARED
    assert policy.assignments()["c1"].pool == "NUMA node #0"
    assert 0 in rt.cpus("c1") and reserved(policy) == {0}
    snapshot = json.loads(json.dumps(policy.snapshot())) if saved else None
    fresh = Policy(m, options)
    report = fresh.restore(list(rt.pods.values()), list(rt.ctrs.values()), snapshot)
    assert sorted(report.adopted) == ["c1", "c11", "c12", "c13"] and report.updates == ()
    assert reserved(fresh) == {0}
    assert placements(fresh) == placements(policy)
    if saved:
        assert fresh.snapshot() == policy.snapshot()
