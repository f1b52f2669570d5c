"""What the daemon knows of a runtime's CRI without talking to it: where it listens, and the
error its client raises. Apart from `client` so that a daemon that never asks the CRI (an NRI
that sends updates apart from its events) does not load gRPC, 9 MB of its resident memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

DEFAULT_SOCKETS = {
    "containerd": "/run/containerd/containerd.sock",
    "cri-o": "/var/run/crio/crio.sock",
}
"""The CRI socket of each runtime, by the name it gives in Configure, where it installs it."""


def default_socket(runtime_name: str) -> str | None:
    """Where `runtime_name` (as in Configure) serves the CRI by default; None when not known."""
    return DEFAULT_SOCKETS.get(runtime_name.strip().lower())


class CriError(Exception):
    """The runtime could not be asked or refused (the message says which)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code
