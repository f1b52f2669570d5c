"""The small HTTP endpoint: `/metrics`, `/healthz` (process alive) and `/readyz` (registered),
and for clients on the same host only, the pages `nri-topology status` and `explain` read
(`/status`, `/explain`): they name every pod on the node, which is not for the whole network even
when the endpoint listens on all addresses for probes and Prometheus.

It runs on the daemon's own event loop, so a scrape sees the state between two decisions and
never a half-applied one; no threads, no web framework. Only GET and HEAD, one request per
connection, which is all Prometheus and kubelet probes need.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable, Mapping
from http import HTTPStatus
from urllib.parse import parse_qsl

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from nri_topology.config.schema import DEFAULT_METRICS_PORT

DEFAULT_HOST = "127.0.0.1"
_MAX_HEADER = 16 * 1024
_READ_TIMEOUT = 10.0

_log = structlog.get_logger("nri_topology.health")

# path -> (query -> (status, content type, body)): the pages served to local clients only
Pages = Mapping[str, Callable[[Mapping[str, str]], tuple[HTTPStatus, str, bytes]]]


class StatusServer:
    """Serves metrics from `registry`; `ready()` returns (ready, why-not) for `/readyz`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_METRICS_PORT,
        pages: Pages | None = None,
    ) -> None:
        self._registry = registry
        self._ready = ready
        self._pages = pages
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port 0)."""
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        _log.info("status endpoint listening", host=self._host, port=self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            head = b""
        except ConnectionError:
            writer.close()
            return
        local = _is_loopback(writer.get_extra_info("peername"))
        status, headers, body, method = self.respond(head[:_MAX_HEADER], local=local)
        lines = [f"HTTP/1.1 {status.value} {status.phrase}"]
        headers = {**headers, "Content-Length": str(len(body)), "Connection": "close"}
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if method != "HEAD":
            writer.write(body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    def respond(
        self, head: bytes, *, local: bool = False
    ) -> tuple[HTTPStatus, dict[str, str], bytes, str]:
        """Status, headers, body and method for one raw request head; `local`: from loopback."""
        text = head.decode("latin-1")
        request_line, _, rest = text.partition("\r\n")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _plain(HTTPStatus.BAD_REQUEST, "bad request\n", "GET")
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            status, headers, body, _ = _plain(HTTPStatus.METHOD_NOT_ALLOWED, "GET or HEAD\n", "GET")
            return status, {**headers, "Allow": "GET, HEAD"}, body, "GET"
        path, _, query = target.partition("?")
        if path == "/metrics":
            accept = ""
            for line in rest.split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "accept":
                    accept = value.strip()
            encoder, content_type = choose_encoder(accept)
            return HTTPStatus.OK, {"Content-Type": content_type}, encoder(self._registry), method
        if path == "/healthz":
            return _plain(HTTPStatus.OK, "ok\n", method)
        if path == "/readyz":
            ready, why = self._ready()
            if ready:
                return _plain(HTTPStatus.OK, f"ready: {why}\n" if why else "ready\n", method)
            return _plain(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {why}\n", method)
        if self._pages is not None and path in self._pages:
            if not local:
                return _plain(HTTPStatus.FORBIDDEN, "only from the node itself\n", method)
            status, content_type, body = self._pages[path](dict(parse_qsl(query)))
            return status, {"Content-Type": content_type}, body, method
        return _plain(HTTPStatus.NOT_FOUND, "not found\n", method)


def _plain(
    status: HTTPStatus, text: str, method: str
) -> tuple[HTTPStatus, dict[str, str], bytes, str]:
    return status, {"Content-Type": "text/plain; charset=utf-8"}, text.encode(), method


def _is_loopback(peer: object) -> bool:
    """Whether a socket peer address (host, port, ...) is on this host's loopback."""
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback
