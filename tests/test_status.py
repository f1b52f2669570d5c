"""`nri-topology status` and `explain` against the real daemon with the real policy: containers
created through the NRI socket, the commands run as a user would, reading the daemon's endpoint."""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nri_topology.cli import main
from nri_topology.daemon.health import _is_loopback
from nri_topology.daemon.service import Daemon
from nri_topology.daemon.settings import Overrides
from nri_topology.daemon.status import _updates_line
from nri_topology.nri import api_pb2
from nri_topology.testing.runtime import RuntimePeer
from tests import machines
from tests.sockets import free_port

pytestmark = pytest.mark.usefixtures("restore_logging")  # the daemon configures logging


def _pod(name: str, qos: str) -> api_pb2.PodSandbox:
    p = api_pb2.PodSandbox(id=f"p-{name}", name=name, namespace="shop", uid=f"u-{name}")
    p.linux.cgroup_parent = f"/kubepods/{qos}podu-{name}"
    return p


def _ctr(p: api_pb2.PodSandbox, name: str, cpus: int = 0) -> api_pb2.Container:
    c = api_pb2.Container(
        id=f"{p.name}-{name}-0123456789abcdef",
        pod_sandbox_id=p.id,
        name=name,
        state=api_pb2.CONTAINER_CREATED,
    )
    res = c.linux.resources
    if cpus:  # Guaranteed: request = limit, whole CPUs
        res.cpu.shares.value = 1024 * cpus
        res.cpu.quota.value = 100_000 * cpus
        res.cpu.period.value = 100_000
        res.memory.limit.value = 256 << 20
    else:
        res.cpu.shares.value = 2
    return c


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, int]]:
    sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=4, threads=2))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="nri-") as short:
        sock = str(Path(short) / "nri.sock")
        peer = RuntimePeer()
        await peer.listen(sock)
        d = Daemon(
            None,
            Overrides(
                socket=sock,
                sysfs=str(sysfs),
                state=str(tmp_path / "state.json"),
                metrics_port=port,
                log_format="json",
            ),
            log_stream=io.StringIO(),
            environ={"NODE_NAME": "node-a"},
        )
        d.setup()
        task = asyncio.get_running_loop().create_task(d.serve())
        await peer.wait_plugin()
        db, web = _pod("db", ""), _pod("web", "besteffort/")
        for p, c in ((db, _ctr(db, "postgres", cpus=2)), (web, _ctr(web, "nginx"))):
            await peer.run_pod_sandbox(p)
            await peer.create_container(p, c)
        yield d, port
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0
        await peer.close()


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_status_shows_the_live_pool_tree(daemon, capsys) -> None:
    d, port = daemon
    code, out, err = await _cli(capsys, "status", "--port", str(port))
    assert code == 0, err
    assert out.startswith("nri-topology ") and "on node-a, registered with the runtime" in out
    assert "Pools:" in out
    exclusive = d.plugin.policy.assignments()["db-postgres-0123456789abcdef"].exclusive  # type: ignore[union-attr]
    assert len(exclusive) == 2
    assert "* shop/db/postgres [exclusive] cpus " in out
    assert "* shop/web/nginx [shared]" in out
    assert " of 8 free" in out or " of 16 free" in out  # CPU capacity in whole CPUs


async def test_status_json_agrees_with_the_policy(daemon, capsys) -> None:
    d, port = daemon
    code, out, _ = await _cli(capsys, "status", "--json", "--port", str(port))
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "nri-topology/status/v1" and doc["registered"] is True
    assert doc["machine"]["name"] == "node-a"
    by_id = {c["container_id"]: c for c in doc["containers"]}
    for cid, a in d.plugin.policy.assignments().items():  # type: ignore[union-attr]
        shown = by_id[cid]
        assert shown["id"] == f"{a.namespace}/{a.pod_name}/{a.name}"
        assert shown["pool"] == a.pool and shown["kind"] == a.kind.value
        assert shown["exclusive"] == ",".join(str(c) for c in sorted(a.exclusive)) or (
            not a.exclusive and shown["exclusive"] == ""
        )
    free = {p["name"]: p["free_milli"] for p in doc["pools"]}
    assert free == {p.name: p.free_milli for p in d.plugin.policy.pools()}  # type: ignore[union-attr]


async def test_status_svg_is_a_picture(daemon, capsys, tmp_path: Path) -> None:
    _, port = daemon
    picture = tmp_path / "node.svg"
    code, out, _ = await _cli(capsys, "status", "--svg", str(picture), "--port", str(port))
    assert code == 0 and "picture written" in out
    root = ET.fromstring(picture.read_text())
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert "nri-topology status: node-a" in texts and "shop/db/postgres" in texts


async def test_explain_gives_the_decision_trace(daemon, capsys) -> None:
    _, port = daemon
    code, out, err = await _cli(capsys, "explain", "shop/db/postgres", "--port", str(port))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "shop/db/postgres (container db-postgres-0123456789abcdef)"
    assert lines[1].startswith("  now: pool ") and "exclusive" in lines[1]
    assert lines[2].startswith("  created ")
    header = next(line for line in lines if "VERDICT" in line).split()
    assert header[:3] == ["POOL", "VERDICT", "AFFINITY"]
    assert sum(" chosen " in line for line in lines) == 1


async def test_explain_a_whole_pod_as_json(daemon, capsys) -> None:
    _, port = daemon
    code, out, _ = await _cli(capsys, "explain", "shop/db", "--json", "--port", str(port))
    assert code == 0
    (entry,) = json.loads(out)["containers"]
    decision = entry["decision"]
    assert decision["what"] == "created" and decision["pool"] == entry["pool"]
    verdicts = [t["verdict"] for t in decision["trace"]]
    assert verdicts.count("chosen") == 1
    chosen = next(t for t in decision["trace"] if t["verdict"] == "chosen")
    assert chosen["pool"] == entry["pool"] and "affinity" in chosen["criteria"]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("shop/nope", "no container shop/nope is placed on this node"),
        ("shop", "expected NAMESPACE/POD or NAMESPACE/POD/CONTAINER"),
    ],
)
async def test_explain_unknown_or_malformed(daemon, capsys, target: str, message: str) -> None:
    _, port = daemon
    code, _, err = await _cli(capsys, "explain", target, "--port", str(port))
    assert code == 1 and message in err


async def test_explain_forgets_released_containers(daemon, capsys) -> None:
    d, port = daemon
    await d.plugin.lifecycle.release("db-postgres-0123456789abcdef", "stopped")  # type: ignore[union-attr]
    assert "db-postgres-0123456789abcdef" not in d.plugin.decisions  # type: ignore[union-attr]
    code, _, err = await _cli(capsys, "explain", "shop/db", "--port", str(port))
    assert code == 1 and "no container shop/db" in err


async def test_no_daemon_is_a_clear_error(capsys) -> None:
    code, _, err = await _cli(capsys, "status", "--port", str(free_port()))
    assert code == 1 and "no nri-topology daemon answers on 127.0.0.1:" in err


@pytest.mark.parametrize(
    ("peer", "local"),
    [
        (("127.0.0.1", 5), True),
        (("127.8.0.1", 5), True),
        (("::1", 5, 0, 0), True),
        (("::ffff:127.0.0.1", 5, 0, 0), True),
        (("10.0.0.7", 5), False),
        (("fe80::1%eth0", 5, 0, 2), False),
        (None, False),
    ],
)
def test_only_loopback_peers_are_local(peer: object, local: bool) -> None:
    assert _is_loopback(peer) is local


async def test_pages_are_refused_to_other_hosts(daemon) -> None:
    d, _ = daemon
    assert d.status is not None
    status, _, body, _ = d.status.respond(b"GET /status HTTP/1.1\r\n\r\n", local=False)
    assert status == 403 and body == b"only from the node itself\n"
    status, _, _, _ = d.status.respond(b"GET /metrics HTTP/1.1\r\n\r\n", local=False)
    assert status == 200


async def test_adopted_containers_say_their_trace_is_from_an_earlier_run(tmp_path: Path) -> None:
    """A plugin that starts with containers already running adopts their cpusets: explain says
    so rather than showing a trace it does not have."""
    from nri_topology.daemon.plugin import TopologyPlugin
    from nri_topology.daemon.status import StatusPages
    from nri_topology.policy.options import Options
    from nri_topology.policy.policy import Policy
    from nri_topology.testing.harness import connected

    machine = machines.synthetic(tmp_path, machines.SyntheticSpec(nodes=2, cores=4, threads=2))
    db = _pod("db", "")
    running = _ctr(db, "postgres", cpus=2)
    running.state = api_pb2.CONTAINER_RUNNING
    running.linux.resources.cpu.cpus = "4,12"
    running.linux.resources.cpu.mems = "1"
    plugin = TopologyPlugin(Policy(machine, Options()))
    async with connected(plugin, RuntimePeer(pods=[db], containers=[running])):
        await asyncio.sleep(0)  # the decisions are kept once the reply is out
        pages = StatusPages(plugin, machine, "node-b")
        status, _, body = pages.explain("shop/db/postgres", "text")
        assert status == 200
        text = body.decode()
        assert "cpus 4,12" in text
        assert "\n  adopted " in text and "kept the CPUs it held" in text
        status, _, body = pages.explain("shop/db/postgres", "json")
        (entry,) = json.loads(body)["containers"]
        assert entry["decision"]["what"] == "adopted" and entry["decision"]["trace"] == []


async def test_a_resize_is_the_decision_explained(daemon, capsys) -> None:
    d, port = daemon
    db = _pod("db", "")
    bigger = _ctr(db, "postgres", cpus=3)
    await d.plugin.update_container(db, bigger, bigger.linux.resources)  # type: ignore[union-attr]
    await asyncio.sleep(0)
    code, out, _ = await _cli(capsys, "explain", "shop/db/postgres", "--port", str(port))
    assert code == 0 and "\n  resized " in out
    assert "exclusive" in out.splitlines()[1]


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"paced": True, "cgroup_first": True}, "after the reply, paced, written to the cgroups"),
        (
            {"paced": True, "cgroup_writes_off": "the cgroup mount is read-only"},
            "not written to the cgroups first: the cgroup mount is read-only",
        ),
        ({"paced": False, "cgroup_writes_off": "no cgroups"}, "Re-pins: in the reply;"),
    ],
)
def test_the_update_line_says_whether_and_why_not_the_cgroups_are_written(
    doc: dict[str, object], said: str
) -> None:
    assert said in _updates_line({"transport": "nri", "cri_socket": None, **doc})
