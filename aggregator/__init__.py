"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""

import os

# Arrow's allocator (mimalloc) hands freed pages back to the OS after 10 ms, and every micro-batch
# allocates its ~10^8 bytes of Arrow buffers anew: on a VM each page touched again costs a fault (a
# fifth of the sink's CPU time, 1.4M faults for five 200k-record batches). Kept, the pages are
# reused; the process stays at its largest batch's size. Read once, when pyarrow loads: set here, before
# any aggregator module imports it (child processes inherit it).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
