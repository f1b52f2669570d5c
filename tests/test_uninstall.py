"""`nri-topology uninstall` (the chart's pre-delete hook) against a small API server: the
DaemonSet goes first, its NodeResourceTopology objects only once its pods are gone, and objects
another program wrote stay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nri_topology.cli import main
from tests.apiserver import NRT_PATH, ApiServer, serve
from tests.test_nrt_publish import kubeconfig

SELECTOR = {"app.kubernetes.io/name": "nri-topology", "app.kubernetes.io/instance": "nrt"}


def nrt(name: str, manager: str) -> dict:
    meta = {"name": name, "managedFields": [{"manager": manager}]}
    return {"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
            "metadata": meta, "zones": []}  # fmt: skip


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    server = ApiServer(
        daemonsets={"kube-system/nrt": SELECTOR},
        pods={"kube-system/nrt-abcde": SELECTOR, "kube-system/other": {"app": "x"}},
        objects={"w1": nrt("w1", "nri-topology"), "w2": nrt("w2", "nri-topology"),
                 "w3": nrt("w3", "nfd-topology-updater")},
    )  # fmt: skip
    async with serve(server) as running:
        yield running


async def uninstall(api: ApiServer, tmp_path: Path, *args: str) -> int:
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    argv = ["uninstall", "--kubeconfig", config, *args]
    return await asyncio.to_thread(main, argv)


async def test_deletes_the_daemonset_waits_for_its_pods_then_its_objects(
    api: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await uninstall(api, tmp_path, "--daemonset", "kube-system/nrt") == 0
    assert api.daemonsets == {}
    assert set(api.objects) == {"w3"}  # another writer's object stays
    assert list(api.pods) == ["kube-system/other"]
    steps = [(r.method, r.path) for r in api.requests]
    deletes = [i for i, (m, path) in enumerate(steps) if m == "DELETE" and NRT_PATH in path]
    empty = max(i for i, (m, path) in enumerate(steps) if path.endswith("/pods"))
    assert min(deletes) > empty, "objects deleted while a plugin could still write them"
    assert "w1, w2" in capsys.readouterr().out


async def test_without_the_daemonset_it_still_removes_the_objects(
    api: ApiServer, tmp_path: Path
) -> None:
    api.daemonsets.clear()
    assert await uninstall(api, tmp_path, "--daemonset", "kube-system/nrt") == 0
    assert set(api.objects) == {"w3"}


async def test_plugins_that_do_not_stop_fail_it_and_keep_the_objects(
    api: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.pods_linger = 100
    code = await uninstall(api, tmp_path, "--daemonset", "kube-system/nrt", "--timeout", "1.5")
    assert code == 1
    assert "nrt-abcde" in capsys.readouterr().err
    assert set(api.objects) == {"w1", "w2", "w3"}


def test_the_daemonset_is_named_with_its_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["uninstall", "--daemonset", "nrt"]) == 2
    assert "NAMESPACE/NAME" in capsys.readouterr().err
