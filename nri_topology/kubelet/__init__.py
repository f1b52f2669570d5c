"""Clients of the kubelet's node-local APIs."""
