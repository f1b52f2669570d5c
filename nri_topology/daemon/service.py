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
)
from nri_topology.config.schema import Config, with_sections
from nri_topology.configured import tier_overrides
from nri_topology.daemon import coexist, logs, takeover
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.health import StatusServer
from nri_topology.daemon.lock import InstanceLock, LockedError
from nri_topology.daemon.placement_file import PlacementFiles
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.daemon.reload import Reloader
from nri_topology.daemon.settings import (
    Overrides,
    effective,
    hint_finder,
    replace_config,
    settings_of,
)
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import SOCKET_ENV, Plugin, Refused, Stub, StubError
from nri_topology.nrt.build import node_name, node_resource_topology
from nri_topology.nrt.cluster import in_cluster, wanted
from nri_topology.policy.options import Options
from nri_topology.policy.port import PolicyPort
from nri_topology.policy.types import PolicyError
from nri_topology.topology.model import Machine
from nri_topology.topology.sysfs import TopologyError, read_machine

if TYPE_CHECKING:
    from nri_topology.nrt.publish import Publisher

_log = structlog.get_logger("nri_topology.service")


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to fix."""


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
        overrides: Overrides | None = None,
        *,
        log_stream: IO[str] | None = None,
        policy_factory: PolicyFactory = _default_policy,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config_path = config_path
        self.overrides = overrides or Overrides()
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
        self.standby: takeover.Standby | None = None  # while another holds the state file
        self.kubelet = coexist.KubeletWatch()
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
        asked = self.config
        try:
            self.config = self.kubelet.beside(asked)
        except coexist.KubeletActive as exc:
            raise StartupError(str(exc)) from None
        except ConfigError as exc:
            raise StartupError(f"the kubelet's state does not fit:\n{exc}") from None
        self.kubelet.applied(asked)
        self.lock = InstanceLock(Path(self.config.state.path))
        try:
            self.lock.acquire()
        except LockedError as exc:
            # A plugin the runtime launches cannot stand by inside its Configure.
            if not self.config.state.lock_wait_seconds or self.launched:
                raise StartupError(str(exc)) from None
            self.standby = takeover.Standby(str(exc))  # `serve` waits, the health endpoint up
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
            policy = self._policy_factory(machine, self.kubelet.options(self.config))
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
        self.kubelet.show(self.plugin.metrics)
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
        new = self.kubelet.beside(asked)
        self.kubelet.show(self.plugin.metrics)
        await self.plugin.reconfigure(self.kubelet.options(new))
        self.kubelet.applied(asked)
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
                plugin, self.machine, self.node_name(), kubelet=lambda: self.kubelet.view.summary()
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

    async def _kubelet_refresh(self) -> None:
        """Before placing a container the kubelet's static CPU manager may pin (`coexist`)."""
        assert self.plugin is not None
        new = await self.kubelet.refresh(self.plugin.reconfigure)
        if new is not None:
            self.config = with_sections(self.config, policy=new.policy)
            self.kubelet.show(self.plugin.metrics)

    def _ready(self) -> tuple[bool, str]:
        """Readiness: a standby once it has shown it could take over (a DaemonSet's surge update
        removes the old pod as soon as the new one is ready: `takeover`); else the plugin's."""
        if self.standby is not None:
            return self.standby.readiness()
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

    async def _wait_for_lock(self) -> int | None:
        """Stand by until the instance holding the state file stops (bounded by
        `state.lock_wait_seconds`); then this one connects and adopts every placement as the
        runtime reports it. None once the lock is held; else the exit status (`Standby.wait`)."""
        assert self.lock is not None and self.plugin is not None and self.standby is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.plugin.metrics.standby.set(1)
        try:
            limit = self.config.state.lock_wait_seconds
            status = await self.standby.wait(self.lock, limit, self._takeover_needs(), self._stop)
        finally:
            self.plugin.metrics.standby.set(0)
        if status is None:
            self.standby = None
        return status

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
