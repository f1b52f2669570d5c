"""Our own ttrpc (containerd's RPC protocol): sans-IO codec and connection, asyncio endpoints.

`codec` holds the wire format, `connection` the stream rules of one connection (bytes in,
events out), `channel` the transport interface, `client` and `server` the asyncio endpoints
that only move bytes and run handlers. Nothing in this package knows about NRI.
"""
