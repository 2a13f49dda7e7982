"""Stopping rollup queries between batches (e2e test helper)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from pyspark.sql.streaming import StreamingQuery


def stop_between_batches(queries: Iterable[StreamingQuery], timeout_s: float = 30.0) -> None:
    """Stops each query once it has processed what its topics hold (at most `timeout_s` later).

    Stop the processes that write its topics (the driver) first, else there is always more. Every
    record written is then rolled up before the test reads Redis and the logs. (A stop during a batch
    cancels the batch's job; the sink then fails with a short JvmCallFailed that Spark reads as the
    stop's, aggregator.jvm_errors: before it, Spark's match over a long Java trace overflowed the stream
    thread's stack.)"""
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
