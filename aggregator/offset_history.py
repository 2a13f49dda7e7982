"""Every reported partition's recent 10 s offset windows, columnar: the one copy the sink keeps of them.

Lag in seconds reads a partition's end offsets over the last 60 windows (latest_values), its lag verdict
the upstream offsets and lags of the lookback (partition_verdicts). At 100,000 partitions, a dict of window
objects a series held ~1.3 GB in the driver and as much again in a verdict child, and reading it was a
Python call a partition. Here each partition is a row of SLOTS window slots, a ring indexed by window
number (start / 10 s) modulo SLOTS: per slot the window number it holds (int32), the `last` of each of
METRICS (float64, NaN where the window had none) and when in the window that last was seen (int16 ms
after its start: the merge keeps the last of greatest (ts, value), as redis_layout.merge_windows does).
About 4.4 KB a partition.

A row is exact from `complete_from` (a window number) on and over the newest SLOTS windows: those windows
are there as Redis holds them once the batch merged in commits, or there were none. A row is filled from
Redis when a read needs windows it does not hold (first read in this process, or further back), after the
sink has every staged batch merged; the batch's partials are then merged in. One query is the only writer
of its target's windows, so what the sink merged is what Redis gets. A read reaching below what a row can
hold (a report older than its newest windows by more than the ring, a lookback longer than it) is not
`covered`: the caller derives those the way it did before, from Redis.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.window_history import decoded_members, finest_key, series_id
from aggregator.window_partials import subject_numbers
from aggregator.window_reads import read_windows
from contract.redis_layout import FINEST_WINDOW

WINDOW_MS = FINEST_WINDOW.size_ms
METRICS = ("source_end_offset", "upstream_offset", "records_lag")
METRIC = {m: i for i, m in enumerate(METRICS)}
# 21 minutes of windows: a lag table's 60 and a 30 s metrics period's lookback (2 x 10 intervals), with room
# for reports a few minutes behind their partition's newest window.
SLOTS = 128
BLOCK_ROWS = 2048  # ~9 MB a block at 128 slots
NOTHING = np.iinfo(np.int64).max  # complete_from of a row nothing was read for
PartitionKey = tuple[str, str, str, int]  # target, source, topic, partition
KEY_COLUMNS = ["target", "source", "topic", "partition"]


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

    def clear(self) -> None:
        """Forgets every row (a batch that failed, Redis state lost, its query ended): the next reads fill
        them again."""
        self.rows.clear()
        self.keys.clear()
        self._allocate()

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks) + self.complete_from.nbytes + self.newest.nbytes

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
        if needed > have:  # 16 bytes a row: these two are copied as they grow
            more = needed - have
            self.complete_from = np.concatenate([self.complete_from, np.full(more, NOTHING, np.int64)])
            self.newest = np.concatenate([self.newest, np.full(more, -1, np.int64)])

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
        self.complete_from[rows] = low
        keys = [finest_key(series_id(*self.keys[int(r)], METRICS[0])) for r in rows]
        replies, _ = read_windows(client, FINEST_WINDOW.name,
                                  list(zip(keys, (low * WINDOW_MS).tolist(), strict=True)))
        found: dict[int, list] = {m: [] for m in range(len(METRICS))}
        for row, key, members in zip(rows.tolist(), keys, replies, strict=True):
            for windows in decoded_members(key, members):
                for metric, index in METRIC.items():
                    w = windows.get(metric)
                    if w is not None:
                        found[index].append((row, w.start_ms, w.last, w.start_ms if w.last_ts is None
                                             else w.last_ts))
        for index, samples in found.items():
            if samples:
                at, starts, last, last_ts = (np.array(c) for c in zip(*samples, strict=True))
                self.merge(METRICS[index], at.astype(np.int64), starts.astype(np.int64),
                           last.astype(np.float64), last_ts.astype(np.int64))

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
            held[at] = block.window[local[:, None], slot[at]]
            last[at] = block.last[local[:, None], slot[at], METRIC[metric]]
        present = (held == number) & ~np.isnan(last)
        return number, last, present


class _Block:
    """BLOCK_ROWS rows of the ring: per row and slot the window number it holds (-1: none), the last of
    each metric (NaN: none) and its ms within the window."""

    def __init__(self, slots: int) -> None:
        self.window = np.full((BLOCK_ROWS, slots), -1, np.int32)
        self.last = np.full((BLOCK_ROWS, slots, len(METRICS)), np.nan)
        self.last_at = np.zeros((BLOCK_ROWS, slots, len(METRICS)), np.int16)

    @property
    def nbytes(self) -> int:
        return self.window.nbytes + self.last.nbytes + self.last_at.nbytes

    def reset(self, rows: np.ndarray) -> None:
        self.window[rows] = -1
        self.last[rows] = np.nan
        self.last_at[rows] = 0

    def merge(self, m: int, rows: np.ndarray, slot: np.ndarray, number: np.ndarray, at: np.ndarray,
              last: np.ndarray) -> np.ndarray:
        """OffsetHistory.merge within the block, one window a (row, slot); which windows took a slot from
        an older one."""
        held = self.window[rows, slot].astype(np.int64)
        newer = number > held
        same = number == held
        # A slot taken by a newer window loses every metric of the old one.
        self.window[rows[newer], slot[newer]] = number[newer]
        self.last[rows[newer], slot[newer], :] = np.nan
        self.last_at[rows[newer], slot[newer], :] = 0
        old_last, old_at = self.last[rows, slot, m], self.last_at[rows, slot, m]
        wins = newer | (same & (np.isnan(old_last) | (at > old_at) | ((at == old_at) & (last > old_last))))
        self.last[rows[wins], slot[wins], m] = last[wins]
        self.last_at[rows[wins], slot[wins], m] = at[wins]
        return newer

def partition_keys(subjects: Sequence[tuple[str, ...]]) -> list[PartitionKey]:
    """(target, source, topic, partition) of subjects (kind, target, source, topic, partition, group)."""
    return [(s[1], s[2], s[3], int(s[4])) for s in subjects]
