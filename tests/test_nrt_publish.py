"""Publishing the NodeResourceTopology object over real HTTP: server-side apply, owner, rate
limit, retries with backoff."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_topology.nrt.cluster import in_cluster, wanted
from nri_topology.nrt.publish import FIELD_MANAGER, Publisher, make_client
from tests.apiserver import ApiServer, serve


class Sleeps:
    """Stands in for asyncio.sleep: records each wait and holds it until released."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self._gate: asyncio.Queue[None] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        await self._gate.get()

    def release(self) -> None:
        self._gate.put_nowait(None)


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


class State:
    """What the build function reads: a counter standing for the policy's state."""

    def __init__(self) -> None:
        self.version = 0

    def build(self) -> dict[str, Any]:
        return {
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "worker-1"},
            "attributes": [{"name": "version", "value": str(self.version)}],
            "zones": [{"name": "node-0", "type": "Node"}],
        }


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with serve(ApiServer(nodes={"worker-1": "uid-1"})) as server:
        yield server


def kubeconfig(path: Path, url: str) -> str:
    """A kubeconfig file with a bearer token, as the systemd mode would be given."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def make(api: ApiServer, tmp_path: Path) -> Callable[..., Publisher]:
    def make(state: State, sleeps: Sleeps, **kw: Any) -> Publisher:
        client = make_client(kubeconfig(tmp_path / "kubeconfig", api.url))
        return Publisher(client, "worker-1", state.build, sleep=sleeps, **kw)

    return make


@pytest.mark.looptime
async def test_applies_the_object_owned_by_the_node_and_coalesces_changes(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    state, sleeps = State(), Sleeps()
    pub = make(state, sleeps, min_interval_s=5)
    pub.start()
    await until(lambda: len(api.applies()) == 1)
    (first,) = api.applies()
    assert first.path == "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1"
    assert first.query == {"fieldManager": [FIELD_MANAGER], "force": ["true"]}
    assert first.headers["content-type"].startswith("application/apply-patch+yaml")
    assert first.headers["authorization"] == "Bearer secret-token"
    assert first.body["metadata"] == {
        "name": "worker-1",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "uid-1"}
        ],
    }
    assert first.body["zones"] == [{"name": "node-0", "type": "Node"}]
    # a burst of changes while the interval runs becomes one update with the latest state
    for v in (1, 2, 3):
        state.version = v
        pub.changed()
    await asyncio.sleep(0.05)
    assert len(api.applies()) == 1 and sleeps.calls == [5]
    sleeps.release()
    await until(lambda: len(api.applies()) == 2)
    assert api.objects["worker-1"]["attributes"] == [{"name": "version", "value": "3"}]
    assert sleeps.calls == [5, 5]
    sleeps.release()
    await asyncio.sleep(0.05)
    assert len(api.applies()) == 2  # nothing changed: nothing sent
    assert [r.method for r in api.requests].count("GET") == 2  # the node's uid, at each write
    await pub.close()


async def test_failures_back_off_and_retry_with_the_latest_state(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    state, sleeps = State(), Sleeps()
    errors: list[int] = []
    api.fail = [500, 503, 500]
    pub = make(state, sleeps, min_interval_s=5, max_backoff_s=3, on_error=lambda: errors.append(1))
    pub.start()
    for expected in ([1], [1, 2], [1, 2, 3]):
        await until(lambda e=expected: sleeps.calls == e)
        state.version += 1
        sleeps.release()
    await until(lambda: pub.published == 1)
    assert (pub.failures, len(errors)) == (3, 3)
    assert api.objects["worker-1"]["attributes"] == [{"name": "version", "value": "3"}]
    await until(lambda: sleeps.calls == [1, 2, 3, 5])  # backoff reset: the interval follows
    await pub.close()


async def test_a_node_not_yet_known_is_retried(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    state, sleeps = State(), Sleeps()
    api.nodes = {}
    pub = make(state, sleeps)
    pub.start()
    await until(lambda: sleeps.calls == [1])
    assert api.applies() == [] and pub.failures == 1
    api.nodes["worker-1"] = "uid-late"
    sleeps.release()
    await until(lambda: pub.published == 1)
    assert api.objects["worker-1"]["metadata"]["ownerReferences"][0]["uid"] == "uid-late"
    await pub.close()


async def test_a_node_registered_again_owns_the_next_write(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    """The kubelet deletes and registers the Node again: a new uid. An object naming the old one
    is deleted by the garbage collector at once, so the next write must name the new one."""
    state, sleeps = State(), Sleeps()
    pub = make(state, sleeps, resync_s=0)
    pub.start()
    await until(lambda: pub.published == 1)
    api.delete_node("worker-1")
    assert api.collected == ["worker-1"]  # owned by the Node: gone with it
    api.register_node("worker-1", "uid-2")
    state.version = 1
    pub.changed()
    sleeps.release()
    await until(lambda: pub.published == 2)
    owner = api.objects["worker-1"]["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "uid-2" and api.collected == ["worker-1"]
    await pub.close()


async def test_an_object_missing_or_changed_on_the_server_is_written_again(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    """No placement changes, yet the object is deleted by hand or edited: the periodic resync
    reads it and writes it again; one found as written is left alone."""
    state = State()
    pub = make(state, asyncio.sleep, min_interval_s=0, resync_s=0.05)
    pub.start()
    await until(lambda: pub.published == 1)
    await until(lambda: [r.method for r in api.requests].count("GET") >= 4)  # resyncs ran
    assert (api.written, pub.resyncs) == (1, 0)  # found as written: nothing sent
    del api.objects["worker-1"]
    await until(lambda: "worker-1" in api.objects)
    assert (api.written, pub.resyncs) == (2, 1)
    api.objects["worker-1"]["zones"] = []
    await until(lambda: api.objects["worker-1"]["zones"] != [])
    assert (api.written, pub.resyncs) == (3, 2)
    await pub.close()


async def test_close_lets_the_write_in_flight_finish_and_sends_nothing_after(
    api: ApiServer, make: Callable[..., Publisher]
) -> None:
    api.delay = 0.3
    pub = make(State(), asyncio.sleep, min_interval_s=0, resync_s=0)
    pub.start()
    await until(lambda: len(api.applies()) == 1)  # received, not yet stored
    await pub.close()
    assert api.written == 1
    pub.changed()
    await asyncio.sleep(0.5)
    assert api.written == 1 and len(api.requests) == 2


def test_when_to_publish(tmp_path: Path) -> None:
    account = tmp_path / "sa"
    assert not in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, account)
    account.mkdir()
    (account / "token").write_text("t")
    assert in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, account)
    assert not in_cluster({}, account)
    assert wanted("auto", None, cluster=True)
    assert not wanted("auto", None, cluster=False)
    assert wanted("auto", "/etc/kubeconfig", cluster=False)
    assert not wanted(False, "/etc/kubeconfig", cluster=True)
    assert wanted(True, None, cluster=False)


# --- through the daemon, with the real policy and the runtime test peer ---------------------


@pytest.mark.usefixtures("restore_logging")
async def test_the_daemon_publishes_and_follows_placements(api: ApiServer, tmp_path: Path) -> None:
    import socket
    import tempfile

    from nri_topology.daemon.service import Daemon, Overrides
    from nri_topology.nri import api_pb2
    from nri_topology.testing.runtime import RuntimePeer
    from tests import machines

    with tempfile.TemporaryDirectory(prefix="nri-") as short:
        sock = Path(short) / "nri.sock"
        peer = RuntimePeer()
        await peer.listen(str(sock))
        sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=2, threads=1))
        config = tmp_path / "config.yaml"
        config.write_text(
            "policy: {reserved_resources: {cpu: 'cpuset:0'}}\n"
            f"nrt: {{publish: true, kubeconfig: {kubeconfig(tmp_path / 'kc', api.url)}, "
            "node_name: worker-1, min_interval_seconds: 0, resync_seconds: 0.2}\n"
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        overrides = Overrides(
            socket=str(sock),
            sysfs=str(sysfs),
            state=str(tmp_path / "state.json"),
            metrics_port=port,
            log_format="json",
        )
        log = WrittenAtShutdown(api)
        daemon = Daemon(config, overrides, log_stream=log, environ={})
        daemon.setup()
        assert daemon.publisher is not None
        task = asyncio.get_running_loop().create_task(daemon.serve())
        await peer.wait_plugin()

        def node_cpu(n: int) -> str:
            obj = api.objects.get("worker-1") or {"zones": []}
            for z in obj["zones"]:
                if z["name"] == f"node-{n}":
                    return next(r["available"] for r in z["resources"] if r["name"] == "cpu")
            return ""

        await until(lambda: node_cpu(1) == "2")
        pod = api_pb2.PodSandbox(id="sb", name="db", namespace="default", uid="u")
        pod.linux.cgroup_parent = "/kubepods/pod-u"
        ctr = api_pb2.Container(id="c1", pod_sandbox_id="sb", name="main")
        ctr.linux.resources.cpu.shares.value = 2048
        ctr.linux.resources.cpu.quota.value = 200_000
        ctr.linux.resources.cpu.period.value = 100_000
        reply = await peer.create_container(pod, ctr)
        assert reply.adjust.linux.resources.cpu.cpus == "2-3"  # node 1, the node with room
        await until(lambda: node_cpu(1) == "0")
        owner = api.objects["worker-1"]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Node", "uid-1")
        # the kubelet registers the Node again; no placement changes, yet the object comes back
        api.delete_node("worker-1")
        api.register_node("worker-1", "uid-2")
        await until(lambda: "worker-1" in api.objects)
        owner = api.objects["worker-1"]["metadata"]["ownerReferences"][0]
        assert owner["uid"] == "uid-2" and node_cpu(1) == "0"
        # stopped while a write is in flight: it lands before "shut down", nothing after
        api.delay = 0.3
        received = len(api.applies())
        await peer.remove_container(pod, ctr)
        await until(lambda: len(api.applies()) > received)
        daemon.stop()
        assert await asyncio.wait_for(task, 5) == 0
        await peer.close()
        await asyncio.sleep(0.5)
        assert log.written_at_shutdown == api.written


class WrittenAtShutdown(io.StringIO):
    """A log stream noting how many objects the API server had stored when "shut down" was
    logged."""

    def __init__(self, api: ApiServer) -> None:
        super().__init__()
        self.api = api
        self.written_at_shutdown: int | None = None

    def write(self, text: str) -> int:
        if '"shut down"' in text:
            self.written_at_shutdown = self.api.written
        return super().write(text)


@pytest.mark.usefixtures("restore_logging")
async def test_a_daemon_not_registered_publishes_nothing(api: ApiServer, tmp_path: Path) -> None:
    """Its placements are not the node's while the runtime has not registered it (wrong socket
    path, NRI off, a standby): the object is first written after the runtime's Synchronize."""
    import tempfile

    from nri_topology.daemon.service import Daemon, Overrides
    from nri_topology.testing.runtime import RuntimePeer
    from tests import machines
    from tests.sockets import free_port

    with tempfile.TemporaryDirectory(prefix="nri-") as short:
        sock = Path(short) / "nri.sock"
        sysfs = machines.write_sysfs(tmp_path, machines.SyntheticSpec(nodes=2, cores=2, threads=1))
        config = tmp_path / "config.yaml"
        config.write_text(
            f"nrt: {{publish: true, kubeconfig: {kubeconfig(tmp_path / 'kc', api.url)}, "
            "node_name: worker-1, min_interval_seconds: 0, resync_seconds: 0.2}\n"
        )
        overrides = Overrides(
            socket=str(sock),
            sysfs=str(sysfs),
            state=str(tmp_path / "state.json"),
            metrics_port=free_port(),
            log_format="json",
        )
        daemon = Daemon(config, overrides, log_stream=io.StringIO(), environ={})
        daemon.setup()
        task = asyncio.get_running_loop().create_task(daemon.serve())
        await asyncio.sleep(1.0)  # retrying the absent socket, resyncs due every 0.2 s
        assert api.applies() == [] and "worker-1" not in api.objects
        peer = RuntimePeer()
        await peer.listen(str(sock))
        await peer.wait_plugin(timeout=10)
        await until(lambda: "worker-1" in api.objects)
        daemon.stop()
        assert await asyncio.wait_for(task, 5) == 0
        await peer.close()
