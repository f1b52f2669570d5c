"""Hostile bytes into TtrpcServer and TtrpcClient: never a crash, only statuses or a close."""

from __future__ import annotations

import asyncio
import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.ttrpc import codec
from nri_topology.ttrpc.client import TtrpcClient
from nri_topology.ttrpc.codec import TYPE_RESPONSE, Frame, FrameDecoder, ProtocolError, TtrpcError
from nri_topology.ttrpc.server import CallContext, TtrpcServer


class ScriptedChannel:
    """Delivers fixed chunks, then EOF (or waits for close); records what was sent."""

    def __init__(self, chunks: list[bytes], *, hold_open: bool = False) -> None:
        self._chunks = list(chunks)
        self._hold_open = hold_open
        self._closed = asyncio.Event()
        self.sent: list[bytes] = []

    async def recv(self) -> bytes:
        if self._chunks:
            await asyncio.sleep(0)
            return self._chunks.pop(0)
        if self._hold_open:
            await self._closed.wait()
        for _ in range(10):  # let replies already under way reach send() before EOF
            await asyncio.sleep(0)
        return b""

    async def send(self, message: bytes) -> None:
        self.sent.append(message)

    def close(self) -> None:
        self._closed.set()


async def echo(payload: bytes, ctx: CallContext) -> bytes:
    return payload


frame_st = st.builds(
    Frame,
    stream_id=st.integers(0, 12),
    type=st.sampled_from([1, 2, 3]),
    flags=st.integers(0, 7),
    data=st.one_of(
        st.binary(max_size=30),
        st.builds(
            codec.encode_request,
            st.sampled_from(["svc", "other"]),
            st.sampled_from(["Echo", "Nope"]),
            st.binary(max_size=20),
        ),
    ),
)


def _stream(frames: list[Frame], garbage: bytes, cut: int) -> list[bytes]:
    wire = b"".join(codec.encode_frame(f) for f in frames) + garbage
    cut %= len(wire) + 1
    return [chunk for chunk in (wire[:cut], wire[cut:]) if chunk]  # b"" would mean EOF


@settings(max_examples=80, deadline=None)
@given(st.lists(frame_st, max_size=8), st.binary(max_size=20), st.integers(0, 500))
def test_server_survives_any_input(frames: list[Frame], garbage: bytes, cut: int) -> None:
    channel = ScriptedChannel(_stream(frames, garbage, cut))
    asyncio.run(TtrpcServer(channel, {"svc": {"Echo": echo}}).serve())
    # Every reply is one well-formed Response frame with flags 0.
    for message in channel.sent:
        [reply] = FrameDecoder().feed(message)
        assert isinstance(reply, Frame)
        assert (reply.type, reply.flags) == (TYPE_RESPONSE, 0)
        codec.decode_response(reply.data)
    # Exactly one reply per request or data frame read before any framing error.
    decoder, readable = FrameDecoder(), []
    for chunk in _stream(frames, garbage, cut):
        try:
            readable += decoder.feed(chunk)
        except ProtocolError:
            break
    assert len(channel.sent) == sum(1 for f in readable if f.type != TYPE_RESPONSE)


@settings(max_examples=80, deadline=None)
@given(st.lists(frame_st, max_size=8), st.binary(max_size=20), st.integers(0, 500))
def test_client_calls_only_fail_with_ttrpc_errors(
    frames: list[Frame], garbage: bytes, cut: int
) -> None:
    async def scenario() -> None:
        channel = ScriptedChannel(_stream(frames, garbage, cut), hold_open=True)
        client = TtrpcClient(channel)
        calls = [asyncio.create_task(client.call("svc", "Echo", b"", timeout=5)) for _ in range(3)]
        await asyncio.sleep(0.01)
        await client.close()
        for call in calls:
            with contextlib.suppress(TtrpcError):
                await call
        assert client.closed

    asyncio.run(scenario())
