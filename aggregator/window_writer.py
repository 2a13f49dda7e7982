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
from typing import Any, cast

import hiredis
import numpy as np
import pyarrow as pa
import redis

from aggregator.batch_plan import numbered_partials
from aggregator.redis_scripts import REPLACE_WINDOWS_LUA
from aggregator.stored_windows import (
    SeriesKeys,
    StoredWindows,
    WindowUpdates,
    in_window_order,
    partials_order,
    size_partials,
)
from aggregator.window_calls import PartCalls, calls_by_part
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
        self._finest_key = layout.finest_applied_batch_key(scope)
        # Batches merged at the finest size only since the last merge at every size, by group: (first,
        # last, their numbered partials), which that merge takes up at the coarser sizes.
        self._finest_only: list[tuple[int, int, pa.Table | None]] = []

    def recover(self, committed: int | None) -> None:
        """Merge, now, the batches up to `committed` that were staged but never merged at every size: first
        a merge cut off part-way, grouped as it was."""
        raw = cast(bytes | None, self.client.get(layout.applied_batch_key(self.scope)))
        if committed is None or raw is None or int(raw) >= committed:
            return
        applied, finest = self._applied(self.client)
        LOG.info("%s: merging the windows of batches %d..%d (the finest from %d), staged before a restart",
                 self.scope, applied + 1, committed, finest + 1)
        cut_off = _merging(cast(dict, self.client.hgetall(layout.merging_batches_key(self.scope))))
        if cut_off is not None and cut_off[1] <= committed:
            first, last, _, every_size = cut_off
            if first == (applied if every_size else finest) + 1:
                self.merge_staged(list(range(finest + 1, last + 1)), every_size)
                applied, finest = self._applied(self.client)
        self.merge_staged(list(range(finest + 1, committed + 1)))

    def merge_staged(self, batch_ids: list[int], every_size: bool = True) -> None:
        """Merge staged batches from their staged copies; one without a copy was merged already (by
        another writer) or, if the applied id is still below it, lost (its staged key expired)."""
        self.apply_all(self._staged(batch_ids), staged=True, every_size=every_size)

    def _staged(self, batch_ids: list[int]) -> list[tuple[int, pa.Table]]:
        keys = [layout.staged_batch_key(self.scope, i) for i in batch_ids]
        blobs = cast(list[bytes | None], self.client.mget(keys)) if keys else []
        missing = [i for i, blob in zip(batch_ids, blobs, strict=True) if blob is None]
        if missing:
            LOG.warning("%s: no staged windows for batches %s (merged by another writer, or expired)",
                        self.scope, missing)
        return [(i, decode_partials(b)) for i, b in zip(batch_ids, blobs, strict=True) if b is not None]

    def submit(self, batch_id: int, windows: pa.Table) -> None:
        """Merge a batch the caller has just committed and staged, from the windows in hand: if Redis lost
        the query's state since (flushed), nothing is merged into it."""
        self.apply_all([(batch_id, windows)], staged=True)

    def wait_idle(self) -> None:
        """Every batch is merged when submit returns."""

    def raise_failure(self) -> None:
        """A failed merge raised from submit."""

    @property
    def behind(self) -> bool:
        """Whether batches have their finest windows merged and not yet their coarser ones."""
        return bool(self._finest_only)

    def apply(self, batch_id: int, windows: pa.Table) -> None:
        """Merge one staged batch's partial windows into Redis, unless it was merged already."""
        self.apply_all([(batch_id, windows)])

    def apply_all(self, batches: list[tuple[int, pa.Table]], staged: bool = False,
                  every_size: bool = True) -> None:
        """Merge consecutive staged batches (id, partial windows) in one go, those not merged already: the
        cost of a merge grows with the series it touches, not with the batches. `every_size` false: only
        their finest windows, the coarser ones left for a later merge (with every batch merged only at the
        finest size since the last one). For `staged` copies the applied id was set when they were staged:
        without it Redis lost the query's state (a flush after they were read), and nothing is merged into
        the emptied Redis (the rebuild redoes it)."""
        for _ in range(WATCH_RETRIES):
            try:
                with self.client.pipeline(transaction=True) as pipe:
                    pipe.watch(layout.applied_batch_key(self.scope), self._finest_key,
                               layout.merging_batches_key(self.scope))
                    if staged and pipe.get(layout.applied_batch_key(self.scope)) is None:
                        LOG.warning("%s: batches %s not merged: the query's state is gone from Redis",
                                    self.scope, [i for i, _ in batches])
                        self._finest_only.clear()
                        return
                    applied, finest = self._applied(pipe)  # watching: answered at once
                    todo = [(i, w) for i, w in batches if i > finest]
                    if todo or (every_size and finest > applied):
                        self._merge(pipe, todo, applied, finest, every_size)
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

    def _applied(self, client: redis.Redis | redis.client.Pipeline) -> tuple[int, int]:
        """(The last batch merged at every size, the last merged at the finest), -1 for none."""
        applied, finest = (cast(bytes | None, client.get(k)) for k in (layout.applied_batch_key(self.scope),
                                                                         self._finest_key))
        every = -1 if applied is None else int(applied)
        return every, every if finest is None else max(every, int(finest))

    def _merge(self, pipe: redis.client.Pipeline, todo: list[tuple[int, pa.Table]], applied: int, finest: int,
               every_size: bool) -> None:
        """Merges batches `todo` (after `finest`) in parts, at the finest size, and at every size with the
        batches after `applied` when `every_size`; pipe WATCHes the applied ids and the parts done."""
        began = time.monotonic()
        merging_key = layout.merging_batches_key(self.scope)
        last = todo[-1][0] if todo else finest
        group = (applied + 1 if every_size else finest + 1, last, every_size)
        done = self._parts_done(pipe, group)
        resumed = bool(done)
        if resumed:  # Redis holds these parts merged already: kept windows would count them twice
            self.stored.clear()
        fresh, series = self.number(pa.concat_tables([w for _, w in todo]), self.series_keys) if todo \
            else (None, 0)
        if fresh is not None:  # as size_partials takes them, and as kept for the next merge at every size
            fresh = in_window_order(fresh)
        # Each size's partials, then the batches' rows are let go (at 100,000 series ~0.3 GB for the coarser
        # sizes' rows of three batches) before the merge's kept windows and calls are made.
        sized = self._sized(fresh, self._coarse(pipe, applied, finest, fresh) if every_size else None)
        numbered = time.monotonic()
        updates = self._updates(sized)
        del sized
        merged = time.monotonic()
        applied_key = layout.applied_batch_key(self.scope)
        watched = [applied_key, self._finest_key, merging_key]
        seen = [pipe.get(k) for k in watched[:2]]
        laid_out, ready = 0.0, merged
        # A part's calls are laid out just before they are sent, and let go after: the ARGV of all of them
        # at once was ~0.5 GB of Python strings at 100,000 series.
        for part, calls in self.parts(updates, self.series_keys, MERGE_PARTS, sorted(done)):
            laid_out += time.monotonic() - ready
            done.add(part)
            self.send_part(pipe, calls, [
                ("HSET", merging_key, "first", group[0], "last", group[1],
                 "sizes", "all" if every_size else "finest", "parts", ",".join(map(str, sorted(done)))),
                ("PEXPIRE", merging_key, layout.INDEX_TTL_MS)])
            del calls
            # The next part WATCHes again: what another writer did in between aborts it.
            pipe.watch(*watched)
            if [pipe.get(k) for k in watched[:2]] != seen or self._parts_done(pipe, group) != done:
                raise redis.WatchError(f"{self.scope}: another writer merged batches {group[:2]} meanwhile")
            ready = time.monotonic()
        queued = time.monotonic()
        pipe.multi()
        if every_size:
            pipe.set(applied_key, last, px=layout.INDEX_TTL_MS)
            pipe.delete(self._finest_key, merging_key,
                        *(layout.staged_batch_key(self.scope, i) for i in range(applied + 1, last + 1)))
        else:
            pipe.set(self._finest_key, last, px=layout.INDEX_TTL_MS)
            pipe.delete(merging_key)
        pipe.execute()
        if every_size:
            self._finest_only.clear()
        else:
            self._finest_only.append((finest + 1, last, fresh))
        if resumed:  # the skipped parts' kept windows were merged from Redis, where they were already
            self.stored.clear()
        LOG.debug("%s: batches %s (%s): windows of %d series merged in %.0f ms (numbered %.0f, merged %.0f, "
                  "Redis calls laid out %.0f, sent in parts %.0f, done %.0f)", self.scope,
                  [i for i, _ in todo], f"every size from {applied + 1}" if every_size else "finest only",
                  series,
                  (time.monotonic() - began) * 1000, (numbered - began) * 1000, (merged - numbered) * 1000,
                  laid_out * 1000, (queued - merged - laid_out) * 1000, (time.monotonic() - queued) * 1000)

    def send_part(self, pipe: redis.client.Pipeline, calls: PartCalls, then: list[tuple]) -> None:
        """One part of a merge in one MULTI on `pipe`'s connection (WATCHing): its calls, packed by Arrow
        (PartCalls.packed), then the commands `then`. redis-py would pack an argument at a time, ~1.7M of
        them a merge at 100,000 series, with the GIL held."""
        # As redis-py checks its pipelines' scripts before it sends them.
        if not cast(list, pipe.script_exists(self._replace.sha))[0]:
            pipe.script_load(REPLACE_WINDOWS_LUA)
        connection = pipe.connection
        assert connection is not None  # bound by WATCH
        try:
            packed = calls.packed(self._replace.sha)
            connection.send_packed_command([*connection.pack_command("MULTI"), *packed,
                                            *connection.pack_commands([*then, ("EXEC",)])])
            # MULTI's answer, then each command's QUEUED (an error there aborts the EXEC), then EXEC's.
            executed = transaction_answers(connection, len(calls) + len(then))
        except BaseException:
            connection.disconnect()  # answers may be left unread
            raise
        finally:
            pipe.reset()
        if executed is None:
            raise redis.WatchError(f"{self.scope}: a watched key changed")
        failed = [answer for answer in executed if isinstance(answer, Exception)]
        if failed:
            raise failed[0]

    def _coarse(self, pipe: redis.client.Pipeline, applied: int, finest: int, fresh: pa.Table | None
                ) -> pa.Table | None:
        """The numbered partials the coarser sizes merge: the batches after `applied` up to `finest` (kept
        from their finest merges, or read from their staged copies), then `fresh`."""
        ranges = [(first, last) for first, last, _ in self._finest_only]
        ends = [applied, *(last for _, last in ranges)]
        if ends[-1] == finest and all(f == end + 1 for (f, _), end in zip(ranges, ends[:-1], strict=True)):
            behind = [table for _, _, table in self._finest_only]
        else:  # a new process, or another writer merged some: the staged copies are the batches
            staged = self._staged(list(range(applied + 1, finest + 1)))
            behind = [self.number(pa.concat_tables([w for _, w in staged]), self.series_keys)[0]] if staged \
                else []
        tables = [t for t in (*behind, fresh) if t is not None]
        if not tables:
            return None
        table = pa.concat_tables(tables)
        if len(tables) == 1:
            return table
        if table["last"].null_count:  # by series as numbered_partials orders them, batch after batch
            return table.take(np.argsort(table["series"].to_numpy(), kind="stable"))
        # By series, metric, start, then last ts and last: size_partials's order at every coarser size too (a
        # window's last ts lies in it), so neither sorts the batches' rows again (two sorts of ~2M rows a
        # merge at 100,000 series). Each merge's rows are in it already (in_window_order): their runs merged.
        return table.take(partials_order(table))

    def _parts_done(self, pipe: redis.client.Pipeline, group: tuple[int, int, bool]) -> set[int]:
        """The parts of a merge of `group` (first, last batch, at every size) already in Redis."""
        cut_off = _merging(cast(dict, pipe.hgetall(layout.merging_batches_key(self.scope))))
        if cut_off is None:
            return set()
        if (cut_off[0], cut_off[1], cut_off[3]) != group:
            raise RuntimeError(f"{self.scope}: batches {cut_off[0]}..{cut_off[1]} were being merged together "
                               f"({_sizes(cut_off[3])}), not {group[0]}..{group[1]} ({_sizes(group[2])})")
        return set(cut_off[2])

    def _sized(self, fresh: pa.Table | None, coarse: pa.Table | None) -> dict[str, pa.Table]:
        """Each size's partials: `fresh` at the finest size, `coarse` at the others (none where None)."""
        sized = {}
        for window, size in layout.WINDOWS.items():
            numbered = fresh if size == layout.FINEST_WINDOW else coarse
            if numbered is not None:
                sized[window] = self.size(numbered, window)
        return sized

    def _updates(self, sized: dict[str, pa.Table]) -> list[WindowUpdates]:
        """Each size's partials merged with the stored windows (read from Redis first where they are not
        kept)."""
        updates = []
        for i, window in enumerate(layout.WINDOWS):
            partials = sized.pop(window, None)
            if partials is None:
                continue
            missing = self.stored.uncovered(partials, window)
            if missing:
                self._load(missing, window, i)
            updates.append(self.stored.apply(partials, window))
            del partials
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


_QUEUED = b"+QUEUED\r\n"
_READ = 1 << 20


def transaction_answers(connection: redis.connection.AbstractConnection, queued: int) -> Any:
    """EXEC's answer to a MULTI of `queued` commands just sent on `connection`, after MULTI's OK and each
    command's QUEUED; raises the first error Redis answered as it queued them. The OK and QUEUED answers are
    read off the socket in bulk and compared with what they are when all went well: ~330k of them a merge at
    every size at 100,000 series, and redis-py's read_response, one Python call an answer, held the GIL the
    sink's thread needs for ~1 us each. EXEC's answer is parsed by hiredis, as redis-py parses it. This
    reads redis-py's connection under its API (its socket, and that its hiredis reader holds nothing): a
    connection read otherwise (no hiredis, data buffered) is read an answer at a time, as before."""
    sock, parser = getattr(connection, "_sock", None), getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)
    if sock is None or not isinstance(reader, hiredis.Reader) or reader.has_data():
        for _ in range(queued + 1):
            connection.read_response()
        return connection.read_response()
    expected = b"+OK\r\n" + _QUEUED * queued
    data, as_expected = bytearray(), True
    while as_expected and len(data) < len(expected):
        chunk = _received(sock)
        as_expected = chunk[:len(expected) - len(data)] == expected[len(data):len(data) + len(chunk)]
        data += chunk
    # Errors made as redis-py makes them (its parser's classes and messages).
    answers = hiredis.Reader(protocolError=redis.exceptions.InvalidResponse,
                             replyError=getattr(parser, "parse_error", redis.exceptions.ResponseError))
    left = 0 if data.startswith(expected) else queued + 1  # answers before EXEC's to look at one by one
    answers.feed(bytes(data[len(expected):]) if not left else bytes(data))
    while True:
        answer = answers.gets()
        if answer is False:
            answers.feed(_received(sock))
        elif isinstance(answer, Exception):
            raise answer
        elif left:
            left -= 1
        else:
            return answer


def _received(sock: Any) -> bytes:
    """The next bytes on the socket; its failures as redis-py's read_response raises them."""
    try:
        chunk = sock.recv(_READ)
    except TimeoutError as exc:
        raise redis.TimeoutError("Timeout reading from Redis during a merge's transaction") from exc
    except OSError as exc:
        raise redis.ConnectionError(f"Error reading from Redis during a merge's transaction: {exc}") from exc
    if not chunk:
        raise redis.ConnectionError("Redis closed the connection during a merge's transaction")
    return chunk


def _merging(raw: dict) -> tuple[int, int, frozenset[int], bool] | None:
    """(first, last, parts done, at every size) of a merge in progress, from its hash; None when there is
    none. A merge recorded before some were finest only was at every size."""
    if not raw:
        return None
    fields = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
              for k, v in raw.items()}
    try:
        parts = frozenset(int(p) for p in fields.get("parts", "").split(",") if p)
        sizes = fields.get("sizes", "all")
        if sizes not in ("all", "finest"):
            raise ValueError(f"sizes {sizes!r}")
        return int(fields["first"]), int(fields["last"]), parts, sizes == "all"
    except (KeyError, ValueError) as exc:
        raise RuntimeError(f"unreadable merge in progress {fields!r}: {exc}") from exc


def _sizes(every_size: bool) -> str:
    return "every size" if every_size else "finest only"
