"""Our own ttrpc (containerd's RPC protocol): sans-IO codec plus asyncio client and server.

`codec` holds the wire format, `channel` the transport interface, `client` and `server` the
endpoints. Nothing in this package knows about NRI.
"""
