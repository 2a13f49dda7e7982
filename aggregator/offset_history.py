"""Partitions' recent 10 s offset windows, columnar: the history a task judges its reports over
(offset_records builds one a task from its Kafka partition's offset records).

Lag in seconds reads a partition's end offsets over the last 60 windows (latest_values), its lag verdict
the upstream offsets and lags of the lookback (partition_verdicts). At 100,000 partitions, a dict of window
objects a series held ~1.3 GB in the driver and as much again in a verdict child, and reading it was a
Python call a partition. Here each partition is a row of SLOTS window slots, a ring indexed by window
number (start / 10 s) modulo SLOTS: per slot the window number it holds (int32), the `last` of each of
METRICS (an int32 delta from the row's base for the metric, or none; a row whose values deltas cannot
hold keeps float64 lasts, _Block) and when in the window that last was seen (int16 ms after its start:
the merge keeps the last of greatest (ts, value), as redis_layout.merge_windows does). About 2.8 KB a
partition (4.4 KB with float64 lasts).

A row is exact from `complete_from` (a window number) on and over the newest SLOTS windows: those windows
are there as Redis holds them once the batch merged in commits, or there were none. A row is filled from
Redis when a read needs windows it does not hold (first met, or further back), after the merge has written
what the caller needs (offset_records.MergeWait); the batch's partials are then merged in. One query is the
only writer of its target's windows, so what the tasks merged is what Redis gets. A read reaching below
what a row can hold (a report older than its newest windows by more than the ring, a lookback longer than
it) is not `covered`: the caller derives those the way it did before, from Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.lag_seconds import DEFAULT_TABLE_CAPACITY
from aggregator.member_text import MetricLasts, member_lasts
from aggregator.window_partials import subject_numbers
from aggregator.window_reads import read_windows
from contract.redis_layout import FINEST_WINDOW, SeriesId, series_key

WINDOW_MS = FINEST_WINDOW.size_ms
METRICS = ("source_end_offset", "upstream_offset", "records_lag")
METRIC = {m: i for i, m in enumerate(METRICS)}
# 21 minutes of windows: a lag table's 60 and a 30 s metrics period's lookback (2 x 10 intervals), with room
# for reports a few minutes behind their partition's newest window.
SLOTS = 128
BLOCK_ROWS = 2048  # ~6 MB a block at 128 slots
# Rows read from Redis at a time by a load: at 60 windows a row, ~140 MB of members (their bytes from Redis
# and their Arrow copy) rather than all of a restart's (~1.3 GB at 100,000 partitions).
LOAD_ROWS = 8192
# Members read as columns at a time (~6 MB of a partition's members): numpy and Arrow's passes over their
# bytes stay in the CPU's caches (0.85 CPU s for 600k members 12k at a time, 1.6 s 490k at a time).
READ_MEMBERS = 16_384
# Windows a load asks each key for with its newest window, in one command (window_reads.read_members): lag in
# seconds' table (DEFAULT_TABLE_CAPACITY 10 s windows back from a report) and two minutes for reports spread
# over a batch or behind their partition's newest window. A read reaching further goes on with a second.
READ_REACH = DEFAULT_TABLE_CAPACITY + 12
NOTHING = np.iinfo(np.int64).max  # complete_from of a row nothing was read for
PartitionKey = tuple[str, str, str, int]  # target, source, topic, partition
KEY_COLUMNS = ["target", "source", "topic", "partition"]
LOG = logging.getLogger(__name__)


def window_number(ts_ms: np.ndarray) -> np.ndarray:
    return np.floor_divide(ts_ms, WINDOW_MS)


class OffsetHistory:
    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self.rows: dict[PartitionKey, int] = {}
        self.keys: list[PartitionKey] = []
        self._allocate()

    def _allocate(self) -> None:
        # The ring's rows in blocks of BLOCK_ROWS: a new partition takes a row of the last block or a new
        # block, so the ring grows by a block at a time and never copies itself (one array doubled as it
        # grew, its old copy alive while it did: ~1 GB at 100,000 partitions).
        self.blocks: list[_Block] = []
        self.complete_from = np.full(0, NOTHING, np.int64)
        self.newest = np.full(0, -1, np.int64)
        # A bound on the windows a row holds: none older than this (NOTHING: none held). Gathers of a row's
        # older windows stop there: a row kept from a task's hot record holds ~12 of a lag table's 61.
        self.lowest = np.full(0, NOTHING, np.int64)

    def clear(self) -> None:
        """Forgets every row (a batch that failed, Redis state lost, its query ended): the next reads fill
        them again."""
        self.rows.clear()
        self.keys.clear()
        self._allocate()

    @property
    def nbytes(self) -> int:
        return (sum(b.nbytes for b in self.blocks) + self.complete_from.nbytes + self.newest.nbytes
                + self.lowest.nbytes)

    def row_of(self, keys: Iterable[PartitionKey]) -> np.ndarray:
        """Each partition's row; a partition met for the first time gets an empty one."""
        rows = self.rows
        out = []
        for key in keys:
            row = rows.get(key)
            if row is None:
                row = rows[key] = len(self.keys)
                self.keys.append(key)
            out.append(row)
        self._grow(len(self.keys))
        return np.array(out, np.int64)

    def _grow(self, needed: int) -> None:
        while len(self.blocks) * BLOCK_ROWS < needed:
            self.blocks.append(_Block(self.slots))
        have = len(self.complete_from)
        if needed > have:  # 24 bytes a row: these three are copied as they grow
            more = needed - have
            self.complete_from = np.concatenate([self.complete_from, np.full(more, NOTHING, np.int64)])
            self.newest = np.concatenate([self.newest, np.full(more, -1, np.int64)])
            self.lowest = np.concatenate([self.lowest, np.full(more, NOTHING, np.int64)])

    def _by_block(self, rows: np.ndarray) -> Iterator[tuple[_Block, np.ndarray | slice, np.ndarray]]:
        """(block, positions in `rows`, rows within the block) of each block `rows` reach."""
        block = rows // BLOCK_ROWS
        if len(block) and block[0] == block[-1] and (block == block[0]).all():
            yield self.blocks[int(block[0])], slice(None), rows - int(block[0]) * BLOCK_ROWS
            return
        order = np.argsort(block, kind="stable")
        cuts = np.flatnonzero(np.diff(block[order])) + 1
        for at in np.split(order, cuts):
            b = int(block[at[0]])
            yield self.blocks[b], at, rows[at] - b * BLOCK_ROWS

    def floor(self, rows: np.ndarray) -> np.ndarray:
        """The first window number each row holds exactly."""
        return np.maximum(self.complete_from[rows], self.newest[rows] - self.slots + 1)

    def covered(self, rows: np.ndarray, low: np.ndarray) -> np.ndarray:
        """Whether each row holds every window from number `low` on."""
        return self.floor(rows) <= low

    def load(self, client: redis.Redis, rows: np.ndarray, low: np.ndarray) -> None:
        """Fills `rows` from Redis with their windows from number `low` on (a row each, once): what the
        sink has committed and merged, before the batch's partials are merged in."""
        unique, inverse = np.unique(rows, return_inverse=True)
        lowest = np.full(len(unique), NOTHING, np.int64)
        np.minimum.at(lowest, inverse.reshape(-1), low)
        rows, low = unique, lowest
        for block, _, local in self._by_block(rows):
            block.reset(local)
        self.newest[rows] = -1
        self.lowest[rows] = NOTHING
        self.complete_from[rows] = low
        for at in range(0, len(rows), LOAD_ROWS):
            self._read(client, rows[at:at + LOAD_ROWS], low[at:at + LOAD_ROWS])

    def _read(self, client: redis.Redis, rows: np.ndarray, low: np.ndarray) -> None:
        """load's read of some rows: their members from Redis, read as columns (member_text.member_lasts)
        and merged a metric at a time. A row is read and merged in one go, so it ends as a single read of
        every row would leave it."""
        keys = [_finest_key(*self.keys[r]) for r in rows.tolist()]
        replies, _ = read_windows(client, FINEST_WINDOW.name,
                                  list(zip(keys, (low * WINDOW_MS).tolist(), strict=True)), READ_REACH)
        owner = np.repeat(np.arange(len(rows)), [len(r) for r in replies])
        members = list(chain.from_iterable(replies))
        found: dict[str, list[MetricLasts]] = {m: [] for m in METRICS}
        for at in range(0, len(members), READ_MEMBERS):
            read, refused = member_lasts(members[at:at + READ_MEMBERS], METRICS)
            for member, why in refused:
                # As decoded_members: the merge replaces it when a batch touches its window.
                LOG.warning("skipping %s in %s", why, keys[owner[at + member]])
            for metric in METRICS:
                read[metric].member += at
                found[metric].append(read[metric])
        for metric, parts in found.items():
            if parts:
                which, start, last, last_ts = (np.concatenate([getattr(w, c) for w in parts])
                                               for c in ("member", "start", "last", "last_ts"))
                self.merge(metric, rows[owner[which]], start, last, last_ts)

    def merge(self, metric: str, rows: np.ndarray, start_ms: np.ndarray, last: np.ndarray,
              last_ts: np.ndarray) -> None:
        """Merges windows of `metric` (their start, last and its ts) into `rows`: a window newer than its
        slot's replaces it, one of the slot's window keeps the last of greatest (ts, value), an older one
        is below what the row holds and is left out."""
        if not len(rows):
            return
        m = METRIC[metric]
        number = window_number(start_ms)
        at = np.clip(last_ts - start_ms, 0, WINDOW_MS - 1).astype(np.int16)
        slot = number % self.slots
        # One window a (row, slot): the newest number, and of it the greatest (ts, value).
        order = np.lexsort((last, at, number, slot, rows))
        rows, slot, number, at, last = rows[order], slot[order], number[order], at[order], last[order]
        final = np.ones(len(rows), bool)
        final[:-1] = (rows[1:] != rows[:-1]) | (slot[1:] != slot[:-1])
        rows, slot, number, at, last = rows[final], slot[final], number[final], at[final], last[final]
        np.minimum.at(self.lowest, rows, number)  # a window older than its slot's is counted: still a bound
        for block, at_rows, local in self._by_block(rows):
            newer = block.merge(m, local, slot[at_rows], number[at_rows], at[at_rows], last[at_rows])
            np.maximum.at(self.newest, rows[at_rows][newer], number[at_rows][newer])

    def merge_rows(self, partials: Mapping[str, pa.Table]) -> None:
        """A batch's partials (batch_plan.HISTORY_METRICS rows, a table a metric) into the rows of partitions
        already kept; others are read from Redis when a report needs them. Each partition's row is looked up
        once for every metric and window of it (a dict lookup a window and metric cost ~2 us a report at
        100,000 partitions)."""
        tables = [(m, partials[m]) for m in METRICS if m in partials and partials[m].num_rows]
        if not tables or not self.rows:
            return
        keys = [t.select(KEY_COLUMNS) for _, t in tables]
        subjects, number = subject_numbers(pa.concat_tables([k.cast(keys[0].schema) for k in keys]),
                                           KEY_COLUMNS)
        known = self.rows
        row_of = np.fromiter((known.get(k, -1) for k in zip(*(subjects[c].to_pylist() for c in KEY_COLUMNS),
                                                              strict=True)), np.int64, subjects.num_rows)
        rows = row_of[number]
        at = 0
        for metric, table in tables:
            mine_rows, at = rows[at:at + table.num_rows], at + table.num_rows
            mine = mine_rows >= 0
            if mine.any():
                last = pc.cast(table[f"{metric}__last"], pa.float64()).to_numpy(zero_copy_only=False)
                self.merge(metric, mine_rows[mine], table["window_start"].to_numpy()[mine], last[mine],
                           table["last_ts"].to_numpy()[mine])

    def gather(self, metric: str, rows: np.ndarray, high: np.ndarray, width: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's windows numbered high - width + 1 .. high, oldest first: (numbers, lasts, present)."""
        number = high[:, None] - (width - 1) + np.arange(width)[None, :]
        slot = number % self.slots
        held = np.empty(number.shape, np.int32)
        last = np.empty(number.shape)
        for block, at, local in self._by_block(rows):
            # Flat cells taken from the raveled arrays: a take over one index, where indexing by (rows,
            # slots) broadcast the two index arrays for each array read.
            cell = local[:, None] * self.slots + slot[at]
            held[at] = block.window.reshape(-1).take(cell)
            last[at] = block.read_cells(cell, local[:, None], METRIC[metric])
        present = (held == number) & ~np.isnan(last)
        return number, last, present


def _finest_key(target: str, source: str, topic: str, partition: int) -> str:
    """A partition's finest windows' key, named anew: a row is loaded once in a process (its first read), so
    window_history's caches of series and key names (lru, ~0.5 KB an entry) kept every partition's name
    for nothing: ~110 MB at 100,000 partitions (bench/RESULTS.md, s29)."""
    return series_key(SeriesId(target, source, topic, partition, METRICS[0]), FINEST_WINDOW.name)


# A slot's `last` is kept as an int32 delta from its row's base (one a metric): offsets and lags are
# integers, and a partition's within its ring's 21 minutes are far less than 2^31 apart.
NO_DELTA = np.iinfo(np.int32).min  # a slot without a value of the metric (offset_records keeps the same form)
_SPAN = np.iinfo(np.int32).max  # the most a delta holds either way
_EXACT = 2**53  # past it a float64 is not every integer


class _Block:
    """BLOCK_ROWS rows of the ring: per row and slot the window number it holds (-1: none), the last of
    each metric and its ms within the window. A last is an int32 delta from the row's base for the metric
    (NO_DELTA: none), 12 bytes a slot where float64 lasts were 24 (~150 MB less at 100,000 partitions). A row
    whose values a delta cannot hold (not an integer, past 2^53, -0.0, or further apart than 2^31 even
    with the base moved to their middle) keeps its lasts as float64 in `wide` instead: the arrays read
    exactly what was merged either way."""

    def __init__(self, slots: int) -> None:
        self.window = np.full((BLOCK_ROWS, slots), -1, np.int32)
        self.delta = np.full((BLOCK_ROWS, slots, len(METRICS)), NO_DELTA, np.int32)
        self.base = np.zeros((BLOCK_ROWS, len(METRICS)), np.int64)
        self.based = np.zeros((BLOCK_ROWS, len(METRICS)), bool)  # a base chosen since the row's reset
        self.last_at = np.zeros((BLOCK_ROWS, slots, len(METRICS)), np.int16)
        self.wide: dict[int, np.ndarray] = {}  # row -> (slots, METRICS) float64 lasts, NaN: none

    @property
    def nbytes(self) -> int:
        return (self.window.nbytes + self.delta.nbytes + self.base.nbytes + self.based.nbytes
                + self.last_at.nbytes + sum(w.nbytes for w in self.wide.values()))

    def reset(self, rows: np.ndarray) -> None:
        self.window[rows] = -1
        self.delta[rows] = NO_DELTA
        self.based[rows] = False
        self.last_at[rows] = 0
        for row in np.asarray(rows).reshape(-1).tolist():
            self.wide.pop(row, None)

    def read(self, rows: np.ndarray, slot: np.ndarray, m: int) -> np.ndarray:
        """The lasts of metric `m` at (rows, slot) (broadcast together), NaN where none."""
        return self.read_cells(rows * self.window.shape[1] + slot, rows, m)

    def read_cells(self, cell: np.ndarray, rows: np.ndarray, m: int) -> np.ndarray:
        """read's lasts at the cells `cell` (row * slots + slot) of `rows` (broadcast with `cell`)."""
        delta = self.delta.reshape(-1).take(cell * len(METRICS) + m)
        out = np.where(delta == NO_DELTA, np.nan, (self.base[rows, m] + delta).astype(np.float64))
        if self.wide:
            slot = cell % self.window.shape[1]
            every_row = np.broadcast_to(rows, out.shape)
            at = np.nonzero(np.isin(every_row, np.fromiter(self.wide, np.int64, len(self.wide))))
            if len(at[0]):
                wide, every_slot = self.wide, np.broadcast_to(slot, out.shape)
                out[at] = [wide[r][s, m] for r, s in zip(every_row[at].tolist(), every_slot[at].tolist(),
                                                            strict=True)]
        return out

    def merge(self, m: int, rows: np.ndarray, slot: np.ndarray, number: np.ndarray, at: np.ndarray,
              last: np.ndarray) -> np.ndarray:
        """OffsetHistory.merge within the block, one window a (row, slot); which windows took a slot from
        an older one."""
        held = self.window[rows, slot].astype(np.int64)
        newer = number > held
        same = number == held
        # A slot taken by a newer window loses every metric of the old one.
        self.window[rows[newer], slot[newer]] = number[newer]
        self.delta[rows[newer], slot[newer], :] = NO_DELTA
        self.last_at[rows[newer], slot[newer], :] = 0
        for row, s in self._wide_at(rows[newer], slot[newer]):
            self.wide[row][s, :] = np.nan
        old_last, old_at = self.read(rows, slot, m), self.last_at[rows, slot, m]
        wins = newer | (same & (np.isnan(old_last) | (at > old_at) | ((at == old_at) & (last > old_last))))
        self.last_at[rows[wins], slot[wins], m] = at[wins]
        self._write(m, rows[wins], slot[wins], last[wins])
        return newer

    def _wide_at(self, rows: np.ndarray, slot: np.ndarray) -> list[tuple[int, int]]:
        if not self.wide:
            return []
        return [(r, s) for r, s in zip(rows.tolist(), slot.tolist(), strict=True) if r in self.wide]

    def _write(self, m: int, rows: np.ndarray, slot: np.ndarray, last: np.ndarray) -> None:
        """Sets the lasts of metric `m` at (rows, slot): as deltas where the row's values allow it."""
        none = np.isnan(last)
        negative_zero = (last == 0) & np.signbit(last)
        whole = none | ((np.abs(last) < _EXACT) & (np.trunc(last) == last) & ~negative_zero)
        wide = np.fromiter((r in self.wide for r in rows.tolist()), bool, len(rows)) if self.wide \
            else np.zeros(len(rows), bool)
        self._to_wide(np.unique(rows[~whole & ~wide]))
        deltas = np.flatnonzero(whole & ~wide & ~none)
        if len(deltas):
            self._fit(m, rows[deltas], last[deltas].astype(np.int64))
        wide = np.fromiter((r in self.wide for r in rows.tolist()), bool, len(rows)) if self.wide \
            else np.zeros(len(rows), bool)
        value = np.zeros(len(rows), np.int64)
        value[~none] = np.where(np.isfinite(last[~none]), last[~none], 0).astype(np.int64)
        narrow = ~wide
        delta = np.where(none, NO_DELTA, value - self.base[rows, m])
        self.delta[rows[narrow], slot[narrow], m] = delta[narrow].astype(np.int32)
        for k in np.flatnonzero(wide).tolist():
            self.wide[int(rows[k])][int(slot[k]), m] = last[k]

    def _fit(self, m: int, rows: np.ndarray, value: np.ndarray) -> None:
        """Gives each row a base for metric `m` its `value`s (integers below 2^53) are deltas from: the
        first value of a row without one, its values' middle when one falls outside (the row's other
        slots moved to it), or the row goes wide when they are too far apart."""
        unbased = ~self.based[rows, m]
        if unbased.any():
            first, at = np.unique(rows[unbased], return_index=True)
            self.base[first, m] = value[unbased][at]
            self.based[first, m] = True
        outside = np.abs(value - self.base[rows, m]) >= _SPAN
        if not outside.any():
            return
        moved = np.unique(rows[outside])
        held = self.delta[moved, :, m]
        present = held != NO_DELTA
        values = self.base[moved, m][:, None] + held.astype(np.int64)
        low = np.where(present, values, _EXACT).min(axis=1)
        high = np.where(present, values, -_EXACT).max(axis=1)
        mine = np.isin(rows, moved)  # every value of those rows, not only those outside
        which = np.searchsorted(moved, rows[mine])
        np.minimum.at(low, which, value[mine])
        np.maximum.at(high, which, value[mine])
        middle = low + (high - low) // 2
        fits = (high - middle < _SPAN) & (middle - low < _SPAN)
        kept = moved[fits]
        self.base[kept, m] = middle[fits]
        self.delta[kept, :, m] = np.where(present[fits], values[fits] - middle[fits][:, None], NO_DELTA)
        self._to_wide(moved[~fits])

    def _to_wide(self, rows: np.ndarray) -> None:
        """Rows whose lasts go to float64 (every metric), out of the deltas."""
        for row in rows.tolist():
            if row in self.wide:
                continue
            delta = self.delta[row]
            self.wide[row] = np.where(delta == NO_DELTA, np.nan,
                                      (self.base[row][None, :] + delta).astype(np.float64))
            self.delta[row] = NO_DELTA


def partition_keys(subjects: Sequence[tuple[str, ...]]) -> list[PartitionKey]:
    """(target, source, topic, partition) of subjects (kind, target, source, topic, partition, group)."""
    return [(s[1], s[2], s[3], int(s[4])) for s in subjects]
