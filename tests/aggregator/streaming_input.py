"""Raw metrics written to real Kafka topics for the aggregator tests, and Redis read back."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from typing import cast

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.streaming import StreamingQuery

from aggregator import offset_records, redis_sink, task_writes
from aggregator.redis_sink import RedisRollupSink, windows_merged
from aggregator.window_partials import BatchPartials
from contract import redis_layout as layout
from contract.records import raw_metrics
from contract.replication_policy import metrics_topic


def new_source() -> str:
    return f"s{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def produce(bootstrap: str, source: str, records: Iterable[raw_metrics.RawMetrics | bytes],
            partition: int = 0, garbage_ts_ms: int | None = None) -> None:
    """Records (or raw bytes that do not parse) in order, to one partition.

    Kafka timestamps are the produce time unless `garbage_ts_ms` is given for the raw bytes: the
    broker's time-based retention would delete records stamped with the tests' old event times.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for record in records:
        if isinstance(record, bytes):
            producer.produce(metrics_topic(source), value=record, partition=partition,
                             timestamp=garbage_ts_ms or 0)
        else:
            key, value = raw_metrics.encode(record)
            producer.produce(metrics_topic(source), key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def topic_pattern(*sources: str) -> str:
    return "|".join(re.escape(metrics_topic(s)) for s in sources)


def members(client: redis.Redis, series: layout.SeriesId, window: str) -> list[layout.WindowAggregate]:
    replies = layout.hash_members(cast(dict, client.hgetall(layout.series_key(series, window))))
    return [w for m in replies if (w := layout.metric_window(m, series.metric)) is not None]


def wait_until(check: Callable[[], object], timeout_s: float = 90.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} not reached within {timeout_s:.0f} s")


def wait_merged(redis_url: str, query: StreamingQuery) -> None:
    """After processAllAvailable: until the last batch's windows are merged too (window_writer)."""
    client = redis.Redis.from_url(redis_url)
    wait_until(lambda: windows_merged(client, query.name, str(query.id)), 60, "windows merged")


def _without_summary_clock(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A replication's lag summary (field `lag`) says when the sink made it (`ts`, the aggregator's
    clock at that batch): a reading of the clock, not of the data. The rest of it is compared."""
    if b"lag" in fields:
        summary = json.loads(fields[b"lag"])
        if isinstance(summary, dict):
            summary.pop("ts", None)
            fields[b"lag"] = json.dumps(summary, sort_keys=True).encode()
    return fields


def database(redis_url: str, db: int) -> redis.Redis:
    """A client of database `db` on the server of `redis_url` (two writers compared side by side)."""
    kwargs = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    return redis.Redis(**{**kwargs, "db": db})


# Not compared: the exactly-once state (batch ids), and the tasks' offset records (offset_records: their
# working copy of recent offset windows, whose bytes depend on which rows needed older windows when, e.g. a
# replayed task's; what they answer, the latest values and verdicts, is compared).
WORKING_STATE = (f"{layout.PREFIX}:batch:", f"{layout.PREFIX}:offrec:")


def snapshot(client: redis.Redis, match: str = f"{layout.PREFIX}:*",
             exclude: Callable[[str], bool] = lambda key: key.startswith(WORKING_STATE)) -> dict:
    """Every key's content in a canonical form: DUMP bytes differ with insertion order and TTL."""
    out: dict[str, object] = {}
    for raw_key in client.scan_iter(match=match, count=1000):
        key = raw_key.decode()
        if exclude(key):
            continue
        kind = cast(bytes, client.type(raw_key)).decode()
        if kind == "zset":
            out[key] = client.zrange(raw_key, 0, -1, withscores=True)
        elif kind == "hash":
            out[key] = sorted(_without_summary_clock(cast(dict, client.hgetall(raw_key))).items())
        elif kind == "set":
            out[key] = sorted(cast(set, client.smembers(raw_key)))
        else:
            out[key] = client.get(raw_key)
        out[f"{key} (expires)"] = cast(int, client.pttl(raw_key)) > 0
    return out


def judged_as_a_task(sink: RedisRollupSink, batch: BatchPartials) -> BatchPartials:
    """Hand-made partials with their partition and group reports judged as the task of one Kafka partition
    judges its own (offset_records), over that partition's offset records in the sink's Redis (one Kafka
    partition a sink)."""
    target = sink.target or "west"
    keys = layout.offset_record_keys(target, sink.query_name, 0)
    windows, values, verdicts, _ = offset_records.judge_partials(
        sink.client, keys, batch.windows, batch.latest,
        offset_records.MergeWait(sink.batch_scope, sink.state().batch_id),
        task_writes.TaskWrites(target, sink.query_name, 0, redis_sink._now_ms()))
    return dataclasses.replace(batch, windows=windows, values=values, verdicts=verdicts)
