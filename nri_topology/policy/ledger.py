"""The CPU accounts of the pool tree: per pool its shared cpuset, its isolated CPUs not granted,
and the shared milli-CPU and containers of its subtree; and the capacity questions asked of them.

The engine changes the accounts when it commits or undoes a grant; the pool choice only reads
them (`choice.room`). The lists are changed in place and never replaced, so a reader may keep
them for the length of one decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nri_topology.policy.pools import Pool

if TYPE_CHECKING:
    from nri_topology.policy.engine import Grant


class Ledger:
    """CPU accounts per pool index."""

    def __init__(
        self,
        pools: tuple[Pool, ...],
        chain: tuple[tuple[int, ...], ...],
        partial: frozenset[int],
        partial_reserved_in: tuple[int, ...],
    ) -> None:
        n = len(pools)
        self.pool_names = tuple(p.name for p in pools)
        self.chain = chain  # per pool: itself, then its ancestors up to the root
        self.partial = partial  # the partly reserved CPU, if any (stays shared)
        self.partial_reserved_in = partial_reserved_in  # its reserved milli-CPU, per pool
        # the pool's sharable CPUs no container holds exclusively: its shared cpuset
        self.shared_cpus: list[frozenset[int]] = [p.sharable for p in pools]
        self.free_iso: list[frozenset[int]] = [p.isolated for p in pools]
        self.sub_shared = [0] * n  # milli-CPU granted from shared CPUs in the subtree
        self.sub_users = [0] * n  # shared containers in the subtree
        self.users: list[dict[str, Grant]] = [{} for _ in range(n)]  # shared users, direct

    def capacity(self, p: int) -> int:
        """Shared milli-CPU the pool's shared CPUs hold."""
        return 1000 * len(self.shared_cpus[p]) - self.partial_reserved_in[p]

    def allocatable(self, p: int) -> int:
        """Milli-CPU still grantable from the pool's shared CPUs (limited by its ancestors)."""
        shared_cpus, reserved_in, sub = self.shared_cpus, self.partial_reserved_in, self.sub_shared
        least: int | None = None
        for a in self.chain[p]:
            left = 1000 * len(shared_cpus[a]) - reserved_in[a] - sub[a]
            if least is None or left < least:
                least = left
        assert least is not None  # a chain holds at least the pool itself
        return least

    def need_cpus(self, p: int, extra_milli: int = 0, extra_users: int = 0) -> int:
        """CPUs the pool must keep shared for the containers in its subtree."""
        milli = self.sub_shared[p] + extra_milli + self.partial_reserved_in[p]
        need = -(-milli // 1000)
        if self.sub_users[p] + extra_users > 0:
            need = max(need, 1)
        return need
