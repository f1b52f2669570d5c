"""Reliability of the policy-backed plugin with the real policy, through the real socket.

Covers what the daemon tests do not: a runtime restart (the plugin reconnects and resyncs without
losing or moving a placement, and requests read back from the shares it set do not drift),
invalid annotations (refused with the key named, nothing changes, not even the checkpoint) and a
full disk (keeps serving, counts the failure, writes the latest state once space is back). Plugin
restarts with 300 containers are in test_daemon_restart.py, unwritable state directories in
test_daemon_plugin.py and test_checkpoint.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.soak import INVALID_ANNOTATIONS
from benchmarks.workload import Spec, fill_spec, nri_pair
from nri_topology.daemon import checkpoint as checkpoint_module
from nri_topology.daemon.checkpoint import Checkpoint
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri.stub import Stub
from nri_topology.policy.intake.request import milli_to_shares, shares_to_milli
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import QoS
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology.model import Machine
from tests import machines


@given(st.integers(3, 256_000))
def test_requests_read_back_from_our_own_shares_do_not_drift(milli: int) -> None:
    """A resync reads each request back from the shares we set: it must come back unchanged."""
    assert shares_to_milli(milli_to_shares(milli)) == milli


@pytest.fixture(scope="module")
def machine() -> Machine:
    return machines.load("server")


def _plugin(machine: Machine, state: Path) -> TopologyPlugin:
    return TopologyPlugin(Policy(machine, Options()), checkpoint=Checkpoint(state))


def _specs(count: int) -> list[Spec]:
    """The dense fill plus some multi-CPU and PMEM containers."""
    out = [fill_spec(i) for i in range(count)]
    out[1::15] = [Spec(QoS.GUARANTEED, cpu=4000, memory=1 << 30)] * len(out[1::15])
    out[2::25] = [Spec(QoS.GUARANTEED, cpu=2000, memory=1 << 29, memory_type="pmem")] * len(
        out[2::25]
    )
    return out


async def test_runtime_restart_reconnects_and_resyncs_without_moving_anything(
    machine: Machine, tmp_path: Path
) -> None:
    plugin = _plugin(machine, tmp_path / "state.json")
    with tempfile.TemporaryDirectory(prefix="nri-") as tmp:
        path = os.path.join(tmp, "nri.sock")
        first = RuntimePeer()
        await first.listen(path)
        stub = Stub(plugin, "topology", "50", path, environ={}, backoff_initial=0.01)
        plugin.stub = stub
        task = asyncio.get_running_loop().create_task(stub.run())
        try:
            await first.wait_plugin()
            for i, spec in enumerate(_specs(120)):
                pod, ctr = nri_pair(f"c{i:03}", spec)
                await first.run_pod_sandbox(pod)
                await first.create_container(pod, ctr)
            await plugin.settle()
            before = dict(plugin.policy.assignments())
            pods, ctrs = list(first.pods.values()), list(first.containers.values())
            await first.close()  # the runtime goes away ...

            # ... and comes back knowing the same containers, pinned as we pinned them.
            second = RuntimePeer(pods=pods, containers=ctrs)
            await second.listen(path)
            await second.wait_plugin(timeout=10)
            assert stub.connections == 2
            assert dict(plugin.policy.assignments()) == before
            assert second.applied_updates == []
            await plugin.flush()
            saved = Checkpoint(tmp_path / "state.json").load().body
            assert saved is not None and saved["policy"] == plugin.policy.snapshot()

            # and it goes on placing
            pod, ctr = nri_pair("after", Spec(QoS.GUARANTEED, cpu=2000, memory=1 << 28))
            await second.run_pod_sandbox(pod)
            reply = await second.create_container(pod, ctr)
            assert reply.adjust.linux.resources.cpu.cpus
            await second.close()
        finally:
            await stub.stop()
            await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    ("key", "value"), INVALID_ANNOTATIONS, ids=[k for k, _ in INVALID_ANNOTATIONS]
)
async def test_invalid_annotation_is_refused_and_changes_nothing(
    machine: Machine, tmp_path: Path, key: str, value: str
) -> None:
    plugin = _plugin(machine, tmp_path / "state.json")
    async with connected(plugin) as (peer, _):
        for i, spec in enumerate(_specs(20)):
            pod, ctr = nri_pair(f"c{i:03}", spec)
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await plugin.flush()
        before = dict(plugin.policy.assignments())
        saved = (tmp_path / "state.json").read_bytes()

        pod, ctr = nri_pair("bad", Spec(QoS.GUARANTEED, cpu=2000, memory=1 << 28))
        pod.annotations[key] = value
        await peer.run_pod_sandbox(pod)
        with pytest.raises(PluginError, match=f"nri-topology: .*{key.split('/')[0]}"):
            await peer.create_container(pod, ctr)
        await plugin.flush()
        assert dict(plugin.policy.assignments()) == before
        assert (tmp_path / "state.json").read_bytes() == saved
        assert peer.plugin is not None and peer.plugin.active


async def test_full_disk_keeps_serving_and_recovers(
    machine: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    plugin = _plugin(machine, state)
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async with connected(plugin) as (peer, _):
        monkeypatch.setattr(checkpoint_module.os, "fsync", full)
        for i, spec in enumerate(_specs(10)):
            pod, ctr = nri_pair(f"c{i:03}", spec)
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await plugin.flush()
        assert len(plugin.policy.assignments()) == 10
        assert plugin.checkpoint is not None and plugin.checkpoint.failing
        assert not state.exists() or Checkpoint(state).load().body != plugin._body()

        monkeypatch.setattr(checkpoint_module.os, "fsync", real_fsync)
        pod, ctr = nri_pair("later", fill_spec(1))
        await peer.run_pod_sandbox(pod)
        await peer.create_container(pod, ctr)
        await plugin.flush()
        saved = Checkpoint(state).load().body
        assert saved is not None and saved["policy"] == plugin.policy.snapshot()
        assert len(saved["policy"]) > 0 and not plugin.checkpoint.failing


async def test_the_file_is_the_policys_whole_snapshot_after_each_kind_of_change(
    machine: Machine, tmp_path: Path
) -> None:
    """The checkpoint writer gets only the entries the policy reports changed: placements,
    releases (moving shared containers) and a resize each reach the file that way."""
    path = tmp_path / "state.json"
    plugin = _plugin(machine, path)

    async def saved_is_whole() -> None:
        await plugin.flush()
        body = Checkpoint(path).load().body
        assert body is not None and body["policy"] == plugin.policy.snapshot()

    async with connected(plugin, RuntimePeer()) as (peer, _):
        pairs = [nri_pair(f"c{i:02}", spec) for i, spec in enumerate(_specs(40))]
        for pod, ctr in pairs:
            await peer.run_pod_sandbox(pod)
            await peer.create_container(pod, ctr)
        await saved_is_whole()
        for pod, ctr in pairs[::4]:
            await peer.stop_container(pod, ctr)
            await peer.remove_container(pod, ctr)
        await saved_is_whole()
        pod, ctr = pairs[1]
        resources = type(ctr.linux.resources)()
        resources.CopyFrom(ctr.linux.resources)
        resources.cpu.shares.value = milli_to_shares(2000)
        await peer.update_container(pod, ctr, resources)
        await saved_is_whole()
        assert len(plugin.policy.snapshot()["containers"]) == 30
