"""Checkpointed consumer groups: lag evaluation and checkpoint metrics."""
