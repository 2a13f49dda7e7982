"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""

import os

# Arrow's allocator (mimalloc) hands freed pages back to the OS after 10 ms, and every micro-batch
# allocates its Arrow buffers anew: on a VM each page touched again costs a fault. Kept, a process stays
# at its largest batch's size, and drains faster (bench/RESULTS.md, "MIMALLOC_PURGE_DELAY"). Read once,
# when pyarrow loads: set here, before any aggregator module imports it (children inherit it); an
# operator's own setting wins.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
