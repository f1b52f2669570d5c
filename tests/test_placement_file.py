"""The placement file: atomic rewrites in a mounted directory, and the daemon keeping it current."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nri_topology.daemon.placement_file import FILE_NAME, PlacementFiles
from nri_topology.daemon.service import Daemon
from nri_topology.daemon.settings import Overrides
from nri_topology.nri import api_pb2
from nri_topology.policy.types import CpuKind, Decision, Placement, Update
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology import cpuset
from tests import machines
from tests.sockets import free_port

pytestmark = pytest.mark.usefixtures("restore_logging")


def decision(cid: str, cpus: str, mems: str = "0", kind: CpuKind = CpuKind.SHARED) -> Decision:
    placement = Placement(cpuset.parse(cpus), cpuset.parse(mems))
    return Decision(cid, "node0", kind, placement)


def read(root: Path, cid: str) -> dict:
    return json.loads((root / cid / FILE_NAME).read_text())


async def test_files_are_replaced_atomically_inside_a_stable_directory(tmp_path: Path) -> None:
    files = PlacementFiles(tmp_path / "containers")
    mount = await files.create(decision("a", "0-3"), "/.nri-topology")
    assert (mount.destination, mount.source) == ("/.nri-topology", str(tmp_path / "containers/a"))
    assert "ro" in mount.options
    assert read(files.root, "a") == {
        "container": "a",
        "pool": "node0",
        "kind": "shared",
        "cpus": "0-3",
        "mems": "0",
        "exclusive_cpus": "",
        "generation": 1,
    }
    folder = (files.root / "a").stat().st_ino
    inode = (files.root / "a" / FILE_NAME).stat().st_ino
    files.updated(
        [Update("a", Placement(cpuset.parse("0-1"), None)), Update("x", Placement(None, None))]
    )
    await files.flush()
    doc = read(files.root, "a")
    assert (doc["cpus"], doc["mems"], doc["generation"]) == ("0-1", "0", 2)
    assert (files.root / "a").stat().st_ino == folder  # the mounted directory stays
    assert (files.root / "a" / FILE_NAME).stat().st_ino != inode  # the file is a new one
    assert sorted(p.name for p in (files.root / "a").iterdir()) == [FILE_NAME]  # no temp left
    files.updated([Update("a", Placement(cpuset.parse("0-1"), None))])  # no change, no rewrite
    await files.flush()
    assert read(files.root, "a")["generation"] == 2
    files.replaced(decision("a", "2", kind=CpuKind.EXCLUSIVE))
    files.removed("a")  # the latest change wins
    await files.flush()
    assert not (files.root / "a").exists()
    assert "a" not in files


async def test_adopt_rewrites_the_living_and_removes_the_gone(tmp_path: Path) -> None:
    files = PlacementFiles(tmp_path)
    for cid in ("a", "b"):
        await files.create(decision(cid, "0-3"), "/p")
    files.updated([Update("a", Placement(cpuset.parse("1"), None))])
    await files.flush()
    after = PlacementFiles(tmp_path)  # a restarted daemon
    await after.adopt({"a": {**read(tmp_path, "a"), "cpus": "2-3"}})
    doc = read(tmp_path, "a")
    assert (doc["cpus"], doc["generation"]) == ("2-3", 3)  # generations keep growing
    assert not (tmp_path / "b").exists() and "a" in after and "b" not in after


# --- through the daemon, with the real policy and the runtime test peer ---------------------


@pytest.fixture
async def node(tmp_path: Path, short_dir: Path) -> AsyncIterator[tuple[Daemon, RuntimePeer]]:
    sock = short_dir / "nri.sock"
    peer = RuntimePeer()
    await peer.listen(str(sock))
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=1, cores=4, threads=1))
    config = tmp_path / "config.yaml"
    config.write_text(
        "policy: {reserved_resources: {cpu: cpuset:0}}\nexpose: {file: true, file_dir: /run/nri}\n"
    )
    overrides = Overrides(
        socket=str(sock),
        sysfs=str(sysfs),
        state=str(tmp_path / "state" / "state.json"),
        metrics_port=free_port(),
        log_format="json",
    )
    daemon = Daemon(config, overrides, log_stream=io.StringIO(), environ={})
    daemon.setup()
    task = asyncio.get_running_loop().create_task(daemon.serve())
    await peer.wait_plugin()
    yield daemon, peer
    daemon.stop()
    assert await asyncio.wait_for(task, 5) == 0
    await peer.close()


def pod(name: str, qos: str) -> api_pb2.PodSandbox:
    p = api_pb2.PodSandbox(id=f"sb-{name}", name=name, namespace="default", uid=f"u-{name}")
    p.linux.cgroup_parent = f"/kubepods/{qos}/pod-{name}" if qos else f"/kubepods/pod-{name}"
    return p


def container(cid: str, p: api_pb2.PodSandbox, milli: int, limit: bool) -> api_pb2.Container:
    c = api_pb2.Container(id=cid, pod_sandbox_id=p.id, name="main", state=api_pb2.CONTAINER_CREATED)
    c.linux.resources.cpu.shares.value = milli * 1024 // 1000
    if limit:
        c.linux.resources.cpu.quota.value = milli * 100
        c.linux.resources.cpu.period.value = 100_000
    c.linux.resources.memory.limit.value = 64 << 20
    return c


def file_of(peer: RuntimePeer, cid: str) -> dict:
    """The document as the container sees it: in the directory the runtime mounted."""
    (mount,) = [m for m in peer.containers[cid].mounts if m.destination == "/run/nri"]
    assert "ro" in mount.options
    return json.loads((Path(mount.source) / FILE_NAME).read_text())


async def test_the_daemon_keeps_each_containers_file_current(node) -> None:
    daemon, peer = node
    web = pod("web", "burstable")
    await peer.create_container(web, container("web", web, 500, limit=False))
    doc = file_of(peer, "web")
    assert (doc["kind"], doc["cpus"]) == ("shared", "1-3")
    assert doc["cpus"] == peer.containers["web"].linux.resources.cpu.cpus

    db = pod("db", "")
    await peer.create_container(db, container("db", db, 2000, limit=True))
    assert file_of(peer, "db")["kind"] == "exclusive"
    await daemon.plugin.settle()  # the re-pin that follows the reply
    await daemon.plugin.files.flush()  # type: ignore[union-attr]
    shrunk = file_of(peer, "web")
    assert shrunk["cpus"] == peer.containers["web"].linux.resources.cpu.cpus  # the update's CPUs
    assert len(cpuset.parse(shrunk["cpus"])) == 1 and shrunk["generation"] == 2

    await peer.stop_container(db, peer.containers["db"])
    await peer.remove_container(db, peer.containers["db"])
    await daemon.plugin.files.flush()  # type: ignore[union-attr]
    assert file_of(peer, "web")["cpus"] == "1-3"
    source = Path(peer.containers["db"].mounts[0].source) if "db" in peer.containers else None
    root = Path(daemon.config.state.path).parent / "containers"
    assert sorted(p.name for p in root.iterdir()) == ["web"]
    assert source is None or not source.exists()


async def test_an_unwritable_root_means_no_mount_rather_than_a_failed_container(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    files = PlacementFiles(blocker / "containers")
    assert await files.create(decision("a", "0-3"), "/p") is None
    assert "a" not in files


async def test_a_restarted_plugin_rewrites_the_files_of_what_still_runs(tmp_path: Path) -> None:
    from nri_topology.daemon.plugin import TopologyPlugin
    from nri_topology.daemon.settings import Settings
    from nri_topology.policy.options import CpuAmount, Options
    from nri_topology.policy.policy import Policy
    from nri_topology.testing.harness import connected

    machine = machines.synthetic(tmp_path, nodes=1, cores=4, threads=1)
    root = tmp_path / "state" / "containers"

    def plugin() -> TopologyPlugin:
        return TopologyPlugin(
            Policy(machine, Options(reserved_resources=CpuAmount(cpus=frozenset({0})))),
            files=PlacementFiles(root),
            settings=Settings(expose_file=True, file_dir="/run/nri"),
        )

    web, db = pod("web", "burstable"), pod("db", "")
    async with connected(plugin()) as (peer, _):
        await peer.create_container(web, container("web", web, 500, limit=False))
        await peer.create_container(db, container("db", db, 2000, limit=True))
        before = file_of(peer, "web")
        running = {cid: c for cid, c in peer.containers.items()}
    assert before["generation"] == 2  # shrunk once by db's exclusive CPUs
    # db went away while the plugin was down; web still runs as the runtime last pinned it
    survivor = running["web"]
    survivor.state = api_pb2.CONTAINER_RUNNING
    after_peer = RuntimePeer(pods=[web], containers=[survivor])
    async with connected(plugin(), after_peer):
        pass  # connected: synchronized, and the files are rewritten before the reply
    assert sorted(p.name for p in root.iterdir()) == ["web"]
    doc = read(root, "web")
    assert (
        doc["generation"] == 3
        and doc["cpus"] == after_peer.containers["web"].linux.resources.cpu.cpus
    )


async def test_the_file_is_readable_by_any_user_whatever_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    old = os.umask(0o077)
    try:
        files = PlacementFiles(tmp_path / "containers")
        await files.create(decision("a", "0-3"), "/p")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "containers" / "a").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "containers" / "a" / FILE_NAME).stat().st_mode) == 0o644
