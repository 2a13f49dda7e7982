"""Lag in seconds gets windows like any gauge: derived by the sink from each report, rolled up to the
topic and the replication (the worst partition at the newest report), kept in every window size."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import cast

import pyarrow as pa
import pytest
import redis

from aggregator.lag_seconds_windows import LagSample, lag_seconds_columns, lag_seconds_partials
from aggregator.redis_sink import RedisRollupSink
from aggregator.window_partials import BatchPartials, latest_of, partials_schema
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from tests.aggregator.streaming_input import judged_as_a_task

HOUR = 3_600_000


def by_level(table: pa.Table, metric: str) -> dict[tuple, tuple]:
    return {(r["kind"], r["level"], r["topic"], r["partition"], r["group"]):
            (r[f"{metric}__n"], r[f"{metric}__sum"], r[f"{metric}__min"], r[f"{metric}__max"],
             r[f"{metric}__last"], r[f"{metric}__last_ts"]) for r in table.to_pylist()}


def test_samples_roll_up_to_the_worst_partition_at_the_newest_report():
    samples = [LagSample("partition", "west", "east", "east.orders", p, "", HOUR + 1_000, s)
               for p, s in ((0, 3.0), (1, 7.0))]
    samples.append(LagSample("partition", "west", "east", "east.pay", 0, "", HOUR + 2_000, 1.0))
    table = lag_seconds_partials(samples)
    assert table.schema == partials_schema()
    rows = by_level(table, "lag_seconds")
    assert rows[("partition", "p", "east.orders", 1, "")] == (1, 7.0, 7.0, 7.0, 7.0, HOUR + 1_000)
    assert rows[("partition", "t", "east.orders", layout.WHOLE_TOPIC, "")] == (2, 10.0, 3.0, 7.0, 7.0,
                                                                               HOUR + 1_000)
    # The replication's newest report is east.pay's: its value is the range's `last`.
    assert rows[("partition", "r", layout.ALL_TOPICS, layout.WHOLE_TOPIC, "")] == (3, 11.0, 1.0, 7.0, 1.0,
                                                                                   HOUR + 2_000)


@pytest.mark.parametrize("kind", ["partition", "group"])
def test_samples_of_distinct_subjects_are_their_own_partition_level_partials(kind: str):
    """A batch's newest report of each subject (one_a_subject) skips the rollup of its own level: the rows
    are those the rollup gives, in another order."""
    group = "billing" if kind == "group" else ""
    rows = [("west", "east", f"east.t{p % 3}", p, group, HOUR + 500 * p + (p % 4) * 9_000, float(p % 5))
            for p in range(12)]
    columns = [list(c) for c in zip(*rows, strict=True)]
    rolled, own = (lag_seconds_columns(kind, *columns, one_a_subject=alone) for alone in (False, True))
    assert own.schema == partials_schema() == rolled.schema
    order = [(c, "ascending") for c in ("level", "topic", "partition", "window_start")]
    assert own.sort_by(order).equals(rolled.sort_by(order))


def test_group_samples_are_kept_per_partition_and_topic():
    table = lag_seconds_partials([LagSample("group", "west", "east", "east.orders", 2, "billing", HOUR, 4.0)])
    assert set(by_level(table, "group_lag_seconds")) == {
        ("group", "p", "east.orders", 2, "billing"),
        ("group", "t", "east.orders", layout.WHOLE_TOPIC, "billing")}


def report(ts: int, topic: str, end: int, lag: int) -> dict:
    record = PartitionMetrics(ts=ts, period_ms=10_000, source="east", target="west", topic=topic,
                              upstream_topic="orders", partition=0, record_count=1, byte_count=1,
                              records_lag=lag, source_end_offset=end, upstream_offset=end - lag - 1,
                              target_offset=7)
    fields = {k: v for k, v in asdict(record).items() if v is not None and not isinstance(v, dict)}
    return fields | {"topic": topic, "partition": 0, "group": ""}


def end_offset(start: int, topic: str, value: float) -> dict:
    return {"kind": "partition", "level": "p", "target": "west", "source": "east", "group": "",
            "topic": topic, "partition": 0, "window_start": start, "max_ts": start,
            "upstream_topic": "orders",
            **{f"source_end_offset__{s}": v for s, v in (("n", 1.0), ("sum", value), ("min", value),
                                                           ("max", value), ("last", value))},
            "source_end_offset__last_ts": start}


def write(sink: RedisRollupSink, windows: list[dict], latest: list[dict], batch_id: int) -> None:
    batch = BatchPartials(pa.Table.from_pylist(windows, schema=partials_schema()), latest_of(latest), {})
    sink.write(judged_as_a_task(sink, batch), batch_id)


def stored(client: redis.Redis, topic: str, partition: int, window: str) -> list[tuple[int, float]]:
    key = layout.series_key(layout.SeriesId("west", "east", topic, partition, "lag_seconds"), window)
    fields = cast(dict, client.hgetall(key))
    windows = (layout.metric_window(m, "lag_seconds") for m in layout.hash_members(fields))
    return [(w.start_ms, w.last) for w in windows if w is not None]


@pytest.mark.integration
def test_the_sink_stores_lag_seconds_windows_at_every_level_and_window_size(redis_url: str):
    sink = RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}")
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    write(sink, [end_offset(HOUR, topic, 100)], [report(HOUR + 5_000, topic, 100, 0)], batch_id=0)
    write(sink, [end_offset(HOUR + 10_000, topic, 200), end_offset(HOUR + 20_000, topic, 300)],
          [report(HOUR + 25_000, topic, 300, 150)], batch_id=1)
    # 0 s while caught up; then the next offset to replicate (150) was the end offset 15 s before.
    expected = [(HOUR, 0.0), (HOUR + 20_000, pytest.approx(15.0))]
    assert stored(sink.client, topic, 0, "10s") == expected
    assert stored(sink.client, topic, layout.WHOLE_TOPIC, "10s") == expected
    assert stored(sink.client, topic, 0, "1m") == [(HOUR, pytest.approx(15.0))]
    whole = stored(sink.client, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "1h")
    assert whole and whole[-1][1] == pytest.approx(15.0)
    sink.close()
