"""Tasks judging a batch's partition and group reports as arrays over their offset records (offset_records,
partition_lag, offset_history) leave Redis, and the verdicts the sink keeps, as one judging each report by the
pure functions over its windows read from Redis (the oracle: partition_lag's path for what the arrays
leave): over live-like batches (a few periods each) and backlog ones, with late and out-of-order reports,
rewound offsets, missing periods, groups and replications, with a ring long enough for every read and one
short enough that late reports and backlogs fall outside it, and the records lost part-way (every partition
read back from the stored windows)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from aggregator import offset_history, offset_records, partition_lag, redis_sink
from contract.records.raw_metrics import GroupMetrics, PartitionMetrics, RawMetrics, ReplicationMetrics
from tests.aggregator.streaming_input import snapshot
from tests.aggregator.test_history_pruning import batches, kafka_batch, twin_sinks, write_through

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


def live_batches(seed: int, count: int = 14) -> list[list[tuple[int, RawMetrics]]]:
    """Batches of (Kafka partition, record): mostly a live trigger's few periods, now and then a backlog's;
    some reports late or missing, offsets that rewind, lag that comes and goes."""
    rng = random.Random(seed)
    period = rng.choice([1_000, 2_500])
    out, k = [], 0
    for _ in range(count):
        batch: list[tuple[int, RawMetrics]] = []
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


def one_at_a_time(history, records, is_partition, rows, ts, high, low, newest=None):
    """No report derived by the arrays: every one by the pure functions."""
    return np.full(len(rows), np.nan), np.zeros(len(rows), bool)


# The short ring also spreads its rows over blocks of two (offset_history.BLOCK_ROWS) and judges the
# reports three at a time (partition_lag.CHUNK_ROWS).
@pytest.mark.parametrize(("slots", "block_rows", "chunk_rows"),
                         [(128, offset_history.BLOCK_ROWS, partition_lag.CHUNK_ROWS), (64, 2, 3)])
@pytest.mark.parametrize("seed", range(6))
def test_a_sink_judging_reports_as_arrays_writes_what_one_judging_each_does(
        redis_url: str, seed: int, slots: int, block_rows: int, chunk_rows: int,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(offset_history, "BLOCK_ROWS", block_rows)
    monkeypatch.setattr(partition_lag, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(offset_records, "TASK_SLOTS", slots)
    arrays, oracle = twin_sinks(redis_url, "arrays", (4, 5))
    derive = partition_lag._lag_seconds
    fallbacks = [0, 0]
    offsets = {0: 0, 1: 0}
    generated = live_batches(seed) if seed % 2 else batches(seed)
    for batch_id, records in enumerate(generated):
        if batch_id == 3:  # the records lost and the driver restarted: what the arrays read is Redis's
            kept = list(arrays.client.scan_iter("srm:offrec:*"))
            assert kept
            arrays.client.delete(*kept)
        now = max(r.ts for _, r in records) + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)  # one clock for both sinks
        parts = kafka_batch(records, offsets)
        for sink, lag_seconds in ((arrays, derive), (oracle, one_at_a_time)):
            monkeypatch.setattr(partition_lag, "_lag_seconds", lag_seconds)
            judge = partition_lag.judge_batch

            def counted(*args, judge=judge, sink=sink):
                judged = judge(*args)
                fallbacks[sink is oracle] += judged.fallback
                return judged

            monkeypatch.setattr(partition_lag, "judge_batch", counted)
            write_through(sink, parts, batch_id, now)
            monkeypatch.setattr(partition_lag, "judge_batch", judge)
        assert snapshot(arrays.client) == snapshot(oracle.client)
    assert fallbacks[1] > 0 and fallbacks[0] < fallbacks[1]  # the arrays judged reports
    for sink in (arrays, oracle):
        sink.client.flushdb()
