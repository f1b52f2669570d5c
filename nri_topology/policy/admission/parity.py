"""Admission parity with the kubelet: what a container that does not fit as asked gets instead.

Under NRI a refusal is a failed container creation of a pod the scheduler and the kubelet have
already admitted, so the pod is stuck on the node. The engine therefore places every container the
kubelet would admit, degrading it when it must, in this order (the table of `ladder`):

1. as asked;
2. as asked, after moving a few shared containers to fewer pools (`moves`);
3. exclusive CPUs asked for: the same amount of shared CPUs (`Degradation.SHARED_CPUS`);
   Before that, exclusive CPUs from the kernel-isolated ones when no ordinary ones are left (the
   kubelet hands isolated CPUs out like any other CPU); after it, when neither kind alone nor
   shared CPUs hold it, the ordinary CPUs that can be sliced plus isolated ones in one grant at
   the root (`Degradation.ISOLATED_MIXED`): the kubelet counts isolated CPUs as allocatable;
4. no shared CPU left in any pool: the reserved CPUs, which the kubelet keeps in its shared pool
   unless `strict_reserved_cpus` is on, within the reserved capacity
   (`Degradation.RESERVED_CPUS`);
5. last, when neither exclusive CPUs (every pool hosting shared containers keeps whole CPUs for
   them) nor the root's shared capacity hold its CPU request while the kubelet, whose single
   shared pool also counts the free kernel-isolated CPUs, admits it: the root's shared CPUs,
   which span every shared CPU (never isolated ones: the scheduler does not balance load
   there), charged only the shared milli-CPU left, maybe none
   (`Degradation.SHARED_OVERCOMMIT`). The shared capacity is then over-committed: CPU shares
   still divide the CPU time in proportion to the requests, as in the kubelet's shared pool.
   Later grants see only what was charged; release gives back exactly that.

Memory that does not fit its tiers anywhere widens into the next tier (`zones.widen_tiers`,
`Degradation.MEMORY_TIER`). A container is charged its memory request, else its limit: a
Burstable container's request reaches the runtime only through the oom_score_adj the kubelet
derives from it, and a small one (under 0.2 % of the machine's memory) reads as none, so its limit
is charged while the kubelet admits on the request. When the charge fits no zone even widened to
the root's nodes of every tier, but the memory requests known (the limit never counts) fit the
machine's memory as the kubelet counts them, the container gets all those nodes and is charged
the bytes still free there, maybe none (`Degradation.MEMORY_CHARGE`); the kernel, not the
accounting, then bounds it. A known request beyond the machine's memory is refused: the kubelet
does not admit it either. A container is refused instead only when it asks for strictness
(`require-isolated-cpus`, `numa-policy: single-numa-node`, strict topology hints, or the options
for them) or the operator set `on_unfit: refuse`.

`full_pcpus_only` is the kubelet's admission rule for integer requests: a count of exclusive CPUs
that is not a multiple of the threads per core is refused, as the kubelet refuses it
(SMTAlignmentError). Fractional Guaranteed requests never get exclusive CPUs from the kubelet, so
under the option they run on shared CPUs (`intake.request` classifies them so).
"""

from __future__ import annotations

from dataclasses import replace

from nri_topology.policy.options import Options
from nri_topology.policy.types import EXCLUSIVE_KINDS, CpuKind, Degradation, Request

ON_UNFIT = ("degrade", "refuse")


# (kind asked for, kind granted) pairs a degraded grant can show; restore reads them back.
DEGRADED_KINDS = frozenset(
    {
        (CpuKind.EXCLUSIVE, CpuKind.SHARED),
        (CpuKind.MIXED, CpuKind.SHARED),
        (CpuKind.ISOLATED, CpuKind.SHARED),
        (CpuKind.SHARED, CpuKind.RESERVED),
        (CpuKind.EXCLUSIVE, CpuKind.RESERVED),
        (CpuKind.MIXED, CpuKind.RESERVED),
        (CpuKind.ISOLATED, CpuKind.RESERVED),
    }
)


def as_granted(req: Request, granted: CpuKind, isolated: bool) -> Request | None:
    """The request as the engine placed it when it gave `granted` CPUs instead (restore)."""
    if (req.kind, granted) in DEGRADED_KINDS and not isolated:
        return as_kind(req, granted)
    if granted is CpuKind.ISOLATED and isolated and req.kind in EXCLUSIVE_KINDS:
        return replace(req, kind=CpuKind.ISOLATED)  # no ordinary CPUs were left
    return None


def as_kind(req: Request, kind: CpuKind) -> Request:
    """The request degraded to shared (or reserved) CPUs: all of its CPU request, no whole CPU."""
    return replace(req, kind=kind, exclusive=0, shared=req.cpu_request, require_isolated=False)


def strict(req: Request) -> bool:
    """Whether the container (or an option) asks to be refused rather than degraded: isolated
    CPUs required, CPUs and memory of one NUMA node only, or of its devices' nodes only."""
    return req.require_isolated or req.single_numa or (req.strict_hints and bool(req.hint_nodes))


def may_degrade(req: Request, options: Options) -> bool:
    return options.on_unfit == "degrade" and not strict(req)


def degradations(
    asked: CpuKind,
    granted: CpuKind,
    tier_widened: bool,
    isolated_mixed: bool = False,
    memory_cut: bool = False,
    cpu_cut: bool = False,
) -> tuple[Degradation, ...]:
    """What a grant of `granted` CPUs gives a request of `asked` CPUs less of."""
    out: list[Degradation] = []
    if isolated_mixed:
        out.append(Degradation.ISOLATED_MIXED)
    if memory_cut:
        out.append(Degradation.MEMORY_CHARGE)
    if asked in EXCLUSIVE_KINDS and granted not in EXCLUSIVE_KINDS:
        out.append(Degradation.SHARED_CPUS)
    if granted is CpuKind.RESERVED and asked is not CpuKind.RESERVED:
        out.append(Degradation.RESERVED_CPUS)
    if cpu_cut:
        out.append(Degradation.SHARED_OVERCOMMIT)
    if tier_widened:
        out.append(Degradation.MEMORY_TIER)
    return tuple(out)
