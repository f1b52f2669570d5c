"""Machine topology: what the hardware is, read from sysfs."""

from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode
from nri_topology.topology.sysfs import TopologyError, default_sysfs_root, read_machine

__all__ = [
    "Cpu",
    "Machine",
    "MemoryTier",
    "NumaNode",
    "TopologyError",
    "default_sysfs_root",
    "read_machine",
]
