"""Property: what the kubelet admits is never refused, and every invariant holds meanwhile.

Random workloads (creations the kubelet admits, by `nri_topology.testing.kubelet`, and removals)
on every shipped machine, under random combinations of the policy options; `on_unfit: refuse` is
left out, as it asks for refusals. A few examples per machine keep the suite quick; the larger
run is `benchmarks/soak.py --admission`.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_topology.policy.options import CpuAmount, Options
from nri_topology.policy.types import QoS
from nri_topology.simulate import machine_spec
from nri_topology.testing import kubelet
from nri_topology.topology.model import Machine, MemoryTier
from tests import machines

GiB = 1 << 30
BUNDLED = machine_spec.bundled_names()
SHARED_PRESENT = machines.TOPOLOGIES.is_dir()


def _machine(name: str) -> Machine:
    if name in BUNDLED:
        return machine_spec.load_bundled(name)[1]
    return machines.load(name)


@st.composite
def options(draw: st.DrawFn, machine: Machine) -> Options:
    cpus = sorted(machine.all_cpus - machine.isolated)
    reserved = draw(
        st.sampled_from(
            [
                CpuAmount(milli=750),
                CpuAmount(milli=1000),
                CpuAmount(milli=2500),
                CpuAmount(cpus=frozenset(cpus[:1])),
                CpuAmount(cpus=frozenset(cpus[1:3])),
            ]
        )
    )
    return Options(
        reserved_resources=reserved,
        prefer_isolated_cpus=draw(st.booleans()),
        prefer_shared_cpus=draw(st.booleans()),
        prefer_closest_numa=draw(st.booleans()),
        distribute_across_numa=draw(st.booleans()),
        full_pcpus_only=draw(st.booleans()),
        colocate_pods=draw(st.booleans()),
        strict_reserved_cpus=draw(st.booleans()),
        shared_placement=draw(st.sampled_from(["pack", "spread"])),
        max_moves=draw(st.sampled_from([0, 4])),
        default_memory_tiers=draw(
            st.sampled_from([frozenset({MemoryTier.DRAM}), frozenset(MemoryTier)])
        ),
    )


@st.composite
def pods(draw: st.DrawFn, machine: Machine) -> kubelet.Pod:
    cpus = len(machine.cpus)
    memory = sum(n.memory for n in machine.nodes.values())
    mem = draw(st.sampled_from([0, 1 << 28, 1 << 30, 8 << 30, memory // 8, memory // 3]))
    qos = draw(st.sampled_from(list(QoS)))
    if qos is QoS.BEST_EFFORT:
        return kubelet.Pod(qos)
    if qos is QoS.BURSTABLE:
        cpu = draw(st.integers(1, 4000))
        request = draw(st.sampled_from([None, 1 << 20, mem // 4])) if mem else None
        return kubelet.Pod(
            qos,
            cpu,
            cpu_limit=draw(st.sampled_from([0, cpu, 2 * cpu])),
            memory=mem,
            memory_request=request,
        )
    whole = draw(st.booleans())
    if whole:
        cpu = 1000 * draw(st.integers(1, max(1, cpus // draw(st.sampled_from([1, 2, 4, 16])))))
    else:
        cpu = draw(st.integers(1, 8000))
    return kubelet.Pod(qos, cpu, memory=max(mem, 1 << 20))


@st.composite
def scenarios(draw: st.DrawFn, name: str) -> tuple[Machine, Options, list[kubelet.Pod | int]]:
    machine = _machine(name)
    steps = draw(
        st.lists(st.one_of(pods(machine), pods(machine), st.integers(0, 1000)), max_size=30)
    )
    return machine, draw(options(machine)), steps


NAMES = [*BUNDLED, *(n for n in machines.ALL_MACHINES if n not in BUNDLED)]


@pytest.mark.parametrize("name", NAMES)
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_what_the_kubelet_admits_is_never_refused(name: str, data: st.DataObject) -> None:
    if name not in BUNDLED and not SHARED_PRESENT:
        pytest.skip("../shared/topologies not present")
    machine, opts, steps = data.draw(scenarios(name))
    kubelet.run(machine, opts, steps)
