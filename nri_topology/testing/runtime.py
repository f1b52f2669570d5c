"""A runtime-side NRI peer for tests, benchmarks and demos, behaving like the Go adaptation.

It plays containerd's part of docs/protocol.md §6 over a real unix socket (or a socketpair
for launched plugins) and reads frames exactly as a Go peer would (`go_reader`), so a plugin that
frames wrongly, answers Synchronize chunks wrongly, subscribes to unknown events or is too slow
fails here the way it would fail on a node. Everything the plugin is asked and answers is
recorded in `calls` (unless `record=False`); container state is kept and updated from
adjustments and updates, the updates by the node's one model of them (`policy.pinning`, with NRI
messages as its form).

Only one plugin is active at a time: the most recently synchronized connection gets the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import structlog
from google.protobuf.message import Message

from nri_topology.nri import api_pb2
from nri_topology.nri.mux import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    MuxDecoder,
    MuxProtocolError,
    frame_message,
)
from nri_topology.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, STATE_CHANGE_EVENTS
from nri_topology.nri.versions import OLD_VALID_EVENTS, VALID_EVENTS, event_bit, parse_version
from nri_topology.policy.pinning import Conflict, Form, apply_replies, apply_updates, merge_updates
from nri_topology.testing.go_reader import GoConnReader, GoReadError
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import MAX_DATA, Code, TtrpcError, encode_request
from nri_topology.ttrpc.server import CallContext, TtrpcServer

log = structlog.get_logger(__name__)

MIN_OBJECTS_PER_SYNC_MESSAGE = 8
_PLUGIN_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")  # enforced by NRI >= v0.12 runtimes
_PLUGIN_IDX = re.compile(r"^[0-9]{2}$")


def _resource_fields(update: api_pb2.ContainerUpdate) -> Iterator[str]:
    """The resource fields an update sets, named as the runtime claims them: each CPU and memory
    knob on its own, hugepage limits per page size, unified parameters per key."""
    for field, value in update.linux.resources.ListFields():
        if field.name in ("cpu", "memory"):
            for knob, _ in value.ListFields():
                yield f"{field.name}.{knob.name}"
        elif field.name == "hugepage_limits":
            yield from (f"hugepage_limits[{limit.page_size}]" for limit in value)
        elif field.name == "unified":
            yield from (f"unified[{key}]" for key in value)
        else:
            yield field.name


def _combined(
    first: api_pb2.ContainerUpdate, second: api_pb2.ContainerUpdate
) -> api_pb2.ContainerUpdate:
    out = api_pb2.ContainerUpdate()
    out.CopyFrom(first)
    out.linux.resources.MergeFrom(second.linux.resources)
    out.ignore_failure = first.ignore_failure and second.ignore_failure
    return out


NRI_UPDATES: Form[api_pb2.ContainerUpdate, api_pb2.LinuxResources, api_pb2.LinuxResources] = Form(
    target=attrgetter("container_id"),
    change=attrgetter("linux.resources"),
    over=api_pb2.LinuxResources.MergeFrom,  # into the container's own message
    in_place=True,
    fields=_resource_fields,
    may_fail=attrgetter("ignore_failure"),
    combine=_combined,
    blank=lambda u: api_pb2.ContainerUpdate(
        container_id=u.container_id, ignore_failure=u.ignore_failure
    ),
)
"""Updates as NRI messages over the resources of the runtime's containers."""


class PluginError(Exception):
    """The plugin answered with an error or broke a protocol rule; the operation failed."""


@dataclass
class Call:
    """One request the peer sent to the plugin, with the reply or the error."""

    method: str
    request: Message
    response: Message | None = None
    error: str | None = None


class _GoChannel:
    """One logical connection read the Go way: whole ttrpc messages out of `GoConnReader`."""

    def __init__(self, trunk: _GoTrunk, conn_id: int) -> None:
        self._trunk = trunk
        self.conn_id = conn_id
        self.reader = GoConnReader()
        self.wake = asyncio.Event()

    async def recv(self) -> bytes:
        while True:
            try:
                message = self.reader.next_message()
            except GoReadError as exc:
                self._trunk.fail(f"conn {self.conn_id}: {exc}")
                return b""
            if message is not None:
                return message
            if self._trunk.closed.is_set():
                return b""
            self.wake.clear()
            await self.wake.wait()

    async def send(self, message: bytes) -> None:
        await self._trunk.send(self.conn_id, message)

    def close(self) -> None:
        self._trunk.fail(None)


class _GoTrunk:
    """The runtime's mux: blocked until started, Go-style frames out, Go-style reading in."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, errors: list[str]
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._errors = errors
        self._decoder = MuxDecoder()
        self._lock = asyncio.Lock()
        self.channels = {
            conn_id: _GoChannel(self, conn_id)
            for conn_id in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)
        }
        self.closed = asyncio.Event()
        self.error: str | None = None
        self.frames: list[tuple[int, int]] = []
        """(conn id, payload size) of every frame received, to check the plugin's framing."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Unblock reading, which the runtime does only once its Runtime service is up."""
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def fail(self, error: str | None) -> None:
        if self.closed.is_set():
            return
        self.error = error
        if error is not None:
            self._errors.append(error)
            log.warning("test runtime closes the plugin connection", error=error)
        self.closed.set()
        self._writer.close()
        for channel in self.channels.values():
            channel.wake.set()

    async def close(self) -> None:
        self.fail(None)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    async def send(self, conn_id: int, message: bytes) -> None:
        if self.closed.is_set():
            raise ConnectionError("plugin connection closed")
        async with self._lock:
            try:
                for frame in frame_message(conn_id, message):
                    self._writer.write(frame)
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self.fail(f"write failed: {exc}")
                raise ConnectionError(f"plugin connection lost: {exc}") from exc

    async def _read_loop(self) -> None:
        try:
            while not self.closed.is_set():
                data = await self._reader.read(1 << 16)
                if not data:
                    self.fail(None)
                    return
                for conn_id, payload in self._decoder.feed(data):
                    self.frames.append((conn_id, len(payload)))
                    channel = self.channels.get(conn_id)
                    if channel is None:
                        continue  # the Go mux drops frames of unopened connections
                    channel.reader.push_frame(payload)
                    channel.wake.set()
        except (GoReadError, MuxProtocolError) as exc:
            self.fail(str(exc))
        except (ConnectionError, OSError) as exc:
            self.fail(f"read failed: {exc}")


class PluginConnection:
    """The runtime's view of one connected plugin."""

    def __init__(
        self,
        peer: RuntimePeer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        external: bool,
    ) -> None:
        self.peer = peer
        self.external = external
        self.registration_error: str | None = None
        self.trunk = _GoTrunk(reader, writer, peer.errors)
        self.client = TtrpcClient(self.trunk.channels[PLUGIN_SERVICE_CONN])
        self.server = TtrpcServer(
            self.trunk.channels[RUNTIME_SERVICE_CONN],
            {
                RUNTIME_SERVICE: {
                    "RegisterPlugin": self._register_plugin,
                    "UpdateContainers": self._update_containers,
                }
            },
        )
        self.name = ""
        self.idx = ""
        self.events = 0
        self.state_change_only = not peer.dedicated_events
        self.registered = asyncio.Event()
        self._configured = asyncio.Event()
        self.active = False
        self._server_task: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self.trunk.closed.is_set()

    @property
    def full_name(self) -> str:
        """The name the runtime gives the plugin in its errors: index, dash, name."""
        return f"{self.idx}-{self.name}"

    @property
    def error(self) -> str | None:
        return self.trunk.error

    async def close(self, error: str | None = None) -> None:
        if error is not None:
            self.trunk.fail(error)
        self.active = False
        await self.trunk.close()
        await self.client.close()
        if self._server_task is not None:
            self._server_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._server_task

    async def _register_plugin(self, payload: bytes, ctx: CallContext) -> bytes:
        req = api_pb2.RegisterPluginRequest.FromString(payload)
        self.peer.registrations.append(req)
        if self.external:  # launched plugins are named by their file, not by this request
            problem = _identity_problem(req, self.peer.dedicated_events)
            if problem is not None:
                self.registration_error = problem
                self.registered.set()
                raise TtrpcError(Code.UNKNOWN, problem)
        self.name, self.idx = req.plugin_name, req.plugin_idx
        self.registered.set()  # the start routine goes on to Configure before we reply
        if self.peer.configure_before_register_reply:
            await self._configured.wait()
        return b""

    async def _update_containers(self, payload: bytes, ctx: CallContext) -> bytes:
        req = api_pb2.UpdateContainersRequest.FromString(payload)
        async with self.peer.lock:
            if self.peer.record:
                self.peer.unsolicited_updates.extend(req.update)
            failed = self.peer._apply_updates(req.update)
        if failed:
            raise TtrpcError(Code.UNKNOWN, "NRI update of some containers failed")
        return b""

    async def handshake(self) -> None:
        """Register, configure and synchronize; raises PluginError and closes on failure."""
        peer = self.peer
        self._server_task = asyncio.get_running_loop().create_task(self.server.serve())
        self.client.start()
        self.trunk.start()
        try:
            await self._wait_registered()
            await self._configure()
            self._configured.set()
            async with peer.lock:
                peer._apply_updates(await self._synchronize())
        except PluginError as exc:
            await self.close(str(exc))
            raise
        finally:
            self._configured.set()
        self.active = True

    async def _wait_registered(self) -> None:
        closed = asyncio.ensure_future(self.trunk.closed.wait())
        registered = asyncio.ensure_future(self.registered.wait())
        try:
            done, _ = await asyncio.wait(
                {closed, registered},
                timeout=self.peer.registration_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closed.cancel()
            registered.cancel()
        if registered not in done:
            raise PluginError(
                "connection closed" if closed in done else "plugin registration timed out"
            )
        if self.registration_error is not None:
            raise PluginError(self.registration_error)

    async def _configure(self) -> None:
        peer = self.peer
        req = api_pb2.ConfigureRequest(
            config=peer.config,
            runtime_name=peer.runtime_name,
            runtime_version=peer.runtime_version,
            registration_timeout=int(peer.registration_timeout * 1000),
            request_timeout=int(peer.request_timeout * 1000),
            NRI_version=peer.nri_version if peer.report_nri_version else "",
        )
        reply = await self.call("Configure", req, api_pb2.ConfigureResponse)
        events = reply.events
        if events == 0:
            events = peer.valid_events
        elif extra := events & ~peer.valid_events:
            raise PluginError(f"invalid plugin events: 0x{extra:x}")
        self.events = events

    def _sync_size(self, req: api_pb2.SynchronizeRequest) -> int:
        return len(encode_request(PLUGIN_SERVICE, "Synchronize", req.SerializeToString(), 1))

    async def _synchronize(self) -> list[api_pb2.ContainerUpdate]:
        """Send everything, in chunks when too big, as the Go adaptation does (§6.3)."""
        peer = self.peer
        pods, ctrs = list(peer.pods.values()), list(peer.containers.values())
        pods_per_msg, ctrs_per_msg = len(pods), len(ctrs)
        deadline = asyncio.get_running_loop().time() + peer.request_timeout
        while True:
            req = api_pb2.SynchronizeRequest(
                pods=pods[:pods_per_msg],
                containers=ctrs[:ctrs_per_msg],
                more=len(pods) > pods_per_msg or len(ctrs) > ctrs_per_msg,
            )
            size = self._sync_size(req)
            if size > peer.sync_message_limit:
                pods_per_msg, ctrs_per_msg = _shrink(
                    pods_per_msg, ctrs_per_msg, size, peer.sync_message_limit
                )
                continue
            remaining = deadline - asyncio.get_running_loop().time()
            reply = await self.call(
                "Synchronize", req, api_pb2.SynchronizeResponse, timeout=remaining
            )
            peer.sync_chunks.append((len(req.pods), len(req.containers), req.more))
            if not req.more:
                return list(reply.update)
            if reply.update or not reply.more:
                raise PluginError("plugin does not handle split sync requests")
            pods, ctrs = pods[pods_per_msg:], ctrs[ctrs_per_msg:]
            pods_per_msg = min(pods_per_msg, len(pods))
            ctrs_per_msg = min(ctrs_per_msg, len(ctrs))

    async def call(
        self,
        method: str,
        req: Message,
        response: type[Message],
        *,
        timeout: float | None = None,
    ) -> Any:
        """Call the plugin; fatal failures close it and raise PluginError, like the runtime."""
        call = Call(method, req)
        if self.peer.record:
            self.peer.calls.append(call)
        try:
            payload = await self.client.call(
                PLUGIN_SERVICE,
                method,
                req.SerializeToString(),
                timeout=self.peer.request_timeout if timeout is None else max(timeout, 0.001),
            )
        except TtrpcError as exc:
            call.error = str(exc)
            if exc.code == Code.DEADLINE_EXCEEDED or self.client.closed or self.closed:
                await self.close(f"{method}: {exc}")
            raise PluginError(f"{method} failed: {exc}") from exc
        except (TimeoutError, ConnectionError, OSError) as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            await self.close(f"{method}: {call.error}")
            raise PluginError(f"{method} failed: {call.error}") from exc
        call.response = response.FromString(payload)
        return call.response


def _identity_problem(req: api_pb2.RegisterPluginRequest, strict_names: bool) -> str | None:
    """Why the runtime refuses an external plugin's name or index (None: acceptable)."""
    name, idx = req.plugin_name, req.plugin_idx
    if not name or (strict_names and not _PLUGIN_NAME.match(name)):
        return f"invalid plugin name: {name!r}"
    if not _PLUGIN_IDX.match(idx):
        return f"invalid plugin index: {idx!r}"
    return None


def _shrink(pods: int, ctrs: int, rejected: int, limit: int) -> tuple[int, int]:
    """Fewer objects per Synchronize message after one was too big (the Go algorithm)."""
    if pods + ctrs <= MIN_OBJECTS_PER_SYNC_MESSAGE:
        raise PluginError("failed to synchronize plugin with split messages")
    factor = min(0.9, limit / rejected)
    pods, ctrs = int(pods * factor), int(ctrs * factor)
    if pods + ctrs < MIN_OBJECTS_PER_SYNC_MESSAGE:
        pods = ctrs = MIN_OBJECTS_PER_SYNC_MESSAGE // 2
    return pods, ctrs


class RuntimePeer:
    """The runtime side of NRI: accepts plugins and relays pod/container events to them.

    `nri_version` selects the behaviour: ≥ v0.12 calls dedicated event RPCs with StateChange as
    fallback, older versions use StateChange only; ≥ v0.10 accepts event bits 12-14. Like real
    runtimes, only NRI ≥ v0.12 reports its version in Configure unless `report_nri_version`
    says otherwise.
    `configure_before_register_reply` holds the RegisterPlugin reply until Configure has been
    answered, which makes the legal Configure-overtakes-reply ordering deterministic.
    `sync_message_limit` below 4 MiB forces Synchronize chunking with smaller data.
    `record=False` keeps no `calls`, `applied_updates` nor `unsolicited_updates`, which tests
    read: a benchmark of many requests would otherwise hold every request, reply and update.
    """

    def __init__(
        self,
        *,
        runtime_name: str = "nri-topology-test-runtime",
        runtime_version: str = "v0.0.1",
        nri_version: str = "v0.12.2",
        report_nri_version: bool | None = None,
        config: str = "",
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        configure_before_register_reply: bool = False,
        sync_message_limit: int = MAX_DATA,
        pods: Sequence[api_pb2.PodSandbox] = (),
        containers: Sequence[api_pb2.Container] = (),
        failing_containers: Sequence[str] = (),
        reply_failures_fail: bool = False,
        record: bool = True,
    ) -> None:
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.nri_version = nri_version
        version = parse_version(nri_version) or (0, 0, 0)
        self.report_nri_version = (
            version >= (0, 12, 0) if report_nri_version is None else report_nri_version
        )
        self.valid_events = VALID_EVENTS if version >= (0, 10, 0) else OLD_VALID_EVENTS
        self.dedicated_events = version >= (0, 12, 0)
        self.config = config
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.configure_before_register_reply = configure_before_register_reply
        self.sync_message_limit = sync_message_limit
        self.pods: dict[str, api_pb2.PodSandbox] = {p.id: p for p in pods}
        self.containers: dict[str, api_pb2.Container] = {c.id: c for c in containers}
        self._resources = {cid: c.linux.resources for cid, c in self.containers.items()}
        """Each known container's resources message, the one its entry in `containers` holds,
        that updates overlay in place: reached once, not through two sub-messages per update."""
        self.failing_containers = set(failing_containers)
        """Container ids whose updates fail (to exercise error replies)."""
        self.reply_failures_fail = reply_failures_fail
        """A failed update in a reply (not ignoring failure) fails the request, as CRI-O does;
        containerd logs it and goes on."""
        self.record = record
        self.calls: list[Call] = []
        self.registrations: list[api_pb2.RegisterPluginRequest] = []
        self.sync_chunks: list[tuple[int, int, bool]] = []
        self.unsolicited_updates: list[api_pb2.ContainerUpdate] = []
        self.applied_updates: list[api_pb2.ContainerUpdate] = []
        self.state_change_fallbacks: list[str] = []
        self.errors: list[str] = []
        self.connections: list[PluginConnection] = []
        self.plugin: PluginConnection | None = None
        self._changed = asyncio.Condition()
        self._accept_lock = asyncio.Lock()
        self.lock = asyncio.Lock()
        """Held while relaying an event or synchronizing, and taken by UpdateContainers: a plugin
        that waits for UpdateContainers inside a handler deadlocks here as on a real node."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- connections ---------------------------------------------------------------------

    async def listen(self, path: str) -> None:
        """Accept external plugins on `path`, like the runtime's NRI socket."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self._server = await asyncio.start_unix_server(self._accepted, path)

    async def attach(self, sock: socket.socket) -> PluginConnection:
        """Serve a pre-connected socket (our end of a launched plugin's socketpair)."""
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return await self._serve_connection(reader, writer, external=False)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(PluginError):
            await self._serve_connection(reader, writer, external=True)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, external: bool
    ) -> PluginConnection:
        conn = PluginConnection(self, reader, writer, external=external)
        self.connections.append(conn)
        async with self._accept_lock:  # the runtime handles one new plugin at a time
            await conn.handshake()
        async with self._changed:
            self.plugin = conn
            self._changed.notify_all()
        task = asyncio.get_running_loop().create_task(self._watch(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return conn

    async def _watch(self, conn: PluginConnection) -> None:
        await conn.trunk.closed.wait()
        conn.active = False
        async with self._changed:
            if self.plugin is conn:
                self.plugin = None
            self._changed.notify_all()

    async def wait_plugin(self, timeout: float = 5.0) -> PluginConnection:
        """The active, synchronized plugin, waiting for one to arrive if needed."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.plugin is not None and self.plugin.active)
        assert self.plugin is not None
        return self.plugin

    async def wait_disconnected(self, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.plugin is None)

    async def close(self) -> None:
        """Stop listening and drop every plugin, as a runtime shutting down does."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in self.connections:
            await conn.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- state -----------------------------------------------------------------------------

    def _merged(
        self,
        conn: PluginConnection,
        updates: Sequence[api_pb2.ContainerUpdate],
        creating: str | None = None,
    ) -> Sequence[api_pb2.ContainerUpdate]:
        """The updates of a reply merged as the adaptation merges a request's replies."""
        try:
            return merge_updates([(conn.full_name, updates)], NRI_UPDATES, creating)
        except Conflict as exc:
            raise PluginError(str(exc)) from exc

    def _apply_reply(
        self,
        conn: PluginConnection,
        updates: Sequence[api_pb2.ContainerUpdate],
        creating: str | None = None,
    ) -> None:
        """The updates of a reply to CreateContainer or StopContainer merged and applied, as the
        runtime does with them (containerd ignores their failures, see `reply_failures_fail`)."""
        if self.failing_containers:  # the two steps, to leave the failing ones out
            failed = self._apply_updates(self._merged(conn, updates, creating))
            if failed and self.reply_failures_fail:
                raise PluginError(f"NRI update of containers failed: {', '.join(failed)}")
            return
        try:
            reply = [(conn.full_name, updates)]
            applied = apply_replies(self._resources, reply, NRI_UPDATES, creating)
        except Conflict as exc:
            raise PluginError(str(exc)) from exc
        if self.record:
            self.applied_updates.extend(applied.applied)

    def _apply_updates(self, updates: Sequence[api_pb2.ContainerUpdate]) -> list[str]:
        """Apply updates to known containers (unknown ids are skipped, as containerd does); the
        ids of those that failed without `ignore_failure`."""
        failed: list[str] = []
        if self.failing_containers:
            failing = self.failing_containers
            failed = [
                u.container_id
                for u in updates
                if u.container_id in failing
                and u.container_id in self.containers
                and not u.ignore_failure
            ]
            updates = [u for u in updates if u.container_id not in failing]
        applied = apply_updates(self._resources, updates, NRI_UPDATES)
        if self.record:
            self.applied_updates.extend(applied.applied)
        return failed

    # -- events ------------------------------------------------------------------------------

    async def _relay(
        self, conn: PluginConnection, method: str, req: Message, response: type[Message]
    ) -> Any:
        """One event call, holding the lock that UpdateContainers also needs (as containerd)."""
        async with self.lock:
            return await conn.call(method, req, response)

    def _target(self, event: int) -> PluginConnection | None:
        conn = self.plugin
        if conn is None or not conn.active or not conn.events & event_bit(event):
            return None
        return conn

    async def _notify(
        self, event: int, method: str, req: Message, response: type[Message]
    ) -> Message | None:
        """Relay a lifecycle event: dedicated RPC, or StateChange for old plugins/runtimes."""
        conn = self._target(event)
        if conn is None:
            return None
        fallback = event in STATE_CHANGE_EVENTS
        if not (fallback and conn.state_change_only):
            try:
                return await self._relay(conn, method, req, response)
            except PluginError as exc:
                cause = exc.__cause__
                if not (
                    fallback and isinstance(cause, TtrpcError) and cause.code == Code.UNIMPLEMENTED
                ):
                    raise
            conn.state_change_only = True
            self.state_change_fallbacks.append(method)
        change = api_pb2.StateChangeEvent(event=event)  # type: ignore[arg-type]
        any_req: Any = req
        change.pod.CopyFrom(any_req.pod)
        if STATE_CHANGE_EVENTS[event][1]:
            change.container.CopyFrom(any_req.container)
        await self._relay(conn, "StateChange", change, api_pb2.Empty)
        return response()

    async def run_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self.pods[pod.id] = pod
        req = api_pb2.RunPodSandboxRequest(pod=pod)
        await self._notify(
            api_pb2.RUN_POD_SANDBOX, "RunPodSandbox", req, api_pb2.RunPodSandboxResponse
        )

    async def update_pod_sandbox(
        self,
        pod: api_pb2.PodSandbox,
        overhead: api_pb2.LinuxResources | None = None,
        resources: api_pb2.LinuxResources | None = None,
    ) -> None:
        req = api_pb2.UpdatePodSandboxRequest(
            pod=pod, overhead_linux_resources=overhead, linux_resources=resources
        )
        await self._notify(
            api_pb2.UPDATE_POD_SANDBOX, "UpdatePodSandbox", req, api_pb2.UpdatePodSandboxResponse
        )

    async def post_update_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        req = api_pb2.PostUpdatePodSandboxRequest(pod=pod)
        await self._notify(
            api_pb2.POST_UPDATE_POD_SANDBOX,
            "PostUpdatePodSandbox",
            req,
            api_pb2.PostUpdatePodSandboxResponse,
        )

    async def stop_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        req = api_pb2.StopPodSandboxRequest(pod=pod)
        await self._notify(
            api_pb2.STOP_POD_SANDBOX, "StopPodSandbox", req, api_pb2.StopPodSandboxResponse
        )

    async def remove_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        self.pods.pop(pod.id, None)
        req = api_pb2.RemovePodSandboxRequest(pod=pod)
        await self._notify(
            api_pb2.REMOVE_POD_SANDBOX, "RemovePodSandbox", req, api_pb2.RemovePodSandboxResponse
        )

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        """Ask the plugin, apply its adjustment and updates, remember the container."""
        created = api_pb2.Container()
        created.CopyFrom(ctr)
        reply = api_pb2.CreateContainerResponse()
        conn = self._target(api_pb2.CREATE_CONTAINER)
        if conn is not None:
            req = api_pb2.CreateContainerRequest(pod=pod, container=ctr)
            reply = await self._relay(conn, "CreateContainer", req, api_pb2.CreateContainerResponse)
            self._apply_reply(conn, reply.update, creating=ctr.id)
            created.annotations.update(reply.adjust.annotations)
            created.linux.resources.MergeFrom(reply.adjust.linux.resources)
            created.mounts.extend(reply.adjust.mounts)
        self.containers[created.id] = created
        self._resources[created.id] = created.linux.resources
        return reply

    async def _container_event(
        self,
        event: int,
        method: str,
        request: type[Message],
        response: type[Message],
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
    ) -> None:
        req: Any = request(pod=pod, container=ctr)
        await self._notify(event, method, req, response)

    async def post_create_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._container_event(
            api_pb2.POST_CREATE_CONTAINER,
            "PostCreateContainer",
            api_pb2.PostCreateContainerRequest,
            api_pb2.PostCreateContainerResponse,
            pod,
            ctr,
        )

    async def start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._container_event(
            api_pb2.START_CONTAINER,
            "StartContainer",
            api_pb2.StartContainerRequest,
            api_pb2.StartContainerResponse,
            pod,
            ctr,
        )

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._container_event(
            api_pb2.POST_START_CONTAINER,
            "PostStartContainer",
            api_pb2.PostStartContainerRequest,
            api_pb2.PostStartContainerResponse,
            pod,
            ctr,
        )

    async def update_container(
        self,
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
        resources: api_pb2.LinuxResources,
    ) -> api_pb2.UpdateContainerResponse:
        """The plugin's entry for `ctr` replaces the requested resources; others are applied."""
        reply = api_pb2.UpdateContainerResponse()
        effective = api_pb2.LinuxResources()
        effective.CopyFrom(resources)
        conn = self._target(api_pb2.UPDATE_CONTAINER)
        if conn is not None:
            req = api_pb2.UpdateContainerRequest(pod=pod, container=ctr, linux_resources=resources)
            reply = await self._relay(conn, "UpdateContainer", req, api_pb2.UpdateContainerResponse)
            updates = self._merged(conn, reply.update)
            for update in updates:
                if update.container_id == ctr.id:
                    effective.MergeFrom(update.linux.resources)
            self._apply_updates([u for u in updates if u.container_id != ctr.id])
        known = self.containers.get(ctr.id)
        if known is not None:
            known.linux.resources.MergeFrom(effective)
        return reply

    async def post_update_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._container_event(
            api_pb2.POST_UPDATE_CONTAINER,
            "PostUpdateContainer",
            api_pb2.PostUpdateContainerRequest,
            api_pb2.PostUpdateContainerResponse,
            pod,
            ctr,
        )

    async def stop_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.StopContainerResponse:
        reply = api_pb2.StopContainerResponse()
        conn = self._target(api_pb2.STOP_CONTAINER)
        if conn is not None:
            req = api_pb2.StopContainerRequest(pod=pod, container=ctr)
            reply = await self._relay(conn, "StopContainer", req, api_pb2.StopContainerResponse)
            self._apply_reply(conn, reply.update)
        return reply

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        self.containers.pop(ctr.id, None)
        self._resources.pop(ctr.id, None)
        await self._container_event(
            api_pb2.REMOVE_CONTAINER,
            "RemoveContainer",
            api_pb2.RemoveContainerRequest,
            api_pb2.RemoveContainerResponse,
            pod,
            ctr,
        )

    async def validate_container_adjustment(
        self, req: api_pb2.ValidateContainerAdjustmentRequest
    ) -> api_pb2.ValidateContainerAdjustmentResponse:
        conn = self._target(api_pb2.VALIDATE_CONTAINER_ADJUSTMENT)
        if conn is None:
            return api_pb2.ValidateContainerAdjustmentResponse()
        return await self._relay(
            conn, "ValidateContainerAdjustment", req, api_pb2.ValidateContainerAdjustmentResponse
        )
