"""Spark Structured Streaming aggregator: raw metrics topics -> per-target rollups in Redis."""

import os

# Arrow's allocator (mimalloc) hands freed pages back to the OS after 10 ms, and every micro-batch
# allocates its Arrow buffers anew: on a VM each page touched again costs a fault (offline, while the
# driver parsed whole batches, five 200k-record batches: 0.5-1.4M faults and 5.4-6.5 s of system time;
# pages kept: 344k and 2.1-3.6 s). Kept, a process stays at its largest batch's size. With partials only
# in the driver (~11 MB a 200k-record batch), bench/aggregator.py in three interleaved pairs: kept,
# 62.9-78.1k records/s and a driver peak RSS of 420-434 MB; mimalloc's 10 ms, 60.3-68.4k records/s
# (~10 % fewer in each pair) and 383-396 MB. Read once, when pyarrow loads: set here, before any
# aggregator module imports it (children inherit it); an operator's own setting wins.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
