"""The runtime's CRI (Kubernetes Container Runtime Interface), as far as the plugin speaks it."""
