"""Machine topology: what the hardware is, read from sysfs."""

from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode

__all__ = ["Cpu", "Machine", "MemoryTier", "NumaNode"]
