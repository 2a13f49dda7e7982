"""Lag tables reused across batches (latest_values.end_offset_table) and history views sliced from the
windows kept in order, the batch merged in first (window_history), leave Redis, the kept history and the
verdicts as the code before them did: a sink running the old view, commit and table building (the
oracle) and one running the new write the same over live-like batches (a few periods each, so that most
tables are reused) and backlog ones, with late and out-of-order reports, rewound offsets, missing periods,
groups and replications."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

import pytest
from streaming_input import snapshot
from test_history_pruning import kafka_batch, twin_sinks, write_through

from aggregator import latest_values, redis_sink
from aggregator.lag_seconds import OffsetPoint, OffsetTimeTable
from aggregator.window_history import WindowHistory
from contract.records.raw_metrics import GroupMetrics, PartitionMetrics, ReplicationMetrics
from contract.redis_layout import FINEST_WINDOW, SeriesId, WindowAggregate, merge_windows, window_start

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


class OldHistory(WindowHistory):
    """The history's view and commit before views were slices of the windows kept in order, and before a
    batch's partials were merged in ahead of its views: merge() only holds them for the views to merge,
    expire() commits them."""

    def __init__(self, keep_ms: int) -> None:
        super().__init__(keep_ms)
        self.pending: dict[SeriesId, list[WindowAggregate]] = {}

    def merge(self, key: SeriesId, partials: Iterable[WindowAggregate]) -> None:
        self.pending.setdefault(key, []).extend(partials)

    def expire(self, key: SeriesId) -> None:
        self.commit(key, self.pending.pop(key, []))

    def clear(self) -> None:
        super().clear()
        self.pending.clear()

    def view(self, key: SeriesId, low_ms: int, high_ms: int,
             newest: int | None = None) -> list[WindowAggregate]:
        partials = self.pending.get(key, ())
        known = self.series[key]
        windows, starts = known.windows, known.starts
        first, end = bisect_left(starts, low_ms), bisect_right(starts, high_ms)
        if newest is not None:
            first = max(first, end - newest)
        merged: dict[int, WindowAggregate] = {}
        for p in partials:
            start = p.start_ms
            if low_ms <= start <= high_ms:
                base = merged[start] if start in merged else windows.get(start)
                merged[start] = p if base is None else merge_windows(base, p)
        if not merged:
            return [windows[start] for start in starts[first:end]]
        union = sorted(merged.keys() | starts[first:end])
        if newest is not None:
            union = union[-newest:] if newest else []
        return [merged[start] if start in merged else windows[start] for start in union]

    def commit(self, key: SeriesId, partials: Iterable[WindowAggregate]) -> None:
        known = self.series.get(key)
        if known is None:
            return
        windows, starts = known.windows, known.starts
        for p in partials:
            start = p.start_ms
            if start >= known.low_ms:
                old = windows.get(start)
                if old is not None:
                    windows[start] = merge_windows(old, p)
                    continue
                windows[start] = p
                if not starts or start > starts[-1]:
                    starts.append(start)
                else:
                    insort(starts, start)
        if starts:
            floor = starts[-1] - (self.keep_ms if known.keep_ms is None else known.keep_ms)
            if floor > known.low_ms:
                known.low_ms = floor
                expired = bisect_left(starts, floor)
                for start in starts[:expired]:
                    del windows[start]
                del starts[:expired]


def old_table(windows: Iterable[WindowAggregate], now_ms: int, newest: OffsetPoint | None = None,
              reuse: object = None) -> OffsetTimeTable:
    """end_offset_table before tables were reused: built from every window, every time."""
    skip_from = window_start(newest.timestamp_ms, FINEST_WINDOW.name) if newest else now_ms + 1
    until = min(now_ms, skip_from - 1)
    points = [OffsetPoint(int(w.last), min(w.start_ms + 5_000, now_ms))
              for w in sorted(windows, key=lambda w: w.start_ms) if w.start_ms <= until]
    return OffsetTimeTable.from_points([*points, *([newest] if newest else [])])


def live_batches(seed: int, count: int = 14) -> list[list[tuple[int, object]]]:
    """Batches of (Kafka partition, record): mostly a live trigger's few periods, now and then a backlog's;
    some reports late or missing, offsets that rewind, lag that comes and goes."""
    rng = random.Random(seed)
    period = rng.choice([1_000, 2_500])
    out, k = [], 0
    for _ in range(count):
        batch: list[tuple[int, object]] = []
        for _ in range(rng.choice([1, 2, 3, 3, 40])):
            k += 1
            ts = T0 + k * period + rng.randint(0, period // 2)
            for topic in ("east.a", "east.b"):
                for p in range(3):
                    if rng.random() < 0.05:
                        continue
                    at = ts - rng.randint(1, 30) * period if rng.random() < 0.03 else ts
                    end = k * 40 + p - (rng.randint(0, 200) if rng.random() < 0.03 else 0)
                    lag = rng.choice([0, 3, 17, 90, k % 9])
                    batch.append((p % 2, PartitionMetrics(
                        ts=at, period_ms=period, source="east", target="west", topic=topic,
                        upstream_topic=topic[5:], partition=p, record_count=rng.randint(0, 9), byte_count=5,
                        records_lag=lag, source_end_offset=end, upstream_offset=end - lag,
                        target_offset=end - lag)))
            if rng.random() < 0.7:
                batch.append((1, GroupMetrics(ts=ts, period_ms=period, source="east", target="west",
                                              group="billing", topic="east.a", upstream_topic="a",
                                              partition=1, group_upstream_offset=k * 30 + 5,
                                              group_downstream_offset=k * 30, group_lag=k % 4)))
            if rng.random() < 0.3:
                batch.append((0, ReplicationMetrics(ts=ts, period_ms=period, source="east", target="west",
                                                    status="RUNNING", tasks=2)))
        rng.shuffle(batch)
        out.append(batch)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_a_sink_reusing_tables_and_slicing_views_writes_what_the_old_one_does(
        redis_url: str, seed: int, monkeypatch: pytest.MonkeyPatch):
    new, old = twin_sinks(redis_url, "reuse", (4, 5))
    old.history = OldHistory(old.history.keep_ms)
    built, reused = [0], [0]
    remember, table = latest_values._remember, latest_values.end_offset_table

    def counted(windows, now_ms, newest=None, reuse=None):
        reused[0] += 1
        return table(windows, now_ms, newest, reuse)

    def remembered(*args):
        built[0] += 1
        return remember(*args)

    monkeypatch.setattr(latest_values, "_remember", remembered)
    offsets = {0: 0, 1: 0}
    for batch_id, records in enumerate(live_batches(seed)):
        now = max(r.ts for _, r in records) + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)  # one clock for both sinks
        parts = kafka_batch(records, offsets)
        for sink, end_offset_table in ((new, counted), (old, old_table)):
            monkeypatch.setattr(latest_values, "end_offset_table", end_offset_table)
            write_through(sink, parts, batch_id, now)
        assert snapshot(new.client) == snapshot(old.client)
        assert new.history.series.keys() == old.history.series.keys()
        for series, kept in new.history.series.items():
            was = old.history.series[series]
            assert (kept.low_ms, kept.starts, kept.keep_ms) == (was.low_ms, was.starts, was.keep_ms)
            assert [(w, w.last_ts) for w in kept.ordered] == [(was.windows[s], was.windows[s].last_ts)
                                                              for s in was.starts]
        assert new.verdicts.known == old.verdicts.known
    assert reused[0] > built[0] > 0  # tables were reused: the comparison is worth it
    for sink in (new, old):
        sink.client.flushdb()
