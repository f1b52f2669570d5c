"""NodeResourceTopology: the node's per-NUMA capacity for the scheduler (build, publish)."""
