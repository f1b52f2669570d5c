"""The CPU accounts of the pool tree: per pool its shared cpuset, its isolated CPUs not granted,
the shared milli-CPU and containers of its subtree and the shared containers placed in it; and
the capacity questions asked of them.

The engine changes the accounts when it commits or undoes a grant; the pool choice only reads
them (`choice.room`). The lists are changed in place and never replaced, so a reader may keep
them for the length of one decision.
"""

from __future__ import annotations

from bisect import bisect_left

from nri_topology.policy.accounts.grant import Grant
from nri_topology.policy.pools import Pool


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
        self.sharable = tuple(len(p.sharable) for p in pools)  # shared CPUs when none is sliced
        self.sub_shared = [0] * n  # milli-CPU granted from shared CPUs in the subtree
        self.sub_users = [0] * n  # shared containers in the subtree
        self.users: list[dict[str, Grant]] = [{} for _ in range(n)]  # shared users, direct
        # The same users in two parts (`add_user`): the plain ones, pinned to exactly the pool's
        # shared set, by container id in order with their grants alongside, so that an update
        # diff walks them in bulk and in id order; and the others, each pinned on its own.
        self.plain_ids: list[list[str]] = [[] for _ in range(n)]
        self.plain_grants: list[list[Grant]] = [[] for _ in range(n)]
        self.pinned: list[dict[str, Grant]] = [{} for _ in range(n)]

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

    def sharable_capacity(self, p: int) -> int:
        """Shared milli-CPU of all the pool's sharable CPUs, as if none were exclusive."""
        return 1000 * self.sharable[p] - self.partial_reserved_in[p]

    def short(self, p: int, exclusive: int, milli: int, users: int) -> int | None:
        """The capacity rule: the first pool up p's chain (p itself first) that would keep fewer
        shared CPUs than its shared containers need once `exclusive` CPUs are sliced off and
        `users` more containers share `milli` more milli-CPU in p; None when every one holds.

        `choose.room` walks the same chain inlined (it runs for every pool of a decision);
        tests/test_policy_capacity.py compares the two."""
        for a in self.chain[p]:
            if len(self.shared_cpus[a]) - exclusive < self.need_cpus(a, milli, users):
                return a
        return None

    def need_cpus(self, p: int, extra_milli: int = 0, extra_users: int = 0) -> int:
        """CPUs the pool must keep shared for the containers in its subtree."""
        milli = self.sub_shared[p] + extra_milli + self.partial_reserved_in[p]
        need = -(-milli // 1000)
        if self.sub_users[p] + extra_users > 0:
            need = max(need, 1)
        return need

    def add_user(self, p: int, cid: str, g: Grant, plain: bool) -> None:
        """A shared user placed directly in pool p; `plain`: pinned to the pool's shared set."""
        self.users[p][cid] = g
        self._file(p, cid, g, plain)

    def remove_user(self, p: int, cid: str) -> None:
        del self.users[p][cid]
        self._unfile(p, cid)

    def refile(self, p: int, cid: str, g: Grant, plain: bool) -> None:
        """A user whose pinning changed kind (a resize in place), its place in `users` kept."""
        self._unfile(p, cid)
        self._file(p, cid, g, plain)

    def plain_grant(self, p: int, cid: str) -> Grant | None:
        """The grant of a plain user of pool p, None when it is not one."""
        ids = self.plain_ids[p]
        i = bisect_left(ids, cid)
        return self.plain_grants[p][i] if i < len(ids) and ids[i] == cid else None

    def _file(self, p: int, cid: str, g: Grant, plain: bool) -> None:
        if plain:
            ids = self.plain_ids[p]
            i = bisect_left(ids, cid)
            ids.insert(i, cid)
            self.plain_grants[p].insert(i, g)
        else:
            self.pinned[p][cid] = g

    def _unfile(self, p: int, cid: str) -> None:
        if self.pinned[p].pop(cid, None) is None:
            ids = self.plain_ids[p]
            i = bisect_left(ids, cid)
            if i == len(ids) or ids[i] != cid:  # never filed: deleting ids[i] would drop another
                raise KeyError(cid)
            del ids[i]
            del self.plain_grants[p][i]
