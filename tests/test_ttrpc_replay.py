"""Replaying the recorded containerd/NRI exchange: our ttrpc writes what the Go code wrote."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import Frame, FrameDecoder
from nri_topology.ttrpc.server import CallContext, Handler, TtrpcServer
from tests.test_ttrpc_fuzz import ScriptedChannel

CAPTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "nri-capture"
pytestmark = pytest.mark.skipif(
    not CAPTURES.is_dir(),
    reason="recorded runtime traffic in ../shared/nri-capture is not beside this checkout",
)


def _conn_stream(raw: bytes, conn_id: int) -> bytes:
    """Payload bytes of one NRI mux connection (8-byte header: conn id, length)."""
    out = bytearray()
    pos = 0
    while pos < len(raw):
        conn, length = struct.unpack_from(">II", raw, pos)
        if conn == conn_id:
            out += raw[pos + 8 : pos + 8 + length]
        pos += 8 + length
    return bytes(out)


@pytest.mark.parametrize("scenario", ["small", "large"])
def test_server_replies_byte_for_byte_like_the_go_plugin(scenario: str) -> None:
    # Conn 1 carries the Plugin service: the runtime calls, the plugin (Go stub) answers.
    directory = CAPTURES / scenario
    replies = {
        path.name.split("-")[-2]: path.read_bytes()
        for path in (directory / "frames").glob("*-plugin-to-runtime-*-response.payload.bin")
    }

    def recorded(method: str) -> Handler:
        async def handler(payload: bytes, ctx: CallContext) -> bytes:
            return replies.get(method, b"")

        return handler

    incoming = _conn_stream((directory / "runtime-to-plugin.raw.bin").read_bytes(), 1)
    expected = _conn_stream((directory / "plugin-to-runtime.raw.bin").read_bytes(), 1)
    methods = {m: recorded(m) for m in ("Configure", "Synchronize", "CreateContainer")}
    channel = ScriptedChannel([incoming])
    asyncio.run(TtrpcServer(channel, {"nri.pkg.api.v1alpha1.Plugin": methods}).serve())
    assert b"".join(channel.sent) == expected


@pytest.mark.parametrize("scenario", ["small", "large"])
def test_client_request_is_byte_for_byte_the_go_plugins(scenario: str) -> None:
    # Conn 2 carries the Runtime service: the plugin calls RegisterPlugin.
    directory = CAPTURES / scenario
    sent_by_go = _conn_stream((directory / "plugin-to-runtime.raw.bin").read_bytes(), 2)
    [frame] = FrameDecoder().feed(sent_by_go)
    assert isinstance(frame, Frame)
    recorded = codec.decode_request(frame.data)
    reply = _conn_stream((directory / "runtime-to-plugin.raw.bin").read_bytes(), 2)

    async def scenario_() -> bytes:
        channel = ScriptedChannel([reply], hold_open=True)
        client = TtrpcClient(channel)
        result = await client.call(
            recorded.service,
            recorded.method,
            recorded.payload,
            timeout=recorded.timeout_nano / 1e9,
        )
        assert channel.sent == [sent_by_go]
        await client.close()
        return result

    assert asyncio.run(scenario_()) == b""
