"""A Kafka partition's offset record: the recent offset windows of the partitions whose reports its task
judges, kept in Redis from one batch's task to the next, so that lag in seconds and lag verdicts are
derived where the reports are read (the executors) and no process keeps every partition's history.

Each task of a batch (partition_partials, one a Kafka partition of a raw-metrics topic) runs
partition_lag.judge_batch over its own reports, on a TaskHistory (an offset_history.OffsetHistory of
TASK_SLOTS windows) built from its Kafka partition's two records (redis_layout.offset_record_keys, Arrow IPC
with LZ4, one MGET and one MULTI of two SETs a task):
- hot: a row a partition, its newest HOT_WINDOWS 10 s windows (two minutes) of offset_history.METRICS in
  offset_history's own form (an int32 delta from the row's base and the ms of each last in its window), the
  window the row is exact from, and a bound on the end offsets of the windows it held older than those (the
  lag table's "no older end offset above the newest windows' least" reads it);
- deep: the same with TASK_SLOTS - 2 windows, for the partitions whose last report needed older windows (lag
  in seconds more than a minute behind), so that a lagging partition does not read the stored windows every
  batch.
A report the newest windows settle (the lag table's newest-windows pass answers it and the bound is under
their least; its verdict's newest `intervals` windows are among them), or whose deep row holds all it reads,
is judged from the record; a partition first met, after its record is lost, or newly lagging reads its older
windows from the stored 10 s windows the merge writes (offset_history.load): no second copy of them.

Exactly once without a batch id: offset_history's merge is idempotent (a newer window takes the slot, one of
the same window keeps the last of greatest (ts, value)), so a replayed batch's tasks find their windows in
the record already and derive the same values and verdicts. The stored windows trail the batches by what the
merge thread has not written yet: a task reading them for a partition its record holds, or without a record
(its Kafka partition's first task, records lost), first waits until every batch committed before its own is
merged at 10 s (MergeWait), since the record's windows may not reach that far back. A partition a present
record does not hold has no window in those batches (its reports would be this task's and in its record),
unless they are another task's: a group report keyed by its group rather than by its topic partition
(drivers before s31) is judged over its partition's windows as the merge has written them (up to a merge
behind, without the batch's own).

A partition's row goes when no report of it has come for TASK_SLOTS windows (its windows are then out of any
read's reach); a row this task read for a group report alone (its partition's reports are another task's)
is not kept. A raw-metrics topic given more partitions moves subjects between tasks: a moved partition is
first met in its new task; its row in the old one goes with time (a subject moved back within TASK_SLOTS
windows by a second increase would find a row missing the windows it had elsewhere: not guarded).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator import latest_values, partition_lag, task_verdicts, task_writes, verdict_summaries
from aggregator.batch_plan import offset_partials, offset_reports
from aggregator.lag_arrays import EXACT_BELOW
from aggregator.lag_seconds_windows import lag_seconds_partials
from aggregator.offset_history import METRICS, NO_DELTA, NOTHING, WINDOW_MS, OffsetHistory, window_number
from aggregator.partition_lag import NEWEST_WINDOWS, Judged, _ceil_window, _Policies, _Reports
from aggregator.subject_cap import member
from aggregator.window_partials import latest_schema, merge_partials
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

HOT_WINDOWS = 12  # two minutes: the lag table's newest minute and a 5 s period's lookback (10 windows)
TASK_SLOTS = 64  # the task's ring: a lag table's 61 windows and the batch's own
KEYS = ["target", "source", "topic", "partition"]
RECORD_IPC = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
# How long a task waits for the merge thread before it reads the stored windows (a merge at 100,000
# partitions takes seconds; one stuck this long fails the batch, whose retry waits again).
MERGE_WAIT_S = 300.0
MERGE_POLL_S = 0.05


@dataclass(frozen=True)
class MergeWait:
    """Called before a task reads the stored windows: returns once the merge has written every batch
    committed before the task's own (`committed`, the sink's state when it planned the batch) at 10 s at
    least. Nothing to wait for without a committed batch, or with no merge recorded (Redis lost: the sink
    drops the batch)."""

    scope: str | None = None
    committed: int | None = None
    timeout_s: float = MERGE_WAIT_S

    def __call__(self, client: redis.Redis) -> None:
        if self.scope is None or self.committed is None:
            return
        keys = (layout.applied_batch_key(self.scope), layout.finest_applied_batch_key(self.scope))
        deadline = time.monotonic() + self.timeout_s
        while True:
            merged = [int(v) for v in cast(list[bytes | None], client.mget(keys)) if v is not None]
            if not merged or max(merged) >= self.committed:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.scope}: batch {self.committed}'s windows not merged after "
                                   f"{self.timeout_s:.0f} s")
            time.sleep(MERGE_POLL_S)


# --- the records ----------------------------------------------------------------------------------------

@dataclass
class OffsetRecord:
    """A Kafka partition's partitions, a row each (the newest `windows` windows, newest first)."""

    keys: pa.Table  # KEYS
    newest: np.ndarray  # int64 window number of slot 0; -1: nothing held
    complete_from: np.ndarray  # int64: the row holds every window from max(this, newest - windows + 1) on
    older_max: np.ndarray  # float64: no end offset of an older window held is above it (inf: unknown)
    older_abs: np.ndarray  # float64: nor is any further from 0 (exact in float64 below 2^53)
    base: np.ndarray  # (n, 3) int64
    based: np.ndarray  # (n, 3) bool
    delta: np.ndarray  # (n, windows, 3) int32, NO_DELTA: none
    at: np.ndarray  # (n, windows, 3) int16: ms of the last in its window

    @property
    def windows(self) -> int:
        return self.delta.shape[1]

    @property
    def floor(self) -> np.ndarray:
        """The first window number each row holds exactly (NOTHING: none)."""
        return np.where(self.newest >= 0, np.maximum(self.complete_from, self.newest - self.windows + 1),
                        NOTHING)

    @classmethod
    def empty(cls, windows: int) -> OffsetRecord:
        return cls(pa.table({"target": pa.array([], pa.string()), "source": pa.array([], pa.string()),
                             "topic": pa.array([], pa.string()), "partition": pa.array([], pa.int64())}),
                   np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0),
                   np.empty((0, 3), np.int64), np.empty((0, 3), bool), np.empty((0, windows, 3), np.int32),
                   np.empty((0, windows, 3), np.int16))

    def encode(self) -> bytes:
        n, w = len(self.newest), self.windows
        table = pa.table({
            **{k: self.keys[k].combine_chunks().dictionary_encode() if k != "partition"
               else self.keys[k].combine_chunks() for k in KEYS},
            "newest": self.newest, "complete_from": self.complete_from, "older_max": self.older_max,
            "older_abs": self.older_abs,
            "base": pa.FixedSizeListArray.from_arrays(pa.array(self.base.reshape(-1)), 3),
            "based": pa.FixedSizeListArray.from_arrays(pa.array(self.based.reshape(-1)), 3),
            "delta": pa.FixedSizeListArray.from_arrays(pa.array(self.delta.reshape(-1)), 3 * w),
            "at": pa.FixedSizeListArray.from_arrays(pa.array(self.at.reshape(-1)), 3 * w)})
        assert table.num_rows == n
        out = pa.BufferOutputStream()
        with pa.ipc.new_stream(out, table.schema, options=RECORD_IPC) as writer:
            writer.write_table(table)
        return cast(bytes, out.getvalue().to_pybytes())

    @classmethod
    def decode(cls, raw: bytes | None, windows: int) -> OffsetRecord:
        if raw is None:
            return cls.empty(windows)
        table = pa.ipc.open_stream(raw).read_all().combine_chunks()
        n = table.num_rows
        if not n:
            return cls.empty(windows)

        def flat(name: str, shape: tuple[int, ...]) -> np.ndarray:
            return table[name].chunk(0).values.to_numpy(zero_copy_only=False).reshape(shape)

        if flat("delta", (n, -1, 3)).shape[1] != windows:
            raise ValueError(f"a record of {flat('delta', (n, -1, 3)).shape[1]} windows, not {windows}")
        keys = pa.table({k: table[k].cast(pa.string()) if k != "partition" else table[k] for k in KEYS})
        newest, complete, older_max, older_abs = (table[c].to_numpy() for c in ("newest", "complete_from",
                                                                                 "older_max", "older_abs"))
        return cls(keys, newest, complete, older_max, older_abs, flat("base", (n, 3)), flat("based", (n, 3)),
                   flat("delta", (n, windows, 3)), flat("at", (n, windows, 3)))


class TaskHistory(OffsetHistory):
    """The task's offset history: the rows of its records (hot, then deep) first, then its partitions in
    neither; the batch's partials merged once (judge_batch merges them again: a no-op here); a row read from
    the stored windows gets its record's windows and the batch's merged in again, the record holding what
    the merge may not have written yet."""

    def __init__(self, records: list[OffsetRecord], slots: int) -> None:
        super().__init__(slots)
        self.records = records
        self.offsets = np.cumsum([0] + [len(r.newest) for r in records])
        self.kept = int(self.offsets[-1])

        def joined(name: str) -> np.ndarray:
            return np.concatenate([getattr(r, name) for r in records])

        self.held_newest, self.held_since = joined("newest"), joined("complete_from")
        self.held_floor = joined("floor")
        self.held_width = np.concatenate([np.full(len(r.newest), r.windows) for r in records])
        for record in records:  # named in bulk: a partition is in one record
            keys = list(zip(*(record.keys[k].to_pylist() for k in KEYS), strict=True))
            self.rows.update(zip(keys, range(len(self.keys), len(self.keys) + len(keys)), strict=True))
            self.keys.extend(keys)
        if len(self.rows) != len(self.keys):
            raise ValueError("a partition in both records")
        self._grow(len(self.keys))
        for record, at in zip(records, self.offsets, strict=False):
            self._fill(record, int(at))
        self.batch_windows: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None
        self.loaded = np.zeros(0, bool)  # rows read from the stored windows in this task
        self._key_table: pa.Table | None = None
        self._recording = False

    def owned(self) -> np.ndarray:
        """Per row: held by a record, or given windows by this task's batch (a partition of this Kafka
        partition, not one read for a group report alone)."""
        out = np.zeros(len(self.keys), bool)
        out[:self.kept] = True
        for _, rows, _, _, _ in self.batch_windows or []:
            out[rows] = True
        return out

    def _fill(self, record: OffsetRecord, offset: int) -> None:
        """A record's windows into its (empty) rows, as they are held: no merge."""
        n, w = len(record.newest), record.windows
        if not n:
            return
        rows = offset + np.arange(n)
        number = record.newest[:, None] - np.arange(w)[None, :]
        held = (record.delta != NO_DELTA).any(axis=2) & (record.newest[:, None] >= 0)
        slot = number % self.slots
        for block, at, local in self._by_block(rows):
            mine, index = held[at], rows[at] - offset
            r = np.broadcast_to(local[:, None], mine.shape)[mine]
            s = slot[at][mine]
            block.window[r, s] = number[at][mine]
            block.delta[r, s] = record.delta[index][mine]
            block.last_at[r, s] = record.at[index][mine]
            block.base[local] = record.base[index]
            block.based[local] = record.based[index]
        self.newest[rows] = record.newest
        self.complete_from[rows] = record.floor
        self.lowest[rows] = np.where(held, number, NOTHING).min(axis=1)

    def hot_equivalent(self, windows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per kept row, as if it held only its newest `windows` windows: the first window it would hold
        exactly, and the bound on the end offsets (and their distance from 0) of every window it held below
        that."""
        floors, bounds, bounds_abs = [], [], []
        for record in self.records:
            if record.windows <= windows:
                floors.append(record.floor)
                bounds.append(record.older_max)
                bounds_abs.append(record.older_abs)
                continue
            newest = record.newest
            floor = np.where(newest >= 0, np.maximum(record.complete_from, newest - windows + 1), NOTHING)
            older = record.delta[:, windows:, 0]
            held = older != NO_DELTA
            values = record.base[:, 0][:, None] + older.astype(np.int64)
            floors.append(floor)
            bounds.append(np.maximum(record.older_max, np.where(held, values, -math.inf)
                                     .max(axis=1, initial=-math.inf)))
            bounds_abs.append(np.maximum(record.older_abs, np.where(held, np.abs(values), 0)
                                         .max(axis=1, initial=0.0)))
        return np.concatenate(floors), np.concatenate(bounds), np.concatenate(bounds_abs)

    def merge_rows(self, partials: Mapping[str, pa.Table]) -> None:
        if self.batch_windows is not None:
            return
        self.batch_windows = []
        self._recording = True
        try:
            super().merge_rows(partials)
        finally:
            self._recording = False

    def merge(self, metric: str, rows: np.ndarray, start_ms: np.ndarray, last: np.ndarray,
              last_ts: np.ndarray) -> None:
        if self._recording and self.batch_windows is not None:
            self.batch_windows.append((metric, rows, start_ms, last, last_ts))
        super().merge(metric, rows, start_ms, last, last_ts)

    def load(self, client: redis.Redis, rows: np.ndarray, low: np.ndarray) -> None:
        super().load(client, rows, low)
        rows = np.unique(rows)
        if len(self.loaded) < len(self.keys):
            self.loaded = np.concatenate([self.loaded, np.zeros(len(self.keys) - len(self.loaded), bool)])
        self.loaded[rows] = True
        for record, offset in zip(self.records, self.offsets, strict=False):
            mine = rows[(rows >= offset) & (rows < offset + len(record.newest))] - offset
            mine = mine[record.newest[mine] >= 0]
            if len(mine):
                self._merge_record(record, int(offset), mine)
        for metric, at, start_ms, last, last_ts in self.batch_windows or []:
            mine = np.isin(at, rows)
            super().merge(metric, at[mine], start_ms[mine], last[mine], last_ts[mine])

    def _merge_record(self, record: OffsetRecord, offset: int, index: np.ndarray) -> None:
        number = record.newest[index, None] - np.arange(record.windows)[None, :]
        rows = np.broadcast_to((offset + index)[:, None], number.shape)
        for m, metric in enumerate(METRICS):
            delta = record.delta[index, :, m]
            held = delta != NO_DELTA
            last = (record.base[index, m][:, None] + delta.astype(np.int64)).astype(np.float64)
            start = number * WINDOW_MS
            super().merge(metric, rows[held], start[held], last[held],
                          start[held] + record.at[index, :, m][held])

    def key_table(self) -> pa.Table:
        """Every row's key (KEYS), in row order: the records' as they came, then the partitions met here."""
        if self._key_table is None or self._key_table.num_rows != len(self.keys):
            kept = [r.keys for r in self.records]
            if len(self.keys) > self.kept:
                columns = zip(*self.keys[self.kept:], strict=True)
                kept.append(pa.table(dict(zip(KEYS, columns, strict=True)), schema=kept[0].schema))
            self._key_table = pa.concat_tables(kept).combine_chunks()
        return self._key_table

    def since(self) -> np.ndarray:
        """Each row's window it is exact from, over every window it held (its record's complete_from; a row
        read from the stored windows: where the read began)."""
        n = len(self.keys)
        out = np.full(n, NOTHING, np.int64)
        out[:self.kept] = self.held_since
        loaded = np.flatnonzero(self.loaded[:n])
        out[loaded] = self.complete_from[loaded]
        return out

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's bound on the end offsets of the windows it held older than its record's (-inf: none;
        a row read from the stored windows holds them all)."""
        n = len(self.keys)
        older_max, older_abs = np.full(n, -math.inf), np.zeros(n)
        older_max[:self.kept] = np.concatenate([r.older_max for r in self.records])
        older_abs[:self.kept] = np.concatenate([r.older_abs for r in self.records])
        loaded = np.flatnonzero(self.loaded[:n])
        older_max[loaded], older_abs[loaded] = -math.inf, 0.0
        return older_max, older_abs


def _extract(history: TaskHistory, rows: np.ndarray, since: np.ndarray, held_from: np.ndarray,
             windows: int) -> OffsetRecord:
    """A record of `rows`: each one's newest `windows` windows as the task leaves them."""
    n = len(rows)
    if not n:
        return OffsetRecord.empty(windows)
    newest = history.newest[rows].copy()
    number = newest[:, None] - np.arange(windows)[None, :]
    slot = number % history.slots
    delta = np.full((n, windows, 3), NO_DELTA, np.int32)
    at = np.zeros((n, windows, 3), np.int16)
    base = np.zeros((n, 3), np.int64)
    based = np.zeros((n, 3), bool)
    wide = np.zeros(n, bool)
    for block, where, local in history._by_block(rows):
        ok = (block.window[local[:, None], slot[where]] == number[where]) & (newest[where, None] >= 0)
        delta[where] = np.where(ok[..., None], block.delta[local[:, None], slot[where]], NO_DELTA)
        at[where] = np.where(ok[..., None], block.last_at[local[:, None], slot[where]], 0)
        base[where], based[where] = block.base[local], block.based[local]
        if block.wide:
            wide[where] = np.isin(local, np.fromiter(block.wide, np.int64, len(block.wide)))
    # The older windows the task held (those leaving the record's windows, a read row's stored ones): a
    # row kept from its record reaches a window or two below them, a read one the ring's whole width.
    ring_max, ring_abs = np.full(n, -math.inf), np.zeros(n)
    lowest = np.maximum(held_from[rows], since[rows])
    span = np.clip(newest - windows - lowest + 1, 0, history.slots - windows)
    for part in (np.flatnonzero((span > 0) & (span <= 4)), np.flatnonzero(span > 4)):
        if not len(part):
            continue
        width = int(span[part].max())
        older, last, present = history.gather("source_end_offset", rows[part], newest[part] - windows, width)
        present &= older >= since[rows[part]][:, None]
        offsets = np.trunc(last)
        ring_max[part] = np.where(present, offsets, -math.inf).max(axis=1, initial=-math.inf)
        ring_abs[part] = np.where(present, np.abs(offsets), 0.0).max(axis=1, initial=0.0)
    old_max, old_abs = history.bounds()
    evicted = held_from[rows] < newest - history.slots + 1  # windows the ring may have let go: unknown
    # A batch's window below what the ring got holds the batch's last only, not the stored one's: unknown.
    earliest = np.full(len(history.keys), NOTHING, np.int64)
    for _, at_rows, start_ms, _, _ in history.batch_windows or []:
        np.minimum.at(earliest, at_rows, window_number(start_ms))
    evicted |= earliest[rows] < lowest
    older_max = np.where(evicted, math.inf, np.maximum(ring_max, old_max[rows]))
    older_abs = np.where(evicted, math.inf, np.maximum(ring_abs, old_abs[rows]))
    newest = np.where(wide, -1, newest)  # float64 lasts (rare): read from the stored windows every time
    keys = history.key_table().take(pa.array(rows))
    return OffsetRecord(keys, newest, since[rows], older_max, older_abs, base, based, delta, at)


def _ring_hot_equivalent(history: TaskHistory, rows: np.ndarray, windows: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TaskHistory.hot_equivalent of rows the task read from the stored windows (exact from `since` on, over
    the ring): the first window they would hold exactly with their newest `windows` windows, and the bound on
    the end offsets (and their distance from 0) the ring holds below that, as _extract leaves them."""
    since = history.since()[rows]
    newest = history.newest[rows]
    floor = np.where(newest >= 0, np.maximum(since, newest - windows + 1), NOTHING)
    bound, bound_abs = np.full(len(rows), -math.inf), np.zeros(len(rows))
    below = np.flatnonzero((newest >= 0) & (floor > since))
    if len(below):
        width = int(min((floor[below] - since[below]).max(), history.slots))
        number, last, present = history.gather("source_end_offset", rows[below], floor[below] - 1, width)
        present &= number >= since[below][:, None]
        offsets = np.trunc(last)
        bound[below] = np.where(present, offsets, -math.inf).max(axis=1, initial=-math.inf)
        bound_abs[below] = np.where(present, np.abs(offsets), 0.0).max(axis=1, initial=0.0)
    return floor, bound, bound_abs


def _answered_by(history: TaskHistory, given: _Reports, rows: np.ndarray, floor: np.ndarray,
                 bound: np.ndarray, bound_abs: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, partition_lag.NewestPass]:
    """Which reports a history exact from window `floor` (a row each) answers as the whole history would, the
    end offsets below `floor` not above `bound` (nor further from 0 than `bound_abs`); the low window each
    report reads (partition_lag.judge_batch's); and their lag in seconds' newest-windows pass, which
    judge_batch reuses."""
    ts, is_partition = given.ts, given.is_partition
    policies = _Policies(given.periods)
    high = window_number(ts)
    low_lag = _ceil_window(ts - latest_values.HISTORY_SPAN_MS)
    low_verdict = np.where(is_partition, _ceil_window(ts - policies.lookback), low_lag)
    # Lag in seconds: settled over the newest windows (partition_lag._lag_seconds' first pass), with no
    # older end offset above their least.
    got = partition_lag.NewestPass.of(history, given, rows, high, low_lag)
    least = got.least
    row_floor = floor[rows]
    # The ring's end offsets below the newest windows, down to the floor (judge_batch reads them down to the
    # table's low: what the ring holds below the floor is the batch's, its older ones are in the bound).
    reach = np.where(row_floor <= low_lag, high - NEWEST_WINDOWS, np.maximum(row_floor, low_lag))
    width = int(min(max(int((high - NEWEST_WINDOWS - reach).max(initial=0)) + 1, 1), history.slots))
    number, last, present = history.gather("source_end_offset", rows, high - NEWEST_WINDOWS, width)
    present &= number >= low_lag[:, None]
    older = np.trunc(last)
    ring_high = np.where(present, older, -math.inf).max(axis=1, initial=-math.inf)
    ring_exact = np.all(~present | (np.abs(older) < EXACT_BELOW), axis=1)
    since = history.since()[rows]
    lag_ok = (row_floor <= low_lag) | (
        (row_floor <= np.maximum(low_lag, high - NEWEST_WINDOWS + 1)) & got.local & (ring_high <= least)
        & ring_exact & (since <= low_lag) & (bound[rows] <= least) & (bound_abs[rows] < EXACT_BELOW))
    # Verdicts: the newest `intervals` windows of the lookback all at or above the floor.
    intervals = next(iter(policies.intervals))
    from_ = np.maximum(row_floor, low_verdict)
    width = int(min(max(int((high - np.minimum(from_, high)).max(initial=0)) + 1, 1), history.slots))
    number, _, present = history.gather("upstream_offset", rows, high, width)
    count = (present & (number >= from_[:, None])).sum(axis=1)
    verdict_ok = ~is_partition | (row_floor <= low_verdict) | (count >= intervals)
    return lag_ok & verdict_ok, np.minimum(low_lag, low_verdict), got




# --- a task's judging ------------------------------------------------------------------------------------

@dataclass
class RecordStats:
    """What a task's judging did with its records (for the sink's debug log)."""

    kept: int = 0  # rows the records held
    read: int = 0  # rows read from the stored windows
    deep: int = 0  # rows written to the deep record
    waited_s: float = 0.0  # waiting for the merge before a read of the stored windows
    bytes: int = 0  # the records' bytes, read and written
    writes: task_writes.WriteStats = field(default_factory=task_writes.WriteStats)  # the task's own writes


def judge(client: redis.Redis, keys: tuple[str, str], reports: pa.Table, partials: Mapping[str, pa.Table],
          merged: Callable[[redis.Redis], None]) -> tuple[Judged, RecordStats]:
    """One task's judging: its partition and group `reports` (the newest of each of its subjects,
    window_partials.latest_schema's rows) and its `partials` of offset_history.METRICS (batch_plan
    .offset_partials); reads its Kafka partition's records at `keys` (hot, deep) and writes them back.
    `merged` is called before any read of the stored windows (MergeWait)."""
    stats = RecordStats()
    waited = False

    def wait_for_merge() -> None:
        nonlocal waited
        if not waited:
            began = time.monotonic()
            merged(client)
            stats.waited_s += time.monotonic() - began
            waited = True

    deep_windows = TASK_SLOTS - 2
    raw = cast(list[bytes | None], client.mget(keys))
    try:
        records = [OffsetRecord.decode(r, w) for r, w in zip(raw, (HOT_WINDOWS, deep_windows), strict=True)]
        history = TaskHistory(records, TASK_SLOTS)
    except (pa.ArrowException, KeyError, ValueError, IndexError) as exc:
        # Another layout's record, or a damaged one: start over from the stored windows, once they hold
        # every committed batch (the record held windows the merge may not have written yet).
        LOG.warning("offset record %s unreadable (%s): its partitions read from the stored windows",
                    keys[0], exc)
        wait_for_merge()
        history = TaskHistory([OffsetRecord.empty(HOT_WINDOWS), OffsetRecord.empty(deep_windows)], TASK_SLOTS)
    stats.kept = history.kept
    given = _Reports(reports)
    rows = history.row_of(given.partition_keys())
    history.merge_rows(partials)  # partitions with windows and no report (none from a driver) get rows too
    n = len(history.keys)
    floor_h, bound, bound_abs = (np.full(n, NOTHING, np.int64), np.full(n, math.inf), np.full(n, math.inf))
    held = slice(0, history.kept)
    floor_h[held], bound[held], bound_abs[held] = history.hot_equivalent(HOT_WINDOWS)
    floor = np.full(n, NOTHING, np.int64)
    floor[:history.kept] = history.held_floor
    # A report the newest HOT_WINDOWS windows settle, or whose row's record (deep) holds all it reads.
    by_hot, low, newest = _answered_by(history, given, rows, floor_h, bound, bound_abs) if len(rows) else \
        (np.zeros(0, bool), np.zeros(0, np.int64), None)
    answered = by_hot | (floor[rows] <= low)
    high = window_number(given.ts)
    cold = ~answered & (low > high - TASK_SLOTS)
    if cold.any():
        # The stored windows lack what the merge has not written yet: a row the record holds may have had
        # its windows of those batches in the record only, and without a record (first task of a Kafka
        # partition, records lost) any row may.
        if (rows[cold] < history.kept).any() or all(r is None for r in raw):
            wait_for_merge()
        history.load(client, rows[cold], low[cold])
        stats.read = int(len(np.unique(rows[cold])))
        # Hot or deep is decided now that the rows read hold their windows: decided before the read, a row
        # without a record (a query's first batch, records lost) went deep, and its next batch read the deep
        # record back, for nothing when its newest windows settle its reports.
        by_hot = by_hot.copy()
        at = np.flatnonzero(cold)
        floor_h[rows[at]], bound[rows[at]], bound_abs[rows[at]] = _ring_hot_equivalent(history, rows[at],
                                                                                      HOT_WINDOWS)
        by_hot[at] = _answered_by(history, _Reports(reports.take(pa.array(at))), rows[at], floor_h, bound,
                                  bound_abs)[0]
    warm = answered & ~history.loaded[rows] if len(history.loaded) else answered
    since = history.since()
    loaded = np.zeros(n, bool)
    loaded[:len(history.loaded)] = history.loaded[:n]
    held_from = np.where(loaded | (floor >= NOTHING), since, floor)  # the oldest window the ring got
    np.minimum.at(history.complete_from, rows[warm], low[warm])  # what the task holds for them is exact
    # The precheck's pass holds for the rows not read since.
    stale = history.loaded[rows] if len(history.loaded) else np.zeros(len(rows), bool)
    precheck = None if newest is None else partition_lag.Precheck(given, rows, newest, stale)
    judged = partition_lag.judge_batch(reports, history, partials, client, wait_for_merge, precheck)
    # A row whose reports all had their answer in the newest HOT_WINDOWS windows is kept hot; the others
    # deep (their older windows then come from the record, not the stored windows, until they catch up).
    was_deep = np.zeros(n, bool)
    was_deep[history.offsets[1]:history.kept] = True
    reported = np.zeros(n, bool)
    reported[rows] = True
    needs = np.zeros(n, bool)
    needs[rows[~by_hot]] = True
    deep = np.where(reported, needs, was_deep)
    # A row turning deep holds exactly only what its ring got (not read: a report below what a ring holds,
    # judged one at a time): the older windows its bound summarises are then read when it is next judged.
    since = np.where(deep & ~was_deep & ~loaded, np.maximum(since, held_from), since)
    # Kept: the rows of this Kafka partition's partitions (held before, or given windows now) whose newest
    # window is within a ring of the newest report's.
    kept = history.owned()
    if len(high):
        kept &= history.newest[:n] > int(high.max()) - TASK_SLOTS
    stats.deep = int((deep & kept).sum())
    blobs = [_extract(history, np.flatnonzero(~deep & kept), since, held_from, HOT_WINDOWS).encode(),
             _extract(history, np.flatnonzero(deep & kept), since, held_from, deep_windows).encode()]
    pipe = client.pipeline(transaction=True)
    for key, blob in zip(keys, blobs, strict=True):
        pipe.set(key, blob, px=layout.OFFSET_RECORD_TTL_MS)
    pipe.execute()
    stats.bytes = sum(map(len, blobs)) + sum(len(r) for r in raw if r)
    return judged, stats


# A task's latest values of partitions and groups (hash key, field, the value's ts and its JSON).
VALUES_SCHEMA = pa.schema([("key", pa.string()), ("field", pa.string()), ("ts", pa.int64()),
                           ("json", pa.string())])


def judged_rows(judged: Judged) -> tuple[pa.Table, pa.Table, list[pa.Table]]:
    """What a task sends the driver of its judging: its latest values (VALUES_SCHEMA), its verdicts
    (verdict_summaries.TABLE_SCHEMA) and its lag-in-seconds samples as partial windows (each report its own
    partition-level partial: a subject has one report a batch)."""
    value_rows = judged.latest_rows().cast(VALUES_SCHEMA)
    verdict_rows = judged.verdict_rows()
    samples = [lag_seconds_partials(judged.samples)] if judged.samples else []
    return value_rows, verdict_rows, samples + judged.sample_tables


def judge_partials(client: redis.Redis, keys: tuple[str, str], windows: pa.Table, latest: pa.Table,
                   merged: Callable[[redis.Redis], None], writes: task_writes.TaskWrites
                   ) -> tuple[pa.Table, pa.Table, pa.Table, RecordStats]:
    """A task's partials (window_partials.window_partials and latest_table rows of one Kafka partition, whose
    records are at `keys`) with its partition and group reports judged: its windows with each report's lag
    in seconds joined as a partial, the latest values and verdicts left for the driver to write
    (VALUES_SCHEMA: those of subjects the cap has not admitted yet; the task writes the rest itself,
    task_writes, as `writes` says), those verdicts as the columns of their replications' summaries
    (verdict_summaries.TABLE_SCHEMA: the task keeps the others, task_verdicts) and what the judging did
    with the records."""
    reports = offset_reports(latest) if latest.num_rows else latest_schema().empty_table()
    partials = offset_partials(windows)
    if not reports.num_rows and not any(t.num_rows for t in partials.values()):
        none = verdict_summaries.TABLE_SCHEMA.empty_table()
        return windows, VALUES_SCHEMA.empty_table(), none, RecordStats()
    judged, stats = judge(client, keys, reports, partials, merged)
    values, verdicts, samples = judged_rows(judged)
    verdict_rows = verdict_values(verdicts)
    rows, written, stats.writes = task_writes.write_own(
        client, writes, pa.concat_tables([values, verdict_rows]), _subjects_of(reports))
    ids = task_writes.field_ids(verdict_rows)
    applied = pc.is_in(ids, value_set=written).to_numpy(zero_copy_only=False)
    pending = pc.is_in(ids, value_set=task_writes.field_ids(rows)).to_numpy(zero_copy_only=False)
    place = task_verdicts.VerdictPlace(writes.target, writes.raw_topic, writes.kafka_partition)
    stats.bytes += task_verdicts.keep_and_summarise(client, place, writes.now_ms, verdicts, applied, pending)
    # The samples' partials share their (subject, window) with the task's own (a report's window, and its
    # topic's and replication's): rolled up here, in the task, not by the driver with every task's answer.
    return merge_partials([windows, *samples]), rows, verdicts.filter(pa.array(pending)), stats


def verdict_values(verdicts: pa.Table) -> pa.Table:
    """Verdicts (verdict_summaries.TABLE_SCHEMA) as the latest fields they are written to (VALUES_SCHEMA)."""
    if not verdicts.num_rows:
        return VALUES_SCHEMA.empty_table()
    pairs = pc.binary_join_element_wise(verdicts["target"], verdicts["source"], "\x00").combine_chunks() \
        .dictionary_encode()
    keys = pa.array([layout.lag_verdicts_key(*p.split("\x00", 1)) for p in pairs.dictionary.to_pylist()],
                    pa.string())
    ts = pc.list_element(verdicts["ints"], verdict_summaries.TS)
    return pa.table([keys.take(pairs.indices), verdicts["field"], ts, verdicts["text"]], schema=VALUES_SCHEMA)


def _subjects_of(reports: pa.Table) -> task_writes.Subjects:
    """The subject (target, source, subject_cap.member) of each latest field the task's `reports` write."""

    def subjects(rows: pa.Table) -> list[tuple[str, str, str] | None]:
        named: dict[tuple[str, str], tuple[str, str, str]] = {}
        columns = [reports[c].to_pylist() for c in ("kind", "target", "source", "topic", "partition",
                                                    "group")]
        for kind, target, source, topic, partition, group in zip(*columns, strict=True):
            fields = f"{topic}|{partition}"
            if kind == "group":
                key = layout.group_latest_key(target, source, group)
                named[(key, fields)] = (target, source, member(topic, partition, group))
                continue
            subject = (target, source, member(topic, partition, None))
            named[(layout.partition_latest_key(target, source, topic), str(partition))] = subject
            named[(layout.lag_verdicts_key(target, source), fields)] = subject
        return [named.get(k) for k in zip(rows["key"].to_pylist(), rows["field"].to_pylist(), strict=True)]

    return subjects
