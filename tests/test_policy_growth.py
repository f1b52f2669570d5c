"""A long-running engine keeps nothing for containers that are gone.

A node runs for months while containers come and go; memory that grows with every container
ever placed is a slow leak, whatever the number of containers running at a time.
"""

from __future__ import annotations

import gc
import tracemalloc

from nri_topology.policy.engine.engine import Engine
from nri_topology.policy.options import Options
from nri_topology.policy.types import CpuKind, QoS
from tests import machines
from tests.test_policy_engine import req


def test_churn_through_the_same_shared_sets_does_not_grow() -> None:
    """Each short-lived shared container is moved by an exclusive grant and back (the pool's
    shared set takes the same two values every time), then released."""
    engine = Engine(machines.load("desktop"), Options())

    def cycle(n: int) -> None:
        engine.place(req(f"shared-{n}", CpuKind.SHARED, shared=100, qos=QoS.BURSTABLE))
        engine.place(req("exclusive", CpuKind.EXCLUSIVE, exclusive=2, qos=QoS.GUARANTEED))
        engine.release("exclusive")
        engine.release(f"shared-{n}")
        engine.take_changed()  # as the checkpoint does after every change

    for n in range(100):  # warm up: every interned set and cached value exists
        cycle(n)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(100, 3100):
            cycle(n)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 128 * 1024, f"{grown} bytes kept after 3000 containers came and went"
