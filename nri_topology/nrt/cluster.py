"""Whether to publish to a Kubernetes API server at all (cheap: no client library loaded)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster(environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT) -> bool:
    """Whether this process runs in a pod that may talk to the API server."""
    return "KUBERNETES_SERVICE_HOST" in environ and (account / "token").is_file()


def wanted(publish: bool | str, kubeconfig: str | None, cluster: bool) -> bool:
    """Whether to publish: `auto` means in a cluster, or with a kubeconfig given."""
    if publish == "auto":
        return cluster or kubeconfig is not None
    return bool(publish)
