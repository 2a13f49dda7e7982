"""Judging on the executors (issue 38), a prototype measured at the real shape: each Kafka partition's task
judges its own partitions' reports over a history it keeps in Redis, against the sink judging the whole
batch in the driver as today, batch by batch (A B A B) in one process, with a real redis-server, no Spark.

Today (aggregator/partition_lag.judge_batch in the sink's thread): lag in seconds, Burrow's verdicts and the
latest values' JSON of every partition and group report of a batch, as numpy over partitions x windows, read
from the driver's offset history (offset_history: ~2.8 KB a partition, kept from batch to batch).

The prototype runs that same judge_batch in each task, over the task's reports only, on a history it builds
for the task and lets go after it:
- the task's state is two records a Kafka partition, each one Redis string (Arrow IPC), read with one MGET
  and written with one MSET: for each of its partitions the newest 10 s windows of offset_history's METRICS
  (offset_history's own form: an int32 delta from the row's base and the ms of each last in its window), the
  window the row is exact from, and a bound on the end offsets of its windows older than those (the lag
  table's "no older end offset above the newest windows' least" reads it). The hot record keeps
  HOT_WINDOWS (two minutes) a partition; the deep one TASK_SLOTS - 2 for the partitions whose last report
  needed older windows (lag in seconds more than a minute behind);
- a report whose answer the newest HOT_WINDOWS settle (lag in seconds within the newest minute and the
  bound holding, and its verdict's newest `intervals` windows within them), or whose deep row holds all it
  reads, is judged from them; only the others (a partition first met, after a restart, or newly lagging)
  read their partition's older windows from the stored 10 s windows the merge writes (offset_history.load,
  a Python decode a window), and are kept deep from then on;
- exactly once without a batch id: a window's merge (offset_history.merge: a newer window takes its slot,
  one of the same window keeps the last of greatest (ts, value)) is idempotent, so a replayed batch merges
  its windows into a record that has them already and gets the same record and the same answers;
- a Kafka partition's record is keyed by the partition count too: a raw-metrics topic given more
  partitions moves subjects between tasks, and every task then starts from the stored windows.
A report is judged this way where it is a subject of the task's Kafka partition: partition reports are
(keyed by their partition); group reports are keyed by their group today, so --check keys them by their
partition, as the design needs the driver to.

Per batch: the tasks' partials (PartitionPartials, in this thread), then A: each Kafka partition's task
judging (collect and plan of its own answer, records read, judging, records written), B: the sink's
RedisRollupSink.write of the whole batch with its windows merged at once (the cold reads read them);
thread CPU of each stage, Redis's CPU and bytes in and out of Redis (INFO) during A, the tasks' RSS rise
over their start (sampled every 5 ms; freed memory returned before each, as a worker does after a task).
Last line: `task_judging_cpu_s=<s> ... sink_judging_cpu_s=<s> ratio=<tasks / sink>`, the mean over batches
1 on (batch 0 finds nothing kept on either side). --restart-at B drops the records before batch B (every
partition first met: read from the stored windows; its own figure). --check compares, at every batch, each
latest value and verdict the tasks derive with the sink's, adds group reports, lagging partitions and
groups, partitions first met mid-run, a replayed batch and a restart, and exits 1 on any difference.
Usage: python bench/task_judging_cpu.py [--series 100000] [--periods 2] [--every-ms 5000] [--batches 6]
[--lagging 50] [--hot-windows 12] [--restart-at B] [--compression lz4|zstd|none] [--check]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import redis

from aggregator import latest_values, partition_lag
from aggregator.batch_plan import BatchPlan
from aggregator.lag_arrays import EXACT_BELOW, lag_seconds
from aggregator.long_lived import return_freed_memory
from aggregator.offset_history import METRICS, NOTHING, WINDOW_MS, OffsetHistory, window_number
from aggregator.partition_lag import (
    NEWEST_WINDOWS,
    Judged,
    _ceil_window,
    _end_offsets,
    _Policies,
    _Reports,
)
from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.redis_sink import RedisRollupSink
from bench.process_cpu import redis_cpu_s
from bench.rollup_runs import record_key
from bench.sink_cpu import SOURCE, TOPIC, kafka_columns
from contract.redis_layout import encode_latest
from stack.redis_server import RedisServer

HOT_WINDOWS = 12  # two minutes: the lag table's newest minute and a 5 s period's lookback (10 windows)
TASK_SLOTS = 64  # the task's ring: a lag table's 61 windows and the batch's own
_NONE = np.iinfo(np.int32).min  # offset_history's "no value" delta
KEYS = ["target", "source", "topic", "partition"]
RATE = 100  # records a period each partition's source end offset moves


# --- the task's state: a hot record a Kafka partition -------------------------------------------------------

@dataclass
class HotRecord:
    """A Kafka partition's partitions, a row each (the newest `windows` windows, newest first)."""

    keys: pa.Table  # KEYS
    newest: np.ndarray  # int64 window number of slot 0; -1: nothing held
    complete_from: np.ndarray  # int64: the row holds every window from max(this, newest - windows + 1) on
    older_max: np.ndarray  # float64: no end offset of an older window held is above it (inf: unknown)
    older_abs: np.ndarray  # float64: nor is any further from 0 (exact in float64 below 2^53)
    base: np.ndarray  # (n, 3) int64
    based: np.ndarray  # (n, 3) bool
    delta: np.ndarray  # (n, windows, 3) int32, _NONE: none
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
    def empty(cls, windows: int) -> HotRecord:
        return cls(pa.table({"target": pa.array([], pa.string()), "source": pa.array([], pa.string()),
                             "topic": pa.array([], pa.string()), "partition": pa.array([], pa.int64())}),
                   np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0),
                   np.empty((0, 3), np.int64), np.empty((0, 3), bool), np.empty((0, windows, 3), np.int32),
                   np.empty((0, windows, 3), np.int16))

    def encode(self, compression: str | None) -> bytes:
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
        with pa.ipc.new_stream(out, table.schema,
                               options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
            writer.write_table(table)
        return cast(bytes, out.getvalue().to_pybytes())

    @classmethod
    def decode(cls, raw: bytes | None, windows: int) -> HotRecord:
        if raw is None:
            return cls.empty(windows)
        table = pa.ipc.open_stream(raw).read_all().combine_chunks()
        n = table.num_rows
        if not n:
            return cls.empty(windows)

        def flat(name: str, shape: tuple[int, ...]) -> np.ndarray:
            return table[name].chunk(0).values.to_numpy(zero_copy_only=False).reshape(shape)

        if flat("delta", (n, -1, 3)).shape[1] != windows:
            return cls.empty(windows)  # another width: start over from the stored windows
        keys = pa.table({k: table[k].cast(pa.string()) if k != "partition" else table[k] for k in KEYS})
        newest, complete, older_max, older_abs = (table[c].to_numpy() for c in ("newest", "complete_from",
                                                                                 "older_max", "older_abs"))
        return cls(keys, newest, complete, older_max, older_abs, flat("base", (n, 3)), flat("based", (n, 3)),
                   flat("delta", (n, windows, 3)), flat("at", (n, windows, 3)))


def record_keys(target: str, kafka_topic: str, kafka_partition: int, kafka_partitions: int) -> list[str]:
    """A Kafka partition's two records (hot, deep): keyed by the partition count too."""
    head = f"srm:judge:{target}:{kafka_topic}:{kafka_partition}/{kafka_partitions}"
    return [f"{head}:hot", f"{head}:deep"]


class TaskHistory(OffsetHistory):
    """The task's offset history: the rows of its records (hot, then deep) first, then its partitions in
    neither; the batch's partials merged once (judge_batch merges them again: a no-op here); a row read from
    the stored windows gets its record's windows and the batch's merged in again, the record holding what
    the merge may not have written yet."""

    def __init__(self, records: list[HotRecord], slots: int) -> None:
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

    def _fill(self, record: HotRecord, offset: int) -> None:
        """A record's windows into its (empty) rows, as they are held: no merge."""
        n, w = len(record.newest), record.windows
        if not n:
            return
        rows = offset + np.arange(n)
        number = record.newest[:, None] - np.arange(w)[None, :]
        held = (record.delta != _NONE).any(axis=2) & (record.newest[:, None] >= 0)
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
            held = older != _NONE
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
        if getattr(self, "_recording", False) and self.batch_windows is not None:
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

    def _merge_record(self, record: HotRecord, offset: int, index: np.ndarray) -> None:
        number = record.newest[index, None] - np.arange(record.windows)[None, :]
        rows = np.broadcast_to((offset + index)[:, None], number.shape)
        for m, metric in enumerate(METRICS):
            delta = record.delta[index, :, m]
            held = delta != _NONE
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
             windows: int) -> HotRecord:
    """A record of `rows`: each one's newest `windows` windows as the task leaves them."""
    n = len(rows)
    if not n:
        return HotRecord.empty(windows)
    newest = history.newest[rows].copy()
    number = newest[:, None] - np.arange(windows)[None, :]
    slot = number % history.slots
    delta = np.full((n, windows, 3), _NONE, np.int32)
    at = np.zeros((n, windows, 3), np.int16)
    base = np.zeros((n, 3), np.int64)
    based = np.zeros((n, 3), bool)
    wide = np.zeros(n, bool)
    for block, where, local in history._by_block(rows):
        ok = (block.window[local[:, None], slot[where]] == number[where]) & (newest[where, None] >= 0)
        delta[where] = np.where(ok[..., None], block.delta[local[:, None], slot[where]], _NONE)
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
    return HotRecord(keys, newest, since[rows], older_max, older_abs, base, based, delta, at)


# --- a task's judging --------------------------------------------------------------------------------------

@dataclass
class TaskCost:
    stages: dict[str, float] = field(default_factory=dict)  # thread CPU s by stage
    read_rows: int = 0  # rows read from the stored windows
    fallback: int = 0  # reports derived a report at a time (pure functions)
    deep_rows: int = 0  # rows kept with DEEP_WINDOWS windows
    blob_bytes: int = 0


def _answered_by(history: TaskHistory, given: _Reports, rows: np.ndarray, floor: np.ndarray,
                 bound: np.ndarray, bound_abs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which reports a history exact from window `floor` (a row each) answers as the whole history would, the
    end offsets below `floor` not above `bound` (nor further from 0 than `bound_abs`); and the low window each
    report reads (partition_lag.judge_batch's)."""
    ts, is_partition = given.ts, given.is_partition
    policies = _Policies(given.periods)
    high = window_number(ts)
    low_lag = _ceil_window(ts - latest_values.HISTORY_SPAN_MS)
    low_verdict = np.where(is_partition, _ceil_window(ts - policies.lookback), low_lag)
    # Lag in seconds: settled over the newest windows (partition_lag._lag_seconds' first pass), with no
    # older end offset above their least.
    end = np.where(is_partition, given.numbers("source_end_offset"), math.nan)
    lag = np.where(is_partition, given.numbers("records_lag"), given.numbers("group_lag"))
    upstream = np.where(is_partition, math.nan, given.numbers("group_upstream_offset"))
    position = np.trunc(np.where(is_partition, end - lag, upstream))
    offsets, times, valid = _end_offsets(history, rows, ts, high, low_lag, end, NEWEST_WINDOWS)
    got = lag_seconds(offsets, times, valid, position, lag, ts)
    least = np.where(valid & np.isfinite(offsets), offsets, math.inf).min(axis=1)
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
    return lag_ok & verdict_ok, np.minimum(low_lag, low_verdict)


class StageClock:
    """Thread CPU by stage: a call charges the time since the last call (or the start) to its stage."""

    def __init__(self, stages: dict[str, float]) -> None:
        self.stages = stages
        self.restart()

    def restart(self) -> None:
        """Charge nothing for the time until now."""
        self._at = time.thread_time()

    def __call__(self, name: str) -> None:
        now = time.thread_time()
        self.stages[name] = self.stages.get(name, 0.0) + now - self._at
        self._at = now


def judge_task(client: redis.Redis, keys: list[str], reports: pa.Table, partials: Mapping[str, pa.Table],
               windows: int = HOT_WINDOWS, slots: int = TASK_SLOTS, compression: str | None = None
               ) -> tuple[Judged, TaskCost]:
    """One task's judging: its reports (the newest partition and group report of each of its subjects) and
    its partials of offset_history.METRICS; reads its records at `keys` (hot, deep) and writes them back."""
    cost = TaskCost()
    stage = StageClock(cost.stages)
    deep_windows = slots - 2
    raw = cast(list[bytes | None], client.mget(keys))
    history = TaskHistory([HotRecord.decode(r, w) for r, w in zip(raw, (windows, deep_windows), strict=True)],
                          slots)
    given = _Reports(reports)
    rows = history.row_of(given.partition_keys())
    n = len(history.keys)
    floor_h, bound, bound_abs = (np.full(n, NOTHING, np.int64), np.full(n, math.inf), np.full(n, math.inf))
    floor_h[:history.kept], bound[:history.kept], bound_abs[:history.kept] = history.hot_equivalent(windows)
    floor = np.full(n, NOTHING, np.int64)
    floor[:history.kept] = history.held_floor
    stage("read")
    history.merge_rows(partials)
    stage("merge")
    # A report the newest `windows` windows settle, or its row's record (deep) holds all it reads.
    by_hot, low = _answered_by(history, given, rows, floor_h, bound, bound_abs)
    answered = by_hot | (floor[rows] <= low)
    stage("precheck")
    high = window_number(given.ts)
    cold = ~answered & (low > high - slots)
    if cold.any():
        history.load(client, rows[cold], low[cold])
        cost.read_rows = int(len(np.unique(rows[cold])))
    warm = answered & ~history.loaded[rows] if len(history.loaded) else answered
    since = history.since()
    loaded = np.zeros(n, bool)
    loaded[:len(history.loaded)] = history.loaded[:n]
    held_from = np.where(loaded | (floor >= NOTHING), since, floor)  # the oldest window the ring got
    np.minimum.at(history.complete_from, rows[warm], low[warm])  # what the task holds for them is exact
    stage("cold")
    judged = partition_lag.judge_batch(reports, history, partials, client, lambda: None)
    cost.fallback = judged.fallback
    stage("judge")
    # A row whose reports all had their answer in the newest `windows` windows is kept hot; the others deep
    # (their older windows then come from the record, not the stored windows, until they catch up).
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
    cost.deep_rows = int(deep.sum())
    blobs = [_extract(history, np.flatnonzero(~deep), since, held_from, windows).encode(compression),
             _extract(history, np.flatnonzero(deep), since, held_from, deep_windows).encode(compression)]
    client.mset(dict(zip(keys, blobs, strict=True)))
    cost.blob_bytes = sum(map(len, blobs)) + sum(len(r) for r in raw if r)
    stage("write")
    return judged, cost


# --- the records -------------------------------------------------------------------------------------------

_PARTITION = ('{"v":1,"kind":"partition","ts":%d,"period_ms":%d,"source":"%s","target":"bench",'
              '"topic":"%s.t%d","upstream_topic":"t%d","partition":%d,"record_count":%d,"byte_count":%d,"records_lag":%d,'
              '"source_end_offset":%d,"upstream_offset":%d,"target_offset":%d}')
_GROUP = ('{"v":1,"kind":"group","ts":%d,"period_ms":%d,"source":"%s","target":"bench","group":"g%d",'
          '"topic":"%s.t%d","upstream_topic":"t%d","partition":%d,"group_upstream_offset":%d,'
          '"group_downstream_offset":%d,"group_lag":%d}')


@dataclass
class LiveShape:
    """A target's reports: each partition every `every_ms`, its end offset moving RATE a report; every
    `lagging`-th partition 150 s behind (its lag in seconds past the newest minute: its row is kept deep),
    the others a few records behind; with `groups`, a group a partition, every 5th of them 200 s behind."""

    every_ms: int
    lagging: int
    groups: bool = False

    def __call__(self, source: str, series: int, ts: int, seq: int) -> bytes | tuple[bytes, ...]:
        topic, partition = divmod(series, 10)
        end = seq * RATE + series % 97
        lag = RATE * 150_000 // self.every_ms if self.lagging and series % self.lagging == 0 \
            else (seq + series) % 7
        count = 1 + seq % 50
        made = (_PARTITION % (ts, self.every_ms, source, source, topic, topic, partition, count, count * 100,
                              lag, end, end - lag, end - lag)).encode()
        if not self.groups:
            return made
        group_lag = RATE * 200_000 // self.every_ms if series % 5 == 0 else (2 * seq + series) % 11
        return made, (_GROUP % (ts, self.every_ms, source, series % 3, source, topic, topic, partition,
                                end - group_lag, end - group_lag, group_lag)).encode()


# --- measuring ---------------------------------------------------------------------------------------------

class PeakRss:
    """The process's RSS, sampled every 5 ms while a stage runs: its rise over the stage's start."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def __enter__(self) -> PeakRss:
        self._start, self.peak = self._rss(), 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss() - self._start)

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss() - self._start)


def _net_bytes(client: redis.Redis) -> tuple[int, int]:
    stats = cast(dict, client.info("stats"))
    return int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


class SinkJudging:
    """The sink's judge_batch and verdict writes, timed (thread CPU) and their answers kept."""

    def __init__(self) -> None:
        self.judge_batch = partition_lag.judge_batch
        self.cpu: dict[str, float] = {}
        self.judged: Judged | None = None
        partition_lag.judge_batch = self._judge  # type: ignore[assignment]
        self._write_verdicts = RedisRollupSink._write_verdicts
        sink_self = self

        def write_verdicts(sink: RedisRollupSink, *args: Any) -> int:
            t0 = time.thread_time()
            try:
                return sink_self._write_verdicts(sink, *args)
            finally:
                sink_self.cpu["verdicts"] = time.thread_time() - t0

        RedisRollupSink._write_verdicts = write_verdicts  # type: ignore[method-assign,assignment]

    def _judge(self, *args: Any) -> Judged:
        t0 = time.thread_time()
        self.judged = self.judge_batch(*args)
        self.cpu["judge"] = time.thread_time() - t0
        return self.judged


def derived(judged: Judged) -> dict[tuple[str, str], tuple[int, str]]:
    """(hash key, field) -> (ts, JSON) of every latest value and verdict a Judged holds."""
    out = {}
    columns = judged.latest_columns
    for k, n, ts, text in zip(columns.keys, columns.names, columns.ts, columns.encoded, strict=True):
        out[(k, n)] = (int(ts), text)
    for k, n, value in judged.latest:
        out[(k, n)] = (int(value["ts"]), encode_latest(value))
    for (target, source), parts in judged.verdicts.items():
        for part in parts:
            for n, text in zip(part.fields, part.text, strict=True):
                out[(f"verdict:{target}:{source}", n)] = (0, text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--periods", type=int, default=2, help="reports of each partition a batch")
    parser.add_argument("--every-ms", type=int, default=5000, help="a partition's metrics period")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--lagging", type=int, default=50, help="every n-th partition lags past a minute")
    parser.add_argument("--hot-windows", type=int, default=HOT_WINDOWS)
    parser.add_argument("--restart-at", type=int, default=None, help="hot records dropped before batch B")
    parser.add_argument("--compression", default="lz4", choices=["none", "lz4", "zstd"],
                        help="the records' Arrow IPC buffers")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    base = int(time.time() * 1000) // 10_000 * 10_000 - args.batches * args.periods * args.every_ms - 60_000
    shape = LiveShape(args.every_ms, args.lagging, groups=args.check)
    partitions = [zlib.crc32(record_key(SOURCE, s)) % 2 for s in range(args.series)]
    offsets = [0, 0]
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    sink_judging = SinkJudging()
    sink = RedisRollupSink(server.url, "judge-cpu", target="bench")
    kafka_keys = [record_keys("bench", TOPIC, k, 2) for k in (0, 1)]
    rows = []
    differences = 0
    try:
        for b in range(args.batches):
            series = args.series if not args.check or b >= 2 else args.series - args.series // 10
            now = base + (b + 1) * args.periods * args.every_ms + 1_000
            mapper = PartitionPartials("bench", None, now + 10**7)
            tables = kafka_columns(series, partitions, b, args.periods, base, offsets, shape, args.every_ms)
            answers = [list(mapper(iter(k.to_batches(max_chunksize=10_000)))) for k in tables]
            del tables
            if args.restart_at == b or (args.check and b == 4):
                client.delete(*(key for keys in kafka_keys for key in keys))
            # A: each task judges its own reports.
            task = {"plan": 0.0}
            cost_sum: dict[str, float] = {}
            read_rows = fallback = deep_rows = 0
            r0, (in0, out0) = redis_cpu_s(client), _net_bytes(client)
            task_derived: dict[tuple[str, str], tuple[int, str]] = {}
            peaks = []
            first: dict[tuple[str, str], tuple[int, str]] = {}
            for k, answer in enumerate(answers):
                for attempt in (0, 1) if args.check and b == 3 else (0,):  # batch 3's tasks run twice
                    return_freed_memory()  # as a worker does after each task: the rise is the task's own
                    with PeakRss() as peak:
                        t0 = time.thread_time()
                        mine_parts = collect(pa.Table.from_batches(answer, schema=PARTS_SCHEMA))
                        plan = BatchPlan.of(mine_parts.partials)
                        partials = {m: plan.history_rows[m] for m in METRICS if m in plan.history_rows}
                        task["plan"] += time.thread_time() - t0
                        judged, cost = judge_task(client, kafka_keys[k],
                                                  plan.reports, partials, args.hot_windows,
                                                  compression=None if args.compression == "none"
                                                  else args.compression)
                    peaks.append(peak.peak)
                    mine = derived(judged)
                    if attempt and mine != first:
                        differences += 1
                        print(f"batch {b} task {k}: the replayed task derived other values", flush=True)
                    first = mine
                task_derived.update(mine)
                for name, s in cost.stages.items():
                    cost_sum[name] = cost_sum.get(name, 0.0) + s
                read_rows += cost.read_rows
                deep_rows += cost.deep_rows
                fallback += cost.fallback
            r1, (in1, out1) = redis_cpu_s(client), _net_bytes(client)
            task_cpu = sum(cost_sum.values())
            # B: the sink, as today, judging the whole batch; its windows merged at once.
            collected = collect(pa.Table.from_batches([a for answer in answers for a in answer],
                                                      schema=PARTS_SCHEMA))
            t0 = time.thread_time()
            sink.write(collected.partials, b, require_state=b > 0)
            sink_cpu = time.thread_time() - t0
            sink_cost = dict(sink_judging.cpu)
            if b != args.restart_at:  # the restart's batch is its own figure
                rows.append((task_cpu, sink_cost["judge"], task["plan"], r1 - r0))
            print(f"batch {b}: {collected.records} records; tasks: judging CPU {task_cpu:.2f} s ("
                  + ", ".join(f"{n} {s:.2f}" for n, s in cost_sum.items())
                  + f"; their plan {task['plan']:.2f}), {read_rows} partitions read from the stored "
                  f"windows, {deep_rows} kept deep, {fallback} reports one at a time, Redis CPU "
                  f"{r1 - r0:.2f} s, Redis bytes in {in1 - in0:,} out {out1 - out0:,}, task RSS rise peak "
                  f"{max(peaks) / 2**20:.0f} MB; "
                  f"sink: judging CPU {sink_cost['judge']:.2f} s, verdicts and summaries "
                  f"{sink_cost.get('verdicts', 0):.2f}, write in all (merge included) {sink_cpu:.2f}",
                  flush=True)
            if args.check:
                assert sink_judging.judged is not None
                theirs = derived(sink_judging.judged)
                if theirs != task_derived:
                    differences += 1
                    for field_ in [f for f in sorted(set(theirs) | set(task_derived))
                                   if theirs.get(f) != task_derived.get(f)][:5]:
                        print(f"  differs {field_}: sink {theirs.get(field_)} tasks "
                              f"{task_derived.get(field_)}")
                print(f"check batch {b}: {len(theirs)} values and verdicts by the sink, {len(task_derived)} "
                      f"by the tasks, {'equal' if theirs == task_derived else 'NOT EQUAL'}", flush=True)
    finally:
        server.stop()
    if args.check:
        print(f"check: {'every batch equal' if not differences else f'{differences} differences'}")
        sys.exit(1 if differences else 0)
    steady = rows[1:] or rows
    task_s, sink_s, plan_s, redis_s = (statistics.mean(r[i] for r in steady) for i in range(4))
    print(f"task_judging_cpu_s={task_s:.2f} task_plan_cpu_s={plan_s:.2f} task_redis_cpu_s={redis_s:.2f} "
          f"sink_judging_cpu_s={sink_s:.2f} ratio={task_s / sink_s:.2f}")


if __name__ == "__main__":
    main()
