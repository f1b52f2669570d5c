"""The plugin side of NRI: connect, register, and turn runtime requests into handler calls.

A plugin author subclasses `Plugin` and overrides only the handlers it needs; `Stub` owns the
socket, the mux, both ttrpc endpoints and the connection lifecycle (docs/protocol.md §2, §6):

* the socket is the `NRI_PLUGIN_SOCKET` fd when the runtime launched us, else a connection to
  the runtime's socket path; a launched plugin ends when its socket closes, an external one
  reconnects with capped, jittered exponential backoff and registers again;
* reading starts before RegisterPlugin is sent, because the runtime's Configure can arrive
  before the RegisterPlugin reply;
* the subscribed events are the handlers the subclass overrides, cut down to the bits the
  runtime's NRI version knows (§7);
* lifecycle notifications arrive either as dedicated RPCs (NRI ≥ v0.12) or as StateChange
  (older runtimes); both reach the same handler;
* Synchronize may come in chunks; the handler sees all pods and containers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import re
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from nri_topology.nri import api_pb2
from nri_topology.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux, Trunk, connect
from nri_topology.nri.versions import event_bit, valid_events
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import Code, TtrpcError, varint
from nri_topology.ttrpc.server import CallContext, Handler, TtrpcServer

log = structlog.get_logger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_SOCKET_PATH = "/var/run/nri/nri.sock"
SOCKET_ENV = "NRI_PLUGIN_SOCKET"
NAME_ENV = "NRI_PLUGIN_NAME"
IDX_ENV = "NRI_PLUGIN_IDX"
NRI_VERSION = "v0.12.2"
"""The NRI API revision our generated messages come from, reported in RegisterPlugin."""

_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")
_IDX = re.compile(r"^[0-9]{2}$")

Updates = Sequence[api_pb2.ContainerUpdate]


class EncodedUpdates(tuple[api_pb2.ContainerUpdate, ...]):
    """Updates that come with their wire form, which the stub writes into the reply instead of
    copying every message into it: a reply re-pinning hundreds of containers spent most of its
    encoding time on those copies. `delimited[i]` is `delimited(self[i])`."""

    delimited: tuple[bytes, ...]

    def __new__(cls, pairs: Iterable[tuple[api_pb2.ContainerUpdate, bytes]]) -> EncodedUpdates:
        pairs = list(pairs)
        return cls.of([message for message, _ in pairs], [data for _, data in pairs])

    @classmethod
    def of(
        cls, messages: Iterable[api_pb2.ContainerUpdate], encoded: Iterable[bytes]
    ) -> EncodedUpdates:
        """From the messages and their `delimited` forms, in the same order."""
        self = super().__new__(cls, messages)
        self.delimited = tuple(encoded)
        return self


def delimited(message: Message) -> bytes:
    """`message` as an element of a repeated field, less the tag: length varint, then body."""
    body = message.SerializeToString()
    return varint(len(body)) + body


def with_updates(message: Message, updates: Updates) -> Message | bytes:
    """`message` with `updates` in its repeated `update` field, serialized when that is cheaper.

    The encoded updates are appended after the other fields: the same bytes as adding them to
    `message` whenever no field numbered above `update` is set, and valid protobuf either way.
    """
    if not isinstance(updates, EncodedUpdates):
        message.update.extend(updates)  # type: ignore[attr-defined]
        return message
    if not updates:
        return message
    return message.SerializeToString() + _update_fields(message.DESCRIPTOR, updates)


def _update_fields(descriptor: Any, updates: EncodedUpdates) -> bytes:
    """The encoded `update` fields of a message of `descriptor`."""
    if not updates:
        return b""
    number = descriptor.fields_by_name["update"].number
    tag = bytes([number << 3 | 2])  # field numbers below 16 take one byte
    return tag + tag.join(updates.delimited)


_CREATE_REPLY = api_pb2.CreateContainerResponse.DESCRIPTOR
_ADJUST_TAG = bytes([_CREATE_REPLY.fields_by_name["adjust"].number << 3 | 2])


def create_reply(adjust: api_pb2.ContainerAdjustment | None, updates: Updates) -> Message | bytes:
    """The CreateContainer reply, the adjustment encoded into it rather than copied in: the
    same bytes, since `adjust` comes before `update` and the plugin sets no later field."""
    if adjust is None or not isinstance(updates, EncodedUpdates):
        reply = api_pb2.CreateContainerResponse()
        if adjust is not None:
            reply.adjust.CopyFrom(adjust)
        return with_updates(reply, updates)
    return _ADJUST_TAG + delimited(adjust) + _update_fields(_CREATE_REPLY, updates)


class Plugin:
    """Base class for NRI plugins: every handler defaults to "nothing to do".

    Only overridden handlers are subscribed to (configure and synchronize are always called).
    Handlers run while the runtime waits, under its request timeout (2 s by default); they must
    not await `Stub.update_containers`, which needs a lock the runtime holds meanwhile. A handler
    raises `Refused` to fail the request with a message for the runtime to report.
    """

    async def configure(self, req: api_pb2.ConfigureRequest) -> int | None:
        """Return an explicit event mask, or None to subscribe to the overridden handlers."""
        return None

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> Updates:
        """All pods and containers the runtime knows, once per connection."""
        return []

    async def run_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        return None

    async def update_pod_sandbox(
        self,
        pod: api_pb2.PodSandbox,
        overhead: api_pb2.LinuxResources,
        resources: api_pb2.LinuxResources,
    ) -> None:
        return None

    async def post_update_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        return None

    async def stop_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        return None

    async def remove_pod_sandbox(self, pod: api_pb2.PodSandbox) -> None:
        return None

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> tuple[api_pb2.ContainerAdjustment | None, Updates]:
        """Adjust the container being created; updates may target only other containers."""
        return None, []

    async def post_create_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        return None

    async def start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        return None

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        return None

    async def update_container(
        self,
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
        resources: api_pb2.LinuxResources,
    ) -> Updates:
        """An entry for `ctr` itself replaces the requested resources."""
        return []

    async def post_update_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        return None

    async def stop_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Updates:
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        return None

    async def validate_container_adjustment(
        self, req: api_pb2.ValidateContainerAdjustmentRequest
    ) -> None:
        """Raise to reject the merged adjustment; the exception text becomes the reason."""
        return None


_PLUGIN_METHODS = api_pb2.DESCRIPTOR.services_by_name["Plugin"].methods


def _snake(name: str) -> str:
    """RPC name to handler name: "PostCreateContainer" -> "post_create_container"."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# Handler name -> the event it subscribes to: the Plugin RPCs that have an Event of their name.
HANDLER_EVENTS: dict[str, int] = {
    _snake(m.name): api_pb2.Event.Value(_snake(m.name).upper())
    for m in _PLUGIN_METHODS
    if _snake(m.name).upper() in api_pb2.Event.DESCRIPTOR.values_by_name
}

# Notification RPCs (NRI >= v0.12), the events that only tell of a pod or container and expect
# an empty answer: RPC name -> (handler, takes a container).
_NOTIFICATIONS: dict[str, tuple[str, bool]] = {
    m.name: (_snake(m.name), "container" in m.input_type.fields_by_name)
    for m in _PLUGIN_METHODS
    if _snake(m.name) in HANDLER_EVENTS
    and not m.output_type.fields
    and set(m.input_type.fields_by_name) <= {"pod", "container"}
}

# Older runtimes deliver the same notifications through StateChange: event -> (handler, ctr?).
STATE_CHANGE_EVENTS: dict[int, tuple[str, bool]] = {
    HANDLER_EVENTS[handler]: (handler, with_ctr) for handler, with_ctr in _NOTIFICATIONS.values()
}


def overridden_events(plugin: Plugin) -> int:
    """Mask of the events whose handlers `plugin`'s class overrides."""
    mask = 0
    for name, event in HANDLER_EVENTS.items():
        if getattr(type(plugin), name) is not getattr(Plugin, name):
            mask |= event_bit(event)
    return mask


class Refused(Exception):
    """Raised by a handler to fail the request; the runtime reports the message as is."""


class StubError(Exception):
    """The stub cannot work: bad identity, unusable socket, or the runtime refused us."""


class NotConnectedError(StubError):
    """No registered connection to the runtime right now."""


class UpdateFailedError(StubError):
    """The runtime refused some container updates."""

    def __init__(self, message: str, failed: Sequence[api_pb2.ContainerUpdate] = ()) -> None:
        super().__init__(message)
        self.failed = list(failed)


@dataclass
class _Session:
    """State of one connection to the runtime; a reconnect starts a fresh one."""

    mux: Mux
    client: TtrpcClient
    registered: bool = False
    ready: bool = False
    events: int = 0
    sync_pods: list[api_pb2.PodSandbox] = field(default_factory=list)
    sync_containers: list[api_pb2.Container] = field(default_factory=list)


Hook = Callable[[], Awaitable[None] | None]
DisconnectHook = Callable[[BaseException | None], Awaitable[None] | None]


async def _call_hook(hook: Callable[..., Awaitable[None] | None] | None, *args: Any) -> None:
    if hook is None:
        return
    try:
        result = hook(*args)
        if result is not None:
            await result
    except Exception:
        log.exception("NRI connection hook failed")


class Stub:
    """Connects `plugin` to the runtime and keeps it connected (see the module docstring).

    `registered` turns true once RegisterPlugin succeeded, `ready` once Synchronize has been
    answered; `on_connect` runs when ready, `on_disconnect(error)` when a connection ends.
    """

    def __init__(
        self,
        plugin: Plugin,
        name: str,
        idx: str,
        socket_path: str | None = None,
        *,
        sock: socket.socket | None = None,
        environ: Mapping[str, str] | None = None,
        registration_timeout: float = 5.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        jitter: Callable[[], float] = random.random,
        on_connect: Hook | None = None,
        on_disconnect: DisconnectHook | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.plugin = plugin
        """Whose handlers serve requests; may be replaced while Configure is being handled,
        the event mask then being the new plugin's."""
        self.name = env.get(NAME_ENV) or name
        self.idx = env.get(IDX_ENV) or idx
        if not _NAME.match(self.name):
            raise StubError(f"invalid plugin name {self.name!r}: use letters, digits, _.+-")
        if not _IDX.match(self.idx):
            raise StubError(f"invalid plugin index {self.idx!r}: must be two digits")
        self.socket_path = socket_path or DEFAULT_SOCKET_PATH
        self._sock = sock
        if sock is None and env.get(SOCKET_ENV):
            self._sock = _socket_from_env(env[SOCKET_ENV])
        self.launched = self._sock is not None
        """True when the runtime handed us the socket: we then exit with it, never reconnect."""
        self.registration_timeout = registration_timeout
        self.request_timeout: float | None = None
        """The runtime's per-request timeout in seconds, from Configure (None: not reported)."""
        self.runtime: api_pb2.ConfigureRequest | None = None
        """The last Configure request: runtime name, version, timeouts, NRI version."""
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._jitter = jitter
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self._session: _Session | None = None
        self._stopping = asyncio.Event()
        self._ready_changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """How many connections reached registration; a reconnect shows as an increment."""
        self.unreachable = ""
        """Why the last attempt to connect failed ("" once one succeeded), for readiness."""

    @property
    def registered(self) -> bool:
        return self._session is not None and self._session.registered

    @property
    def ready(self) -> bool:
        return self._session is not None and self._session.ready

    @property
    def events(self) -> int:
        """The event mask sent in the last Configure reply."""
        return 0 if self._session is None else self._session.events

    async def wait_ready(self) -> None:
        async with self._ready_changed:
            await self._ready_changed.wait_for(lambda: self.ready)

    async def _notify_ready(self) -> None:
        async with self._ready_changed:
            self._ready_changed.notify_all()

    async def _became_ready(self) -> None:
        await self._notify_ready()
        await _call_hook(self.on_connect)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def backoff(self, attempt: int) -> float:
        """Delay before reconnect attempt `attempt` (0-based): doubling, capped, half jittered."""
        base = min(self.backoff_max, self.backoff_initial * (2 ** min(attempt, 32)))
        return base * (0.5 + 0.5 * self._jitter())

    async def run(self) -> None:
        """Serve the runtime until `stop()`, or until a launched plugin's socket closes."""
        attempt = 0
        while not self._stopping.is_set():
            try:
                trunk, writer = await self._open()
            except OSError as exc:
                if self.launched:
                    raise StubError(f"cannot use the NRI socket handed over: {exc}") from exc
                delay = self.backoff(attempt)
                attempt += 1
                why = unreachable(self.socket_path, exc)
                # A warning for the operator when the reason is new; its retries at info level.
                level = logging.INFO if why == self.unreachable else logging.WARNING
                self.unreachable = why
                log.log(
                    level,
                    "NRI runtime not reachable",
                    why=why,
                    path=self.socket_path,
                    error=exc.strerror or str(exc),
                    errno=errno.errorcode.get(exc.errno or 0, exc.errno),
                    retry_in=round(delay, 2),
                )
                await self._sleep(delay)
                continue
            self.unreachable = ""
            registered = await self._serve(trunk, writer)
            if self.launched:
                return
            attempt = 0 if registered else attempt + 1
            if not self._stopping.is_set():
                delay = self.backoff(0 if registered else attempt)
                log.info("reconnecting to the NRI runtime", retry_in=round(delay, 2))
                await self._sleep(delay)

    async def stop(self) -> None:
        """Drop the connection and make `run()` return."""
        self._stopping.set()
        if self._session is not None:
            await self._session.mux.close()

    async def update_containers(self, updates: Sequence[api_pb2.ContainerUpdate]) -> None:
        """Ask the runtime to update running containers, outside of any request handler."""
        session = self._session
        if session is None or not session.registered:
            raise NotConnectedError("not registered with the NRI runtime")
        req = with_updates(api_pb2.UpdateContainersRequest(), updates)
        if not isinstance(req, bytes):
            req = req.SerializeToString()
        try:
            payload = await session.client.call(RUNTIME_SERVICE, "UpdateContainers", req)
        except TtrpcError as exc:
            if session.client.closed:
                raise NotConnectedError(f"NRI connection lost during update: {exc}") from exc
            raise UpdateFailedError(f"runtime refused container updates: {exc}") from exc
        failed = api_pb2.UpdateContainersResponse.FromString(payload).failed
        if failed:
            ids = ", ".join(u.container_id for u in failed)
            raise UpdateFailedError(f"runtime failed to update containers: {ids}", failed)

    async def _sleep(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _open(self) -> tuple[Trunk, asyncio.StreamWriter]:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            if sock.fileno() < 0:
                raise OSError("NRI socket already closed")
            return await connect(sock=sock)
        return await connect(self.socket_path)

    async def _serve(self, trunk: Trunk, writer: asyncio.StreamWriter) -> bool:
        """One connection from registration to close; returns whether registration succeeded."""
        mux = Mux(trunk, writer)
        plugin_conn = mux.open(PLUGIN_SERVICE_CONN)
        runtime_conn = mux.open(RUNTIME_SERVICE_CONN)
        session = _Session(mux=mux, client=TtrpcClient(runtime_conn))
        server = TtrpcServer(plugin_conn, {PLUGIN_SERVICE: _PluginService(self, session).methods})
        self._session = session
        session.client.start()
        mux.start()
        server_task = asyncio.get_running_loop().create_task(server.serve())
        error: BaseException | None = None
        try:
            req = api_pb2.RegisterPluginRequest(
                plugin_name=self.name, plugin_idx=self.idx, NRI_version=NRI_VERSION
            )
            await session.client.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                req.SerializeToString(),
                timeout=self.registration_timeout,
            )
            session.registered = True
            self.connections += 1
            log.info("registered with the NRI runtime", plugin=f"{self.idx}-{self.name}")
            # stop() may have come while we were connecting, before it could see this session
            await _first_of(mux.wait_closed(), self._stopping.wait())
            error = mux.error
        except (TtrpcError, ConnectionError, OSError, TimeoutError) as exc:
            error = exc
            if not mux.closed:
                log.error("NRI registration failed", error=str(exc))
        finally:
            was_registered = session.registered
            session.registered = session.ready = False
            await mux.close()
            await session.client.close()
            server_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await server_task
            if self._session is session:
                self._session = None
            await self._notify_ready()
        if was_registered:
            log.info("NRI connection closed", error=str(error) if error else None)
            await _call_hook(self.on_disconnect, error)
        return was_registered


ENABLE_NRI = "the snippets that enable NRI in each runtime are in packaging/runtime/"


def unreachable(path: str, exc: OSError) -> str:
    """Why the runtime's NRI socket at `path` could not be connected to, and what to check, for
    the operator: the runtimes ship with NRI off or on another path often enough."""
    if isinstance(exc, FileNotFoundError):
        return (
            f"no NRI socket at {path}: NRI is off in the runtime (containerd 1.7's default) or "
            f"listens on another path (nri.socket); {ENABLE_NRI}"
        )
    if isinstance(exc, ConnectionRefusedError):
        return (
            f"nothing accepts connections on {path}: the runtime that made it is not running, "
            f"or its NRI is off; {ENABLE_NRI}"
        )
    if isinstance(exc, PermissionError):
        return f"no permission to connect to {path}: run as root (the directory is mode 0700)"
    return f"cannot connect to {path}: {exc.strerror or exc}"


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return as soon as one of `waits` finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


RequestHandler = Callable[[Any, CallContext], Awaitable[Message | bytes]]
"""A decoded request in, the response message (or its encoding) out."""


def _endpoint(request: type[Message], handler: RequestHandler) -> Handler:
    """The ttrpc handler for one RPC: decode, call, encode, and log when the answer comes
    after the runtime's deadline (the runtime drops the plugin for it)."""

    async def endpoint(payload: bytes, ctx: CallContext) -> bytes:
        try:
            req = request.FromString(payload)
        except DecodeError as exc:
            raise TtrpcError(Code.INTERNAL, f"cannot decode {request.__name__}: {exc}") from None
        try:
            reply = await handler(req, ctx)
            return reply if isinstance(reply, bytes) else reply.SerializeToString()
        except Refused as exc:
            raise TtrpcError(Code.UNKNOWN, str(exc)) from exc
        finally:
            late = ctx.remaining()
            if late is not None and late < 0:
                log.warning(
                    "NRI request answered after the runtime's deadline; it drops the plugin",
                    method=ctx.method,
                    late_seconds=round(-late, 3),
                )

    return endpoint


def _socket_from_env(value: str) -> socket.socket:
    try:
        fd = int(value)
    except ValueError:
        raise StubError(f"{SOCKET_ENV}={value!r} is not a file descriptor number") from None
    try:
        return socket.socket(fileno=fd)
    except OSError as exc:
        raise StubError(f"{SOCKET_ENV}={fd} is not a usable socket: {exc}") from exc


def _debug_enabled() -> bool:
    """Whether structlog passes debug lines on. Asked of the configured wrapper class: the
    module logger is a lazy proxy that binds a new logger for every call, a visible share of a
    short request's time for a line that is filtered out in production."""
    check = getattr(structlog.get_config()["wrapper_class"], "is_enabled_for", None)
    try:
        return check is None or bool(check(None, logging.DEBUG))
    except Exception:  # a wrapper class whose check needs an instance: let the logger decide
        return True


def _log_event(method: str, pod: Any, ctr: Any = None) -> None:
    """One debug line per event the runtime sends, whatever the plugin does with it."""
    if not _debug_enabled():
        return
    if ctr is None:
        log.debug("NRI event", method=method, pod=f"{pod.namespace}/{pod.name}")
    else:
        log.debug("NRI event", method=method, pod=f"{pod.namespace}/{pod.name}", container=ctr.name)


class _PluginService:
    """The Plugin service of one connection: calls the plugin's handlers for each request.

    Its methods are named after the RPCs they serve; the notifications share one handler.
    """

    def __init__(self, stub: Stub, session: _Session) -> None:
        self.stub = stub
        self.session = session
        self.methods: dict[str, Handler] = {}
        for m in _PLUGIN_METHODS:
            if m.name in _NOTIFICATIONS:
                handler = self._notification(*_NOTIFICATIONS[m.name])
            else:
                handler = getattr(self, _snake(m.name), None)
                if handler is None:
                    continue  # Shutdown: left UNIMPLEMENTED
            self.methods[m.name] = _endpoint(GetMessageClass(m.input_type), handler)

    @property
    def plugin(self) -> Plugin:
        """The stub's plugin at each request: a stand-in may hand over to the plugin proper
        during Configure (see `Stub.plugin`)."""
        return self.stub.plugin

    async def configure(self, req: api_pb2.ConfigureRequest, ctx: CallContext) -> Message:
        self.stub.runtime = req
        self.stub.request_timeout = req.request_timeout / 1000 if req.request_timeout else None
        if req.registration_timeout:
            self.stub.registration_timeout = req.registration_timeout / 1000
        # an explicit mask is the plugin's own choice; ours is cut to what the runtime knows
        explicit = await self.plugin.configure(req)
        mask = explicit or overridden_events(self.plugin) & valid_events(req)
        self.session.events = mask
        log.info(
            "configured by the NRI runtime",
            runtime=req.runtime_name,
            runtime_version=req.runtime_version,
            nri_version=req.NRI_version or None,
            events=hex(mask),
            request_timeout=self.stub.request_timeout,
        )
        return api_pb2.ConfigureResponse(events=mask)

    async def synchronize(
        self, req: api_pb2.SynchronizeRequest, ctx: CallContext
    ) -> Message | bytes:
        self.session.sync_pods.extend(req.pods)
        self.session.sync_containers.extend(req.containers)
        if req.more:
            return api_pb2.SynchronizeResponse(more=True)
        pods, containers = self.session.sync_pods, self.session.sync_containers
        self.session.sync_pods, self.session.sync_containers = [], []
        updates = await self.plugin.synchronize(pods, containers)
        reply = with_updates(api_pb2.SynchronizeResponse(), updates)
        if not self.session.ready:
            self.session.ready = True
            # debug: the plugin logs the synchronization with what it made of it
            log.debug("synchronized", pods=len(pods), containers=len(containers))
            # after the reply: a hook calling update_containers must not hold up Synchronize
            self.stub._spawn(self.stub._became_ready())
        return reply

    async def state_change(self, req: api_pb2.StateChangeEvent, ctx: CallContext) -> Message:
        target = STATE_CHANGE_EVENTS.get(req.event)
        if target is None:
            raise TtrpcError(Code.INVALID_ARGUMENT, f"StateChange for unexpected event {req.event}")
        handler, with_ctr = target
        _log_event(api_pb2.Event.Name(req.event), req.pod, req.container if with_ctr else None)
        method = getattr(self.plugin, handler)
        await (method(req.pod, req.container) if with_ctr else method(req.pod))
        return api_pb2.Empty()

    async def create_container(
        self, req: api_pb2.CreateContainerRequest, ctx: CallContext
    ) -> Message | bytes:
        _log_event(ctx.method, req.pod, req.container)
        adjust, updates = await self.plugin.create_container(req.pod, req.container)
        return create_reply(adjust, updates)

    async def update_container(
        self, req: api_pb2.UpdateContainerRequest, ctx: CallContext
    ) -> Message | bytes:
        _log_event(ctx.method, req.pod, req.container)
        updates = await self.plugin.update_container(req.pod, req.container, req.linux_resources)
        return with_updates(api_pb2.UpdateContainerResponse(), updates)

    async def stop_container(
        self, req: api_pb2.StopContainerRequest, ctx: CallContext
    ) -> Message | bytes:
        _log_event(ctx.method, req.pod, req.container)
        updates = await self.plugin.stop_container(req.pod, req.container)
        return with_updates(api_pb2.StopContainerResponse(), updates)

    async def update_pod_sandbox(
        self, req: api_pb2.UpdatePodSandboxRequest, ctx: CallContext
    ) -> Message:
        await self.plugin.update_pod_sandbox(
            req.pod, req.overhead_linux_resources, req.linux_resources
        )
        return api_pb2.UpdatePodSandboxResponse()

    async def validate_container_adjustment(
        self, req: api_pb2.ValidateContainerAdjustmentRequest, ctx: CallContext
    ) -> Message:
        try:
            await self.plugin.validate_container_adjustment(req)
        except Exception as exc:
            return api_pb2.ValidateContainerAdjustmentResponse(reject=True, reason=str(exc))
        return api_pb2.ValidateContainerAdjustmentResponse()

    def _notification(self, handler: str, with_ctr: bool) -> RequestHandler:
        async def notify(req: Any, ctx: CallContext) -> Message:
            _log_event(ctx.method, req.pod, req.container if with_ctr else None)
            method = getattr(self.plugin, handler)
            await (method(req.pod, req.container) if with_ctr else method(req.pod))
            return api_pb2.Empty()  # every notification's response is empty on the wire

        return notify
