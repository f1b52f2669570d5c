"""The deferred checkpoint writer: coalesces changes, saves a busy node anyway, snapshots only
under the lock, writes at once on flush, and retries a failed write.

The tests run on the event loop's virtual clock (looptime): delays are the writer's defaults and
are checked to the tick, without waiting for them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nri_topology.daemon.checkpoint import Checkpoint, decode
from nri_topology.daemon.writer import CheckpointWriter, Snapshot

pytestmark = pytest.mark.looptime


class Recording(Checkpoint):
    """A checkpoint that remembers every body it wrote."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written: list[dict[str, Any]] = []
        self.at: list[float] = []  # loop time at which each write was seen done
        self._loop = asyncio.get_running_loop()
        self._wrote = asyncio.Event()

    def save_encoded(self, data: bytes) -> bool:  # runs in a worker thread
        ok = super().save_encoded(data)
        if ok:
            body = decode(data).body
            assert body is not None
            self.written.append(body)
            self._loop.call_soon_threadsafe(self._seen)
        return ok

    def _seen(self) -> None:
        self.at.append(self._loop.time())
        self._wrote.set()

    async def wait_written(self, count: int = 1) -> float:
        """Wait for the `count`th write; the loop time it was seen done at."""
        while len(self.at) < count:
            self._wrote.clear()
            await self._wrote.wait()
        return self.at[count - 1]


class State:
    """What the writer snapshots: a counter the test bumps as the daemon changes its state, and
    one container entry per count, given to the writer as the entries changed since the last
    snapshot (as the daemon gives the policy's)."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = asyncio.Lock()
        self.failures = 0
        self.snapshotted = asyncio.Event()
        self.reported = 0  # containers the last snapshot held
        self.asked: list[bool] = []  # `whole` of each snapshot

    def body(self, whole: bool) -> Snapshot:
        assert self.lock.locked(), "snapshots are taken under the lock"
        self.snapshotted.set()
        self.asked.append(whole)
        before, self.reported = self.reported, self.n
        if whole:
            return Snapshot(self.expected())
        changed = {f"c{i}": self.entry(i) for i in range(before, self.n)}
        changed.update({f"c{i}": None for i in range(self.n, before)})
        return Snapshot({"n": self.n, "containers": {}}, changed)

    def entry(self, i: int) -> dict[str, Any]:
        return {"cpus": str(i)}

    def expected(self) -> dict[str, Any]:
        return {"n": self.n, "containers": {f"c{i}": self.entry(i) for i in range(self.n)}}

    def failed(self) -> None:
        self.failures += 1


def writer(tmp_path: Path, state: State, **timing: float) -> tuple[CheckpointWriter, Recording]:
    checkpoint = Recording(tmp_path / "state.json")
    w = CheckpointWriter(
        checkpoint, state.body, state.lock, state.failed, entries_at=("containers",), **timing
    )
    return w, checkpoint


async def test_a_burst_of_changes_is_one_write_of_the_last_state(tmp_path: Path) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state, quiet_s=0.05)
    for _ in range(20):
        state.n += 1
        w.changed()
    assert checkpoint.written == []  # nothing on the path of the change itself
    await w.flush()
    assert [b["n"] for b in checkpoint.written] == [20]
    assert Checkpoint(checkpoint.path).load().body == state.expected()


async def test_a_quiet_state_is_written_without_a_flush(tmp_path: Path) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state)  # quiet_s 50 ms
    start = asyncio.get_running_loop().time()
    state.n = 3
    w.changed()
    await asyncio.sleep(0.03)
    state.n = 4
    w.changed()  # the quiet period starts again
    # the write goes through a thread, whose real time the virtual clock also counts
    assert 0.08 <= await checkpoint.wait_written() - start < 0.5
    assert checkpoint.written == [state.expected()]


async def test_a_busy_state_is_written_at_least_every_max_delay(tmp_path: Path) -> None:
    state = State()
    # Changes every 10 ms never leave the state quiet for a minute; max_delay_s (1 s) saves it.
    w, checkpoint = writer(tmp_path, state, quiet_s=60)
    loop = asyncio.get_running_loop()
    start, seen = loop.time(), []
    while len(checkpoint.written) < 2:
        state.n += 1
        w.changed()
        await asyncio.sleep(0.01)
        if len(checkpoint.written) > len(seen):
            seen.append(loop.time() - start)
    assert 1.0 <= seen[0] < 1.5 and 2.0 <= seen[1] < 3.0
    numbers = [b["n"] for b in checkpoint.written]
    assert 100 <= numbers[0] < numbers[1] <= state.n


async def test_the_snapshot_waits_for_the_lock(tmp_path: Path) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state)
    await state.lock.acquire()  # a decision in progress
    state.n = 1
    w.changed()
    flushing = asyncio.get_running_loop().create_task(w.flush())
    await asyncio.sleep(0.05)
    assert checkpoint.written == [] and not flushing.done()
    state.n = 2  # the decision finishes with another change
    w.changed()
    state.lock.release()
    await asyncio.wait_for(flushing, 5)
    assert [b["n"] for b in checkpoint.written] == [2]


async def test_changes_during_a_write_are_written_after_it(tmp_path: Path) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state, quiet_s=60)
    state.n = 1
    w.changed()
    flushing = asyncio.get_running_loop().create_task(w.flush())
    await asyncio.wait_for(state.snapshotted.wait(), 5)  # being encoded and written now
    assert not flushing.done()
    async with state.lock:
        state.n = 2
        w.changed()
    await asyncio.wait_for(flushing, 5)
    assert [b["n"] for b in checkpoint.written] == [1, 2]


async def test_flush_with_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state)
    await w.flush()
    assert checkpoint.written == [] and not checkpoint.path.exists()


async def test_a_failed_write_is_counted_and_retried_without_a_new_change(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("")  # the state directory is a file: every write fails
    state = State()
    checkpoint = Recording(blocker / "state.json")
    w = CheckpointWriter(
        checkpoint, state.body, state.lock, state.failed, entries_at=("containers",)
    )  # retry_s 10 s
    state.n = 4
    w.changed()
    await w.flush()
    failed_at = asyncio.get_running_loop().time()
    assert state.failures == 1 and checkpoint.failing
    blocker.unlink()
    assert 10.05 <= await checkpoint.wait_written() - failed_at < 10.5  # retry, then a quiet period
    assert [b["n"] for b in checkpoint.written] == [4] and not checkpoint.failing
    w.close()


async def test_a_failing_snapshot_is_counted_and_retried(tmp_path: Path) -> None:
    state = State()
    broken = [True]

    def snapshot(whole: bool) -> Snapshot:
        if broken[0]:
            state.body(whole)  # the changes are taken, then the snapshot fails
            raise ValueError("policy bug")
        return state.body(whole)

    checkpoint = Recording(tmp_path / "state.json")
    w = CheckpointWriter(checkpoint, snapshot, state.lock, state.failed, entries_at=("containers",))
    state.n = 2
    w.changed()
    await w.flush()
    failed_at = asyncio.get_running_loop().time()
    assert state.failures == 1 and checkpoint.written == []
    broken[0] = False
    await asyncio.sleep(9.9)
    assert checkpoint.written == []
    assert 10.05 <= await checkpoint.wait_written() - failed_at < 10.5
    assert checkpoint.written == [state.expected()]
    assert state.asked == [True, True]  # after a failed snapshot, a whole one
    w.close()


async def test_after_the_first_snapshot_only_changed_entries_are_asked_for(
    tmp_path: Path,
) -> None:
    state = State()
    w, checkpoint = writer(tmp_path, state)
    for n in (5, 8, 3, 0, 2):
        state.n = n
        w.changed()
        await w.flush()
    assert state.asked == [True, False, False, False, False]
    assert [b["containers"] for b in checkpoint.written] == [
        {f"c{i}": state.entry(i) for i in range(n)} for n in (5, 8, 3, 0, 2)
    ]
