"""The checks of the VM end-to-end test, run inside the guest (Debian 13, systemd, cgroup v2).

The plugin runs as the shipped systemd unit, containerd with runc's systemd cgroup driver, pods
in kubelet-style slices made over D-Bus; last, when the host shared a CRI-O, containerd is
stopped and CRI-O with its systemd cgroup manager takes over the same NRI socket. Every check
reads what the kernel and systemd hold and compares it with what the plugin decided; the results
go to a JSON file for the host's test:
`[{"check": name, "ok": bool, "detail": str}, ...]`.

usage: python guest.py OUT.json   (with the repository on PYTHONPATH, the plugin's venv Python)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from nri_topology.cri import api_pb2 as cri
from nri_topology.daemon.cgroupfs import cgroup_dir
from nri_topology.policy.types import QoS
from nri_topology.topology.cpuset import parse as parse_cpus
from tests.e2e.harness import (
    IMAGE,
    SLEEP,
    Cri,
    container_labels,
    hugetlb_controller,
    metric_sample,
    pod_labels,
    qos_named,
    resources,
    wait_for,
)

CGROUP = Path("/sys/fs/cgroup")
CONTAINERD_SOCK = Path("/run/containerd/containerd.sock")
# CRI-O as run.sh installs it (tests/vm/crio.conf, crio.service), when the host shared one.
CRIO = Path("/usr/local/bin/crio")
CRIO_SOCK = Path("/var/run/crio/crio.sock")
CRIO_STORE = "overlay@/var/lib/containers/storage+/run/containers/storage"
STATE = Path("/var/lib/nri-topology/state.json")
GIB = 1 << 30


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def pod_slice(qos: QoS, uid: str) -> str:
    """The kubelet's systemd-driver pod slice name."""
    uid = uid.replace("-", "_")
    if qos is QoS.GUARANTEED:
        return f"kubepods-pod{uid}.slice"
    return f"kubepods-{qos.value.lower()}-pod{uid}.slice"


def start_slice(name: str, memory_max: int = 0) -> None:
    """A transient slice, as the kubelet starts one (parents are implicit slice units)."""
    props = ["1", "MemoryMax", "t", str(memory_max)] if memory_max else ["0"]
    sh("busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
       "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
       name, "replace", *props, "0")  # fmt: skip
    wait_for(f"{name} active", lambda: sh("systemctl", "is-active", name).strip() == "active", 60)


class Node:
    def __init__(self, sock: Path = CONTAINERD_SOCK) -> None:
        self.cri = Cri(sock)
        self.containers: dict[str, str] = {}  # name -> id
        self.pods: dict[str, str] = {}  # name -> sandbox id
        self.guaranteed: set[str] = set()

    def run_pod(
        self,
        name: str,
        qos_name: str,
        cpu_milli: int = 0,
        memory: int = 64 << 20,
        hugepages: dict[int, int] | None = None,
        handler: str = "",
    ) -> str:
        """A pod of one container, started; `handler` the runtime handler (containerd.toml)."""
        qos = qos_named(qos_name)
        uid = str(uuid.uuid4())
        parent = pod_slice(qos, uid)
        start_slice(parent, memory if qos is QoS.GUARANTEED else 0)
        config = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace="vm"),
            labels=pod_labels(name, "vm", uid),
            log_directory=f"/var/log/pods/{uid}",
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=parent,
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER)
                ),
            ),
        )
        pod = self.cri.runtime(
            "RunPodSandbox", cri.RunPodSandboxRequest(config=config, runtime_handler=handler), 300
        ).pod_sandbox_id
        ccfg = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="c0"),
            image=cri.ImageSpec(image=IMAGE, user_specified_image=IMAGE),
            command=SLEEP,
            labels=container_labels(config, "c0"),
            log_path="c0.log",
            linux=cri.LinuxContainerConfig(
                resources=resources(qos_name, cpu_milli, memory, hugepages),
                security_context=cri.LinuxContainerSecurityContext(
                    namespace_options=config.linux.security_context.namespace_options
                ),
            ),
        )
        cid = self.cri.runtime(
            "CreateContainer",
            cri.CreateContainerRequest(pod_sandbox_id=pod, config=ccfg, sandbox_config=config),
            300,
        ).container_id
        self.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=cid), 300)
        self.containers[name] = cid
        self.pods[name] = pod
        if qos is QoS.GUARANTEED:
            self.guaranteed.add(name)
        return cid

    def fill(self, prefix: str, handler: str = "") -> None:
        """BestEffort pods `prefix`N until every NUMA node's CPUs hold a Guaranteed container or
        one of these (any container, without a handler): a Guaranteed pod then takes its CPU
        from some of them."""

        def counted(name: str) -> bool:
            return not handler or name.startswith(prefix) or name in self.guaranteed

        n = 0
        while n < 4 and any(
            not any(cpus & c for name, (cpus, _) in self.snapshot().items() if counted(name))
            for c in numa_cpus()
        ):
            self.run_pod(f"{prefix}{n}", "besteffort", handler=handler)
            n += 1

    def remove_pod(self, name: str) -> None:
        """Stop and remove a pod, as the kubelet does when it is deleted."""
        cid, pod = self.containers.pop(name), self.pods.pop(name)
        self.guaranteed.discard(name)
        self.cri.runtime("StopContainer", cri.StopContainerRequest(container_id=cid), 300)
        self.cri.runtime("RemoveContainer", cri.RemoveContainerRequest(container_id=cid), 300)
        self.cri.runtime("StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod), 300)
        self.cri.runtime("RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod), 300)

    def remove_all(self) -> None:
        """Every pod the runtime has, tracked or not (one a failed check left), removed."""
        for pod in self.cri.runtime("ListPodSandbox", cri.ListPodSandboxRequest(), 300).items:
            listed = self.cri.runtime(
                "ListContainers",
                cri.ListContainersRequest(filter=cri.ContainerFilter(pod_sandbox_id=pod.id)),
                300,
            )
            for c in listed.containers:
                self.cri.runtime("StopContainer", cri.StopContainerRequest(container_id=c.id), 300)
                self.cri.runtime(
                    "RemoveContainer", cri.RemoveContainerRequest(container_id=c.id), 300
                )
            self.cri.runtime(
                "StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod.id), 300
            )
            self.cri.runtime(
                "RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod.id), 300
            )
        self.containers.clear()
        self.pods.clear()
        self.guaranteed.clear()

    def info(self, cid: str) -> dict:
        """The runtime's verbose ContainerStatus info: pid, runtimeSpec."""
        resp = self.cri.runtime(
            "ContainerStatus", cri.ContainerStatusRequest(container_id=cid, verbose=True)
        )
        return json.loads(resp.info["info"])

    def pid(self, cid: str) -> int:
        return int(self.info(cid)["pid"])

    def cgroup(self, cid: str) -> Path:
        """The cgroup (v2) of the container's process: its scope, or a child of it (crun's
        `container`)."""
        line = Path(f"/proc/{self.pid(cid)}/cgroup").read_text().splitlines()[0]
        return CGROUP / line.split(":", 2)[2].lstrip("/")

    def scope(self, cid: str) -> Path:
        """The container's systemd scope: where the runtime and the plugin write."""
        d = self.cgroup(cid)
        return d if d.name.endswith(".scope") else d.parent

    def effective(self, cid: str) -> tuple[set[int], set[int]]:
        d = self.cgroup(cid)
        return (
            parse_cpus((d / "cpuset.cpus.effective").read_text()),
            parse_cpus((d / "cpuset.mems.effective").read_text()),
        )

    def systemd_view(self, cid: str) -> tuple[set[int], set[int]]:
        """systemd's AllowedCPUs / AllowedMemoryNodes of the container's scope (empty means
        unrestricted: then the root cgroup's)."""
        out = sh("systemctl", "show", self.scope(cid).name, "-p", "AllowedCPUs",
                 "-p", "AllowedMemoryNodes")  # fmt: skip
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

        def cpus(text: str) -> set[int]:
            return parse_cpus(text.replace(" ", ",")) if text.strip() else set()

        return (
            cpus(props.get("AllowedCPUs", ""))
            or parse_cpus((CGROUP / "cpuset.cpus.effective").read_text()),
            cpus(props.get("AllowedMemoryNodes", ""))
            or parse_cpus((CGROUP / "cpuset.mems.effective").read_text()),
        )

    def decided(self) -> dict[str, tuple[set[int], set[int] | None]]:
        """Every container's CPUs and memory nodes as the plugin decided them (its /status)."""
        with urllib.request.urlopen("http://127.0.0.1:8967/status?format=json", timeout=30) as r:
            doc = json.load(r)
        return {
            c["container_id"]: (
                parse_cpus(c["cpus"] or ""),
                parse_cpus(c["mems"]) if c["mems"] else None,
            )
            for c in doc["containers"]
        }

    def mismatches(self) -> dict[str, str]:
        """Containers whose cgroup or systemd view differs from the plugin's decision."""
        decided = self.decided()
        out = {}
        for name, cid in self.containers.items():
            cpus, mems = self.effective(cid)
            allowed_cpus, allowed_mems = self.systemd_view(cid)
            want_cpus, want_mems = decided.get(cid, (None, None))
            if not (cpus == want_cpus == allowed_cpus and mems == allowed_mems) or (
                want_mems is not None and mems != want_mems
            ):
                out[name] = (
                    f"decided {want_cpus} / {want_mems}, cpuset.cpus.effective {cpus}, "
                    f"AllowedCPUs {allowed_cpus}, cpuset.mems.effective {mems}, "
                    f"AllowedMemoryNodes {allowed_mems}"
                )
        return out

    def agree(self, what: str, timeout: float = 60) -> None:
        """Wait until every container's cgroup and systemd view hold the plugin's decision."""
        try:
            wait_for(what, lambda: not self.mismatches(), timeout)
        except TimeoutError:
            raise AssertionError(f"{what}: {self.mismatches()}") from None

    def snapshot(self) -> dict[str, tuple[set[int], set[int]]]:
        return {name: self.effective(cid) for name, cid in self.containers.items()}


def plugin_ready() -> bool:
    proc = subprocess.run(
        ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8967/readyz')"],
        capture_output=True,
    )
    return proc.returncode == 0


def restart_plugin() -> None:
    """`systemctl restart nri-topology`, until it has synchronized again and is ready."""
    synced = journal_count("synchronized with the runtime")
    sh("systemctl", "restart", "nri-topology")
    wait_for("resynchronized", lambda: journal_count("synchronized with the runtime") > synced, 120)
    wait_for("plugin ready", plugin_ready, 120)


def journal_count(text: str) -> int:
    out = sh("journalctl", "-u", "nri-topology", "-o", "cat", "--no-pager")
    return sum(text in line for line in out.splitlines())


def check_topology() -> str:
    doc = json.loads(sh("/opt/nri-topology/venv/bin/nri-topology", "topology", "--json"))
    nodes = {n["id"]: n for n in doc["nodes"]}
    only = [n for n in nodes.values() if not n["cpus"]]
    assert doc["counts"]["memory_only_nodes"] == 1 and len(only) == 1, doc["counts"]
    (mem,) = only
    cpu_tiers = {n["tier"] for n in nodes.values() if n["cpus"]}
    assert cpu_tiers == {"dram"}, cpu_tiers
    assert mem["tier"] != "dram" and mem["tier_source"] in ("hmat", "kernel"), mem
    return (
        f"{doc['counts']['cpus']} CPUs, {len(nodes)} nodes; node {mem['id']} memory-only: "
        f"tier {mem['tier']} ({mem['tier_source']}), distances {mem['distances']}"
    )


def metric(name: str, **labels: str) -> float:
    """One sample of the plugin's metrics endpoint (0 when absent)."""
    with urllib.request.urlopen("http://127.0.0.1:8967/metrics", timeout=30) as r:
        return metric_sample(r.read().decode(), name, **labels)


def numa_cpus() -> list[set[int]]:
    """The CPUs of each NUMA node that has any."""
    out = []
    for d in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        text = (d / "cpulist").read_text().strip()
        if text:
            out.append(parse_cpus(text))
    return out


def check_placement(node: Node) -> str:
    node.run_pod("be", "besteffort")
    node.run_pod("bu", "burstable", 200)
    node.fill("fill")
    node.agree("shared containers placed")
    before = node.snapshot()
    node.run_pod("g", "guaranteed", 1000, GIB // 4)
    cpus, _ = node.effective(node.containers["g"])
    assert len(cpus) == 1, f"guaranteed got {cpus}"
    # the shared containers that held its CPU had their scopes written by the plugin (the unit
    # lets it), then the runtime's record and systemd's properties followed
    holders = sorted(name for name, (held, _) in before.items() if held & cpus)
    written = metric("nri_topology_cgroup_writes_total", outcome="written")
    why = {
        "holders": holders,
        "written": written,
        "refused": metric("nri_topology_cgroup_writes_total", outcome="refused"),
        "transport": [
            t
            for t in ("cri", "nri", "reply")
            if metric("nri_topology_update_transport", transport=t)
        ],
    }
    assert holders and written >= len(holders), f"re-pins written into the cgroups: {why}"
    assert journal_count("cgroups cannot be written here") == 0
    node.agree("cgroups and systemd agree with the plugin")
    snapshot = {k: [sorted(c), sorted(m)] for k, (c, m) in node.snapshot().items()}
    return json.dumps({"written_first": why, "placed": snapshot})


def check_drift(node: Node) -> str:
    cid = node.containers["be"]
    before = node.effective(cid)[0]
    online = parse_cpus(Path("/sys/devices/system/cpu/online").read_text())
    drifted = min(before) if len(before) > 1 else min(online - before)
    (node.scope(cid) / "cpuset.cpus").write_text(str(drifted))
    assert node.effective(cid)[0] == {drifted}
    wait_for("drift repaired", lambda: node.effective(cid)[0] == before, 60)
    node.agree("systemd agrees again")
    assert journal_count("cgroup differs from the placement, updating") >= 1
    return f"be set to {drifted} by hand, put back to {sorted(before)}"


def check_plugin_restart(node: Node) -> str:
    before = node.snapshot()
    restart_plugin()
    assert node.snapshot() == before
    assert not node.mismatches(), node.mismatches()
    return "placements unchanged after systemctl restart nri-topology"


def check_runtime_restart(node: Node) -> str:
    before = node.snapshot()
    pid = sh("systemctl", "show", "-p", "MainPID", "--value", "nri-topology").strip()
    synced = journal_count("synchronized with the runtime")
    sh("systemctl", "restart", "containerd")
    wait_for("resynchronized", lambda: journal_count("synchronized with the runtime") > synced, 180)
    assert sh("systemctl", "show", "-p", "MainPID", "--value", "nri-topology").strip() == pid
    assert node.snapshot() == before
    node.run_pod("be2", "besteffort")
    node.agree("new pod placed as decided")
    g = node.effective(node.containers["g"])[0]
    assert not node.effective(node.containers["be2"])[0] & g
    return "the same plugin process reconnected; placements unchanged; a new pod placed"


def check_hugepages(node: Node) -> str:
    """Pages of 2 MiB on node 1 only: a Guaranteed pod asking for them (its hugepage limit, as
    the kubelet sets it) gets node 1 among its memory nodes, the plugin books them there, and its
    cgroup carries the limit."""
    size_kb, count = 2048, 4
    knob = Path(f"/sys/devices/system/node/node1/hugepages/hugepages-{size_kb}kB/nr_hugepages")
    knob.write_text(f"{count}\n")
    held = int(knob.read_text())
    assert held == count, f"the kernel gave {held} of {count} pages on node 1"
    restart_plugin()  # it reads the nodes' pages at start
    limit = count * size_kb * 1024
    cid = node.run_pod("hp", "guaranteed", 1000, GIB // 8, hugepages={size_kb: limit})
    _, mems = node.effective(cid)
    with urllib.request.urlopen("http://127.0.0.1:8967/status?format=json", timeout=30) as r:
        doc = json.load(r)
    (c,) = [c for c in doc["containers"] if c["container_id"] == cid]
    # What each side held, for a failure to say where the limit went missing.
    resp = node.cri.runtime(
        "ContainerStatus", cri.ContainerStatusRequest(container_id=cid, verbose=True)
    )
    spec = json.loads(resp.info["info"]).get("runtimeSpec", {})
    (root,) = [p for p in doc["pools"] if p["parent"] is None]
    seen = (
        f"host hugetlb controller {hugetlb_controller()}, "
        f"spec hugepageLimits {spec.get('linux', {}).get('resources', {}).get('hugepageLimits')}, "
        f"plugin's pages {root['hugepages']}, container {c}"
    )
    assert 1 in mems, f"memory nodes {mems} lack node 1, which holds the pages; {seen}"
    want = [{"node": 1, "resource": "hugepages-2Mi", "pages": count}]
    assert c["hugepages"] == want, seen
    scope = node.scope(cid)
    if "hugetlb" in (scope / "cgroup.controllers").read_text().split():
        shown = (scope / "hugetlb.2MB.max").read_text().strip()
        assert shown == str(limit), f"hugetlb.2MB.max {shown}, limit {limit}"
    else:
        shown = "absent (no hugetlb controller in the container's cgroup)"
    node.remove_pod("hp")  # its CPU back to the shared pool, for the grants that follow
    return f"memory nodes {sorted(mems)}, booked {c['hugepages']}, hugetlb.2MB.max {shown}"


# The runtime's record of a written re-pin lags updates.grow_delay_seconds (at most 10 s), as on
# a busy node: systemd's view of the scope (AllowedCPUs) is the old placement until then.
LAG_S = 10
# A revert is read back every Pacing.recheck_s (0.5 s) and written again; allowed here: that,
# the read and the write, with room for software emulation.
REPAIR_S = 2.0


def lag_record() -> None:
    """Make the runtime's record of written re-pins lag LAG_S (a setting read at start)."""
    conf = Path("/etc/nri-topology/config.yaml")
    text = conf.read_text()
    want = f"  grow_delay_seconds: {LAG_S}\n"
    if want not in text:
        conf.write_text(text.replace("  grow_delay_seconds: 0.5\n", want))
        restart_plugin()


def explained_window(name: str) -> float:
    """The exclusivity window `explain` gives for the pod's container, once it closed."""
    url = f"http://127.0.0.1:8967/explain?container=vm/{name}/c0&format=json"

    def window() -> float | None:
        with urllib.request.urlopen(url, timeout=30) as r:
            (c,) = json.load(r)["containers"]
        return (c["decision"] or {}).get("exclusive_window_seconds")

    wait_for(f"{name}'s window closed", lambda: window() is not None, 60)
    return window()


def revert_round(node: Node, pod: str, act: Callable[[list[str]], None]) -> dict:
    """Grant a Guaranteed pod a CPU shared containers hold, then `act` on their scopes while
    the runtime's record of their re-pins still lags: what their cgroups did over the next
    seconds, and what the plugin counted and said of the grant's window."""
    lag_record()
    node.fill(f"{pod}-be")
    node.agree("the runtime's record holds every placement", 120)
    before = node.snapshot()
    reverts = metric("nri_topology_cgroup_drift_total", check="revert")
    warned = journal_count("written cgroups were set back")
    cid = node.run_pod(pod, "guaranteed", 1000, GIB // 8)
    try:
        cpus = node.effective(cid)[0]
        holders = sorted(n for n, (held, _) in before.items() if held & cpus)
        files = {n: node.cgroup(node.containers[n]) / "cpuset.cpus.effective" for n in holders}

        def on() -> list[str]:
            return [n for n, f in files.items() if parse_cpus(f.read_text()) & cpus]

        at_start = on()
        # systemd's view of them is still the old one: what it would re-apply
        lagging = [n for n in holders if node.systemd_view(node.containers[n])[0] & cpus]
        assert lagging, (
            f"no shared container's record still held CPU {sorted(cpus)} after the start "
            f"(holders {holders}): nothing for systemd to re-apply"
        )
        t0 = time.monotonic()
        act([node.scope(node.containers[n]).name for n in lagging])
        acted = time.monotonic() - t0
        seen: list[float] = []  # when, after the action returned, a holder was on the CPU
        off: list[float] = []  # and when none was
        t1 = time.monotonic()
        while (now := time.monotonic() - t1) < 4:
            (seen if on() else off).append(now)
            time.sleep(0.02)
        back = [t for t in off if seen and t > seen[-1]]  # off again after the last time on
        rose = metric("nri_topology_cgroup_drift_total", check="revert") - reverts
        window = explained_window(pod)
        # The window counts from the workload's start to the writes: holders found on the CPU
        # after StartContainer returned mean it cannot be 0.
        assert not at_start or window > 0, f"window {window} s, yet {at_start} on {cpus} at start"
        return {
            "cpu": sorted(cpus),
            "holders": lagging,
            "on_cpu_at_start": at_start,
            "action_s": round(acted, 2),
            "seen_on_cpu_after_s": [round(seen[0], 2), round(seen[-1], 2)] if seen else None,
            "off_again_after_s": round(back[0], 2) if back else None,
            "off_again": bool(back) or not seen,
            "drift_revert_rose": rose,
            "window_s": window,
            "warnings": journal_count("written cgroups were set back") - warned,
        }
    finally:
        node.remove_pod(pod)


def check_set_property(node: Node) -> str:
    """systemd re-applies a scope's properties, AllowedCPUs included, when one is set: the
    plugin reads back what it wrote and writes it again."""

    def act(scopes: list[str]) -> None:
        for scope in scopes:
            sh("systemctl", "set-property", "--runtime", scope, "CPUWeight=99")

    r = revert_round(node, "sp", act)
    assert r["seen_on_cpu_after_s"] or r["drift_revert_rose"], (
        f"systemd did not put a holder back on the CPU after set-property: {r}"
    )
    assert r["off_again"] and r["drift_revert_rose"] >= 1, f"the revert was not repaired: {r}"
    assert not r["seen_on_cpu_after_s"] or r["off_again_after_s"] <= REPAIR_S, r
    return json.dumps(r)


def check_daemon_reload(node: Node) -> str:
    """`systemctl daemon-reload`: systemd 252 re-applies every unit's properties on it; whether
    this systemd does is recorded, and a revert, if any, is repaired."""
    version = sh("systemctl", "--version").split()[1]
    r = revert_round(node, "dr", lambda _: sh("systemctl", "daemon-reload"))
    reverted = bool(r["seen_on_cpu_after_s"] or r["drift_revert_rose"])
    if reverted:
        assert r["off_again"] and r["drift_revert_rose"] >= 1, f"not repaired: {r}"
        assert not r["seen_on_cpu_after_s"] or r["off_again_after_s"] <= REPAIR_S, r
    assert r["off_again"], r
    said = "re-applied AllowedCPUs, repaired" if reverted else "did not re-apply AllowedCPUs"
    return f"systemd {version} on daemon-reload {said}: {json.dumps(r)}"


def check_crun(node: Node) -> str:
    """Debian's crun as the runtime (systemd driver, cgroup v2): shared containers re-pinned
    by a Guaranteed pod's grant, as the plugin's writes and the runtime's record land."""
    node.fill("crun", handler="crun")
    shared = sorted(n for n in node.containers if n.startswith("crun"))
    node.agree("crun's containers placed", 120)
    before = {n: node.effective(node.containers[n])[0] for n in shared}
    layout = {
        n: str(node.cgroup(node.containers[n]).relative_to(node.scope(node.containers[n])))
        for n in shared
    }
    outcomes = ("written", "busy", "refused", "gone", "outside")
    counts = {o: metric("nri_topology_cgroup_writes_total", outcome=o) for o in outcomes}
    cid = node.run_pod("crun-g", "guaranteed", 1000, GIB // 8, handler="crun")
    try:
        cpus = node.effective(cid)[0]
        holders = sorted(n for n, held in before.items() if held & cpus)
        at_start = [n for n in holders if node.effective(node.containers[n])[0] & cpus]
        assert holders, f"no crun container held CPU {sorted(cpus)}: {before}"
        node.agree("crun's containers re-pinned, systemd agrees", 120)
        window = explained_window("crun-g")
        assert not at_start or window > 0, f"window {window} s, yet {at_start} on {cpus} at start"
        delta = {o: metric("nri_topology_cgroup_writes_total", outcome=o) - counts[o]
                 for o in outcomes}  # fmt: skip
        # written: the window may be 0; refused (busy, ...): it stays open until the runtime's
        # re-pin, so it cannot be
        assert delta["written"] >= len(holders) or window > 0, f"{delta}, window {window} s"
        return json.dumps({
            "crun": sh("crun", "--version").splitlines()[0],
            "process_cgroup_under_scope": layout,
            "cpu": sorted(cpus),
            "holders": holders,
            "on_cpu_at_start": at_start,
            "writes": delta,
            "window_s": window,
        })  # fmt: skip
    finally:
        node.remove_pod("crun-g")


def switch_to_crio(node: Node) -> Node:
    """containerd's pods removed and containerd stopped, then CRI-O started on the same NRI
    socket: one runtime at a time owns it, the plugin's unit stays as shipped and reconnects by
    itself, and no placement of containerd's is left to hold CPUs."""
    node.remove_all()
    synced = journal_count("synchronized with the runtime")
    sh("systemctl", "stop", "containerd")
    archive, store = (
        "oci-archive:/mnt/host/busybox.tar",
        f"containers-storage:[{CRIO_STORE}]{IMAGE}",
    )
    sh("skopeo", "--policy", "/etc/crio/policy.json", "copy", "--quiet", archive, store)
    sh("systemctl", "start", "crio")  # Type=notify: its sockets serve when this returns
    crio = Node(CRIO_SOCK)
    wait_for("the image visible to CRI-O", lambda: crio.cri.image_present(IMAGE), 120)

    def resynced() -> bool:
        return journal_count("synchronized with the runtime") > synced

    wait_for("synchronized with CRI-O", resynced, 180)  # its reconnection backs off to 30 s
    wait_for("plugin ready", plugin_ready, 120)
    return crio


def grow_delay() -> str:
    """updates.grow_delay_seconds as configured (lag_record may have raised it)."""
    for line in Path("/etc/nri-topology/config.yaml").read_text().splitlines():
        if line.strip().startswith("grow_delay_seconds:"):
            return line.split(":", 1)[1].strip()
    return "default"


def windows() -> dict[str, float]:
    """The exclusivity windows' histogram: how many, their sum, how many were 0."""
    name = "nri_topology_exclusive_window_seconds"
    return {
        "count": metric(f"{name}_count"),
        "sum": metric(f"{name}_sum"),
        "le_0": metric(f"{name}_bucket", le="0.0"),
    }


def check_crio_systemd(node: Node) -> str:
    """CRI-O 1.36 with its systemd cgroup manager (runc, conmon in the pod's slice): the plugin
    finds the shared containers' `crio-<id>.scope` from the cgroups path CRI-O reports
    (`slice:crio:id`), writes them before the Guaranteed container starts (outcome written,
    window 0), and systemd's view of them follows once CRI-O's own re-pin comes."""
    crio = switch_to_crio(node)
    version = crio.cri.version()
    lag_record()  # CRI-O's re-pin comes well after the write: systemd's view shows which was which
    crio.run_pod("crio-be", "besteffort")
    crio.run_pod("crio-bu", "burstable", 200)
    crio.fill("crio-fill")
    crio.agree("CRI-O's containers placed", 120)
    # the cgroups path CRI-O hands runc (and NRI) names the scope the process is in
    be = crio.containers["crio-be"]
    path = crio.info(be)["runtimeSpec"]["linux"]["cgroupsPath"]
    scope = crio.scope(be)
    rel = cgroup_dir(path)
    assert rel is not None and CGROUP / rel == scope, f"{path} names {rel}, the scope is {scope}"
    assert crio.cgroup(be) == scope, f"runc's process not in its scope: {crio.cgroup(be)}"
    conmon = scope.parent / f"crio-conmon-{be}.scope"
    assert conmon.is_dir(), (
        f"no {conmon.name} beside {scope.name}: {sorted(scope.parent.iterdir())}"
    )
    with urllib.request.urlopen("http://127.0.0.1:8967/status?format=json", timeout=30) as r:
        updates = json.load(r)["updates"]  # the transport, and why writes are off if they are
    assert metric("nri_topology_cgroup_writes_enabled") == 1, f"writes off: {updates}"
    before = crio.snapshot()
    files = {n: crio.cgroup(crio.containers[n]) / "cpuset.cpus.effective" for n in before}
    outcomes = ("written", "gone", "busy", "refused", "outside", "read_only")
    counts = {o: metric("nri_topology_cgroup_writes_total", outcome=o) for o in outcomes}
    windows_before = windows()
    cid = crio.run_pod("crio-g", "guaranteed", 1000, GIB // 8)
    returned = time.monotonic()
    # the shared containers' cgroups as StartContainer returned, read before anything else
    at_return = {n: parse_cpus(f.read_text()) for n, f in files.items()}
    try:
        cpus = crio.effective(cid)[0]
        assert len(cpus) == 1, f"the Guaranteed container got {sorted(cpus)}"
        holders = sorted(n for n, (held, _) in before.items() if held & cpus)
        assert holders, f"no shared container held CPU {sorted(cpus)}: {before}"
        on_cpu = sorted(n for n, held in at_return.items() if held & cpus)
        lagging = [n for n in holders if crio.systemd_view(crio.containers[n])[0] & cpus]
        crio.agree("systemd agrees after CRI-O's re-pin", 180)
        converged = time.monotonic() - returned
        window = explained_window("crio-g")
        delta = {o: metric("nri_topology_cgroup_writes_total", outcome=o) - counts[o]
                 for o in outcomes}  # fmt: skip
        wdelta = {k: v - windows_before[k] for k, v in windows().items()}
        show = ("systemctl", "show", "-p", "AllowedCPUs", "--value")
        allowed = {n: sh(*show, crio.scope(crio.containers[n]).name).strip() for n in holders}
        r = {
            "crio": f"{version.runtime_name} {version.runtime_version}",
            "cgroups_path": path.replace(be, "<id>"),
            "scope": str(rel).replace(be, "<id>"),
            "conmon_scope": conmon.name.replace(be, "<id>"),
            # not a container to NRI: CRI-O leaves it unrestricted (no infra_ctr_cpuset here)
            "conmon_cpus": (conmon / "cpuset.cpus.effective").read_text().strip(),
            "transport": updates["transport"],
            "cpu": sorted(cpus),
            "holders": holders,
            "on_cpu_at_start": on_cpu,
            "systemd_lagging_at_start": lagging,
            "writes": delta,
            "window_s": window,
            "window_metric": wdelta,
            "grow_delay_s": grow_delay(),
            "systemd_converged_s": round(converged, 1),
            "AllowedCPUs": allowed,
        }
        assert not on_cpu, f"shared containers on the granted CPU at start: {r}"
        assert delta["written"] >= len(holders), f"not all holders written: {r}"
        assert not any(delta[o] for o in outcomes if o != "written"), f"writes not landed: {r}"
        assert window == 0 and wdelta["sum"] == 0 and wdelta["le_0"] >= 1, f"window: {r}"
        return json.dumps(r)
    finally:
        crio.remove_pod("crio-g")


def recorder(out: Path) -> Callable[[str, Callable[[], str]], None]:
    """Run a check and write every result so far to `out`: the host reads what is there, also
    when the guest is stopped before the last check."""
    results: list[dict[str, object]] = []

    def record(name: str, fn: Callable[[], str]) -> None:
        started = time.monotonic()
        try:
            detail, ok = fn(), True
        except Exception:
            detail, ok = traceback.format_exc(limit=4), False
        took = time.monotonic() - started
        results.append({"check": name, "ok": ok, "detail": detail, "seconds": round(took, 1)})
        out.write_text(json.dumps(results, indent=1))

    return record


def main(out: Path) -> int:
    record = recorder(out)
    record("topology", check_topology)
    node = Node()
    record("placement", lambda: check_placement(node))
    record("drift", lambda: check_drift(node))
    record("plugin_restart", lambda: check_plugin_restart(node))
    record("runtime_restart", lambda: check_runtime_restart(node))
    record("hugepages", lambda: check_hugepages(node))
    record("set_property", lambda: check_set_property(node))
    record("daemon_reload", lambda: check_daemon_reload(node))
    record("crun", lambda: check_crun(node))
    if CRIO.exists():  # the host shared a CRI-O (else the host's test skips and says why)
        record("crio_systemd", lambda: check_crio_systemd(node))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
