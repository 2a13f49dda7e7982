"""The sink makes window objects only of the history partials a view reads or the kept history keeps
(BatchPlan.add_history): over generated batches it writes to Redis, and keeps, exactly what a sink making
every partial a window object does. Batches of reports as the driver sends them, through the tasks'
parsing (partition_partials) and the driver's merge, including backlogs of many windows a series, late and
out-of-order reports, rewound offsets, missing periods, groups and replications."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

import pyarrow as pa
import pytest

from aggregator import redis_sink
from aggregator.batch_plan import HISTORY_METRICS, BatchPlan
from aggregator.partition_partials import PARTS_SCHEMA, collect
from aggregator.redis_sink import RedisRollupSink
from contract.records import raw_metrics
from contract.records.raw_metrics import GroupMetrics, PartitionMetrics, RawMetrics, ReplicationMetrics
from tests.aggregator.streaming_input import snapshot

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
MADE: dict[str, list[int]] = {"pruned": [], "every": []}  # windows made a batch, by each plan


class PrunedPlan(BatchPlan):
    def add_history(self, metrics, read_from, keeps):
        added = super().add_history(metrics, read_from, keeps)
        if not self.history_rows:  # the batch's last metric
            MADE["pruned"].append(sum(map(len, self.history.values())))
        return added


class EveryWindowPlan(BatchPlan):
    """The plan as it was: a window object for every history partial (the oracle)."""

    def add_history(self, metrics, read_from: Mapping[str, int], keeps):
        added = super().add_history(metrics, dict.fromkeys(HISTORY_METRICS, -(2**62)), keeps)
        if not self.history_rows:
            MADE["every"].append(sum(map(len, self.history.values())))
        return added


def batches(seed: int, count: int = 8) -> list[list[tuple[int, RawMetrics]]]:
    """Batches of (Kafka partition, record): each a stretch of periods (a backlog's or a live trigger's),
    some reports late (from before the last batch) or missing, offsets that rewind."""
    rng = random.Random(seed)
    period = rng.choice([1_000, 1_500, 10_000])
    out, k = [], 0
    for _ in range(count):
        batch: list[tuple[int, RawMetrics]] = []
        periods = rng.choice([2, 5, 40, 150])
        group_until = rng.choice([periods, 10])  # a group whose reports stop: its reads reach further back
        for i in range(periods):
            k += 1
            ts = T0 + k * period + rng.randint(0, period // 2)
            for topic in ("east.a", "east.b"):
                for p in range(3):
                    if rng.random() < 0.1:
                        continue  # a missing report
                    late = rng.random() < 0.05
                    at = ts - rng.randint(1, 30) * period if late else ts
                    end = k * 40 + p - (rng.randint(0, 200) if rng.random() < 0.05 else 0)  # rewound
                    lag = rng.choice([0, 0, 3, 17, k % 9])
                    batch.append((p % 2, PartitionMetrics(
                        ts=at, period_ms=period, source="east", target="west", topic=topic,
                        upstream_topic=topic[5:], partition=p, record_count=rng.randint(0, 9), byte_count=5,
                        records_lag=lag, source_end_offset=end, upstream_offset=end - lag,
                        target_offset=end - lag)))
            if i < group_until and rng.random() < 0.7:
                batch.append((1, GroupMetrics(ts=ts, period_ms=period, source="east", target="west",
                                              group="billing", topic="east.a", upstream_topic="a",
                                              partition=1, group_upstream_offset=k * 30,
                                              group_downstream_offset=k * 30, group_lag=k % 4)))
            if rng.random() < 0.3:
                batch.append((0, ReplicationMetrics(ts=ts, period_ms=period, source="east", target="west",
                                                    status="RUNNING", tasks=2)))
        rng.shuffle(batch)  # out of order within the batch
        out.append(batch)
    return out


def kafka_batch(records: list[tuple[int, RawMetrics]], offsets: dict[int, int]) -> list[pa.RecordBatch]:
    parts = []
    for p in (0, 1):
        values = [raw_metrics.encode(r)[1] for q, r in records if q == p]
        parts.append(pa.record_batch({
            "topic": ["srm-metrics.east.internal"] * len(values),
            "partition": pa.array([p] * len(values), pa.int32()),
            "offset": pa.array(range(offsets[p], offsets[p] + len(values)), pa.int64()),
            "kafka_ts": pa.array([T0] * len(values), pa.int64()), "value": pa.array(values, pa.binary())}))
        offsets[p] += len(values)
    return parts


def twin_sinks(redis_url: str, prefix: str, dbs: tuple[int, int]) -> tuple[RedisRollupSink, RedisRollupSink]:
    """Two sinks of one query, each on an emptied database `dbs` of one real Redis: the same batches
    written through both compare key by key."""
    base = redis_url.rsplit("/", 1)[0]
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    first, second = (RedisRollupSink(f"{base}/{db}", name, 600_000, "west").bind("q") for db in dbs)
    for sink in (first, second):
        sink.client.flushdb()
    return first, second


def write_through(sink: RedisRollupSink, parts: list[pa.RecordBatch], batch_id: int, now: int) -> None:
    """One batch through the tasks' parsing and judging (as Spark's tasks would run it, at `now`) into
    `sink`."""
    state = sink.state()
    mapper = sink.task_function(state, now)
    answers = [a for part in parts for a in mapper(iter([part]))]
    collected = collect(pa.Table.from_batches(answers, schema=PARTS_SCHEMA))
    sink.write(collected.partials, batch_id, state, require_state=batch_id > 0)


@pytest.mark.parametrize("seed", range(10))
def test_a_sink_making_only_the_windows_that_matter_writes_what_one_making_all_does(
        redis_url: str, seed: int, monkeypatch: pytest.MonkeyPatch):
    pruned, every = twin_sinks(redis_url, "prune", (2, 3))
    offsets = {0: 0, 1: 0}
    MADE["pruned"].clear()
    MADE["every"].clear()
    for batch_id, records in enumerate(batches(seed)):
        newest = max(r.ts for _, r in records)
        now = newest + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)  # one clock for both sinks
        parts = kafka_batch(records, offsets)
        for sink, plan in ((pruned, PrunedPlan), (every, EveryWindowPlan)):
            monkeypatch.setattr(redis_sink, "BatchPlan", plan)
            write_through(sink, parts, batch_id, now)
        assert snapshot(pruned.client) == snapshot(every.client)
        assert pruned.history.series == every.history.series
    assert sum(MADE["pruned"]) < sum(MADE["every"])  # windows were left out: the comparison is worth it
    for sink in (pruned, every):
        sink.client.flushdb()

