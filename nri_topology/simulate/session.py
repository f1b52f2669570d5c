"""One simulation from command-line choices: pick the machine, workload and options, then run.

Kept apart from the command so tests and benchmarks can run simulations without argparse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from nri_topology.policy.options import Options
from nri_topology.simulate import machine_spec
from nri_topology.simulate.machine_spec import MachineSpecError
from nri_topology.simulate.runner import Runner, Simulation
from nri_topology.simulate.workload import (
    Workload,
    WorkloadError,
    bundled_workload_names,
    load_bundled_workload,
    load_workload,
)
from nri_topology.topology.model import Machine, MemoryTier

DEFAULT_MACHINE = "server"


class SimulationError(ValueError):
    """Inputs that cannot be simulated; the message says which input and why."""


@dataclass(frozen=True)
class Inputs:
    machine: Machine
    machine_name: str
    workload: Workload
    options: Options


def _workload(choice: str) -> Workload:
    path = Path(choice)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        return load_workload(path)
    if choice in bundled_workload_names():
        return load_bundled_workload(choice)
    raise WorkloadError(
        f"workload {choice!r}: no such file and no bundled workload of that name "
        f"(bundled: {', '.join(bundled_workload_names())})"
    )


def _machine_from_sysfs(root: Path, tiers: Mapping[int, MemoryTier]) -> tuple[str, Machine]:
    from nri_topology.topology.sysfs import read_machine

    sys_root, proc_root = root, None
    if (root / "sys" / "devices").is_dir():  # a dump holding sys/ and maybe proc/
        sys_root = root / "sys"
        proc_root = root / "proc" if (root / "proc").is_dir() else None
    try:
        machine = read_machine(sys_root, proc_root=proc_root, tier_overrides=tiers)
    except (OSError, ValueError) as exc:
        raise SimulationError(f"--sysfs {root}: {exc}") from None
    return str(root), machine


def _machine(choice: str) -> tuple[str, Machine]:
    path = Path(choice)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        spec = machine_spec.load_spec(path)
        return spec.name, machine_spec.to_machine(spec, origin=str(path))
    spec, machine = machine_spec.load_bundled(choice)
    return spec.name, machine


def load_inputs(
    *,
    machine: str | None = None,
    sysfs: Path | None = None,
    workload: str = "default",
    config: Path | None = None,
    until: int | None = None,
) -> Inputs:
    """Resolve the command-line choices; every failure is a SimulationError naming the input.

    With --config, the policy options come from the file, and so do the memory tier overrides
    when the machine is read from sysfs. `until` keeps only the first steps, so the tree and the
    picture show the node at that point.
    """
    options = Options()
    tiers: dict[int, MemoryTier] = {}
    if config is not None:
        from nri_topology.config.load import load_config
        from nri_topology.configured import policy_options, tier_overrides

        try:
            loaded = load_config(config)
        except ValueError as exc:
            raise SimulationError(f"--config {config}: {exc}") from None
        options = policy_options(loaded)
        tiers = tier_overrides(loaded)
    try:
        wl = _workload(workload)
        if sysfs is not None:
            name, m = _machine_from_sysfs(sysfs, tiers)
        else:
            name, m = _machine(machine or wl.machine or DEFAULT_MACHINE)
    except (WorkloadError, MachineSpecError) as exc:
        raise SimulationError(str(exc)) from None
    if until is not None:
        if not 1 <= until <= len(wl.steps):
            raise SimulationError(f"--until {until}: the workload has steps 1 to {len(wl.steps)}")
        wl = msgspec.structs.replace(wl, steps=wl.steps[:until])
    return Inputs(m, name, wl, options)


def simulate(inputs: Inputs) -> Simulation:
    """Run the workload through a fresh policy; failed steps are recorded, not raised."""
    from nri_topology.policy.policy import Policy

    policy = Policy(inputs.machine, inputs.options)
    runner = Runner(policy, inputs.machine)
    steps = runner.run(inputs.workload)
    return Simulation(
        machine=inputs.machine,
        machine_name=inputs.machine_name,
        workload=inputs.workload,
        steps=steps,
        assignments=dict(runner.assignments),
        pools=tuple(policy.pools()),
    )
