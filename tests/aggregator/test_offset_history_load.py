"""OffsetHistory.load reads a partition's stored 10 s windows as columns (member_text.member_lasts), a
bounded number of rows at a time: on a real Redis, the ring it leaves equals, array by array, the one the
reading before left (each member through the contract's decoder, every row at once), over windows with
the offset metrics absent, last ts unknown or outside its window, integers past 2^53 and 2^31 apart,
fractions, NaN and infinities, damaged members, windows sharing a slot, rows asked twice and rows spread
over blocks, rows and members read a few at a time."""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest
import redis

from aggregator import offset_history
from aggregator.offset_history import METRICS, WINDOW_MS, OffsetHistory, _finest_key
from aggregator.window_history import decoded_members
from aggregator.window_reads import read_windows
from contract import redis_layout as layout

pytestmark = pytest.mark.integration

FIRST = 170_000_000  # a window number: Nov 2023


def decoded_read(self: OffsetHistory, client: redis.Redis, rows: np.ndarray, low: np.ndarray) -> None:
    """load's read as it was: each member decoded to WindowAggregates, samples gathered in Python."""
    keys = [_finest_key(*self.keys[int(r)]) for r in rows]
    replies, _ = read_windows(client, layout.FINEST_WINDOW.name,
                              list(zip(keys, (low * WINDOW_MS).tolist(), strict=True)))
    found: dict[str, list] = {m: [] for m in METRICS}
    for row, key, members in zip(rows.tolist(), keys, replies, strict=True):
        for windows in decoded_members(key, members):
            for metric in METRICS:
                w = windows.get(metric)
                if w is not None:
                    ts = w.start_ms if w.last_ts is None else w.last_ts
                    found[metric].append((row, w.start_ms, w.last, ts))
    for metric, samples in found.items():
        if samples:
            at, starts, last, last_ts = (np.array(c) for c in zip(*samples, strict=True))
            self.merge(metric, at.astype(np.int64), starts.astype(np.int64), last.astype(np.float64),
                       last_ts.astype(np.int64))


def last_value(rng: random.Random, base: int) -> float:
    kind = rng.random()
    if kind < 0.6:
        return float(base + rng.randint(0, 5_000))
    if kind < 0.7:
        return float(base + rng.choice([2**31, -(2**31), 2**33]))
    if kind < 0.8:
        return rng.choice([0.5, -0.0, 2.0**53 + 2, 2.0**60 + 2**10, -(2.0**55), float("nan"), float("inf")])
    return float(rng.choice([0, 1, 7]))


def stored(rng: random.Random, client: redis.Redis, keys: list[str]) -> None:
    """Each key's windows over ~40 numbers: a random few metrics each (the offset ones or not)."""
    for p, key in enumerate(keys):
        base = rng.choice([0, 10**6, 2**40, 2**53 - 100])
        fields: dict[str, str | bytes] = {}
        for number in sorted(rng.sample(range(FIRST, FIRST + 40), rng.randint(0, 30))):
            start = number * WINDOW_MS
            metrics = rng.sample(layout.WINDOW_METRICS, rng.randint(1, 6))
            windows = {m: layout.WindowAggregate(start, float(rng.randint(1, 4)), 1.0, 0.0, 9.0,
                                                 last_value(rng, base),
                                                 rng.choice([None, start + rng.randint(-500, WINDOW_MS + 500),
                                                             start + 9_999, start]))
                       for m in metrics}
            member = layout.encode_member(start, windows)
            if rng.random() < 0.03:
                member = rng.choice(["junk", member[:-3], member + ";5:1:1:1:1:1:1",
                                     member.replace(":", "::", 1)])
            fields[str(start)] = member
            fields[layout.NEWEST_FIELD] = str(start)
        if fields:
            client.hset(key, mapping=fields)
        if p % 7 == 0:  # a hash Redis no longer holds: nothing to read
            client.delete(key)


def state(history: OffsetHistory) -> list:
    out: list = [history.newest.tolist(), history.complete_from.tolist()]
    for block in history.blocks:
        out += [block.window.tolist(), block.delta.tolist(), block.base.tolist(), block.based.tolist(),
                block.last_at.tolist(), sorted((r, repr(w.tolist())) for r, w in block.wide.items())]
    return out


# Rows and members read at a time small too: a row's members then span several columnar reads.
@pytest.mark.parametrize(("slots", "block_rows", "load_rows", "read_members"),
                         [(128, 2048, 8192, 16_384), (8, 3, 4, 5), (16, 5, 1, 1), (16, 5, 10, 7)])
@pytest.mark.parametrize("seed", range(4))
def test_a_load_leaves_the_ring_the_decoded_read_left(redis_url: str, seed: int, slots: int, block_rows: int,
                                                       load_rows: int, read_members: int,
                                                       monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(seed)
    monkeypatch.setattr(offset_history, "BLOCK_ROWS", block_rows)
    client = redis.Redis.from_url(redis_url)
    target = uuid.uuid4().hex[:8]
    partitions = [(target, "east", f"east.t{p % 3}", p) for p in range(40)]
    keys = [_finest_key(*k) for k in partitions]
    stored(rng, client, keys)
    columnar, decoded = OffsetHistory(slots), OffsetHistory(slots)
    for history in (columnar, decoded):
        rows = history.row_of(partitions)
        history.merge("records_lag", rows, np.full(len(rows), (FIRST + 50) * WINDOW_MS), np.ones(len(rows)),
                      np.full(len(rows), (FIRST + 50) * WINDOW_MS))  # what a load replaces
    asked = np.array([rng.randrange(len(partitions)) for _ in range(60)], np.int64)
    low = np.array([FIRST + rng.randint(-5, 35) for _ in asked], np.int64)
    monkeypatch.setattr(offset_history, "LOAD_ROWS", load_rows)
    monkeypatch.setattr(offset_history, "READ_MEMBERS", read_members)
    columnar.load(client, asked, low)
    monkeypatch.setattr(offset_history, "LOAD_ROWS", 10**9)
    monkeypatch.setattr(OffsetHistory, "_read", decoded_read)
    decoded.load(client, asked, low)
    assert state(columnar) == state(decoded)
    held = sum(int((b.window >= 0).sum()) for b in columnar.blocks)
    assert held > len(partitions)  # windows were read
    assert sum(len(b.wide) for b in columnar.blocks)  # rows of values deltas cannot hold too
    client.delete(*keys)
    client.close()
