"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""

import os

# Arrow's allocator (mimalloc) hands freed pages back to the OS 10 ms after they are freed, and every
# micro-batch allocates its Arrow buffers anew: on a VM each page touched again costs a fault
# (bench/RESULTS.md, "MIMALLOC_PURGE_DELAY"). Never returned (-1), though, a process stays at the largest
# size it ever had (at 100,000 series, most of a worker's memory between tasks). So pages wait an hour
# here, and each process returns what it freed at one point of its own: a worker at the end of each task,
# the driver at the end of each batch (long_lived.return_freed_memory). Read once, when pyarrow loads: set
# here, before any aggregator module imports it (children inherit it); an operator's own setting wins.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "3600000")
