"""The daemon assembled: configuration, topology, policy, plugin, NRI stub, status endpoint,
reload and signals, for `nri-topology run`.

Start-up problems (bad configuration, another instance holding the state file, unreadable sysfs,
a policy that cannot be built for this machine) end the process with a clear message before it
connects: a plugin that registers and then refuses every container would be worse. A plugin the
runtime launched is configured by the runtime instead: the text of its conf.d file arrives with the
first Configure, and the runtime never restarts it with another, so it takes nothing (state file,
topology, policy, metrics port) before that Configure; a problem found then fails the Configure and
ends the process with the same exit status. After start-up
nothing ends it but SIGTERM/SIGINT or, for a plugin the runtime launched, the runtime closing its
socket. A final checkpoint that cannot be written makes the exit status non-zero: the state on
disk is older than the placements, and whoever restarts the plugin should know.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import structlog

from nri_topology import __version__
from nri_topology.config.load import (
    DEFAULT_PATH,
    MAX_CONFIG_BYTES,
    ConfigError,
    parse_config,
    read_config,
    with_overrides,
)
from nri_topology.config.schema import Config
from nri_topology.configured import policy_options, tier_overrides
from nri_topology.daemon import coexist, logs, takeover
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.health import StatusServer
from nri_topology.daemon.hints import HintFinder
from nri_topology.daemon.lock import InstanceLock, LockedError
from nri_topology.daemon.placement_file import PlacementFiles
from nri_topology.daemon.plugin import Settings, TopologyPlugin
from nri_topology.daemon.reload import Reloader
from nri_topology.daemon.schedule import Pacing
from nri_topology.daemon.verify import cgroup_root
from nri_topology.kubelet.managers import KubeletView
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import SOCKET_ENV, Plugin, Refused, Stub, StubError
from nri_topology.nrt.build import node_name, node_resource_topology
from nri_topology.nrt.cluster import in_cluster, wanted
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import PolicyError
from nri_topology.topology.devices import DeviceLocator
from nri_topology.topology.model import Machine
from nri_topology.topology.sysfs import TopologyError, read_machine

if TYPE_CHECKING:
    from nri_topology.nrt.publish import Publisher

_log = structlog.get_logger("nri_topology.service")
TAKEOVER_CHECK_S = 10.0  # how often a standby proves again that it could take over


@dataclass(frozen=True, slots=True)
class Overrides:
    """Command-line values that win over the configuration file (None = use the file's)."""

    socket: str | None = None
    cri_socket: str | None = None
    plugin_name: str | None = None
    plugin_index: str | None = None
    sysfs: str | None = None
    state: str | None = None
    metrics_host: str | None = None
    metrics_port: int | None = None  # 0 turns the endpoint off
    log_format: str | None = None
    log_level: str | None = None


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to fix."""


def effective(config: Config, o: Overrides) -> Config:
    """`config` with the command-line overrides applied and validated (ConfigError if invalid)."""

    def given(**values: Any) -> dict[str, Any]:
        return {k: v for k, v in values.items() if v is not None}

    metrics = given(address=o.metrics_host, port=o.metrics_port or None)
    if o.metrics_port == 0:
        metrics["enabled"] = False
    updates = {
        "nri": given(socket=o.socket, plugin_name=o.plugin_name, plugin_index=o.plugin_index),
        "topology": given(sysfs_root=o.sysfs),
        "updates": given(cri_socket=o.cri_socket),
        "state": given(path=o.state),
        "metrics": metrics,
        "logging": given(format=o.log_format, level=o.log_level),
    }
    return with_overrides(config, updates, "command line")


def settings_of(config: Config) -> Settings:
    e = config.expose
    return Settings(
        expose_env=e.enabled,
        env_prefix=e.env_prefix,
        expose_file=e.file,
        file_dir=e.file_dir,
        cgroup_root=cgroup_root(Path(config.topology.sysfs_root)),
        verify_interval_s=config.verify.interval_seconds,
        restart_hold_s=config.restarts.hold_seconds,
        pacing=pacing_of(config),
        pace_old_runtimes=config.updates.in_reply is False,
        transport=config.updates.transport,
        cri_socket=config.updates.cri_socket,
        cgroup_first=config.updates.cgroup_first,
    )


def pacing_of(config: Config) -> Pacing | None:
    """How re-pins of other containers go out; None: in the reply."""
    u = config.updates
    if u.in_reply is True:
        return None
    return Pacing(
        batch=u.batch,
        gap_s=u.gap_seconds,
        grow_delay_s=u.grow_delay_seconds,
        start_wait_s=u.start_wait_seconds,
    )


def hint_finder(config: Config) -> HintFinder | None:
    """Where the daemon looks for topology hints; None when nowhere."""
    hints = config.hints
    locator = DeviceLocator(config.topology.sysfs_root) if hints.devices else None
    client = None
    if hints.pod_resources.enabled:
        from nri_topology.kubelet.podresources import PodResourcesClient  # loads grpc

        pr = hints.pod_resources
        client = PodResourcesClient(pr.socket, pr.timeout_seconds)
    if locator is None and client is None:
        return None
    return HintFinder(locator, client, hints.pod_resources.budget_seconds)


PolicyFactory = Callable[[Machine, Options], PolicyPort]


class _AwaitingConfigure(Plugin):
    """The stub's plugin in a runtime-launched daemon until the first Configure, which carries
    the configuration: `start` builds the plugin proper from it and hands the stub over to it."""

    def __init__(self, start: Callable[[api_pb2.ConfigureRequest], Awaitable[Plugin]]) -> None:
        self._start = start

    async def configure(self, req: api_pb2.ConfigureRequest) -> int | None:
        plugin = await self._start(req)
        return await plugin.configure(req)


def _default_policy(machine: Machine, options: Options) -> PolicyPort:
    from nri_topology.policy.policy import Policy  # the policy package is heavy; load it here

    return Policy(machine, options)


class Daemon:
    """One run of the plugin; `serve()` returns the process exit status."""

    def __init__(
        self,
        config_path: Path | None,
        overrides: Overrides = Overrides(),
        *,
        log_stream: IO[str] | None = None,
        policy_factory: PolicyFactory = _default_policy,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config_path = config_path
        self.overrides = overrides
        self._log_stream = log_stream
        self._policy_factory = policy_factory
        self._environ = environ
        self.config = Config()
        self.plugin: TopologyPlugin | None = None
        self.machine: Machine | None = None
        self.status: StatusServer | None = None
        self.reloader: Reloader[Config] | None = None
        self.publisher: Publisher | None = None  # set when publishing NodeResourceTopology
        self.lock: InstanceLock | None = None
        self.stub: Stub | None = None
        env = os.environ if environ is None else environ
        self.launched = bool(env.get(SOCKET_ENV))
        """Launched by the runtime: configured by its first Configure (see the module doc)."""
        self.standby: str | None = None  # who holds the state file while this one waits
        # Why the standby could not take over ("" : it could; None: not checked yet).
        self.cannot_take_over: str | None = None
        self.kubelet = KubeletView()  # the kubelet's managers, read at start and on reloads
        self._kubelet_stamp: tuple[int, int, int] | None = None  # its CPU state file's, as read
        # The configuration as given, before what the kubelet holds is taken out of it.
        self._asked = self.config
        self._stop = asyncio.Event()
        self._failed = 0  # exit status of a start-up that failed after connecting
        self._watcher: asyncio.Task[None] | None = None

    def setup(self) -> None:
        """Everything that can fail before connecting; raises StartupError."""
        try:
            loaded = read_config(self.config_path)
        except ConfigError as exc:
            raise StartupError(f"invalid configuration:\n{exc}") from None
        try:
            self.config = effective(loaded.config, self.overrides)
        except ConfigError as exc:
            raise StartupError(f"invalid command-line option:\n{exc}") from None
        logs.configure(
            self.config.logging.format, self.config.logging.level, self._log_stream or sys.stderr
        )
        for note in loaded.notes:
            _log.info(note)
        if self.launched:
            _log.info("launched by the runtime, waiting for its configuration")
            return
        self._start()

    def _start(self) -> None:
        """Take the state file and build the plugin from `self.config`; raises StartupError."""
        self._asked = self.config
        try:
            self.config = self._beside_kubelet(self.config)
        except coexist.KubeletActive as exc:
            raise StartupError(str(exc)) from None
        except ConfigError as exc:
            raise StartupError(f"the kubelet's state does not fit:\n{exc}") from None
        self.lock = InstanceLock(Path(self.config.state.path))
        try:
            self.lock.acquire()
        except LockedError as exc:
            # A plugin the runtime launches cannot stand by inside its Configure.
            if not self.config.state.lock_wait_seconds or self.launched:
                raise StartupError(str(exc)) from None
            self.standby = str(exc)  # `serve` waits for it, the health endpoint up
        except OSError as exc:
            raise StartupError(f"cannot lock {self.lock.path}: {exc.strerror or exc}") from None
        try:
            self._build()
        except BaseException:
            self.close()
            self.plugin = self.publisher = self.reloader = None  # half built: never served
            raise

    def close(self) -> None:
        """Release the state file to the next instance (`serve` does it when it returns)."""
        if self.lock is not None:
            self.lock.release()

    def _build(self) -> None:
        topology = self.config.topology
        try:
            machine = read_machine(
                Path(topology.sysfs_root),
                proc_root=Path(topology.proc_root) if topology.proc_root else None,
                tier_overrides=tier_overrides(self.config),
            )
        except (TopologyError, OSError) as exc:
            raise StartupError(f"cannot read the machine topology: {exc}") from None
        for warning in machine.warnings:
            _log.warning("topology", detail=warning)
        self.machine = machine
        try:
            policy = self._policy_factory(machine, self._options(self.config))
        except PolicyError as exc:
            raise StartupError(f"the policy cannot run on this machine: {exc}") from None
        self.plugin = TopologyPlugin(
            policy,
            checkpoint=Checkpoint(Path(self.config.state.path)),
            settings=settings_of(self.config),
            runtime_config=None if self.launched else self._runtime_config,
            hints=hint_finder(self.config),
            files=PlacementFiles(Path(self.config.state.path).parent / "containers"),
        )
        self.plugin.kubelet_refresh = self._kubelet_refresh
        self._show_kubelet()
        self.publisher = self._publisher(machine)
        self.reloader = self._reloader()
        if self.reloader is not None:
            self.reloader.mark_current()
        _log.info(
            "starting",
            version=__version__,
            cpus=len(machine.cpus),
            nodes=len(machine.nodes),
            socket=self.config.nri.socket,
            state=self.config.state.path,
        )

    async def apply(self, config: Config) -> None:
        """Apply a new configuration's live parts; the rest needs a restart (said in the log)."""
        assert self.plugin is not None
        asked = effective(config, self.overrides)
        new = self._beside_kubelet(asked)
        self._show_kubelet()
        await self.plugin.reconfigure(self._options(new))
        self._asked = asked
        self.plugin.settings = settings_of(new)
        restart_only = [
            name
            for name in ("topology", "nri", "state", "metrics", "logging", "hints", "nrt", "verify")
            if getattr(new, name) != getattr(self.config, name)
        ]
        if restart_only:
            _log.warning("changed settings take effect on restart", sections=restart_only)
        self.config = replace_config(self.config, new)

    async def _runtime_config(self, text: str) -> None:
        """Configuration text in a Configure after start-up (runtimes send a drop-in file's to
        the plugins they launch, which are configured by the first one: `_configured`)."""
        try:
            config = parse_config(text, "NRI Configure")
            await self.apply(config)
        except (ConfigError, PolicyError, coexist.KubeletActive) as exc:
            assert self.plugin is not None
            self.plugin.metrics.error("config")
            _log.error("runtime-supplied configuration refused, keeping defaults", error=str(exc))

    async def _configured(self, req: api_pb2.ConfigureRequest) -> Plugin:
        """Start a launched daemon with the first Configure's configuration (the file's, or the
        defaults, when it has none or an invalid one); Refused when it cannot start."""
        refused = ""
        if req.config.strip():
            try:
                self.config = effective(parse_config(req.config, "NRI Configure"), self.overrides)
            except ConfigError as exc:
                refused = str(exc)
        logs.configure(
            self.config.logging.format, self.config.logging.level, self._log_stream or sys.stderr
        )
        try:
            self._start()
            assert self.plugin is not None and self.stub is not None
            self.plugin.stub = self.stub
            await self._open()
        except (StartupError, OSError) as exc:
            why = str(exc) if isinstance(exc, StartupError) else f"metrics endpoint: {exc}"
            self._failed = 2 if isinstance(exc, StartupError) else 1
            _log.error("cannot start with the runtime's configuration", error=why)
            self._stop.set()
            raise Refused(f"nri-topology: {why}") from None
        if refused:
            self.plugin.metrics.error("config")
            _log.error("runtime-supplied configuration refused, using the file's", error=refused)
        self.stub.plugin = self.plugin
        return self.plugin

    async def _open(self) -> None:
        """Open the metrics endpoint (OSError if it cannot), then publish and watch."""
        await self._open_status()
        self._open_watchers()

    async def _open_status(self) -> None:
        """The metrics, health and status endpoint; OSError if it cannot listen."""
        plugin = self.plugin
        assert plugin is not None
        config = self.config
        if config.metrics.enabled:
            from nri_topology.daemon.status import StatusPages  # loads the simulator's renderers

            assert self.machine is not None
            pages = StatusPages(
                plugin, self.machine, self.node_name(), kubelet=lambda: self.kubelet.summary()
            )
            self.status = StatusServer(
                plugin.metrics.registry,
                self._ready,
                config.metrics.address,
                config.metrics.port,
                pages=pages.routes(),
            )
            await self.status.start()

    def _open_watchers(self) -> None:
        """Watch the configuration file (publishing starts once synchronized: `_connected`)."""
        if self.reloader is not None:
            loop = asyncio.get_running_loop()
            self.reloader.install_sighup(loop)
            self._watcher = loop.create_task(self.reloader.watch())

    def _connected(self) -> None:
        """Registered and synchronized: from now on the placements are this instance's to
        publish; an instance that never registers publishes none it is not making."""
        if self.publisher is not None:
            self.publisher.start()

    def _disconnected(self, error: BaseException | None) -> None:
        if self.plugin is not None:
            self.plugin.metrics.registered.set(0)

    async def serve(self) -> int:
        """Connect and serve until stopped; 0 on a clean stop. Releases the state file's lock."""
        try:
            return await self._serve()
        finally:
            self.close()

    async def _serve(self) -> int:
        config = self.config
        loop = asyncio.get_running_loop()
        first = self.plugin if self.plugin is not None else _AwaitingConfigure(self._configured)
        try:
            stub = Stub(
                first,
                config.nri.plugin_name,
                config.nri.plugin_index,
                config.nri.socket,
                environ=self._environ,
                on_connect=self._connected,
                on_disconnect=self._disconnected,
            )
        except StubError as exc:
            _log.error("cannot start the NRI stub", error=str(exc))
            return 1
        self.stub = stub
        if self.plugin is not None:
            self.plugin.stub = stub
            try:
                await self._open_status()
            except OSError as exc:
                _log.error("cannot open the metrics endpoint", error=str(exc))
                return 1
            if self.standby is not None:  # health endpoint up, the runtime not yet asked
                waited = await self._wait_for_lock()
                if waited is not None:
                    if self.status is not None:
                        await self.status.close()
                    return waited
            self._open_watchers()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        runner = loop.create_task(stub.run())
        stopper = loop.create_task(self._stop.wait())
        status = 0
        try:
            await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if runner.done() and runner.exception() is not None:
                _log.error("NRI connection failed", error=str(runner.exception()))
                status = 1
            elif not self._failed:
                _log.info("stopping", reason="signal" if stopper.done() else "runtime closed")
        finally:
            if self.publisher is not None:  # its last write lands before "shut down", none after
                await self.publisher.close()
            if self.plugin is not None and not await self.plugin.shutdown():
                status = status or 1
            await stub.stop()  # the plugin's shutdown did, unless it was never built
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(runner, 5)
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watcher
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            if self.status is not None:
                await self.status.close()
        return self._failed or status

    def stop(self) -> None:
        self._stop.set()

    def _beside_kubelet(self, config: Config) -> Config:
        """`config` as it applies beside the kubelet's managers now (`coexist`); raises
        KubeletActive when they run and the configuration says to refuse."""
        stamp = coexist.stamp(config.kubelet.cpu_manager_state)  # before reading: never newer
        view = coexist.read_view(config.kubelet)
        coexist.check(view, config.kubelet)
        self.kubelet, self._kubelet_stamp = view, stamp
        return coexist.beside(config, view)

    async def _kubelet_refresh(self) -> None:
        """Before placing a container the kubelet's static CPU manager may pin: it writes its
        state file before it creates or re-pins one, so a changed file is read again and applied,
        and the container keeps the kubelet's cpuset, every other one kept off it."""
        section = self.config.kubelet
        if section.when_active != "avoid" or not self.kubelet.static_cpu:
            return
        stamp = coexist.stamp(section.cpu_manager_state)
        if stamp == self._kubelet_stamp:
            return
        view = replace(self.kubelet, cpu=coexist.read_view(section).cpu)
        self._kubelet_stamp = stamp
        if view.cpu == self.kubelet.cpu:
            return
        before, self.kubelet = self.kubelet, view
        assert self.plugin is not None
        try:
            new = coexist.beside(self._asked, view)
            await self.plugin.reconfigure(self._options(new))
        except (ConfigError, PolicyError) as exc:
            self.kubelet = before
            _log.error("the kubelet's new pins cannot be left to it", error=str(exc))
            return
        self.config = self.config.model_copy(update={"policy": new.policy})
        self._show_kubelet()
        _log.info("the kubelet's static CPU manager pins anew", **view.summary())

    def _options(self, config: Config) -> Options:
        """The policy options of `config` beside the kubelet's managers as last read."""
        return coexist.outside(policy_options(config), self.kubelet, config.kubelet)

    def _show_kubelet(self) -> None:
        if self.plugin is not None:
            kubelet = self.kubelet
            metrics = self.plugin.metrics
            for manager, on in (("cpu", kubelet.static_cpu), ("memory", kubelet.static_memory)):
                metrics.kubelet_manager.labels(manager).set(int(on))
            metrics.kubelet_memory.clear()
            for (node, resource), size in kubelet.memory_taken.items():
                metrics.kubelet_memory.labels(str(node), resource).set(size)

    def _ready(self) -> tuple[bool, str]:
        """Readiness: a standby once it has shown it could take over (a DaemonSet's surge update
        removes the old pod as soon as the new one is ready: `takeover`); else the plugin's."""
        if self.standby is not None:
            why = self.cannot_take_over
            if why is None:
                return False, "standby, checking that it could take over"
            if why:
                return False, f"standby, could not take over: {why}"
            return True, f"standby, waiting for the state file: {self.standby}"
        assert self.plugin is not None
        return self.plugin.ready()

    def _takeover_needs(self) -> takeover.Needs:
        plugin = self.plugin
        assert plugin is not None
        s = plugin.settings
        return takeover.Needs(
            self.config.nri.socket,
            takeover.cri_sockets(s.transport, s.cri_socket),
            s.cgroup_root if plugin.verifier is not None else None,
        )

    async def _prove_takeover(self) -> None:
        """While standing by: check what taking over needs, now and every
        `TAKEOVER_CHECK_S`; a warning each time the reason changes, not at every check."""
        needs = self._takeover_needs()
        while True:
            why = await takeover.problem(needs)
            if why != self.cannot_take_over:
                if why:
                    _log.warning("standing by, but could not take over: not ready", reason=why)
                else:
                    _log.info("standing by, could take over: ready")
            self.cannot_take_over = why
            await asyncio.sleep(TAKEOVER_CHECK_S)

    async def _wait_for_lock(self) -> int | None:
        """Stand by until the instance holding the state file stops (bounded by
        `state.lock_wait_seconds`); then this one connects and adopts every placement as the
        runtime reports it. None once the lock is held; else the exit status: 0 when stopped
        while waiting, 2 when the wait ran out."""
        assert self.lock is not None and self.plugin is not None
        limit = self.config.state.lock_wait_seconds
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.plugin.metrics.standby.set(1)
        _log.warning(
            "another instance holds the state file, standing by",
            holder=self.standby,
            wait_seconds=limit,
        )

        def still(exc: LockedError) -> None:
            self.standby = str(exc)

        waiter = loop.create_task(self.lock.wait(limit, still))
        stopper = loop.create_task(self._stop.wait())
        prover = loop.create_task(self._prove_takeover())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            waiter.cancel()
            prover.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prover
            self.plugin.metrics.standby.set(0)
        if not waiter.done() or waiter.cancelled():
            _log.info("stopping", reason="signal while standing by")
            return 0
        error = waiter.exception()
        if isinstance(error, LockedError):
            _log.error("the state file stayed locked, giving up", error=str(error))
            return 2
        if error is not None:
            _log.error("cannot lock the state file", error=str(error))
            return 2
        _log.info("took over the state file", after=self.standby)
        self.standby = None
        return None

    def _publisher(self, machine: Machine) -> Publisher | None:
        """The NodeResourceTopology publisher, when publishing is wanted (see `nrt.publish`)."""
        nrt = self.config.nrt
        environ = os.environ if self._environ is None else self._environ
        if not wanted(nrt.publish, nrt.kubeconfig, in_cluster(environ)):
            return None
        from nri_topology.nrt.publish import Publisher, make_client  # loads the client library

        try:
            client = make_client(nrt.kubeconfig)
        except Exception as exc:  # lightkube raises its own ConfigError, OSError, KeyError...
            raise StartupError(f"cannot publish NodeResourceTopology: {exc}") from None
        plugin = self.plugin
        assert plugin is not None
        name = self.node_name()

        def build() -> dict[str, Any]:
            return node_resource_topology(
                machine,
                plugin.policy.node_capacity(),
                name,
                policy=nrt.topology_manager_policy,
                scope=nrt.topology_manager_scope,
            )

        publisher = Publisher(
            client,
            name,
            build,
            min_interval_s=nrt.min_interval_seconds,
            max_backoff_s=nrt.max_backoff_seconds,
            resync_s=nrt.resync_seconds,
            on_error=lambda: plugin.metrics.error("nrt_publish"),
        )
        plugin.on_change = publisher.changed
        _log.info("publishing NodeResourceTopology", node=name)
        return publisher

    def node_name(self) -> str:
        """The Kubernetes node name (`nrt.build.node_name`)."""
        return node_name(self.config.nrt.node_name, self._environ)

    def _reloader(self) -> Reloader[Config] | None:
        path = self.config_path or DEFAULT_PATH  # read_config fell back to it as well
        if not path.exists():
            return None
        assert self.plugin is not None
        return Reloader(
            path,
            lambda data: parse_config(data.decode("utf-8", errors="replace"), str(path)),
            self.apply,
            (ConfigError, PolicyError, coexist.KubeletActive),
            self.plugin.metrics,
            max_bytes=MAX_CONFIG_BYTES,
        )


def replace_config(old: Config, new: Config) -> Config:
    """The configuration in force after a reload: live sections from `new`, others from `old`."""
    live = ("policy", "expose", "restarts", "kubelet")
    return old.model_copy(update={name: getattr(new, name) for name in live})
