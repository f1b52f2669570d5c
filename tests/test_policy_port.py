"""`Policy` is what the daemon, the simulator and the invariant checks drive: `PolicyPort`."""

from __future__ import annotations

import inspect

import pytest

from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.port import PolicyPort
from nri_topology.simulate.machine_spec import load_bundled

_MEMBERS = sorted(
    name
    for name, v in vars(PolicyPort).items()
    if inspect.isfunction(v) and not name.startswith("_")
)


def test_the_port_lists_the_calls_its_drivers_make() -> None:
    assert _MEMBERS == [
        "assignments",
        "changes",
        "cold_start_done",
        "container",
        "create",
        "hold",
        "node_capacity",
        "placements",
        "pod_containers",
        "pools",
        "reconfigure",
        "release",
        "resize",
        "restore",
        "snapshot",
    ]


@pytest.mark.parametrize("name", _MEMBERS)
def test_policy_has_the_ports_signature(name: str) -> None:
    want = inspect.signature(getattr(PolicyPort, name), eval_str=True)
    got = inspect.signature(getattr(Policy, name), eval_str=True)
    assert got == want


def test_a_policy_is_a_port() -> None:
    _, machine = load_bundled("server")
    assert isinstance(Policy(machine, Options()), PolicyPort)
