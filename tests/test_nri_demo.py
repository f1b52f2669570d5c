"""The demo scenario and the event-logging plugin, through the real socket."""

from __future__ import annotations

import pytest

from nri_topology.testing.demo import demo, scenario
from nri_topology.testing.event_logger import EventLogger
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer


async def test_demo_prints_a_clean_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert await demo(EventLogger()) == 0
    out = capsys.readouterr().out
    assert "runtime errors: 0" in out
    assert "CreateContainer        4" in out


@pytest.mark.parametrize(
    ("nri_version", "events"),
    [("v0.12.2", 0x1FFF), ("v0.11.0", 0x1FFF), ("v0.8.0", 0x7FF)],
)
async def test_event_logger_sees_every_event(nri_version: str, events: int) -> None:
    plugin = EventLogger()
    peer = RuntimePeer(nri_version=nri_version, report_nri_version=True)
    async with connected(plugin, peer) as (peer, s):
        assert s.events == events
        await scenario(peer, pods=1, containers=1)
    expected = {
        "synchronize": 1,
        "run_pod_sandbox": 1,
        "create_container": 1,
        "post_create_container": 1,
        "start_container": 1,
        "post_start_container": 1,
        "update_container": 1,
        "post_update_container": 1,
        "stop_container": 1,
        "remove_container": 1,
        "stop_pod_sandbox": 1,
        "remove_pod_sandbox": 1,
    }
    if events & 0x800:
        expected |= {"update_pod_sandbox": 1, "post_update_pod_sandbox": 1}
    assert dict(plugin.counts) == expected
    assert not peer.errors
