"""Shaping: the CPUs and memory a request takes in one given pool."""
