"""Checkpoint: the saved state's format and the restore of running containers."""
