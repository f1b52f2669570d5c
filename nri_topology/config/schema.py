"""The configuration file's schema: every section, key, type, default and allowed value.

All models forbid unknown keys so that a typo is an error rather than a silently ignored
setting. Values are validated here (CPU amounts, tiers, ports, plugin identity) so that a
`Config` that exists is one the daemon can apply; `nri_topology.configured` turns it into the
policy's options, so this room knows nothing of the policy. Where a validator accepts more than
the stored type (CPU amounts given as numbers, any letter case, a plugin index as an integer),
`WithJsonSchema` says so, so that the JSON Schema generated from these models
(`nri_topology.config.jsonschema`) accepts what the file accepts.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    WithJsonSchema,
)

from nri_topology.quantity import QuantityError, cpu_milli
from nri_topology.topology import cpuset

DEFAULT_STATE_PATH = "/var/lib/nri-topology/state.json"
# Outside the exporter ports the Prometheus project allocates (9100-9999, full, and on from 10000)
# and not 8891, which NRI reference plugins (nri-plugins) serve their metrics on.
DEFAULT_METRICS_PORT = 8967

TierName = Literal["dram", "pmem", "hbm", "cxl"]
TIERS: tuple[str, ...] = get_args(TierName)


def _any_case(*words: str) -> WithJsonSchema:
    """The input schema of a lower-cased choice: each word in any letter case."""
    spelled = ("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in w) for w in words)
    return WithJsonSchema({"type": "string", "pattern": f"^(?:{'|'.join(spelled)})$"})


_CPU_AMOUNT_INPUT = WithJsonSchema({"type": ["string", "number"]})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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

    cpu: Annotated[str, BeforeValidator(_reserved_cpu), _CPU_AMOUNT_INPUT] = "750m"


class AvailableResources(_Section):
    """The CPUs the plugin may hand out at all."""

    cpu: Annotated[str, BeforeValidator(_available_cpu), _CPU_AMOUNT_INPUT]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class AnnotationLimitsSection(_Section):
    """Bounds on one pod's annotations; the upper bounds keep a decision within milliseconds."""

    max_value_bytes: Annotated[StrictInt, Field(ge=1024, le=262144)] = 16384
    max_affinity_rules: Annotated[StrictInt, Field(ge=0, le=64)] = 8
    max_affinity_values: Annotated[StrictInt, Field(ge=1, le=64)] = 16
    max_affinity_globs: Annotated[StrictInt, Field(ge=0, le=64)] = 8


_Globs = list[Annotated[str, Field(min_length=1)]]


class TrustedNamespacesSection(_Section):
    """Namespaces (globs) whose pods may use the privileged annotations.

    Unset reserved_cpus and preserve follow policy.reserved_namespaces.
    """

    reserved_cpus: _Globs | None = None
    preserve: _Globs | None = None
    isolated_cpus: _Globs = ["*"]


class PolicySection(_Section):
    pin_cpu: StrictBool = True
    pin_memory: StrictBool = True
    prefer_isolated_cpus: StrictBool = True
    prefer_shared_cpus: StrictBool = False
    reserved_resources: ReservedResources = ReservedResources()
    available_resources: AvailableResources | None = None
    reserved_namespaces: list[Annotated[str, Field(min_length=1)]] = ["kube-system"]
    colocate_pods: StrictBool = False
    colocate_namespaces: StrictBool = False
    prefer_closest_numa: StrictBool = True
    distribute_across_numa: StrictBool = False
    distribute_min_group: Annotated[StrictInt, Field(ge=1, le=1024)] = 1
    full_pcpus_only: StrictBool = False
    topology_hints: StrictBool = True
    strict_topology_hints: StrictBool = False
    numa_policy: Literal["best-effort", "single-numa-node"] = "best-effort"
    default_memory_tiers: Annotated[
        list[Annotated[TierName, BeforeValidator(_lower), _any_case(*TIERS)]], Field(min_length=1)
    ] = ["dram"]
    on_unfit: Annotated[Literal["degrade", "refuse"], BeforeValidator(_lower)] = "degrade"
    strict_reserved_cpus: StrictBool = False
    shared_placement: Annotated[Literal["pack", "spread"], BeforeValidator(_lower)] = "spread"
    max_moves: Annotated[StrictInt, Field(ge=0, le=64)] = 4
    annotation_limits: AnnotationLimitsSection = AnnotationLimitsSection()
    trusted_namespaces: TrustedNamespacesSection = TrustedNamespacesSection()


def _node_id(value: object) -> object:
    """A NUMA node id: an integer, also spelled as a string ("2") as JSON and Helm write keys."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"expected a NUMA node id (an integer), got {_shown(value)}")


class TopologySection(_Section):
    sysfs_root: Annotated[str, Field(min_length=1)] = "/sys"
    proc_root: Annotated[str, Field(min_length=1)] | None = "/proc"
    # NUMA node id -> tier, overriding what discovery decided
    memory_tiers: Annotated[
        dict[
            Annotated[int, BeforeValidator(_node_id), Field(ge=0)],
            Annotated[TierName, BeforeValidator(_lower), _any_case(*TIERS)],
        ],
        Field(json_schema_extra={"propertyNames": {"pattern": "^[0-9]+$"}}),
    ] = {}


def _plugin_index(value: object) -> object:
    """Two digits, as NRI requires; a YAML integer 0-99 is zero-padded."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 99:
        return f"{value:02d}"
    if isinstance(value, str) and re.fullmatch(r"\d\d", value):
        return value
    raise ValueError(f"expected two digits 00-99, got {_shown(value)}")


class NriSection(_Section):
    socket: Annotated[str, Field(min_length=1)] = "/var/run/nri/nri.sock"
    plugin_name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_.+-]+$")] = "nri-topology"
    plugin_index: Annotated[
        str,
        BeforeValidator(_plugin_index),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "pattern": "^[0-9]{2}$"},
                    {"type": "integer", "minimum": 0, "maximum": 99},
                ]
            }
        ),
    ] = "90"


class StateSection(_Section):
    path: Annotated[str, Field(min_length=1)] = DEFAULT_STATE_PATH
    # Seconds a second instance waits for the state file's lock (an upgrade's new instance
    # beside the old one) before it gives up; 0: give up at once.
    lock_wait_seconds: Annotated[float, Field(ge=0, le=3600)] = 300.0


Format = Literal["auto", "json", "console"]
Level = Literal["debug", "info", "warning", "error"]


class LoggingSection(_Section):
    format: Annotated[Format, BeforeValidator(_lower), _any_case(*get_args(Format))] = "auto"
    level: Annotated[Level, BeforeValidator(_lower), _any_case(*get_args(Level))] = "info"


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
    enabled: StrictBool = True
    address: Annotated[str, BeforeValidator(_address)] = "127.0.0.1"
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = DEFAULT_METRICS_PORT


class ExposeSection(_Section):
    """Telling the workload its placement: environment variables set at container creation,
    and a read-only file kept current."""

    enabled: StrictBool = True
    env_prefix: Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")] = "NRI_TOPOLOGY_"
    file: StrictBool = False
    file_dir: Annotated[str, Field(pattern=r"^/\S*$")] = "/.nri-topology"


class PodResourcesSection(_Section):
    """The kubelet's PodResources API, for the NUMA nodes of devices from device plugins."""

    enabled: StrictBool = False
    socket: Annotated[str, Field(min_length=1)] = "/var/lib/kubelet/pod-resources/kubelet.sock"
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 2.0  # deadline of one call
    budget_seconds: Annotated[float, Field(ge=0, le=10)] = 0.5  # CreateContainer waits this long


class HintsSection(_Section):
    """Where topology hints are looked for (whether they steer placement is a policy option)."""

    devices: StrictBool = True  # the container's devices and device mounts, via sysfs
    pod_resources: PodResourcesSection = PodResourcesSection()


class NrtSection(_Section):
    """NodeResourceTopology: the node's per-NUMA capacity, published for the scheduler."""

    # auto: publish when running in a cluster (a service account is mounted) or when a
    # kubeconfig is given; true: always (logs errors without credentials); false: never.
    publish: StrictBool | Literal["auto"] = "auto"
    node_name: Annotated[str, Field(min_length=1)] | None = None  # default: $NODE_NAME, hostname
    kubeconfig: Annotated[str, Field(min_length=1)] | None = None  # systemd mode
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = (
        "best-effort"
    )
    topology_manager_scope: Literal["container", "pod"] = "container"
    min_interval_seconds: Annotated[float, Field(ge=0, le=3600)] = 5.0
    max_backoff_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    # Seconds between checks that the object on the server is the one to write (written again
    # when missing or different, e.g. collected after the Node was re-registered); 0: never.
    resync_seconds: Annotated[float, Field(ge=0, le=86400)] = 60.0


class VerifySection(_Section):
    """Checking that containers' cgroups hold their placements (decided == applied)."""

    # Seconds between checks of every container; 0: only right after a container starts.
    interval_seconds: Annotated[float, Field(ge=0, le=86400)] = 10.0


class KubeletSection(_Section):
    """The kubelet's own CPU and memory managers beside this plugin."""

    # Its checkpoints, read at start and on every reload; "" skips one.
    cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    memory_manager_state: str = "/var/lib/kubelet/memory_manager_state"
    config: Annotated[str, Field(min_length=1)] | None = None  # its KubeletConfiguration file
    # With the static CPU manager or the Memory Manager on: keep off the CPUs it pinned
    # containers to (avoid), or refuse to run (refuse).
    when_active: Annotated[Literal["avoid", "refuse"], BeforeValidator(_lower)] = "avoid"
    # Take policy.reserved_resources.cpu from its reservedSystemCPUs, and
    # policy.strict_reserved_cpus from its strict-cpu-reservation option (needs `config`).
    reserved_cpus: StrictBool = False


class RestartsSection(_Section):
    """A container's next attempt in the same pod (a crash, a failed probe)."""

    # Seconds a stopped container's exclusive CPUs wait for its next attempt; 0: given back at
    # once. The kubelet's crash-loop back-off reaches 300 s.
    hold_seconds: Annotated[float, Field(ge=0, le=3600)] = 330.0


class UpdatesSection(_Section):
    """When and how other containers' re-pins reach the runtime (docs/architecture.md, "Update
    schedule"): after the reply in small paced batches, or all in the reply."""

    # true: every re-pin in the reply, applied before the new container is created: no
    # exclusivity window, but its creation (and the runtime's other events) wait for all of them.
    # auto: after the reply wherever the transport is safe, in the reply elsewhere. false: after
    # the reply everywhere, through NRI UpdateContainers even where it may deadlock.
    in_reply: StrictBool | Literal["auto"] = "auto"
    # How updates sent apart from a reply travel. cri: UpdateContainerResources on the runtime's
    # CRI socket, cpusets only, as the kubelet's CPU manager sends them (safe on every runtime).
    # nri: NRI UpdateContainers, safe only where the runtime's NRI is v0.12.1 or later. auto: NRI
    # where v0.12.1 or later, else the CRI when its socket answers at Configure, else the reply.
    transport: Literal["auto", "cri", "nri"] = "auto"
    # The runtime's CRI socket; default by the runtime's name in Configure (containerd:
    # /run/containerd/containerd.sock, CRI-O: /var/run/crio/crio.sock).
    cri_socket: Annotated[str, Field(min_length=1)] | None = None
    batch: Annotated[StrictInt, Field(ge=1, le=64)] = 3  # re-pins per UpdateContainers
    gap_seconds: Annotated[float, Field(ge=0, le=1)] = 0.01  # pause between two batches
    grow_delay_seconds: Annotated[float, Field(ge=0, le=10)] = 0.5  # growth waits for a grant
    # re-pins wait (at most this long) for a container just granted exclusive CPUs to start
    start_wait_seconds: Annotated[float, Field(ge=0, le=10)] = 1.0
    # With cgroup_first: a container just granted exclusive CPUs starts at most this long after
    # the runtime asked, waiting for the shared containers' cgroups to give them up; at most half
    # the runtime's default NRI request timeout, past which it starts the task without us.
    write_wait_seconds: Annotated[float, Field(ge=0, le=1)] = 0.25
    # Paced re-pins are written into the containers' cgroups (cpuset files under
    # topology.sysfs_root) at once, then applied by the runtime grow_delay_seconds later: the
    # exclusivity window closes in milliseconds, not after every runtime re-pin.
    # Needs the cgroup files writable (the DaemonSet mounts them read-write); false: only the
    # runtime writes them.
    cgroup_first: StrictBool = True


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
