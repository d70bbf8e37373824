"""Traces: indexed, compacting histories of updates, persisted as Delta tables."""
