"""The update path: other containers' re-pins from a decision to their cgroups and the runtime
(`path.UpdatePath`), when each goes (`schedule`, sans-IO) and how it travels (`transport`)."""
