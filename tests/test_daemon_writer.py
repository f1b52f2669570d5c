"""The deferred checkpoint writer: coalesces changes, saves a busy node anyway, snapshots only
under the lock, writes at once on flush, and retries a failed write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nri_topology.daemon.checkpoint import Checkpoint, decode
from nri_topology.daemon.writer import CheckpointWriter


class Recording(Checkpoint):
    """A checkpoint that remembers every body it wrote."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written: list[dict[str, Any]] = []

    def save_encoded(self, data: bytes) -> bool:
        ok = super().save_encoded(data)
        if ok:
            body = decode(data).body
            assert body is not None
            self.written.append(body)
        return ok


class State:
    """What the writer snapshots: a counter the test bumps as the daemon changes its state."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = asyncio.Lock()
        self.failures = 0
        self.snapshotted = asyncio.Event()

    def body(self) -> dict[str, Any]:
        assert self.lock.locked(), "snapshots are taken under the lock"
        self.snapshotted.set()
        return self.expected()

    def expected(self) -> dict[str, Any]:
        return {"n": self.n, "containers": {f"c{i}": {"cpus": str(i)} for i in range(self.n)}}

    def failed(self) -> None:
        self.failures += 1


def writer(tmp_path: Path, state: State, **timing: float) -> tuple[CheckpointWriter, Recording]:
    checkpoint = Recording(tmp_path / "state.json")
    return CheckpointWriter(checkpoint, state.body, state.lock, state.failed, **timing), checkpoint


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
    w, checkpoint = writer(tmp_path, state, quiet_s=0.02)
    state.n = 3
    w.changed()
    async with asyncio.timeout(5):
        while not checkpoint.written:
            await asyncio.sleep(0.01)
    assert checkpoint.written == [state.expected()]


async def test_a_busy_state_is_written_at_least_every_max_delay(tmp_path: Path) -> None:
    state = State()
    # Changes every 10 ms never leave the state quiet for a minute; max_delay_s still saves it.
    w, checkpoint = writer(tmp_path, state, quiet_s=60, max_delay_s=0.05)
    async with asyncio.timeout(10):
        while len(checkpoint.written) < 2:
            state.n += 1
            w.changed()
            await asyncio.sleep(0.01)
    numbers = [b["n"] for b in checkpoint.written]
    assert numbers[0] < numbers[1] <= state.n


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
    w = CheckpointWriter(checkpoint, state.body, state.lock, state.failed, retry_s=0.05)
    state.n = 4
    w.changed()
    await w.flush()
    assert state.failures == 1 and checkpoint.failing
    blocker.unlink()
    async with asyncio.timeout(5):
        while not checkpoint.written:
            await asyncio.sleep(0.01)
    assert [b["n"] for b in checkpoint.written] == [4] and not checkpoint.failing
    w.close()


async def test_a_failing_snapshot_is_counted_and_retried(tmp_path: Path) -> None:
    state = State()
    broken = [True]

    def snapshot() -> dict[str, Any]:
        if broken[0]:
            raise ValueError("policy bug")
        return state.body()

    checkpoint = Recording(tmp_path / "state.json")
    w = CheckpointWriter(checkpoint, snapshot, state.lock, state.failed, retry_s=0.05)
    state.n = 2
    w.changed()
    await w.flush()
    assert state.failures == 1 and checkpoint.written == []
    broken[0] = False
    async with asyncio.timeout(5):
        while not checkpoint.written:
            await asyncio.sleep(0.01)
    assert checkpoint.written == [state.expected()]
    w.close()
