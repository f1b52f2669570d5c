"""Replay real bytes from the upstream runtime side (shared/nri-capture) against our code."""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from nri_topology.nri import api_pb2
from nri_topology.nri.mux import HEADER, MuxDecoder
from nri_topology.nri.stub import Plugin, Stub
from nri_topology.testing.go_reader import GoConnReader
from nri_topology.ttrpc.codec import FrameDecoder, decode_request, decode_response

CAPTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "nri-capture"
SCENARIOS = ["small", "large"]
REQUEST_TYPES = {
    "Configure": api_pb2.ConfigureRequest,
    "Synchronize": api_pb2.SynchronizeRequest,
    "CreateContainer": api_pb2.CreateContainerRequest,
}

pytestmark = pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared/nri-capture not present")


@dataclass(frozen=True)
class CapturedFrame:
    seq: int
    direction: str
    data: bytes  # mux header + payload

    @property
    def conn_id(self) -> int:
        return HEADER.unpack_from(self.data)[0]

    @property
    def payload(self) -> bytes:
        return self.data[HEADER.size :]


def frames(scenario: str) -> list[CapturedFrame]:
    out = []
    for path in sorted((CAPTURES / scenario / "frames").glob("*.frame.bin")):
        match = re.match(r"(\d+)-(runtime-to-plugin|plugin-to-runtime)-", path.name)
        assert match, path.name
        out.append(CapturedFrame(int(match[1]), match[2], path.read_bytes()))
    return out


def ttrpc_messages(data: bytes, chunk: int) -> dict[int, list]:
    """Mux-decode `data` fed in `chunk`-byte pieces, then ttrpc-decode each connection."""
    mux = MuxDecoder()
    per_conn: dict[int, FrameDecoder] = {}
    out: dict[int, list] = {}
    for start in range(0, len(data), chunk):
        for conn_id, payload in mux.feed(data[start : start + chunk]):
            decoder = per_conn.setdefault(conn_id, FrameDecoder())
            out.setdefault(conn_id, []).extend(decoder.feed(payload))
    assert mux.buffered == 0
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_runtime_bytes_are_accepted(scenario: str, chunk: int) -> None:
    raw = (CAPTURES / scenario / "runtime-to-plugin.raw.bin").read_bytes()
    messages = ttrpc_messages(raw, chunk)
    assert [m.type for m in messages[2]] == [2]  # the RegisterPlugin reply
    assert decode_response(messages[2][0].data).error() is None
    requests = [decode_request(m.data) for m in messages[1]]
    assert [r.method for r in requests] == ["Configure", "Synchronize", "CreateContainer"]
    assert [m.stream_id for m in messages[1]] == [1, 3, 5]
    payload_files = sorted((CAPTURES / scenario / "frames").glob("*runtime-to-plugin-*payload.bin"))
    for request, path in zip(requests, payload_files, strict=True):
        assert request.service == "nri.pkg.api.v1alpha1.Plugin"
        assert request.payload == path.read_bytes()
        REQUEST_TYPES[request.method].FromString(request.payload)  # parses with our types


def test_large_sync_arrives_in_go_layout() -> None:
    runtime = [f for f in frames("large") if f.direction == "runtime-to-plugin"]
    sizes = [len(f.payload) for f in runtime]
    assert 4096 in sizes  # the first part of the 24 KiB Synchronize request
    assert sizes[sizes.index(4096) + 1] > 4096


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_plugin_bytes_from_go_pass_our_go_reader(scenario: str) -> None:
    readers = {1: GoConnReader(), 2: GoConnReader()}
    got = 0
    for f in frames(scenario):
        if f.direction == "plugin-to-runtime":
            readers[f.conn_id].push_frame(f.payload)
            while readers[f.conn_id].next_message() is not None:
                got += 1
    assert got == 4


class LoggerLike(Plugin):
    """What the captured Go plugin does: CreateContainer only, one annotation."""

    def __init__(self) -> None:
        self.synced: tuple[int, int] | None = None

    async def synchronize(self, pods, containers):  # type: ignore[no-untyped-def]
        self.synced = (len(pods), len(containers))
        return []

    async def create_container(self, pod, ctr):  # type: ignore[no-untyped-def]
        adjust = api_pb2.ContainerAdjustment()
        adjust.annotations["logger-was-here"] = "logger-pid-1234"
        return adjust, []


def _header(frame_payload: bytes) -> tuple[int, int, int, int]:
    length, stream, type_, flags = HEADER.unpack_from(frame_payload[:8]) + tuple(
        frame_payload[8:10]
    )
    return length, stream, type_, flags


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_our_plugin_answers_with_the_same_frames(scenario: str) -> None:
    """Play the runtime's captured frames to our stub; its frames must match the Go plugin's."""
    runtime_end, plugin_end = socket.socketpair()
    plugin = LoggerLike()
    stub = Stub(plugin, "nri-logger", "10", sock=plugin_end, environ={})
    task = asyncio.create_task(stub.run())
    reader, writer = await asyncio.open_unix_connection(sock=runtime_end)
    decoder = MuxDecoder()
    pending: list[tuple[int, bytes]] = []
    try:
        for f in frames(scenario):
            if f.direction == "runtime-to-plugin":
                writer.write(f.data)
                await writer.drain()
                continue
            async with asyncio.timeout(5):
                while not pending:
                    pending += decoder.feed(await reader.read(1 << 16))
            conn_id, payload = pending.pop(0)
            assert conn_id == f.conn_id
            assert len(payload) == len(f.payload), f"frame {f.seq}"
            ours, theirs = _header(payload), _header(f.payload)
            assert ours == theirs, f"frame {f.seq}"
            if theirs[2] == 1:  # RegisterPlugin: same identity, same timeout encoding size
                req, captured = decode_request(payload[10:]), decode_request(f.payload[10:])
                assert (req.service, req.method, req.payload) == (
                    captured.service,
                    captured.method,
                    captured.payload,
                )
            elif theirs[1] == 5:  # CreateContainer: the annotation value holds a process id
                mine = api_pb2.CreateContainerResponse.FromString(
                    decode_response(payload[10:]).payload
                )
                go = api_pb2.CreateContainerResponse.FromString(
                    decode_response(f.payload[10:]).payload
                )
                assert {k: len(v) for k, v in mine.adjust.annotations.items()} == {
                    k: len(v) for k, v in go.adjust.annotations.items()
                }
            else:  # Configure (events 0x8) and Synchronize (empty) replies: byte for byte
                assert payload == f.payload
        assert not pending
    finally:
        writer.close()
        await asyncio.wait_for(task, 5)
    assert plugin.synced == ((1, 1) if scenario == "small" else (60, 300))
