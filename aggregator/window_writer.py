"""Merges committed batches' partial windows into the stored windows of every size, one batch behind.

Spark starts the next micro-batch only when the sink returns, and merging a batch's windows (~0.6 s for
15k series whatever the batch's size) was most of a small batch's time. So the sink stages the batch's
partial windows (Arrow IPC, one Redis string) in the MULTI that records the batch as committed, and hands
them to this writer's thread: the next batch is read and parsed while this one's windows are merged.

Batches are merged in order, each in one MULTI that also deletes its staged copy and advances the applied
batch id (redis_layout.applied_batch_key). A batch staged but not merged when the process died is merged
when a sink of the same query starts (recover). Merging is not idempotent, so the applied id is WATCHed:
a batch another writer merged meanwhile (a query restarted in the same process) is not merged twice.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time

import pyarrow as pa
import redis

from aggregator import redis_layout as layout
from aggregator.batch_plan import numbered_partials
from aggregator.stored_windows import SeriesKeys, StoredWindows, WindowUpdates, redis_calls, size_partials

LOG = logging.getLogger(__name__)
WATCH_RETRIES = 5
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def encode_partials(windows: pa.Table) -> bytes:
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, windows.schema, options=_IPC) as writer:
        writer.write_table(windows)
    return out.getvalue().to_pybytes()


def decode_partials(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


class WindowWriter:
    def __init__(self, client: redis.Redis, scope: str) -> None:
        self.client = client
        self.scope = scope
        self.stored = StoredWindows()
        self.series_keys = SeriesKeys()
        self._replace = client.register_script(layout.REPLACE_WINDOWS_LUA)
        # At most one batch waits while one is merged: the query cannot run ahead of its windows.
        self._queue: queue.Queue[tuple[int, pa.Table]] = queue.Queue(maxsize=1)
        self._idle = threading.Condition()
        self._pending = 0
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    # --- in the sink's staging MULTI ------------------------------------------------------------------

    def stage(self, pipe: redis.client.Pipeline, batch_id: int, windows: pa.Table) -> None:
        staged = layout.staged_batch_key(self.scope, batch_id)
        pipe.set(staged, encode_partials(windows), px=layout.INDEX_TTL_MS)
        # The first batch staged by this code: every earlier one was merged when it was committed.
        applied = layout.applied_batch_key(self.scope)
        pipe.set(applied, batch_id - 1, nx=True)
        pipe.pexpire(applied, layout.INDEX_TTL_MS)

    # --- merging ----------------------------------------------------------------------------------------

    def submit(self, batch_id: int, windows: pa.Table) -> None:
        """Merge a staged batch in the background, after the ones submitted before it."""
        self.raise_failure()
        with self._idle:
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"windows-{self.scope}", daemon=True)
            self._thread.start()
        self._queue.put((batch_id, windows))

    def wait_idle(self) -> None:
        """Until every submitted batch is merged; raises what made a merge fail."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        self.raise_failure()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"{self.scope}: merging windows failed; the staged batches are merged when "
                               f"the query restarts") from self._failure

    def recover(self, committed: int | None) -> None:
        """Merge, now and in order, the batches up to `committed` that were staged but never merged."""
        raw = self.client.get(layout.applied_batch_key(self.scope))
        if committed is None or raw is None:
            return
        for batch_id in range(int(raw) + 1, committed + 1):
            blob = self.client.get(layout.staged_batch_key(self.scope, batch_id))
            if blob is None:
                LOG.warning("%s: batch %d was committed but its windows are neither merged nor staged",
                            self.scope, batch_id)
                continue
            LOG.info("%s: merging the windows of batch %d, staged before a restart", self.scope, batch_id)
            self.apply(batch_id, decode_partials(blob))

    def apply(self, batch_id: int, windows: pa.Table) -> None:
        """Merge one staged batch's partial windows into Redis, unless it was merged already."""
        applied_key = layout.applied_batch_key(self.scope)
        for _ in range(WATCH_RETRIES):
            try:
                with self.client.pipeline(transaction=True) as pipe:
                    pipe.watch(applied_key)
                    applied = pipe.get(applied_key)
                    if applied is not None and int(applied) >= batch_id:
                        return
                    self._merge(pipe, batch_id, windows)
                    return
            except redis.WatchError:
                self.stored.clear()  # merged from Redis as it was before another writer's batch
            except Exception:
                # The kept windows took the batch in before Redis did (or, after a partial EXEC, are
                # unsure of it): read them again.
                self.stored.clear()
                raise
        raise RuntimeError(f"{self.scope}: batch {batch_id}: the applied batch id kept changing")

    def _merge(self, pipe: redis.client.Pipeline, batch_id: int, windows: pa.Table) -> None:
        began = time.monotonic()
        finest, series = numbered_partials(windows, self.series_keys)
        numbered = time.monotonic()
        updates = self._updates(finest)
        merged = time.monotonic()
        pipe.multi()
        for keys, argv in redis_calls(updates, self.series_keys):
            self._replace(keys=keys, args=argv, client=pipe)
        pipe.set(layout.applied_batch_key(self.scope), batch_id, px=layout.INDEX_TTL_MS)
        pipe.delete(layout.staged_batch_key(self.scope, batch_id))
        queued = time.monotonic()
        pipe.execute()
        LOG.debug("%s: batch %d: windows of %d series merged in %.0f ms (numbered %.0f, merged %.0f, "
                  "queued %.0f, Redis %.0f)", self.scope, batch_id, series, (time.monotonic() - began) * 1000,
                  *((b - a) * 1000 for a, b in itertools.pairwise((began, numbered, merged, queued,
                                                                    time.monotonic()))))

    def _updates(self, finest: pa.Table | None) -> list[WindowUpdates]:
        """The batch's partials merged at every window size with the stored windows (read from Redis
        first where they are not kept)."""
        if finest is None:
            return []
        updates = []
        for i, window in enumerate(layout.WINDOWS):
            partials = size_partials(finest, window)
            missing = self.stored.uncovered(partials, window)
            if missing:
                reads = self.client.pipeline(transaction=False)
                for series, low in missing.items():
                    reads.zrangebyscore(self.series_keys.keys[series][i], low, "+inf")
                replies = zip(missing.items(), reads.execute(), strict=True)
                self.stored.load(window, {series: (low, members) for (series, low), members in replies})
            updates.append(self.stored.apply(partials, window))
        return updates

    def _run(self) -> None:
        while True:
            batch_id, windows = self._queue.get()
            try:
                if self._failure is None:
                    self.apply(batch_id, windows)
            except Exception as exc:  # the sink raises it in the query's next batch
                LOG.error("%s: merging the windows of batch %d failed: %s", self.scope, batch_id, exc)
                self._failure = exc
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
