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

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.window_history import decoded_members, finest_key, series_id
from aggregator.window_reads import read_windows
from contract.redis_layout import FINEST_WINDOW

WINDOW_MS = FINEST_WINDOW.size_ms
METRICS = ("source_end_offset", "upstream_offset", "records_lag")
METRIC = {m: i for i, m in enumerate(METRICS)}
# 21 minutes of windows: a lag table's 60 and a 30 s metrics period's lookback (2 x 10 intervals), with room
# for reports a few minutes behind their partition's newest window.
SLOTS = 128
NOTHING = np.iinfo(np.int64).max  # complete_from of a row nothing was read for
PartitionKey = tuple[str, str, str, int]  # target, source, topic, partition


def window_number(ts_ms: np.ndarray) -> np.ndarray:
    return np.floor_divide(ts_ms, WINDOW_MS)


class OffsetHistory:
    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self.rows: dict[PartitionKey, int] = {}
        self.keys: list[PartitionKey] = []
        self._allocate(0)

    def _allocate(self, capacity: int) -> None:
        self.window = np.full((capacity, self.slots), -1, np.int32)
        self.last = np.full((capacity, self.slots, len(METRICS)), np.nan)
        self.last_at = np.zeros((capacity, self.slots, len(METRICS)), np.int16)
        self.complete_from = np.full(capacity, NOTHING, np.int64)
        self.newest = np.full(capacity, -1, np.int64)

    def clear(self) -> None:
        """Forgets every row (a batch that failed, Redis state lost): the next reads fill them again."""
        self.rows.clear()
        self.keys.clear()
        self._allocate(0)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.window, self.last, self.last_at, self.complete_from, self.newest))

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
        have = len(self.complete_from)
        if needed <= have:
            return
        old = (self.window, self.last, self.last_at, self.complete_from, self.newest)
        self._allocate(max(needed, 2 * have, 1024))
        for new, kept in zip((self.window, self.last, self.last_at, self.complete_from, self.newest), old,
                             strict=True):
            new[:have] = kept

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
        self.window[rows] = -1
        self.last[rows] = np.nan
        self.last_at[rows] = 0
        self.newest[rows] = -1
        self.complete_from[rows] = low
        keys = [finest_key(series_id(*self.keys[r], METRICS[0])) for r in rows]
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
        for index, windows in found.items():
            if windows:
                row, start, last, last_ts = (np.array(c) for c in zip(*windows, strict=True))
                self.merge(METRICS[index], row.astype(np.int64), start.astype(np.int64),
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
        np.maximum.at(self.newest, rows[newer], number[newer])

    def merge_rows(self, metric: str, partials: pa.Table) -> None:
        """A batch's partials of `metric` (batch_plan.HISTORY_METRICS rows) into the rows of partitions
        already kept; others are read from Redis when a report needs them."""
        if partials.num_rows == 0 or not self.rows:
            return
        keys = zip(*(partials[c].to_pylist() for c in ("target", "source", "topic", "partition")),
                   strict=True)
        known = self.rows
        rows = np.array([known.get(k, -1) for k in keys], np.int64)
        mine = rows >= 0
        if not mine.any():
            return
        self.merge(metric, rows[mine], partials["window_start"].to_numpy()[mine],
                   pc.cast(partials[f"{metric}__last"], pa.float64()).to_numpy(zero_copy_only=False)[mine],
                   partials["last_ts"].to_numpy()[mine])

    def gather(self, metric: str, rows: np.ndarray, high: np.ndarray, width: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's windows numbered high - width + 1 .. high, oldest first: (numbers, lasts, present)."""
        number = high[:, None] - (width - 1) + np.arange(width)[None, :]
        slot = number % self.slots
        present = self.window[rows[:, None], slot] == number
        last = self.last[rows[:, None], slot, METRIC[metric]]
        present &= ~np.isnan(last)
        return number, last, present


def partition_keys(subjects: Sequence[tuple[str, ...]]) -> list[PartitionKey]:
    """(target, source, topic, partition) of subjects (kind, target, source, topic, partition, group)."""
    return [(s[1], s[2], s[3], int(s[4])) for s in subjects]
