"""Stopping rollup queries between batches (e2e test helper)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from pyspark.sql.streaming import StreamingQuery


def stop_between_batches(queries: Iterable[StreamingQuery], timeout_s: float = 30.0) -> None:
    """Stops each query once it has processed what its topics hold (at most `timeout_s` later).

    Stop the processes that write its topics (the driver) first, else there is always more. `stop()`
    during a batch interrupts the foreachBatch, and Spark then recognises the interruption by matching
    a regex against the Python traceback's text (StreamExecution.isInterruptionException), which
    overflows the JVM's stack on a long one: a StackOverflowError printed by the stream thread. Between
    batches nothing is interrupted."""
    queries = list(queries)
    waiters = [threading.Thread(target=_process_all_available, args=(q,), daemon=True) for q in queries]
    for waiter in waiters:
        waiter.start()
    deadline = time.monotonic() + timeout_s
    for waiter in waiters:
        waiter.join(max(0.0, deadline - time.monotonic()))
    for query in queries:
        query.stop()


def _process_all_available(query: StreamingQuery) -> None:
    try:
        query.processAllAvailable()
    except Exception:  # a failed query: the test reads exception() itself
        pass
