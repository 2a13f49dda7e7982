"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""
