"""Merges committed batches' partial windows into the stored windows of every size, exactly once.

Merging is not idempotent, so the sink stages the batch's partial windows (Arrow IPC, one Redis string;
`stage`) in the MULTI that records the batch as committed, then a WindowWriter merges them from the copy in
hand (`submit`): at once (tests, tools) or in the sink's merge thread (merge_thread: the streaming query)
while Spark runs the next batch. A crash in between leaves them staged, and they are merged when a writer of
the same query starts (`recover`), before its first batch.

Batches are merged in order. Redis runs a MULTI whole, blocking every other client meanwhile (the sink's
next commit, the service's reads): one MULTI for the ~50k keys of 2,000 partitions blocked Redis ~0.5 s,
and ~1.2 s for a 200k-record batch. So a merge goes in MERGE_PARTS transactions, the topics split between
them by a hash of their name; each records its part as done (redis_layout.merging_batches_key) and the
last one also deletes the staged copies and advances the applied batch id (applied_batch_key). A merge
cut off part-way is finished as it was grouped, its parts done skipped. The applied id and the parts done
are WATCHed: what another writer merged meanwhile (a query restarted in the same process, whose old sink
was still in a batch) is not merged twice.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import pyarrow as pa
import redis

from aggregator.batch_plan import numbered_partials
from aggregator.redis_scripts import REPLACE_WINDOWS_LUA
from aggregator.stored_windows import SeriesKeys, StoredWindows, WindowUpdates, calls_by_part, size_partials
from aggregator.window_reads import read_windows
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)
WATCH_RETRIES = 5
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")
# Transactions a merge is cut into, so one does not hold Redis for long (bench/RESULTS.md, "MERGE_PARTS").
# Fixed, and a topic's part depends only on its name (stored_windows.merge_part): a restart must cut a
# merge the same way.
MERGE_PARTS = 8


def encode_partials(windows: pa.Table) -> bytes:
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, windows.schema, options=_IPC) as writer:
        writer.write_table(windows)
    return out.getvalue().to_pybytes()


def decode_partials(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def stage(pipe: redis.client.Pipeline, scope: str, batch_id: int, windows: pa.Table) -> None:
    """Queue, in the sink's MULTI, a committed batch's partial windows for merging."""
    pipe.set(layout.staged_batch_key(scope, batch_id), encode_partials(windows), px=layout.INDEX_TTL_MS)
    # The first batch staged by this code: every earlier one was merged when it was committed. Only set
    # when missing: the writer WATCHes the key while it merges, and any write (even a new TTL) aborts it.
    pipe.set(layout.applied_batch_key(scope), batch_id - 1, nx=True, px=layout.INDEX_TTL_MS)


class WindowWriter:
    """Merges staged batches, in the caller's thread."""

    # How a batch's partials are numbered and sized for the merge (a test merges with the old ones).
    number = staticmethod(numbered_partials)
    size = staticmethod(size_partials)
    parts = staticmethod(calls_by_part)  # a test sees the calls of each part through it

    def __init__(self, client: redis.Redis, scope: str) -> None:
        self.client = client
        self.scope = scope
        self.stored = StoredWindows()
        self.series_keys = SeriesKeys()
        self._replace = client.register_script(REPLACE_WINDOWS_LUA)

    def recover(self, committed: int | None) -> None:
        """Merge, now, the batches up to `committed` that were staged but never merged: first a merge cut
        off part-way, grouped as it was."""
        raw = cast(bytes | None, self.client.get(layout.applied_batch_key(self.scope)))
        if committed is None or raw is None or int(raw) >= committed:
            return
        first = int(raw) + 1
        LOG.info("%s: merging the windows of batches %d..%d, staged before a restart", self.scope, first,
                 committed)
        cut_off = _merging(cast(dict, self.client.hgetall(layout.merging_batches_key(self.scope))))
        if cut_off is not None and cut_off[0] == first and cut_off[1] <= committed:
            self.merge_staged(list(range(first, cut_off[1] + 1)))
            first = cut_off[1] + 1
        if first <= committed:
            self.merge_staged(list(range(first, committed + 1)))

    def merge_staged(self, batch_ids: list[int]) -> None:
        """Merge staged batches from their staged copies; one without a copy was merged already (by
        another writer) or, if the applied id is still below it, lost (its staged key expired)."""
        keys = [layout.staged_batch_key(self.scope, i) for i in batch_ids]
        blobs = cast(list[bytes | None], self.client.mget(keys))
        missing = [i for i, blob in zip(batch_ids, blobs, strict=True) if blob is None]
        if missing:
            LOG.warning("%s: no staged windows for batches %s (merged by another writer, or expired)",
                        self.scope, missing)
        staged = zip(batch_ids, blobs, strict=True)
        self.apply_all([(i, decode_partials(blob)) for i, blob in staged if blob is not None], staged=True)

    def submit(self, batch_id: int, windows: pa.Table) -> None:
        """Merge a batch the caller has just committed and staged, from the windows in hand: if Redis lost
        the query's state since (flushed), nothing is merged into it."""
        self.apply_all([(batch_id, windows)], staged=True)

    def wait_idle(self) -> None:
        """Every batch is merged when submit returns."""

    def raise_failure(self) -> None:
        """A failed merge raised from submit."""

    def apply(self, batch_id: int, windows: pa.Table) -> None:
        """Merge one staged batch's partial windows into Redis, unless it was merged already."""
        self.apply_all([(batch_id, windows)])

    def apply_all(self, batches: list[tuple[int, pa.Table]], staged: bool = False) -> None:
        """Merge consecutive staged batches (id, partial windows) in one go, those not merged already: the
        cost of a merge grows with the series it touches, not with the batches. For `staged` copies the
        applied id was set when they were staged: without it Redis lost the query's state (a flush
        after they were read), and nothing is merged into the emptied Redis (the rebuild redoes it)."""
        applied_key = layout.applied_batch_key(self.scope)
        for _ in range(WATCH_RETRIES):
            try:
                with self.client.pipeline(transaction=True) as pipe:
                    pipe.watch(applied_key, layout.merging_batches_key(self.scope))
                    applied = cast(bytes | None, pipe.get(applied_key))  # watching: answered at once
                    if staged and applied is None:
                        LOG.warning("%s: batches %s not merged: the query's state is gone from Redis",
                                    self.scope, [i for i, _ in batches])
                        return
                    todo = [(i, w) for i, w in batches if applied is None or i > int(applied)]
                    if todo:
                        self._merge(pipe, [i for i, _ in todo], pa.concat_tables([w for _, w in todo]),
                                    applied)
                    return
            except redis.WatchError:
                self.stored.clear()  # merged from Redis as it was before another writer's batch
            except Exception:
                # The kept windows took the batch in before Redis did (or, after a partial EXEC, are
                # unsure of it): read them again.
                self.stored.clear()
                raise
        ids = [i for i, _ in batches]
        raise RuntimeError(f"{self.scope}: batches {ids}: the applied batch id kept changing")

    def _merge(self, pipe: redis.client.Pipeline, batch_ids: list[int], windows: pa.Table,
               applied: bytes | None) -> None:
        """Merges the batches in parts; pipe WATCHes the applied id (read as `applied`) and the parts done."""
        began = time.monotonic()
        merging_key = layout.merging_batches_key(self.scope)
        group = (batch_ids[0], batch_ids[-1])
        done = self._parts_done(pipe, group)
        resumed = bool(done)
        if resumed:  # Redis holds these parts merged already: kept windows would count them twice
            self.stored.clear()
        finest, series = self.number(windows, self.series_keys)
        numbered = time.monotonic()
        updates = self._updates(finest)
        merged = time.monotonic()
        applied_key = layout.applied_batch_key(self.scope)
        laid_out, ready = 0.0, merged
        # A part's calls are laid out just before they are sent, and let go after: the ARGV of all of them
        # at once was ~0.5 GB of Python strings at 100,000 series.
        for part, calls in self.parts(updates, self.series_keys, MERGE_PARTS, sorted(done)):
            laid_out += time.monotonic() - ready
            pipe.multi()
            for keys, argv in calls:
                self._replace(keys=keys, args=argv, client=pipe)
            del calls
            done.add(part)
            pipe.hset(merging_key, mapping={"first": group[0], "last": group[1],
                                            "parts": ",".join(map(str, sorted(done)))})
            pipe.pexpire(merging_key, layout.INDEX_TTL_MS)
            pipe.execute()
            # The next part WATCHes again: what another writer did in between aborts it.
            pipe.watch(applied_key, merging_key)
            if pipe.get(applied_key) != applied or self._parts_done(pipe, group) != done:
                raise redis.WatchError(f"{self.scope}: another writer merged batches {group} meanwhile")
            ready = time.monotonic()
        queued = time.monotonic()
        pipe.multi()
        pipe.set(applied_key, batch_ids[-1], px=layout.INDEX_TTL_MS)
        pipe.delete(merging_key, *(layout.staged_batch_key(self.scope, i) for i in batch_ids))
        pipe.execute()
        if resumed:  # the skipped parts' kept windows were merged from Redis, where they were already
            self.stored.clear()
        LOG.debug("%s: batches %s: windows of %d series merged in %.0f ms (numbered %.0f, merged %.0f, "
                  "Redis calls laid out %.0f, sent in parts %.0f, done %.0f)", self.scope, batch_ids, series,
                  (time.monotonic() - began) * 1000, (numbered - began) * 1000, (merged - numbered) * 1000,
                  laid_out * 1000, (queued - merged - laid_out) * 1000, (time.monotonic() - queued) * 1000)

    def _parts_done(self, pipe: redis.client.Pipeline, group: tuple[int, int]) -> set[int]:
        """The parts of a merge of `group` (first, last batch) already in Redis."""
        cut_off = _merging(cast(dict, pipe.hgetall(layout.merging_batches_key(self.scope))))
        if cut_off is None:
            return set()
        if cut_off[:2] != group:
            raise RuntimeError(f"{self.scope}: batches {cut_off[0]}..{cut_off[1]} were being merged "
                               f"together, not {group[0]}..{group[1]}")
        return set(cut_off[2])

    def _updates(self, finest: pa.Table | None) -> list[WindowUpdates]:
        """The batch's partials merged at every window size with the stored windows (read from Redis
        first where they are not kept)."""
        if finest is None:
            return []
        updates = []
        for i, window in enumerate(layout.WINDOWS):
            partials = self.size(finest, window)
            missing = self.stored.uncovered(partials, window)
            if missing:
                self._load(missing, window, i)
            updates.append(self.stored.apply(partials, window))
        return updates

    def _load(self, missing: dict[int, int], window: str, size_index: int) -> None:
        """Reads from Redis the windows of `missing` (series -> the oldest start the batch touches) from a
        trim period earlier on, with each key's newest window start: both bound a trim (_key_changes)."""
        earlier = layout.trim_period_ms(window)
        keys = self.series_keys.keys
        reads = [(keys[series][size_index], low - earlier) for series, low in missing.items()]
        members, newest = read_windows(self.client, window, reads)
        self.stored.load(window, {series: (low - earlier, held)
                                  for (series, low), held in zip(missing.items(), members, strict=True)},
                         dict(zip(missing, newest, strict=True)))


def _merging(raw: dict) -> tuple[int, int, frozenset[int]] | None:
    """(first, last, parts done) of a merge in progress, from its hash; None when there is none."""
    if not raw:
        return None
    fields = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
              for k, v in raw.items()}
    try:
        parts = frozenset(int(p) for p in fields.get("parts", "").split(",") if p)
        return int(fields["first"]), int(fields["last"]), parts
    except (KeyError, ValueError) as exc:
        raise RuntimeError(f"unreadable merge in progress {fields!r}: {exc}") from exc
