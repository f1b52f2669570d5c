"""What a validated configuration asks of the policy and of the topology reader.

The one mapping from `config` (the file's schema, which knows nothing of the policy) to the
policy's `Options` and the memory tier overrides; the daemon, the simulator and the commands all
go through here, so the config room and the policy room never import each other.
"""

from __future__ import annotations

from nri_topology.config.schema import Config, read_cpu_amount
from nri_topology.policy.options import AnnotationLimits, CpuAmount, Options, Trust
from nri_topology.topology.model import MemoryTier


def parse_cpu_amount(value: object, *, quantity: bool) -> CpuAmount:
    """A CPU amount as the policy takes it; errors as the configuration file reports them."""
    kind, amount = read_cpu_amount(value, quantity=quantity)
    return CpuAmount(**{kind: amount})  # the kinds are CpuAmount's field names


def policy_options(config: Config) -> Options:
    """The policy options `config` asks for."""
    p = config.policy
    available = p.available_resources
    trusted = p.trusted_namespaces
    return Options(
        pin_cpu=p.pin_cpu,
        pin_memory=p.pin_memory,
        prefer_isolated_cpus=p.prefer_isolated_cpus,
        prefer_shared_cpus=p.prefer_shared_cpus,
        reserved_resources=parse_cpu_amount(p.reserved_resources.cpu, quantity=True),
        available_resources=(
            None if available is None else parse_cpu_amount(available.cpu, quantity=False)
        ),
        reserved_namespaces=tuple(p.reserved_namespaces),
        colocate_pods=p.colocate_pods,
        colocate_namespaces=p.colocate_namespaces,
        prefer_closest_numa=p.prefer_closest_numa,
        distribute_across_numa=p.distribute_across_numa,
        distribute_min_group=p.distribute_min_group,
        full_pcpus_only=p.full_pcpus_only,
        topology_hints=p.topology_hints,
        strict_topology_hints=p.strict_topology_hints,
        single_numa_node=p.numa_policy == "single-numa-node",
        default_memory_tiers=frozenset(MemoryTier(t) for t in p.default_memory_tiers),
        on_unfit=p.on_unfit,
        strict_reserved_cpus=p.strict_reserved_cpus,
        shared_placement=p.shared_placement,
        max_moves=p.max_moves,
        annotation_limits=AnnotationLimits(
            max_value_bytes=p.annotation_limits.max_value_bytes,
            max_affinity_rules=p.annotation_limits.max_affinity_rules,
            max_affinity_values=p.annotation_limits.max_affinity_values,
            max_affinity_globs=p.annotation_limits.max_affinity_globs,
        ),
        trust=Trust(
            reserved_cpus=tuple(
                p.reserved_namespaces if trusted.reserved_cpus is None else trusted.reserved_cpus
            ),
            preserve=tuple(p.reserved_namespaces if trusted.preserve is None else trusted.preserve),
            isolated_cpus=tuple(trusted.isolated_cpus),
        ),
    )


def tier_overrides(config: Config) -> dict[int, MemoryTier]:
    """The per-node memory tier overrides for topology discovery."""
    return {node: MemoryTier(t) for node, t in config.topology.memory_tiers.items()}
