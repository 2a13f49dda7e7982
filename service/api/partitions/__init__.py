"""Partition metrics: one metric of one remote topic-partition."""
