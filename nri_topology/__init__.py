"""nri-topology: an NRI plugin that places containers on topologically aligned CPUs and memory."""

__version__ = "0.1.0"
