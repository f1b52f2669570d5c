"""Intake: a container's pod data, annotations and amounts read into a `Request`."""
