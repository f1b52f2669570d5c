"""Test doubles for the runtime side of NRI, importable by tests, benchmarks and `run --demo`."""
