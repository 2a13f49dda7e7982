"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""

import os

# Arrow's allocator (mimalloc) hands freed pages back to the OS after 10 ms, and every micro-batch
# allocates its ~10^8 bytes of Arrow buffers anew: on a VM each page touched again costs a fault
# (offline, five 200k-record batches: 0.5-1.4M faults and 5.4-6.5 s of system time; pages kept: 344k
# and 2.1-3.6 s). Kept, the process stays at its largest batch's size (~1 GB at 200k records). Read
# once, when pyarrow loads: set here, before any aggregator module imports it (children inherit it).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
