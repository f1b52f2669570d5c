"""Hugepages accounted per NUMA node on each real runtime: with a known number of 2 MiB pages
allocated for the test, a Guaranteed pod asking for some of them is admitted and `status` and
`explain` show them taken on the node holding them; a pod asking for more than remain is refused
(docs/resources.md: more pages of a size than are unbooked on the whole machine), and once the
first pod is removed its pages are free again.

The pod asks for its pages as Kubernetes lets it, two ways:
- `limits`: the container's hugepage limits, which the kubelet sets from its `hugepages-2Mi`
  request; the runtimes pass them on (to the cgroup and to NRI) where the host has a hugetlb
  cgroup controller. Without one this variant skips: containerd drops the limits, and CRI-O hands
  them to runc, which cannot create the container (the harness then sends none, `hugepage_limits`).
- `annotation`: `noderesource.dev/resources` naming `hugepages-2Mi`, as the resource-annotator
  webhook writes it (with the same limits where the host takes them); this reaches the plugin
  with or without the controller.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.harness import HUGEPAGES, Pod, Run, hugetlb_controller, parse_cpus, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PAGE_KB = 2048
RESOURCE = "hugepages-2Mi"
ALLOCATED = 8  # pages this test adds to the host's
FIRST = 6  # pages the first pod asks for
KNOB = HUGEPAGES / f"hugepages-{PAGE_KB}kB" / "nr_hugepages"


def _set_pages(knob: Path, count: int) -> int:
    """Ask the kernel for `count` pages of the size; return how many it now holds."""
    knob.write_text(f"{count}\n")
    return int(knob.read_text())


@pytest.fixture
def pages() -> Iterator[int]:
    """The host's 2 MiB pages, ALLOCATED more than before for the test's duration (the count is
    restored afterwards, also when the test fails); skips where the kernel will not give them."""
    if not KNOB.exists():
        pytest.skip(f"the kernel offers no {PAGE_KB} kB hugepages ({KNOB} missing)")
    before = int(KNOB.read_text())
    try:
        try:
            held = _set_pages(KNOB, before + ALLOCATED)
        except OSError as exc:
            pytest.skip(f"the kernel refuses to allocate {PAGE_KB} kB hugepages: {exc}")
        if held < before + ALLOCATED:
            pytest.skip(
                f"the kernel allocated {held - before} of {ALLOCATED} {PAGE_KB} kB hugepages "
                "(too little contiguous memory)"
            )
        yield held
    finally:
        with contextlib.suppress(OSError):
            _set_pages(KNOB, before)


def status(run: Run) -> dict:
    code, body = run.plugin_http("/status?format=json")
    assert code == 200, body
    return json.loads(body)


def pages_free(run: Run) -> dict:
    """The 2 MiB pages the plugin counts on the whole machine (its root pool): held and free."""
    (root,) = [p for p in status(run)["pools"] if p["parent"] is None]
    return root["hugepages"].get(RESOURCE, {})


def booked(run: Run, container_id: str) -> list[dict]:
    """The pages `status` shows a container holding, per node."""
    (c,) = [c for c in status(run)["containers"] if c["container_id"] == container_id]
    return c["hugepages"]


def explained(run: Run, pod: Pod) -> dict:
    code, body = run.plugin_http(f"/explain?container=e2e/{pod.name}/c0&format=json")
    assert code == 200, body
    (c,) = json.loads(body)["containers"]
    return c["decision"]


def annotation(pages: int) -> dict[str, str]:
    """`noderesource.dev/resources` for a pod of one container `c0` asking 500m, 64 MiB and
    `pages` pages of 2 MiB, as the resource-annotator webhook copies a pod's resources."""
    limits = {"cpu": "500m", "memory": "64Mi", RESOURCE: f"{pages * PAGE_KB // 1024}Mi"}
    return {"noderesource.dev/resources": json.dumps({"containers": {"c0": {"limits": limits}}})}


def guaranteed(run: Run, name: str, pages: int, via: str, start: bool = True) -> Pod:
    """A Guaranteed pod of one container (500m, 64 MiB) asking for `pages` pages of 2 MiB."""
    pod = run.run_pod(
        name,
        "guaranteed",
        500,
        64 << 20,
        annotations=annotation(pages) if via == "annotation" else None,
        containers=0,
    )
    if start:
        run.add_container(pod, "c0", 500, 64 << 20, hugepages={PAGE_KB: pages * PAGE_KB * 1024})
    return pod


@pytest.mark.parametrize("via", ["limits", "annotation"])
def test_hugepages_are_booked_refused_and_freed(run: Run, pages: int, via: str) -> None:
    if via == "limits" and not hugetlb_controller():
        pytest.skip(
            "the host has no hugetlb cgroup controller mounted: containerd drops a container's "
            "hugepage limits before NRI plugins see them, runc fails CRI-O's"
        )
    run.start_plugin()  # after the pages exist: the plugin reads them at start
    assert pages_free(run) == {"pages": pages, "free": pages}

    first = guaranteed(run, "huge", FIRST, via)
    (c,) = first.containers
    taken = booked(run, c.id)
    assert sum(e["pages"] for e in taken) == FIRST and {e["resource"] for e in taken} == {RESOURCE}
    assert pages_free(run) == {"pages": pages, "free": pages - FIRST}
    assert explained(run, first)["hugepages"] == taken
    # The kernel takes hugepages only from the cpuset's memory nodes: the pages' nodes are there.
    mems = parse_cpus(run.cpuset(c).mems)
    assert {e["node"] for e in taken} <= mems, (taken, mems)

    # More pages than remain free on the whole machine: refused before the container starts.
    left = pages - FIRST
    more = guaranteed(run, "more", left + 2, via, start=False)
    with pytest.raises(grpc.RpcError) as refused:
        run.create_container(
            more, "c0", 500, 64 << 20, hugepages={PAGE_KB: (left + 2) * PAGE_KB * 1024}
        )
    assert f"{left + 2} pages of {RESOURCE} asked, {left} free" in refused.value.details()
    assert pages_free(run) == {"pages": pages, "free": left}

    # The first pod gone, its pages are free again and the larger pod fits.
    run.remove_pod(first)
    wait_for("pages free again", lambda: pages_free(run) == {"pages": pages, "free": pages}, 30)
    again = guaranteed(run, "again", left + 2, via)
    assert sum(e["pages"] for e in booked(run, again.containers[0].id)) == left + 2
    assert pages_free(run) == {"pages": pages, "free": pages - left - 2}
