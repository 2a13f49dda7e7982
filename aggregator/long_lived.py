"""The garbage collector and the objects that live as long as the process: kept out of its full passes,
and the memory a batch freed handed back to the system.

A full collection walks every tracked object. Both kinds of aggregator process hold many that never become
garbage: an executor's Python worker its imports (pyspark, pyarrow, pandas), the driver the sink's window
history (~10^5-10^6 windows at a few thousand partitions). Measured on bench/aggregator.py: PySpark's daemon
runs gc.collect() after every task, 14 % of the workers' CPU (~90 ms a task); the driver spent 9.4 s in 29
full collections over the bench's ~30 batches.

gc.freeze() moves the objects alive at that moment out of the collector's sight. Objects frozen and later
dropped are still freed by their reference counts; only cyclic garbage among them would stay, so the
driver thaws and collects everything once every THAW_EVERY batches.

Freed memory stays with the allocators: Arrow's (mimalloc, whose automatic return aggregator/__init__.py
puts off) keeps pages for reuse, and glibc's malloc keeps the heap top and its arenas (the py4j threads each
have one). A process that once held a large batch would keep its size: both are returned at the end of a
driver's batch and of a worker's task, for a few ms each (bench/RESULTS.md has the measurements).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable

import pyarrow as pa

THAW_EVERY = 500  # batches: at the default 2 s trigger, one full collection every ~17 minutes

_worker_frozen: list[bool] = []


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def freeze_worker_imports() -> None:
    """Once per executor Python worker, at its first task: what it imported is frozen."""
    if not _worker_frozen and "pyspark.worker" in sys.modules:
        gc.freeze()
        _worker_frozen.append(True)


def settle_after_batch(batches_done: int) -> None:
    """At the end of a driver's micro-batch: what the batch left alive (the history it extended) is frozen;
    every THAW_EVERY batches everything is thawed and collected first."""
    if batches_done % THAW_EVERY == 0:
        gc.unfreeze()
        gc.collect()
    gc.freeze()
    return_freed_memory()


def return_freed_memory() -> None:
    """What the batch (or task) freed goes back to the system; the next allocates afresh in a few ms."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)
