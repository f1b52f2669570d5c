"""Decided versus applied: the pure comparison, and the verifier on real files."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import structlog.testing

from nri_topology.daemon.cgroupfs import Outcome, Result
from nri_topology.daemon.drift import Applied, Drift, compare, parse_list
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.settings import Settings
from nri_topology.daemon.verify import Verifier
from nri_topology.nri import api_pb2
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import Placement
from nri_topology.testing.harness import connected
from nri_topology.topology import cpuset
from tests import machines

F = frozenset


@pytest.mark.parametrize(
    ("cpus", "mems", "applied", "drift"),
    [
        (F({0}), F({0}), Applied(F({0}), F({0})), None),
        (F({0}), F({0}), Applied(F({0, 1}), F({0})), Drift("c", (F({0}), F({0, 1})), None)),
        (F({0}), F({1}), Applied(F({0}), F({0, 1})), Drift("c", None, (F({1}), F({0, 1})))),
        (None, None, Applied(F({0, 1}), F({0})), None),  # pinning left alone never drifts
        (F({0}), None, Applied(None, F({3})), None),  # unset in the cgroup (v2): not compared
        (
            F({2, 3}),
            F({1}),
            Applied(F({0}), F({0})),
            Drift("c", (F({2, 3}), F({0})), (F({1}), F({0}))),
        ),
    ],
)
def test_compare(cpus, mems, applied, drift) -> None:
    assert compare("c", cpus, mems, applied) == drift


def test_parse_list() -> None:
    assert parse_list("0-2,5\n") == F({0, 1, 2, 5})
    assert parse_list("\n") is None


def _cgroup(root: Path, rel: str, cpus: str, mems: str) -> Path:
    d = root / rel
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text(mems + "\n")
    return d


class Runtime:
    """The verifier's surroundings: placements that can change, and the updates sent."""

    def __init__(self, placements: dict[str, Placement]) -> None:
        self.placements = placements
        self.sent: list[tuple[str, str, str, str]] = []
        self.drifts: list[str] = []
        self.after_first_read: dict[str, Placement] | None = None
        self.before_second_read = lambda: None
        self.reads = 0

    async def expected(self, ids):
        self.reads += 1
        if self.reads == 2:
            self.before_second_read()
        out = {c: p for c, p in self.placements.items() if ids is None or c in ids}
        if self.reads == 1 and self.after_first_read is not None:
            self.placements = self.after_first_read
        return out

    async def send(self, updates, why: str) -> None:
        for u in updates:
            p = u.placement
            self.sent.append((u.container_id, cpuset.text(p.cpus), cpuset.text(p.mems), why))


async def verifier(tmp_path: Path, runtime: Runtime) -> Verifier:
    v = Verifier(tmp_path, runtime.expected, runtime.send, runtime.drifts.append, confirm_s=0)
    _cgroup(tmp_path, "pods/a", "0-1", "0")
    _cgroup(tmp_path, "pods/b", "1", "0")
    await v.reset({"a": "/pods/a", "b": "/pods/b", "c": "/pods/c"})
    return v


async def test_drift_repaired_with_the_placement(tmp_path: Path) -> None:
    runtime = Runtime({"a": Placement(F({0}), F({0})), "b": Placement(F({1}), F({0}))})
    v = await verifier(tmp_path, runtime)
    drifts = await v.check(None, "periodic")
    assert [d.container_id for d in drifts] == ["a"]
    assert runtime.sent == [("a", "0", "0", "drift_periodic")]
    assert runtime.drifts == ["periodic"]


async def test_the_same_drift_again_is_counted_and_sent_but_warned_once(tmp_path: Path) -> None:
    """A container whose cgroup refuses its placement (child cgroups holding the CPUs) drifts
    at every check: each is counted and sent again, the warning given once."""
    runtime = Runtime({"a": Placement(F({0}), F({0}))})
    v = await verifier(tmp_path, runtime)
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await v.check(None, "periodic")
    assert runtime.drifts == ["periodic"] * 3 and len(runtime.sent) == 3
    assert [e["log_level"] for e in logs] == ["warning", "info", "info"]


async def test_placement_changed_while_reading_is_not_repaired(tmp_path: Path) -> None:
    runtime = Runtime({"a": Placement(F({0}), F({0}))})
    runtime.after_first_read = {"a": Placement(F({0, 1}), F({0}))}
    v = await verifier(tmp_path, runtime)
    assert await v.check(["a"], "post_start") == []
    assert runtime.sent == [] and runtime.drifts == []


async def test_drift_that_lands_meanwhile_is_not_repaired(tmp_path: Path) -> None:
    """The runtime applies a reply's updates after the reply: the check waits and re-reads."""
    runtime = Runtime({"a": Placement(F({0}), F({0}))})
    runtime.before_second_read = lambda: (tmp_path / "pods/a/cpuset.cpus").write_text("0\n")
    v = await verifier(tmp_path, runtime)
    assert await v.check(["a"], "post_start") == []
    assert runtime.sent == [] and runtime.drifts == []


async def test_unknown_and_forgotten_containers_are_skipped(tmp_path: Path) -> None:
    runtime = Runtime({"c": Placement(F({0}), F({0})), "a": Placement(F({0}), F({0}))})
    v = await verifier(tmp_path, runtime)
    v.forget("a")
    assert await v.check(None, "periodic") == []  # c has no cgroup, a is forgotten
    assert runtime.sent == []


async def test_writes_say_each_outcome_and_log_the_refusals(tmp_path: Path) -> None:
    v = await verifier(tmp_path, Runtime({}))
    (tmp_path / "pods/b/cpuset.cpus").unlink()
    (tmp_path / "pods/b/cpuset.cpus").mkdir()
    v.track("d", "/../victim")
    p = Placement(F({0}), F({0}))
    with structlog.testing.capture_logs() as logs:
        results = await v.write({"a": p, "b": p, "c": p, "d": p, "unknown": p})
    assert results == {
        "a": Result(Outcome.WRITTEN),
        "b": Result(Outcome.REFUSED, "cpuset.cpus", errno.EISDIR),
        "c": Result(Outcome.GONE, None, errno.ENOENT),
        "d": Result(Outcome.OUTSIDE),
        "unknown": Result(Outcome.GONE),
    }
    said = {e["container_id"]: (e["log_level"], e["outcome"], e["errno"]) for e in logs}
    assert said == {"b": ("warning", "refused", "EISDIR"), "d": ("warning", "outside", None)}
    with structlog.testing.capture_logs() as logs:  # the same again: said once per container
        await v.write({"b": p, "d": p})
    assert logs == []


async def test_reset_counts_the_reported_cgroups_found_beneath_the_root(tmp_path: Path) -> None:
    runtime = Runtime({})
    v = Verifier(tmp_path, runtime.expected, runtime.send, runtime.drifts.append)
    _cgroup(tmp_path, "pods/a", "0", "0")
    assert await v.reset({"a": "/pods/a", "b": "/pods/b", "c": "/../pods/a"}) == 1
    assert await v.reset({"b": "/pods/b"}) == 0


# --- the plugin with the real policy: an update lost between creation and start is repaired


def _pod(pid: str, parent: str) -> api_pb2.PodSandbox:
    pod = api_pb2.PodSandbox(id=pid, name=pid, namespace="work", uid=pid)
    pod.linux.cgroup_parent = parent
    return pod


def _ctr(cid: str, pod: api_pb2.PodSandbox, guaranteed: bool) -> api_pb2.Container:
    ctr = api_pb2.Container(
        id=cid, pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_CREATED
    )
    ctr.linux.cgroups_path = f"{pod.linux.cgroup_parent}/{cid}"
    if guaranteed:
        ctr.linux.resources.cpu.shares.value = 1024
        ctr.linux.resources.cpu.quota.value = 100_000
        ctr.linux.resources.cpu.period.value = 100_000
        ctr.linux.resources.memory.limit.value = 64 << 20
    else:
        ctr.linux.resources.cpu.shares.value = 2
    return ctr


async def test_plugin_repairs_an_update_lost_before_start(tmp_path: Path) -> None:
    machine = machines.synthetic(tmp_path / "sys", cores=4, threads=1)
    cgroups = tmp_path / "cgroup"
    plugin = TopologyPlugin(
        Policy(machine, Options()),
        settings=Settings(cgroup_root=cgroups, verify_interval_s=0, pacing=None),
    )
    be_pod, g_pod = _pod("pbe", "/kubepods/besteffort/pbe"), _pod("pg", "/kubepods/pg")
    be, g = _ctr("be", be_pod, False), _ctr("g", g_pod, True)
    async with connected(plugin) as (peer, stub):
        plugin.stub = stub
        await peer.run_pod_sandbox(be_pod)
        await peer.create_container(be_pod, be)
        await peer.run_pod_sandbox(g_pod)
        reply = await peer.create_container(g_pod, g)
        moved = {u.container_id: u.linux.resources.cpu.cpus for u in reply.update}
        exclusive = plugin.policy.assignments()["g"].cpus
        assert moved == {"be": cpuset.format(frozenset(range(4)) - exclusive)}
        # The runtime lost that update: the started container's cgroup has all CPUs.
        _cgroup(cgroups, "kubepods/besteffort/pbe/be", "0-3", "0")
        _cgroup(cgroups, "kubepods/pg/g", cpuset.format(exclusive), "0")
        await peer.post_start_container(be_pod, be)
        await peer.post_start_container(g_pod, g)
        await plugin.settle()
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in peer.unsolicited_updates] == [
            ("be", moved["be"])
        ]
        assert plugin.metrics.cgroup_drift.labels("post_start")._value.get() == 1
