"""A long-running policy keeps nothing for containers that are gone.

A node runs for months while containers come and go; memory that grows with every container
ever placed is a slow leak, whatever the number of containers running at a time.
"""

from __future__ import annotations

import gc
import tracemalloc

from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from tests import machines
from tests.test_policy_restore import workload


def test_churn_through_the_same_shared_sets_does_not_grow() -> None:
    """Each short-lived shared container, in a pod of its own, is moved by an exclusive grant
    and back (the pool's shared set takes the same two values every time), then released."""
    policy = Policy(machines.load("desktop"), Options())
    exclusive = workload(0, "g", 2000)

    def cycle(n: int) -> None:
        shared = workload(n, "b", 100)
        policy.create(*shared)
        policy.create(*exclusive)
        policy.release(exclusive[1].id)
        policy.release(shared[1].id)
        policy.changes()  # as the checkpoint writer does after every change

    for n in range(1, 101):  # warm up: every interned set and cached value exists
        cycle(n)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(101, 3101):
            cycle(n)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 128 * 1024, f"{grown} bytes kept after 3000 containers came and went"
