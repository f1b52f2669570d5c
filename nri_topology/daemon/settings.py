"""The daemon's settings: what a validated configuration and the command line make of them
(the policy's options are `configured`'s), and what a reload keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_topology.config.load import with_overrides
from nri_topology.config.schema import Config, with_sections
from nri_topology.daemon import convert
from nri_topology.daemon.cgroupfs import cgroup_root
from nri_topology.daemon.hints import HintFinder
from nri_topology.daemon.updates.schedule import PACED, Pacing
from nri_topology.topology.devices import DeviceLocator


@dataclass(frozen=True, slots=True)
class Settings:
    """Daemon behaviour that is not placement policy."""

    expose_env: bool = True  # give new containers environment variables naming their placement
    env_prefix: str = convert.ENV_PREFIX
    cgroup_root: Path | None = None  # where containers' cgroups are read; None: never checked
    verify_interval_s: float = 10.0  # periodic cgroup check; 0: only after a container starts
    expose_file: bool = False  # mount a placement file, kept current, into new containers
    file_dir: str = "/.nri-topology"  # where that file's directory appears in the container
    # How long a stopped container's exclusive CPUs wait for its next attempt; 0: not at all.
    restart_hold_s: float = 330.0
    pacing: Pacing | None = PACED  # re-pins after the reply; None: in the reply
    # Pace re-pins even where the runtime's NRI adaptation may deadlock on UpdateContainers
    # (older than v0.12.1) and no CRI answers; otherwise they travel in the reply there.
    pace_old_runtimes: bool = False
    transport: str = "auto"  # updates apart from a reply: auto, cri, nri (`Transport`)
    cri_socket: str | None = None  # None: the runtime's default, by its name in Configure
    # Paced re-pins are written into the containers' cgroups at once, ahead of the runtime.
    cgroup_first: bool = True


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
        write_wait_s=u.write_wait_seconds,
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


def replace_config(old: Config, new: Config) -> Config:
    """The configuration in force after a reload: live sections from `new`, others from `old`."""
    live = ("policy", "expose", "restarts", "kubelet")
    return with_sections(old, **{name: getattr(new, name) for name in live})
