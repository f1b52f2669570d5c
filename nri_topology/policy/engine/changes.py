"""Change tracking: the containers whose grant changed since the checkpoint writer last asked.

The engine notes every container it commits or reverts a grant for, or whose cold start ends;
`take` hands the names to the one reader (`Policy.changes`) and starts afresh. Past `NAMED`
names it stops naming them and reports None: any may have changed.
"""

from __future__ import annotations

# More than change between two checkpoint writes, and a bound when nobody asks.
NAMED = 4096


class ChangeLog:
    """The containers changed since the last `take`, None when too many to name."""

    def __init__(self, named: int = NAMED) -> None:
        self._named = named
        self._changed: set[str] | None = set()

    def note(self, container_id: str) -> None:
        changed = self._changed
        if changed is not None:
            changed.add(container_id)
            if len(changed) > self._named:
                self._changed = None

    def take(self) -> set[str] | None:
        """The containers noted since the last call (each named once), None when too many."""
        changed, self._changed = self._changed, set()
        return changed
