"""A gRPC service on a unix socket, for the test doubles of the runtime's CRI and the kubelet's
PodResources API: unary methods only, each a coroutine and its request and response types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc.aio

# method name -> (handler, request type, response type)
Methods = Mapping[str, tuple[Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]], Any, Any]]


async def serve_unix(path: str, service: str, methods: Methods) -> grpc.aio.Server:
    """Start serving `service` (its full name, e.g. `runtime.v1.RuntimeService`) on `path`."""
    server = grpc.aio.server()
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            handler,
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for name, (handler, request, response) in methods.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server
