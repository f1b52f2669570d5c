"""Local endpoints for tests: a free TCP port on loopback, a GET of the plugin's endpoint."""

from __future__ import annotations

import http.client
import socket


def free_port() -> int:
    """A port nothing listens on now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(host: str, port: int, path: str) -> tuple[int, str]:
    """A GET of the plugin's status endpoint: the status and the body."""
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()
