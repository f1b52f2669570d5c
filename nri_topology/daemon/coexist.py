"""Living beside the kubelet's CPU manager and Memory Manager (configuration `kubelet`).

At start and on every reload the daemon reads the kubelet's state files and, where given, its
configuration. With the static CPU manager or the Memory Manager on, the kubelet pins Guaranteed
containers itself and writes its choice back to their cgroups: the daemon says so (log, metric,
`status`) and either keeps every other container off the CPUs the kubelet pinned containers to
and out of the memory and hugepages its Memory Manager reserved on each NUMA node, or refuses to
run. The containers in the static CPU manager's entries (pod uid and container name) keep the
cpusets the kubelet gives them (`Options.kubelet_pinned`), at a restart and a reload as when it
creates or re-pins them: it writes its state before either, and the daemon reads it again then
when it changed. Asked to, it takes the reserved CPUs from the kubelet's `reservedSystemCPUs`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import structlog
import yaml

from nri_topology.bounded_read import TooLarge, read_bounded
from nri_topology.config.load import ConfigError, with_overrides
from nri_topology.config.schema import Config, KubeletSection, read_cpu_amount
from nri_topology.configured import policy_options
from nri_topology.kubelet.managers import (
    KubeletView,
    memory_by_node,
    parse_cpu_manager_state,
    parse_kubelet_config,
    parse_memory_manager_state,
)
from nri_topology.policy.accounts.hugepages import page_size_kb, pages
from nri_topology.policy.options import Options
from nri_topology.policy.types import PolicyError
from nri_topology.quantity import format_bytes
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.daemon.metrics import Metrics

_log = structlog.get_logger("nri_topology.daemon")
_LIMIT = 16 << 20  # bytes of one state or configuration file
T = TypeVar("T")


class KubeletActive(Exception):
    """The kubelet's own managers run and the configuration says to refuse (`when_active`)."""


def _read(path: str | None, parse: Callable[[str], T], problems: list[str]) -> T | None:
    if not path:
        return None
    try:
        text = read_bounded(Path(path), _LIMIT).decode()
    except FileNotFoundError:
        return None  # the kubelet never wrote it: no such manager here
    except (OSError, TooLarge, UnicodeDecodeError) as exc:
        problems.append(f"{path}: {exc}")
        return None
    try:
        return parse(text)
    except (ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        problems.append(f"{path}: not as the kubelet writes it: {exc}")
        return None


def stamp(path: str | None) -> tuple[int, int, int] | None:
    """What tells a new version of a state file from the one read (the kubelet replaces its
    checkpoints by a rename): inode, size, modification time; None when there is none."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_view(section: KubeletSection) -> KubeletView:
    """What the kubelet's files say now; unreadable ones are named in `problems`."""
    problems: list[str] = []
    cpu = _read(section.cpu_manager_state, parse_cpu_manager_state, problems)
    memory = _read(section.memory_manager_state, parse_memory_manager_state, problems)
    config = _read(section.config, parse_kubelet_config, problems)
    return KubeletView(cpu, memory, config, tuple(problems))


def active(view: KubeletView) -> list[str]:
    """The kubelet's managers that pin containers on this node, by name."""
    return [
        name
        for name, on in (
            ("static CPU manager", view.static_cpu),
            ("Memory Manager", view.static_memory),
        )
        if on
    ]


def check(view: KubeletView, section: KubeletSection) -> None:
    """Say what runs; raise KubeletActive when it runs and `when_active` is refuse."""
    for problem in view.problems:
        _log.warning("kubelet state unreadable", problem=problem)
    running = active(view)
    if not running:
        return
    what = " and ".join(running)
    if section.when_active == "refuse":
        raise KubeletActive(
            f"the kubelet's {what} is on: it pins Guaranteed containers itself and would undo "
            "this plugin's placements (kubelet.when_active: refuse); set cpuManagerPolicy: none "
            "and memoryManagerPolicy: None, or kubelet.when_active: avoid"
        )
    memory = (
        f" and the memory it reserved for them{_memory_words(view)}" if view.static_memory else ""
    )
    _log.warning(
        f"the kubelet's {what} is on: the CPUs it pinned containers to{memory} are left to it",
        **view.summary(),
    )


def memory_words(by_node: Mapping[str, Mapping[str, int]]) -> str:
    """`memory_by_node`'s answer for people: `node 0: hugepages-1Gi 2Gi, memory 5Gi`."""
    return "; ".join(
        f"node {node}: "
        + ", ".join(f"{resource} {format_bytes(size)}" for resource, size in sorted(sizes.items()))
        for node, sizes in sorted(by_node.items(), key=lambda item: int(item[0]))
    )


def _memory_words(view: KubeletView) -> str:
    """` (node 0: memory 2Gi, hugepages-1Gi 2Gi)`, or nothing when it reserved none."""
    words = memory_words(memory_by_node(view.memory_taken))
    return f" ({words})" if words else ""


def outside(options: Options, view: KubeletView, section: KubeletSection) -> Options:
    """`options` with what the kubelet's managers hold left to them (`when_active: avoid`): the
    containers its static CPU manager pinned keep its cpusets, and the memory and hugepages
    the Memory Manager reserved for its containers per NUMA node are left out of what the
    policy grants."""
    if section.when_active != "avoid":
        return options
    if view.static_cpu and view.cpu is not None:
        options = replace(options, kubelet_pinned=dict(view.cpu.assigned))
    if not view.static_memory:
        return options
    memory: list[tuple[int, int]] = []
    huge: list[tuple[int, int, int]] = []
    for (node, resource), size in sorted(view.memory_taken.items()):
        if resource == "memory":
            memory.append((node, size))
        elif (kb := page_size_kb(resource)) is not None:
            huge.append((node, kb, pages(kb, size)))
    return replace(options, outside_memory=tuple(memory), outside_hugepages=tuple(huge))


def beside(config: Config, view: KubeletView) -> Config:
    """`config` with what the kubelet holds taken out and, when asked, its reserved CPUs."""
    section = config.kubelet
    policy: dict[str, object] = {}
    taken = view.taken if view.static_cpu else frozenset()
    if taken:
        available = config.policy.available_resources
        if available is None:
            policy["available_resources"] = {"cpu": f"exclude-cpuset:{cpuset.format(taken)}"}
        else:
            kind, amount = read_cpu_amount(available.cpu, quantity=False)
            assert isinstance(amount, frozenset)
            text = (
                f"cpuset:{cpuset.format(amount - taken)}"
                if kind == "cpus"
                else f"exclude-cpuset:{cpuset.format(amount | taken)}"
            )
            policy["available_resources"] = {"cpu": text}
    kubelet = view.config
    if section.reserved_cpus and kubelet is not None and kubelet.reserved_cpus:
        policy["reserved_resources"] = {"cpu": f"cpuset:{cpuset.format(kubelet.reserved_cpus)}"}
        policy["strict_reserved_cpus"] = kubelet.strict_reservation
    return with_overrides(config, {"policy": policy}, "the kubelet's state")


class KubeletWatch:
    """The daemon's view of the kubelet's managers, read at start and on reloads, and read again
    before a container its static CPU manager may pin is placed (`refresh`)."""

    def __init__(self) -> None:
        self.view = KubeletView()
        self._stamp: tuple[int, int, int] | None = None  # the CPU state file's, as read
        # The configuration as given, before what the kubelet holds is taken out of it.
        self._asked: Config | None = None

    def beside(self, asked: Config) -> Config:
        """`asked` as it applies beside the kubelet's managers now (read again); raises
        KubeletActive when they run and the configuration says to refuse."""
        stamp_now = stamp(asked.kubelet.cpu_manager_state)  # before reading: never newer
        view = read_view(asked.kubelet)
        check(view, asked.kubelet)
        self.view, self._stamp = view, stamp_now
        return beside(asked, view)

    def applied(self, asked: Config) -> None:
        """`asked` is now the configuration in force (its `beside` applied to the policy)."""
        self._asked = asked

    def options(self, config: Config) -> Options:
        """The policy options of `config` beside the kubelet's managers as last read."""
        return outside(policy_options(config), self.view, config.kubelet)

    async def refresh(self, reconfigure: Callable[[Options], Awaitable[None]]) -> Config | None:
        """The kubelet writes its CPU state file before it creates or re-pins a container, so a
        changed file is read again and applied (`reconfigure`): the containers it pins keep its
        cpusets, every other one kept off them. The new configuration, or None when nothing
        changed or the new pins could not be applied (said in the log)."""
        asked = self._asked
        if asked is None:
            return None
        section = asked.kubelet
        if section.when_active != "avoid" or not self.view.static_cpu:
            return None
        stamp_now = stamp(section.cpu_manager_state)
        if stamp_now == self._stamp:
            return None
        view = replace(self.view, cpu=read_view(section).cpu)
        self._stamp = stamp_now
        if view.cpu == self.view.cpu:
            return None
        before, self.view = self.view, view
        try:
            new = beside(asked, view)
            await reconfigure(self.options(new))
        except (ConfigError, PolicyError) as exc:
            self.view = before
            _log.error("the kubelet's new pins cannot be left to it", error=str(exc))
            return None
        _log.info("the kubelet's static CPU manager pins anew", **view.summary())
        return new

    def show(self, metrics: Metrics) -> None:
        """The managers in force and the memory they reserved, as metrics."""
        for manager, on in (("cpu", self.view.static_cpu), ("memory", self.view.static_memory)):
            metrics.kubelet_manager.labels(manager).set(int(on))
        metrics.kubelet_memory.clear()
        for (node, resource), size in self.view.memory_taken.items():
            metrics.kubelet_memory.labels(str(node), resource).set(size)
