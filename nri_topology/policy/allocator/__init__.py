"""Allocator: which CPUs and NUMA nodes of a machine to take, by its core and cache tree."""
