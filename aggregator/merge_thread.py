"""The streaming query's window merges, in a thread of the sink's process, a batch or more behind the query.

The sink commits a batch (its partial windows staged in the MULTI that records its id: window_writer.stage)
and hands the windows to its MergeThread, which merges them (window_writer.WindowWriter) while Spark runs
the next batch. The executors' tasks parse and aggregate in their own Python workers, so the driver's
interpreter mostly waits on the JVM then, and the merge takes that time. A thread, not the child process
the merge once had (when the driver parsed, the next batch's parsing needed the GIL): one process owns the
stored windows and the copy the merge keeps of them, with no second interpreter, pipe or watchdog.

A merge costs per series it touches, so batches that come quickly (under BATCH_GAP_S apart: a query with
a short trigger, under load) are merged together, up to MERGE_INTERVAL_S after the last merge, and a
thread that falls behind catches up in fewer, larger merges. Batches further apart (the default trigger, a
backlog's) are merged as they come: waiting would only delay their windows. A sink about to read windows
from Redis (wait_idle), or a thread MAX_BEHIND batches behind, has it merge at once. A failed merge fails
the sink's next batch (raise_failure); nothing is merged after it (later batches build on it), and the
restarted query merges what is left staged (WindowWriter.recover).
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import redis

from aggregator.window_writer import WindowWriter

LOG = logging.getLogger(__name__)
# A merge costs per series it touches, whatever the batch's size: batches a live query commits quickly
# are merged together, up to this long after the last merge, so windows trail latest values by up to this
# much more (half the finest window, 10 s). Merging less often costs the merge and Redis less CPU, which
# the latest values' freshness gains (bench/RESULTS.md, "MERGE_INTERVAL_S").
MERGE_INTERVAL_S = 5.0
# Batches that come further apart than this are merged as they come: a query at the default 2 s trigger
# (aggregator.trigger.interval.ms), a backlog's (seconds apart at 200k records a batch), whose windows
# seldom overlap and whose last batch would wait for nothing.
BATCH_GAP_S = 1.5
# Batches handed over and not merged yet: a live query's come a fraction of a second apart at the
# quickest, so a merge interval holds a dozen or more. More (a merge that fell behind) and the sink waits
# for a merge, asked at once.
MAX_BEHIND = 64
# The coarser windows (1 min, 1 h) are merged at every COARSE_EVERY-th merge and at most every
# COARSE_INTERVAL_S, the finest (10 s) at every merge: each size costs a merge about as much (its windows
# recomputed, their members written, a command a key), and a batch adds a few seconds to a coarser window.
# Seconds alone did not bound them where it matters: at 100,000 series merges come more than 10 s apart,
# and nearly every merge was at every size (bench/RESULTS.md, s28). The coarser windows trail the finest by
# up to COARSE_EVERY merges, and at least this long.
COARSE_INTERVAL_S = 10.0
COARSE_EVERY = 3
# With no batch waiting, the coarser sizes are merged once no batch has come for this long (a backlog
# drained, a query stopped producing), so they do not wait for a batch that is not coming.
QUIET_S = 10.0
THREAD_PREFIX = "srm-windows-"


class MergeThread:
    """Merges committed batches in a thread, in the order handed over; the writer's first merge (what a
    crash left staged) is done by the caller, before the first batch."""

    def __init__(self, client: redis.Redis, scope: str, committed: int | None) -> None:
        self.scope = scope
        self._writer = WindowWriter(client, scope)
        self._writer.recover(committed)
        self._changed = threading.Condition()
        self._waiting: list[tuple[int, pa.Table]] = []
        self._merging = False
        self._at_once = False  # merge what waits without waiting for the interval
        self._everything = False  # and at every size, without waiting for COARSE_INTERVAL_S
        self._closing = False
        self._failure: Exception | None = None
        self._last_merge = 0.0
        self._last_every_size = float("-inf")  # the first merge is at every size
        self._finest_merges = COARSE_EVERY  # merges at the finest size only since the last at every size
        self._last_arrival: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{scope}", daemon=True)
        self._thread.start()

    def submit(self, batch_id: int, windows: pa.Table) -> None:
        """Hands over a batch committed (and staged) by the sink."""
        self.raise_failure()
        with self._changed:
            now = time.monotonic()
            quick = self._last_arrival is not None and now - self._last_arrival < BATCH_GAP_S
            self._last_arrival = now
            self._waiting.append((batch_id, windows))
            self._at_once |= not quick
            while len(self._waiting) >= MAX_BEHIND and self._running():
                self._at_once = True
                self._changed.notify_all()
                self._changed.wait()
            self._changed.notify_all()
        self.raise_failure()

    def wait_idle(self) -> None:
        """Returns once every batch handed over is merged at every size (Redis holds their windows)."""
        with self._changed:
            self._at_once = self._everything = True
            self._changed.notify_all()
            while (self._waiting or self._merging or self._writer.behind) and self._running():
                self._changed.wait()
        self.raise_failure()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"{self.scope}: merging windows failed ({type(self._failure).__name__}: "
                               f"{self._failure}); the staged batches are merged when the query restarts")

    def close(self, wait_s: float = 0.0) -> None:
        """The thread merges what was handed over (waited for up to `wait_s`), then ends; batches still
        staged when the process ends are merged by the query's next writer (recover)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if wait_s > 0:
            self._thread.join(wait_s)

    def _running(self) -> bool:
        return self._failure is None and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._changed:
                due = self._next_batches()
                if due is None:
                    return
                batches, every_size = due
                self._merging = True
            try:
                if self._failure is None:
                    self._writer.apply_all(batches, staged=True, every_size=every_size)
            except Exception as exc:
                LOG.exception("%s: merging the windows of batches %s failed", self.scope,
                              [i for i, _ in batches])
                self._failure = exc
            finally:
                with self._changed:
                    self._merging = False
                    self._last_merge = time.monotonic()
                    if every_size:
                        self._last_every_size = self._last_merge
                        self._finest_merges = 0
                    else:
                        self._finest_merges += 1
                    self._changed.notify_all()
            # The merged batches' partials are not held while the thread waits for the next ones (what the
            # coarser sizes still need of them, the writer keeps, numbered).
            del due, batches

    def _next_batches(self) -> tuple[list[tuple[int, pa.Table]], bool] | None:
        """(Holding the lock.) The batches to merge next, once they are due: handed over after a gap,
        asked for at once, MERGE_INTERVAL_S after the last merge, or the sink closing; and whether to
        merge them at every size (asked for at once, closing, or COARSE_EVERY - 1 merges at the finest only
        and COARSE_INTERVAL_S since the last at every size). A merge at every size alone is due when batches
        wait at the coarser sizes only and none waits: asked, closing, or COARSE_INTERVAL_S since the last
        and QUIET_S since the last batch came. None: closed, and nothing left."""
        while True:
            now = time.monotonic()
            coarse_in = self._last_every_size + COARSE_INTERVAL_S - now
            asked = self._everything or self._closing
            every_size = asked or (coarse_in <= 0 and self._finest_merges >= COARSE_EVERY - 1)
            if self._waiting and (self._at_once or self._closing):
                break
            if not self._waiting:
                quiet_in = 0.0 if self._last_arrival is None else self._last_arrival + QUIET_S - now
                if self._writer.behind and (asked or max(coarse_in, quiet_in) <= 0):
                    every_size = True
                    break
                if self._closing:
                    return None
                self._changed.wait(max(coarse_in, quiet_in) if self._writer.behind else None)
                continue
            due = self._last_merge + MERGE_INTERVAL_S - time.monotonic()
            if due <= 0:
                break
            self._changed.wait(due)
        batches, self._waiting, self._at_once = self._waiting, [], False
        if every_size:
            self._everything = False
        return batches, every_size
