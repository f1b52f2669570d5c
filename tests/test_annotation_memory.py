"""Memory stays flat however many distinct large annotations come and go (issue 10): the parsed
annotations are cached by total text length, and nothing else keeps a removed container's."""

from __future__ import annotations

import gc
import json
import tracemalloc

from nri_topology.policy.intake.annotations import DOMAIN, RESOURCES_KEY
from nri_topology.policy.intake.bounded import CACHE
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import ContainerInfo, PodInfo, Resources
from nri_topology.testing import hostile
from tests import machines

MiB = 1 << 20


def _large(i: int) -> dict[str, str]:
    """About 15 KB of distinct, valid annotations: few YAML events, so quick to parse."""
    values = ", ".join(f'"{i:08d}-{v:02d}-' + "x" * 200 + '"' for v in range(16))
    rule = f"  - match: {{key: labels/app, operator: In, values: [{values}]}}\n"
    claim = {"containers": {"app": {"requests": {"cpu": "100m", "memory": f"{i % 97 + 1}Mi"}}}}
    return {
        hostile.AFFINITY: "app:\n" + rule * 3,
        f"cold-start.{DOMAIN}": f"duration: {i % 50}s",
        RESOURCES_KEY: json.dumps(claim) + " " * 2000,
    }


def _cycle(policy: Policy, i: int) -> None:
    pod = PodInfo(
        id=f"p{i}",
        name=f"pod{i}",
        namespace="tenant",
        annotations=_large(i),
        cgroup_parent=f"/kubepods/burstable/pod{i}",
    )
    ctr = ContainerInfo(id=f"c{i}", pod_id=pod.id, name="app", resources=Resources(cpu_shares=102))
    policy.create(pod, ctr)
    policy.release(ctr.id)


def test_thousands_of_distinct_large_annotations_leave_memory_flat(tmp_path):
    machine = machines.synthetic(tmp_path, machines.SyntheticSpec(cores=4))
    policy = Policy(machine, Options())
    for n in range(20):  # live neighbours, so the decisions do real work
        pod = PodInfo(id=f"n{n}", name=f"n{n}", namespace="tenant", cgroup_parent="burstable")
        policy.create(pod, ContainerInfo(id=f"n{n}", pod_id=pod.id, name="app"))
    tracemalloc.start()
    try:
        for i in range(300):  # warm-up: the cache fills to its bound
            _cycle(policy, i)
        gc.collect()
        start, _ = tracemalloc.get_traced_memory()
        for i in range(300, 2300):
            _cycle(policy, i)
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(_large(0)[hostile.AFFINITY]) > 10_000
    assert CACHE.chars <= CACHE.max_chars
    assert end - start < 2 * MiB, f"grew {(end - start) / MiB:.1f} MiB over 2000 cycles"
