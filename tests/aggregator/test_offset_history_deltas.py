"""The offset history keeps each slot's `last` as an int32 delta from its row's base (offset_history._Block),
and a row whose values deltas cannot hold as float64: either way a gather reads exactly what was merged.
Checked against a float64 ring (the layout before) over random merges: offsets far from zero, a row's
values moving more than 2^31 (the base moves, or the row goes wide when they are too far apart), values
past 2^53, non-integers, infinities, -0.0 and NaN, windows older than the ring, resets, rows over blocks."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aggregator import offset_history
from aggregator.offset_history import METRIC, METRICS, WINDOW_MS, OffsetHistory


class FloatRing:
    """The ring as it was: float64 lasts, one window a (row, slot), the last of greatest (ts, value)."""

    def __init__(self, rows: int, slots: int) -> None:
        self.slots = slots
        self.window = np.full((rows, slots), -1, np.int64)
        self.last = np.full((rows, slots, len(METRICS)), np.nan)
        self.at = np.zeros((rows, slots, len(METRICS)), np.int64)

    def merge(self, m: int, rows: np.ndarray, start: np.ndarray, last: np.ndarray,
              last_ts: np.ndarray) -> None:
        number = start // WINDOW_MS
        at = np.clip(last_ts - start, 0, WINDOW_MS - 1)
        slot = number % self.slots
        # Of a batch's windows of one (row, slot): the last in (number, ms, value) order (NaN sorts last).
        order = np.lexsort((last, at, number, slot, rows))
        rows, slot, number, at, last = rows[order], slot[order], number[order], at[order], last[order]
        final = np.ones(len(rows), bool)
        final[:-1] = (rows[1:] != rows[:-1]) | (slot[1:] != slot[:-1])
        for r, s, n, a, v in zip(*(c[final].tolist() for c in (rows, slot, number, at, last)), strict=True):
            held = self.window[r, s]
            if n > held:
                self.window[r, s], self.last[r, s, :], self.at[r, s, :] = n, np.nan, 0
            old, old_at = self.last[r, s, m], self.at[r, s, m]
            if n > held or (n == held and (math.isnan(old) or a > old_at or (a == old_at and v > old))):
                self.last[r, s, m], self.at[r, s, m] = v, a


def value(rng: random.Random, base: list[int], row: int, step: int) -> float:
    kind = rng.random()
    if kind < 0.6:
        return float(base[row] + rng.randint(0, 1000) + step * rng.choice([1, 100, 10**6]))
    if kind < 0.7:
        return float(base[row] + rng.choice([2**31, -(2**31), 2**32, 2**31 - 1, -(2**31 - 1)]))
    if kind < 0.75:
        return rng.choice([math.inf, -math.inf, math.nan, -0.0, 0.5, 2.0**60, -(2.0**53)])
    if kind < 0.8:  # the row's offsets leap
        base[row] += rng.choice([2**33, -(2**33)])
        return float(base[row])
    return float(base[row] + rng.randint(-3, 3))


@pytest.mark.parametrize("seed", range(12))
def test_a_gather_reads_what_a_float64_ring_holds(seed: int, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(seed)
    slots, n = rng.choice([8, 16, 128]), rng.randint(1, 7)
    monkeypatch.setattr(offset_history, "BLOCK_ROWS", rng.choice([2, 3, 2048]))
    history, ring = OffsetHistory(slots), FloatRing(n, slots)
    rows = history.row_of([("west", "east", "east.t", p) for p in range(n)])
    base = [rng.choice([0, 10**6, 2**40, 2**53 - 50]) for _ in range(n)]
    first = 170_000_000
    wide = 0
    for step in range(60):
        k = rng.randint(1, 12)
        at = np.array([rng.randrange(n) for _ in range(k)], np.int64)
        number = np.array([first + step + rng.randint(-3 * slots, 2) for _ in range(k)], np.int64)
        last = np.array([value(rng, base, int(r), step) for r in at])
        start = number * WINDOW_MS
        ts = start + np.array([rng.randint(0, WINDOW_MS - 1) for _ in range(k)])
        metric = rng.choice(METRICS)
        history.merge(metric, rows[at], start, last, ts)
        ring.merge(METRIC[metric], at, start, last, ts)
        if rng.random() < 0.05:  # a row read again from Redis starts empty
            again = np.array([rng.randrange(n)], np.int64)
            for block, _, local in history._by_block(rows[again]):
                block.reset(local)
            ring.window[again], ring.last[again], ring.at[again] = -1, np.nan, 0
        high = np.full(n, first + step + 2, np.int64)
        width = min(slots, 30)
        number_read = high[:, None] - (width - 1) + np.arange(width)[None, :]
        slot = number_read % slots
        for m in METRICS:
            _, got, present = history.gather(m, rows, high, width)
            expected = ring.last[np.arange(n)[:, None], slot, METRIC[m]]
            held = ring.window[np.arange(n)[:, None], slot] == number_read
            assert present.tolist() == (held & ~np.isnan(expected)).tolist()
            assert [str(x) for x in got[present]] == [str(x) for x in expected[present]]
        wide = max(wide, sum(len(b.wide) for b in history.blocks))
        # No row holds a window older than its `lowest` (where gathers of older windows stop).
        for r in rows.tolist():
            held = history.blocks[r // offset_history.BLOCK_ROWS].window[r % offset_history.BLOCK_ROWS]
            assert (held[held >= 0] >= history.lowest[r]).all()
    assert history.nbytes > 0


def test_a_ring_of_offsets_far_from_zero_is_deltas_not_float64():
    history = OffsetHistory(128)
    rows = history.row_of([("west", "east", "east.t", p) for p in range(3)])
    start = np.arange(128, dtype=np.int64) * WINDOW_MS + 170_000_000 * WINDOW_MS
    for r in rows.tolist():
        for m in METRICS:
            history.merge(m, np.full(128, r), start, 2.0**50 + np.arange(128) * 5e6, start)
    block = history.blocks[0]
    assert not block.wide
    _, last, present = history.gather("upstream_offset", rows, np.full(3, 170_000_127), 128)
    assert present.all() and (last == 2.0**50 + np.arange(128) * 5e6).all()
    assert block.delta.dtype == np.int32
