"""Metrics registry and the status endpoint: names, labels, values, health and readiness."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nri_topology.daemon.health import StatusServer
from nri_topology.daemon.metrics import (
    ERROR_REASONS,
    LATENCY_BUCKETS,
    ContainerStat,
    MemoryStat,
    Metrics,
    PoolStat,
    StateView,
)

VIEW = StateView(
    pools=(
        PoolStat(
            name="node0",
            cpu_capacity=8000,
            cpu_free=5500,
            cpu_assigned=2500,
            containers=1,
            memory={"dram": MemoryStat(capacity=1 << 30, free=3 << 28, assigned=1 << 28)},
        ),
    ),
    containers=(
        ContainerStat(
            id="c1",
            name="app",
            pod="web",
            namespace="default",
            pool="node0",
            kind="exclusive",
            cpu_count=2,
            exclusive_cpus=2,
        ),
    ),
)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _get(port: int, path: str, method: str = "GET", raw: bytes | None = None):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw or f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.decode(), body.decode()


@pytest.fixture
async def served():
    state = {"view": VIEW, "ready": (False, "not registered")}
    metrics = Metrics(lambda: state["view"])
    server = StatusServer(metrics.registry, lambda: state["ready"], port=0)
    await server.start()
    yield server, metrics, state
    await server.close()


async def test_metrics_endpoint_lists_pools_containers_and_counters(served) -> None:
    server, metrics, _ = served
    metrics.requests.labels("CreateContainer").inc()
    metrics.error("policy")
    metrics.decision_latency.labels("create").observe(0.003)
    metrics.registered.set(1)
    status, head, body = await _get(server.port, "/metrics")
    assert status == 200 and "text/plain" in head
    s = _samples(body)
    pool = (("pool", "node0"),)
    assert s[("nri_topology_pool_cpu_capacity_cores", pool)] == 8
    assert s[("nri_topology_pool_cpu_free_cores", pool)] == 5.5
    assert s[("nri_topology_pool_cpu_assigned_cores", pool)] == 2.5
    assert s[("nri_topology_pool_containers", pool)] == 1
    tier = (("pool", "node0"), ("tier", "dram"))
    assert s[("nri_topology_pool_memory_capacity_bytes", tier)] == 1 << 30
    assert s[("nri_topology_pool_memory_free_bytes", tier)] == 3 << 28
    assert s[("nri_topology_pool_memory_assigned_bytes", tier)] == 1 << 28
    labels = dict(
        container_id="c1", container="app", pod="web", namespace="default", pool="node0",
        kind="exclusive",
    )  # fmt: skip
    assert s[("nri_topology_container_cpus", tuple(sorted(labels.items())))] == 2
    assert s[("nri_topology_container_exclusive_cpus", (("container_id", "c1"), *pool))] == 2
    assert s[("nri_topology_nri_requests_total", (("method", "CreateContainer"),))] == 1
    assert s[("nri_topology_errors_total", (("reason", "policy"),))] == 1
    assert s[("nri_topology_decision_duration_seconds_count", (("operation", "create"),))] == 1
    assert s[("nri_topology_registered", ())] == 1


async def test_bound_series_count_in_the_labelled_ones(served) -> None:
    """`request` and `observe` update the series `labels()` names, listed methods or not."""
    server, metrics, _ = served
    metrics.request("CreateContainer")
    metrics.requests.labels("CreateContainer").inc()
    metrics.request("PostStartContainer")  # not exported from the start: made when first counted
    metrics.observe("create", 0.003)
    metrics.observe("create", 0.5)
    s = _samples((await _get(server.port, "/metrics"))[2])
    requests = "nri_topology_nri_requests_total"
    assert s[(requests, (("method", "CreateContainer"),))] == 2
    assert s[(requests, (("method", "PostStartContainer"),))] == 1
    create = (("operation", "create"),)
    assert s[("nri_topology_decision_duration_seconds_count", create)] == 2
    assert s[("nri_topology_decision_duration_seconds_sum", create)] == pytest.approx(0.503)


async def test_series_follow_prometheus_conventions(served) -> None:
    server, metrics, _ = served
    metrics.decision_latency.labels("create").observe(0.00003)
    _, _, body = await _get(server.port, "/metrics")
    s = _samples(body)
    # Every error reason is there at 0 before the first error, as are both reload results.
    for reason in ERROR_REASONS:
        assert s[("nri_topology_errors_total", (("reason", reason),))] == 0
    for result in ("applied", "rejected"):
        assert s[("nri_topology_config_reloads_total", (("result", result),))] == 0
    assert s[("nri_topology_nri_requests_total", (("method", "StopContainer"),))] == 0
    assert s[("nri_topology_decision_duration_seconds_count", (("operation", "resize"),))] == 0
    assert not [name for name, _ in s if name.endswith("_created")]
    # No label carries a cpuset or anything else that changes while the series lives.
    labels = {name for _, pairs in s for name, _ in pairs}
    assert not labels & {"cpus", "mems", "cpuset"}
    assert not [name for name, _ in s if "milli" in name]
    # A decision of tens of microseconds lands in a bucket of its own, not in the first one.
    create = (("operation", "create"),)
    assert LATENCY_BUCKETS[0] <= 0.000025
    assert s[("nri_topology_decision_duration_seconds_bucket", (("le", "2.5e-05"), *create))] == 0
    assert s[("nri_topology_decision_duration_seconds_bucket", (("le", "5e-05"), *create))] == 1


def test_unknown_error_reasons_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown error reason"):
        Metrics().error("typo")


async def test_removed_containers_leave_no_series(served) -> None:
    server, _, state = served
    state["view"] = StateView(pools=VIEW.pools)
    _, _, body = await _get(server.port, "/metrics")
    assert not [k for k in _samples(body) if k[0] == "nri_topology_container_cpus"]


async def test_openmetrics_is_negotiated(served) -> None:
    server, _, _ = served
    raw = b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n"
    status, head, body = await _get(server.port, "", raw=raw)
    assert status == 200 and "openmetrics" in head and body.endswith("# EOF\n")


async def test_health_and_readiness(served) -> None:
    server, _, state = served
    assert (await _get(server.port, "/healthz"))[::2] == (200, "ok\n")
    assert (await _get(server.port, "/readyz"))[::2] == (503, "not ready: not registered\n")
    state["ready"] = (True, "")
    assert (await _get(server.port, "/readyz?verbose"))[::2] == (200, "ready\n")


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /nope HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\n\r\n", 405),
        (b"garbage\r\n\r\n", 400),
        (b"GET /healthz", 400),  # connection closed before the head ended
    ],
)
async def test_bad_requests_get_clear_statuses(served, raw: bytes, status: int) -> None:
    server, _, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw)
    writer.write_eof()
    data = await reader.read()
    writer.close()
    assert int(data.split()[1]) == status


async def test_head_has_no_body(served) -> None:
    server, _, _ = served
    status, head, body = await _get(server.port, "/healthz", method="HEAD")
    assert status == 200 and "Content-Length: 3" in head and body == ""


async def test_default_bind_is_loopback() -> None:
    server = StatusServer(Metrics().registry, lambda: (True, ""), port=0)
    await server.start()
    try:
        assert server._server is not None
        assert server._server.sockets[0].getsockname()[0] == "127.0.0.1"
    finally:
        await server.close()
