"""Hostile annotations through the real daemon: the test runtime sends them over a real unix socket
to the plugin with the real policy. Never a crash, always an answer within the runtime's request
timeout, a refusal leaves the state as it was; warnings are logged and counted (issue 10)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import structlog.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.policy.intake.annotations import ALIAS_DOMAIN, ANNOTATIONS, DOMAIN, RESOURCES_KEY
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.testing import hostile
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import PluginError, RuntimePeer
from nri_topology.topology.model import Machine
from nri_topology.ttrpc.codec import Code, TtrpcError
from tests import machines

TIMEOUT = 2.0  # the runtime's default request timeout


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    spec = machines.SyntheticSpec(sockets=2, cores=4, threads=2, isolated="15")
    return machines.synthetic(Path(tmp_path_factory.mktemp("m")), spec)


def nri_pair(
    n: int,
    annotations: dict[str, str],
    *,
    qos: str = "burstable",
    namespace: str = "tenant",
    shares: int = 102,
    quota: int = 0,
) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    pod = api_pb2.PodSandbox(id=f"p{n}", name=f"pod{n}", namespace=namespace, uid=f"u{n}")
    pod.annotations.update(annotations)
    pod.linux.cgroup_parent = f"/kubepods/{qos}/podu{n}" if qos else f"/kubepods/podu{n}"
    ctr = api_pb2.Container(
        id=f"c{n}", pod_sandbox_id=pod.id, name="app", state=api_pb2.CONTAINER_RUNNING
    )
    ctr.linux.resources.cpu.shares.value = shares
    if quota:
        ctr.linux.resources.cpu.quota.value = quota
        ctr.linux.resources.cpu.period.value = 100_000
        ctr.linux.resources.memory.limit.value = 1 << 28
    return pod, ctr


# --- the grammar of hostile annotations ---------------------------------------------------------

_KEYS = st.sampled_from(
    [
        *(
            f"{spec.name}.{domain}{scope}"
            for spec in ANNOTATIONS
            if not spec.prefixed
            for domain in (DOMAIN, ALIAS_DOMAIN)
            for scope in ("", "/pod", "/container.app")
        ),
        *(
            f"{domain}/{spec.name}"
            for spec in ANNOTATIONS
            if spec.prefixed
            for domain in (DOMAIN, ALIAS_DOMAIN)
        ),
        RESOURCES_KEY,
        f"require-isolated-cpu.{DOMAIN}",
        f"cpu-class.{DOMAIN}",
        f"prefer-cpu-priority.{DOMAIN}/pod",
    ]
)
_NUMBERS = st.one_of(
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.sampled_from(
        ["0", "-0", "1e-999", "1e999", ".inf", "-.nan", "0x" + "f" * 50, "1:2:3", "1_000"]
    ),
    st.integers().map(str),
)
_SCALARS = st.one_of(
    _NUMBERS,
    st.text(max_size=40),
    st.sampled_from(["true", "false", "T", "dram,pmem", "mixed", "60s", "1h1ns", "~", "null"]),
    st.integers(1, 300_000).map(lambda n: "x" * n),
    st.text(alphabet="é€𝄞\u202e\x00", max_size=20),
)


def _yaml(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(_SCALARS.map(json.dumps), children), max_size=4).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
        children.map(lambda v: f"&a {v}"),
        st.just("*a"),
        children.map(lambda v: f"!!str {v}"),
    )


_VALUES = st.one_of(
    _SCALARS,
    st.recursive(_SCALARS.map(json.dumps), _yaml, max_leaves=12),
    st.integers(1, 40_000).map(hostile.nested_brackets),
    st.integers(1, 40_000).map(hostile.nested_cold_start),
    st.integers(1, 40_000).map(hostile.deep_json),
    st.tuples(st.integers(1, 1200), st.integers(1, 250)).map(
        lambda rp: hostile.anchored_rules(*rp)
    ),
    st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda lw: hostile.alias_bomb(*lw)),
    st.tuples(st.integers(1, 12), st.integers(1, 20), st.integers(0, 12)).map(
        lambda rvg: hostile.worst_affinity(*rvg)
    ),
    _NUMBERS.map(lambda n: hostile.claim("app", n, n)),
    st.integers(1, 6000).map(hostile.huge_raw_number),
    st.tuples(_NUMBERS, st.sampled_from(["", "h", "ms", "µs"])).map(
        lambda nu: f"duration: {nu[0]}{nu[1]}"
    ),
)
_ANNOTATIONS = st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=3)


async def _fuzz_session(machine: Machine, pods: list[dict[str, str]]) -> None:
    plugin = TopologyPlugin(Policy(machine, Options()))
    async with connected(plugin, RuntimePeer(request_timeout=TIMEOUT)) as (peer, _):
        conn = await peer.wait_plugin()
        for n in range(3):  # neighbours for the affinities to match
            await peer.create_container(*nri_pair(100 + n, {}))
        for n, annotations in enumerate(pods):
            pod, ctr = nri_pair(
                n,
                annotations,
                qos=["burstable", "", "besteffort"][n % 3],
                quota=200_000 if n % 3 == 1 else 0,
                shares=2048 if n % 3 == 1 else 102,
            )
            before = plugin.policy.assignments()
            started = time.perf_counter()
            try:
                await peer.create_container(pod, ctr)
            except PluginError as exc:
                cause = exc.__cause__
                assert isinstance(cause, TtrpcError), exc
                assert cause.code == Code.UNKNOWN and cause.message.startswith("nri-topology: "), (
                    exc
                )
                assert len(cause.message) < 2000  # values are shown shortened
                assert plugin.policy.assignments() == before
            else:
                await peer.remove_container(pod, ctr)
            assert time.perf_counter() - started < TIMEOUT
            assert conn.active, peer.errors
        await peer.create_container(*nri_pair(999, {}))  # still serving
        await plugin.settle()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(_ANNOTATIONS, min_size=1, max_size=8))
def test_fuzzed_annotations_through_the_daemon(machine, pods):
    asyncio.run(_fuzz_session(machine, pods))


@pytest.mark.parametrize("case", sorted(hostile.CASES))
def test_each_hostile_case_through_the_daemon(machine, case):
    asyncio.run(_fuzz_session(machine, [hostile.CASES[case]]))


# --- warnings: logged, counted, said in the decision ---------------------------------------------


def _counters(plugin: TopologyPlugin) -> dict[tuple[str, str], float]:
    text = generate_latest(plugin.metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("nri_topology_annotation"):
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.name, next(iter(s.labels.values()))] = s.value
    return out


def test_warnings_are_logged_counted_and_in_the_decision(machine):
    async def scenario() -> tuple[list[dict], dict]:
        plugin = TopologyPlugin(Policy(machine, Options()))
        assert set(_counters(plugin).values()) == {0.0}  # every label exported from the start
        unknown = {
            f"require-isolated-cpu.{DOMAIN}": "true",
            f"cpu-class.{DOMAIN}": "turbo",
            f"prefer-reserved-cpus.{DOMAIN}": "true",
            RESOURCES_KEY: hostile.claim("app", "75"),
        }
        async with connected(plugin, RuntimePeer(request_timeout=TIMEOUT)) as (peer, _):
            with structlog.testing.capture_logs() as logged:
                pod, ctr = nri_pair(1, unknown)
                await peer.create_container(pod, ctr)
                second = api_pb2.Container()
                second.CopyFrom(ctr)
                second.id, second.name = "c1b", "side"
                await peer.create_container(pod, second)  # same pod: keys not warned again
                with pytest.raises(PluginError):
                    await peer.create_container(*nri_pair(2, hostile.CASES["alias bomb"]))
                # Decisions are logged just after their reply is sent: before the peer reads it.
            await plugin.settle()
        return logged, _counters(plugin)

    logged, counters = asyncio.run(scenario())
    (keys,) = [e for e in logged if e["event"] == "annotation keys ignored"]
    assert keys["pod"] == "tenant/pod1" and len(keys["keys"]) == 2
    assert any(f"require-isolated-cpus.{DOMAIN}" in k for k in keys["keys"])
    ignored = [e for e in logged if e["event"] == "annotation ignored"]
    assert sorted(e["kind"] for e in ignored) == ["claim_cut", "untrusted", "untrusted"]
    created = [e for e in logged if e["event"] == "container created"]
    assert [e["container"] for e in created] == ["tenant/pod1/app", "tenant/pod1/side"]
    assert any("prefer-reserved-cpus" in w for w in created[0]["warnings"])
    (refused,) = [e for e in logged if e["event"] == "placement refused"]
    assert "anchors" in refused["reason"]
    assert counters["nri_topology_annotation_warnings_total", "unknown_key"] == 1
    assert counters["nri_topology_annotation_warnings_total", "unsupported_key"] == 1
    assert counters["nri_topology_annotation_warnings_total", "untrusted"] == 2  # per container
    assert counters["nri_topology_annotation_warnings_total", "claim_cut"] == 1
    assert counters["nri_topology_annotation_refusals_total", "aliases"] == 1
    assert counters["nri_topology_annotation_refusals_total", "depth"] == 0


def test_synchronize_with_hostile_pods_running_leaves_them_unpinned_and_serves(machine):
    """The crash loop of the issue: a hostile pod that exists when the plugin (re)starts."""

    async def scenario() -> None:
        pairs = [nri_pair(n, annotations) for n, annotations in enumerate(hostile.CASES.values())]
        pairs.append(nri_pair(99, {}))
        peer = RuntimePeer(
            request_timeout=TIMEOUT,
            pods=[p for p, _ in pairs],
            containers=[c for _, c in pairs],
        )
        plugin = TopologyPlugin(Policy(machine, Options()))
        with structlog.testing.capture_logs() as logged:
            async with connected(plugin, peer) as (peer, _):
                conn = await peer.wait_plugin()
                assert conn.active and not peer.errors
                assert set(plugin.policy.assignments()) == {"c99"}
                await peer.create_container(*nri_pair(100, {}))
        unplaced = [e for e in logged if e["event"] == "not placed, pinning left as is"]
        assert len(unplaced) == len(hostile.CASES)
        assert all(len(e["reason"]) < 600 for e in unplaced)

    asyncio.run(scenario())
