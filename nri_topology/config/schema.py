"""The configuration file's schema: every section, key, type, default and allowed value.

Every section refuses unknown keys so that a typo is an error rather than a silently ignored
setting. Values are validated here (CPU amounts, tiers, ports, plugin identity) so that a
`Config` that exists is one the daemon can apply; `nri_topology.configured` turns it into the
policy's options, so this room knows nothing of the policy.

The sections are msgspec Structs: frozen, and light to import beside the daemon. `Meta` bounds
types and values; a `Before` reads a value the way the file may spell it (CPU amounts given as
numbers, any letter case, a plugin index as an integer) before its type is checked, and says
what it accepts, so that the JSON Schema generated from these Structs
(`nri_topology.config.jsonschema`) accepts what the file accepts. `validate.py` applies them and
names every problem by its key.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, Literal, get_args

from msgspec import Meta, Struct, structs

from nri_topology.config.validate import Before, Problem
from nri_topology.quantity import QuantityError, cpu_milli
from nri_topology.topology import cpuset

DEFAULT_STATE_PATH = "/var/lib/nri-topology/state.json"
# Outside the exporter ports the Prometheus project allocates (9100-9999, full, and on from 10000)
# and not 8891, which NRI reference plugins (nri-plugins) serve their metrics on.
DEFAULT_METRICS_PORT = 8967

TierName = Literal["dram", "pmem", "hbm", "cxl"]
TIERS: tuple[str, ...] = get_args(TierName)


def _any_case_pattern(*words: str) -> dict[str, Any]:
    """The input schema of a lower-cased choice: each word in any letter case."""
    spelled = ("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in w) for w in words)
    return {"type": "string", "pattern": f"^(?:{'|'.join(spelled)})$"}


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _lowered(value: Any) -> Any:
    """A choice, or a list of choices, in lower case."""
    if isinstance(value, list):
        return [_lower(v) for v in value]
    return _lower(value)


def _any_case(*words: str) -> Before:
    """A lower-cased choice (or list of them), given in any letter case."""
    return Before(_lowered, _any_case_pattern(*words))


_CPU_AMOUNT_INPUT = {"type": ["string", "number"]}


class _Section(Struct, forbid_unknown_fields=True, frozen=True):
    pass


# ---------------------------------------------------------------------------------------------
# CPU amounts: "750m", "2", 2, "cpuset:0-1", "exclude-cpuset:0-1"


def _shown(value: object) -> str:
    """A value as an error message shows it: strings in double quotes, as in the YAML."""
    return json.dumps(value) if isinstance(value, str | int | float) else repr(value)


CpuAmountKind = Literal["cpus", "exclude", "milli"]


def read_cpu_amount(value: object, *, quantity: bool) -> tuple[CpuAmountKind, frozenset[int] | int]:
    """A CPU amount as (kind, CPUs or milli-CPU); quantities only where `quantity` (reserved),
    CPU lists everywhere. The kinds name the fields of the policy's `CpuAmount`."""
    accepted = "cpuset:<list> or exclude-cpuset:<list>"
    if quantity:
        accepted = f"a CPU quantity (750m, 2) or {accepted}"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {accepted}, got {_shown(value)}")
    text = str(value).strip()
    for prefix in ("cpuset:", "exclude-cpuset:"):
        if text.startswith(prefix):
            try:
                cpus = cpuset.parse(text.removeprefix(prefix))
            except cpuset.CpuSetError as e:
                raise ValueError(f"{e}; expected {accepted}") from None
            if not cpus:
                raise ValueError(f"empty CPU list in {_shown(text)}; expected {accepted}")
            return ("cpus" if prefix == "cpuset:" else "exclude"), cpus
    if not quantity:
        raise ValueError(f"expected {accepted}, got {_shown(value)}")
    try:
        milli = cpu_milli(text)
    except QuantityError:
        raise ValueError(f"expected {accepted}, got {_shown(value)}") from None
    if milli <= 0:
        raise ValueError(f"expected more than 0 CPUs, got {_shown(value)}")
    return "milli", milli


def _reserved_cpu(value: object) -> str:
    read_cpu_amount(value, quantity=True)
    return str(value).strip()


def _available_cpu(value: object) -> str:
    read_cpu_amount(value, quantity=False)
    return str(value).strip()


class ReservedResources(_Section):
    """CPUs for system pods (reserved namespaces, prefer-reserved-cpus)."""

    cpu: Annotated[str, Before(_reserved_cpu, _CPU_AMOUNT_INPUT)] = "750m"


class AvailableResources(_Section):
    """The CPUs the plugin may hand out at all."""

    cpu: Annotated[str, Before(_available_cpu, _CPU_AMOUNT_INPUT)]


class AnnotationLimitsSection(_Section):
    """Bounds on one pod's annotations; the upper bounds keep a decision within milliseconds."""

    max_value_bytes: Annotated[int, Meta(ge=1024, le=262144)] = 16384
    max_affinity_rules: Annotated[int, Meta(ge=0, le=64)] = 8
    max_affinity_values: Annotated[int, Meta(ge=1, le=64)] = 16
    max_affinity_globs: Annotated[int, Meta(ge=0, le=64)] = 8


_Globs = tuple[Annotated[str, Meta(min_length=1)], ...]


class TrustedNamespacesSection(_Section):
    """Namespaces (globs) whose pods may use the privileged annotations.

    Unset reserved_cpus and preserve follow policy.reserved_namespaces.
    """

    reserved_cpus: _Globs | None = None
    preserve: _Globs | None = None
    isolated_cpus: _Globs = ("*",)


class PolicySection(_Section):
    pin_cpu: bool = True
    pin_memory: bool = True
    prefer_isolated_cpus: bool = True
    prefer_shared_cpus: bool = False
    reserved_resources: ReservedResources = ReservedResources()
    available_resources: AvailableResources | None = None
    reserved_namespaces: _Globs = ("kube-system",)
    colocate_pods: bool = False
    colocate_namespaces: bool = False
    prefer_closest_numa: bool = True
    distribute_across_numa: bool = False
    distribute_min_group: Annotated[int, Meta(ge=1, le=1024)] = 1
    full_pcpus_only: bool = False
    topology_hints: bool = True
    strict_topology_hints: bool = False
    numa_policy: Literal["best-effort", "single-numa-node"] = "best-effort"
    default_memory_tiers: Annotated[
        tuple[TierName, ...],
        Meta(min_length=1),
        Before(_lowered, {"type": "array", "items": _any_case_pattern(*TIERS), "minItems": 1}),
    ] = ("dram",)
    on_unfit: Annotated[Literal["degrade", "refuse"], _any_case("degrade", "refuse")] = "degrade"
    strict_reserved_cpus: bool = False
    shared_placement: Annotated[Literal["pack", "spread"], _any_case("pack", "spread")] = "spread"
    max_moves: Annotated[int, Meta(ge=0, le=64)] = 4
    annotation_limits: AnnotationLimitsSection = AnnotationLimitsSection()
    trusted_namespaces: TrustedNamespacesSection = TrustedNamespacesSection()


def _node_id(value: object) -> int:
    """A NUMA node id: an integer, also spelled as a string ("2") as JSON and Helm write keys."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise Problem(f"expected at least 0, got {value}", (str(value), "[key]"))
        return value
    message = f"expected a NUMA node id (an integer), got {_shown(value)}"
    raise Problem(message, (str(value), "[key]"))


def _tier_map(value: object) -> object:
    """NUMA node ids (given as integers or strings) to tiers (in any letter case)."""
    if not isinstance(value, dict):
        return value
    return {_node_id(node): _lower(tier) for node, tier in value.items()}


class TopologySection(_Section):
    sysfs_root: Annotated[str, Meta(min_length=1)] = "/sys"
    proc_root: Annotated[str, Meta(min_length=1)] | None = "/proc"
    # NUMA node id -> tier, overriding what discovery decided
    memory_tiers: Annotated[
        dict[int, TierName],
        Before(
            _tier_map,
            {
                "type": "object",
                "propertyNames": {"pattern": "^[0-9]+$"},
                "additionalProperties": _any_case_pattern(*TIERS),
            },
        ),
    ] = {}


def _plugin_index(value: object) -> object:
    """Two digits, as NRI requires; a YAML integer 0-99 is zero-padded."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 99:
        return f"{value:02d}"
    if isinstance(value, str) and re.fullmatch(r"\d\d", value):
        return value
    raise ValueError(f"expected two digits 00-99, got {_shown(value)}")


class NriSection(_Section):
    socket: Annotated[str, Meta(min_length=1)] = "/var/run/nri/nri.sock"
    plugin_name: Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_.+-]+$")] = "nri-topology"
    plugin_index: Annotated[
        str,
        Before(
            _plugin_index,
            {
                "anyOf": [
                    {"type": "string", "pattern": "^[0-9]{2}$"},
                    {"type": "integer", "minimum": 0, "maximum": 99},
                ]
            },
        ),
    ] = "90"


class StateSection(_Section):
    path: Annotated[str, Meta(min_length=1)] = DEFAULT_STATE_PATH
    # Seconds a second instance waits for the state file's lock (an upgrade's new instance
    # beside the old one) before it gives up; 0: give up at once.
    lock_wait_seconds: Annotated[float, Meta(ge=0, le=3600)] = 300.0


Format = Literal["auto", "json", "console"]
Level = Literal["debug", "info", "warning", "error"]


class LoggingSection(_Section):
    format: Annotated[Format, _any_case(*get_args(Format))] = "auto"
    level: Annotated[Level, _any_case(*get_args(Level))] = "info"


def _address(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(
            f"expected an IP address such as 127.0.0.1 or ::1, got {_shown(value)}"
        ) from None
    return value


class MetricsSection(_Section):
    enabled: bool = True
    address: Annotated[str, Before(_address)] = "127.0.0.1"
    port: Annotated[int, Meta(ge=1, le=65535)] = DEFAULT_METRICS_PORT


class ExposeSection(_Section):
    """Telling the workload its placement: environment variables set at container creation,
    and a read-only file kept current."""

    enabled: bool = True
    env_prefix: Annotated[str, Meta(pattern=r"^[A-Z_][A-Z0-9_]*$")] = "NRI_TOPOLOGY_"
    file: bool = False
    file_dir: Annotated[str, Meta(pattern=r"^/\S*$")] = "/.nri-topology"


class PodResourcesSection(_Section):
    """The kubelet's PodResources API, for the NUMA nodes of devices from device plugins."""

    enabled: bool = False
    socket: Annotated[str, Meta(min_length=1)] = "/var/lib/kubelet/pod-resources/kubelet.sock"
    timeout_seconds: Annotated[float, Meta(gt=0, le=60)] = 2.0  # deadline of one call
    budget_seconds: Annotated[float, Meta(ge=0, le=10)] = 0.5  # CreateContainer waits this long


class HintsSection(_Section):
    """Where topology hints are looked for (whether they steer placement is a policy option)."""

    devices: bool = True  # the container's devices and device mounts, via sysfs
    pod_resources: PodResourcesSection = PodResourcesSection()


class NrtSection(_Section):
    """NodeResourceTopology: the node's per-NUMA capacity, published for the scheduler."""

    # auto: publish when running in a cluster (a service account is mounted) or when a
    # kubeconfig is given; true: always (logs errors without credentials); false: never.
    publish: bool | Literal["auto"] = "auto"
    node_name: Annotated[str, Meta(min_length=1)] | None = None  # default: $NODE_NAME, hostname
    kubeconfig: Annotated[str, Meta(min_length=1)] | None = None  # systemd mode
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = (
        "best-effort"
    )
    topology_manager_scope: Literal["container", "pod"] = "container"
    min_interval_seconds: Annotated[float, Meta(ge=0, le=3600)] = 5.0
    max_backoff_seconds: Annotated[float, Meta(gt=0, le=3600)] = 60.0
    # Seconds between checks that the object on the server is the one to write (written again
    # when missing or different, e.g. collected after the Node was re-registered); 0: never.
    resync_seconds: Annotated[float, Meta(ge=0, le=86400)] = 60.0


class VerifySection(_Section):
    """Checking that containers' cgroups hold their placements (decided == applied)."""

    # Seconds between checks of every container; 0: only right after a container starts.
    interval_seconds: Annotated[float, Meta(ge=0, le=86400)] = 10.0


class KubeletSection(_Section):
    """The kubelet's own CPU and memory managers beside this plugin."""

    # Its checkpoints, read at start and on every reload; "" skips one.
    cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    memory_manager_state: str = "/var/lib/kubelet/memory_manager_state"
    config: Annotated[str, Meta(min_length=1)] | None = None  # its KubeletConfiguration file
    # With the static CPU manager or the Memory Manager on: keep off the CPUs it pinned
    # containers to (avoid), or refuse to run (refuse).
    when_active: Annotated[Literal["avoid", "refuse"], _any_case("avoid", "refuse")] = "avoid"
    # Take policy.reserved_resources.cpu from its reservedSystemCPUs, and
    # policy.strict_reserved_cpus from its strict-cpu-reservation option (needs `config`).
    reserved_cpus: bool = False


class RestartsSection(_Section):
    """A container's next attempt in the same pod (a crash, a failed probe)."""

    # Seconds a stopped container's exclusive CPUs wait for its next attempt; 0: given back at
    # once. The kubelet's crash-loop back-off reaches 300 s.
    hold_seconds: Annotated[float, Meta(ge=0, le=3600)] = 330.0


class UpdatesSection(_Section):
    """When and how other containers' re-pins reach the runtime (docs/architecture.md, "Update
    schedule"): after the reply in small paced batches, or all in the reply."""

    # true: every re-pin in the reply, applied before the new container is created: no
    # exclusivity window, but its creation (and the runtime's other events) wait for all of them.
    # auto: after the reply wherever the transport is safe, in the reply elsewhere. false: after
    # the reply everywhere, through NRI UpdateContainers even where it may deadlock.
    in_reply: bool | Literal["auto"] = "auto"
    # How updates sent apart from a reply travel. cri: UpdateContainerResources on the runtime's
    # CRI socket, cpusets only, as the kubelet's CPU manager sends them (safe on every runtime).
    # nri: NRI UpdateContainers, safe only where the runtime's NRI is v0.12.1 or later. auto: NRI
    # where v0.12.1 or later, else the CRI when its socket answers at Configure, else the reply.
    transport: Literal["auto", "cri", "nri"] = "auto"
    # The runtime's CRI socket; default by the runtime's name in Configure (containerd:
    # /run/containerd/containerd.sock, CRI-O: /var/run/crio/crio.sock).
    cri_socket: Annotated[str, Meta(min_length=1)] | None = None
    batch: Annotated[int, Meta(ge=1, le=64)] = 3  # re-pins per UpdateContainers
    gap_seconds: Annotated[float, Meta(ge=0, le=1)] = 0.01  # pause between two batches
    grow_delay_seconds: Annotated[float, Meta(ge=0, le=10)] = 0.5  # growth waits for a grant
    # re-pins wait (at most this long) for a container just granted exclusive CPUs to start
    start_wait_seconds: Annotated[float, Meta(ge=0, le=10)] = 1.0
    # With cgroup_first: a container just granted exclusive CPUs starts at most this long after
    # the runtime asked, waiting for the shared containers' cgroups to give them up; at most half
    # the runtime's default NRI request timeout, past which it starts the task without us.
    write_wait_seconds: Annotated[float, Meta(ge=0, le=1)] = 0.25
    # Paced re-pins are written into the containers' cgroups (cpuset files under
    # topology.sysfs_root) at once, then applied by the runtime grow_delay_seconds later: the
    # exclusivity window closes in milliseconds, not after every runtime re-pin.
    # Needs the cgroup files writable (the DaemonSet mounts them read-write); false: only the
    # runtime writes them.
    cgroup_first: bool = True


class Config(_Section):
    """The whole configuration file; every section optional."""

    policy: PolicySection = PolicySection()
    topology: TopologySection = TopologySection()
    nri: NriSection = NriSection()
    state: StateSection = StateSection()
    logging: LoggingSection = LoggingSection()
    metrics: MetricsSection = MetricsSection()
    expose: ExposeSection = ExposeSection()
    hints: HintsSection = HintsSection()
    nrt: NrtSection = NrtSection()
    verify: VerifySection = VerifySection()
    restarts: RestartsSection = RestartsSection()
    kubelet: KubeletSection = KubeletSection()
    updates: UpdatesSection = UpdatesSection()


def with_sections(config: Config, **sections: _Section) -> Config:
    """`config` with whole sections taken from another validated `Config` (a reload's)."""
    return structs.replace(config, **sections)
