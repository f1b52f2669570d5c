"""Admission: what a container that does not fit as asked gets instead, and moves."""
