"""Many pods on each runtime: started in parallel as a kubelet starts them, and a hundred
pods resynchronized when the plugin restarts."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from tests.e2e.harness import Run, online_cpus, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GIB = 1 << 30


def expected_cpus(run: Run) -> dict[str, set[int]]:
    """Every live container's CPUs as the plugin decided them (its checkpoint): exclusive ones
    their own CPUs, shared ones the online CPUs less every exclusive CPU."""
    placed = wait_for("checkpoint written", run.checkpoint, 10)
    assert isinstance(placed, dict)
    exclusive = {cid: parse_cpus(p["exclusive"]) for cid, p in placed.items() if p["exclusive"]}
    taken = set().union(*exclusive.values()) if exclusive else set()
    return {cid: exclusive.get(cid, online_cpus() - taken) for cid in placed}


def mismatches(run: Run) -> dict[str, tuple[str, str]]:
    want = expected_cpus(run)
    out = {}
    for pod in run.pods.values():
        for c in pod.containers:
            got = run.cpus(c)
            if parse_cpus(got) != want.get(c.id):
                out[f"{pod.name}/{c.name}"] = (got, ",".join(map(str, sorted(want.get(c.id, ())))))
    return out


def test_parallel_pod_starts_get_what_the_plugin_decided(run: Run) -> None:
    """1 Guaranteed + 5 BestEffort pods started at once, several rounds: every cgroup read back
    must hold the plugin's decision, also for containers updated between creation and start."""
    run.start_plugin()
    rounds, failures = 5, {}
    with ThreadPoolExecutor(6) as pool:
        for r in range(rounds):
            jobs = [pool.submit(run.run_pod, f"g{r}", "guaranteed", 1000, GIB // 4)]
            jobs += [pool.submit(run.run_pod, f"be{r}-{i}", "besteffort") for i in range(5)]
            pods = [j.result() for j in jobs]
            # The plugin may repair drift after a start: give it its verification interval.
            try:
                wait_for("cgroups match the decisions", lambda: not mismatches(run), 10)
            except TimeoutError:
                failures[r] = mismatches(run)
            list(pool.map(run.remove_pod, pods))
    repaired = run.metric("nri_topology_cgroup_drift_total", check="post_start")
    print(f"{rounds} rounds, containers repaired after start: {repaired:.0f}")
    assert not failures, f"rounds with cgroups that differ from the decision: {failures}"


def test_hundred_pods_resynchronized_on_plugin_restart(run: Run) -> None:
    run.start_plugin()
    pods, per_pod = 100, 2
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        made = list(
            pool.map(lambda i: run.run_pod(f"p{i}", "besteffort", containers=per_pod), range(pods))
        )
    print(f"{pods} pods x {per_pod} containers started in {time.monotonic() - started:.1f}s")
    g = run.run_pod("g", "guaranteed", 1000, GIB // 4)
    exclusive = parse_cpus(run.cpus(g.containers[0]))
    shared = [c for p in made for c in p.containers]
    # Where re-pins follow the reply, the shared cgroups lose the exclusive CPU a little later.
    wait_for(
        "shared cgroups without the exclusive CPU",
        lambda: all(parse_cpus(run.cpus(c)) == online_cpus() - exclusive for c in shared),
        30,
    )
    before = {c.id: run.cpus(c) for p in [*made, g] for c in p.containers}
    run.stop_plugin(signal.SIGKILL)
    run.start_plugin()
    synced = [e for e in run.plugin_events() if e.get("event") == "synchronized with the runtime"]
    last = synced[-1]
    assert last["containers"] == pods * per_pod + 1
    assert last["adopted"] == pods * per_pod + 1 and last["failed"] == 0
    starts = [e for e in run.plugin_events() if e.get("event") == "starting"]
    took = datetime.fromisoformat(last["timestamp"]) - datetime.fromisoformat(
        starts[-1]["timestamp"]
    )
    print(f"plugin start to synchronized with {pods * per_pod + 1} containers: {took}")
    assert {c.id: run.cpus(c) for p in [*made, g] for c in p.containers} == before
    # The runtime restarting: the plugin reconnects and is synchronized with all of them again.
    run.stop_containerd()
    run.start_containerd()
    wait_for(
        "resynchronized after the runtime restart",
        lambda: (
            sum(e.get("event") == "synchronized with the runtime" for e in run.plugin_events())
            == len(synced) + 1
        ),
        60,
    )
    last = [e for e in run.plugin_events() if e.get("event") == "synchronized with the runtime"][-1]
    assert last["containers"] == pods * per_pod + 1 and last["adopted"] == last["containers"]
    assert {c.id: run.cpus(c) for p in [*made, g] for c in p.containers} == before
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run.remove_pod, made))
    print(f"{pods} pods removed in {time.monotonic() - started:.1f}s")
