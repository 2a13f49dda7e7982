"""Replications: list and one, with status and lag evaluation, and replication-level metrics."""
