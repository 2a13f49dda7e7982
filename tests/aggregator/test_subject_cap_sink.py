"""The subject cap in the sink, on a real Redis: refused subjects get no series, no latest value and no
index entry, the refusals are counted, and a batch replayed after a failed commit, or by a restarted
aggregator, refuses the same subjects."""

from __future__ import annotations

import logging
import uuid
from typing import cast

import pytest
import redis

from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from tests.aggregator.streaming_input import snapshot
from tests.aggregator.test_redis_sink import HOUR, latest_row, row, write

pytestmark = pytest.mark.integration

# Each topic is a subject too: its whole-topic windows (here the lag in seconds the tasks derive).
CAP = 7


def _batch(source: str, topic: str, partitions: range, ts: int) -> list[dict]:
    rows: list[dict] = []
    for p in partitions:
        report = PartitionMetrics(ts=ts, period_ms=10_000, source=source, target="west", topic=topic,
                                  upstream_topic="orders", partition=p, record_count=1, byte_count=1,
                                  records_lag=0, source_end_offset=10, upstream_offset=9, target_offset=9)
        start = ts // 10_000 * 10_000
        rows += [row(start, 1, 1, 1, 1, 1, partition=p, topic=topic, source=source, max_ts=ts),
                 latest_row(report, topic, p, source=source)]
    rows.append(row(ts // 10_000 * 10_000, len(partitions), len(partitions), 1, 1, 1, source=source,
                    topic=layout.ALL_TOPICS, partition=layout.WHOLE_TOPIC, max_ts=ts))
    return rows


def _batches(source: str) -> list[list[dict]]:
    """3 partitions and their topic, then 7 new partitions and their topic of which the topic and 2
    partitions fit, then the same again a minute later."""
    return [_batch(source, f"{source}.a", range(3), HOUR + 1_000),
            _batch(source, f"{source}.b", range(3, 10), HOUR + 11_000),
            _batch(source, f"{source}.b", range(3, 10), HOUR + 71_000)]


def _state(client: redis.Redis, source: str) -> dict:
    """Every key of the replication, its name with the source made generic (runs use their own)."""
    return {key.replace(source, "SRC"): repr(value).replace(source, "SRC")
            for key, value in snapshot(client).items() if source in key}


def _sink(redis_url: str) -> RedisRollupSink:
    return RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}", max_subjects=CAP)


def test_subjects_past_the_cap_get_no_series_and_are_counted(redis_url: str, caplog):
    source = f"s{uuid.uuid4().hex[:8]}"
    sink, client = _sink(redis_url), redis.Redis.from_url(redis_url)
    with caplog.at_level(logging.WARNING, logger="aggregator.subject_cap"):
        for batch_id, rows in enumerate(_batches(source)):
            write(sink, rows, batch_id)
    kept = {m.decode() for m in cast(list, client.zrange(layout.subjects_key("west", source), 0, -1))}
    assert kept == {f"{source}.a|{p}|" for p in (-1, 0, 1, 2)} | {f"{source}.b|{p}|" for p in (-1, 3, 4)}
    refused = cast(bytes, client.get(layout.refused_subjects_key("west", source)))
    assert int(refused) == 10  # 5 in each of 2 batches
    partitions = cast(list, client.hkeys(layout.partition_latest_key("west", source, f"{source}.b")))
    assert sorted(int(p) for p in partitions) == [3, 4]
    listed = cast(set, client.smembers(layout.partitions_key("west", source, f"{source}.b")))
    assert sorted(listed) == [b"3", b"4"]
    for p, stored in ((4, True), (5, False), (9, False)):
        series = layout.SeriesId("west", source, f"{source}.b", p, "record_count")
        assert client.exists(layout.series_key(series, "10s")) == stored
    whole = layout.SeriesId("west", source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "record_count")
    assert client.exists(layout.series_key(whole, "10s"))  # the replication is no subject: never refused
    lines = [r.getMessage() for r in caplog.records if "max.subjects.per.replication" in r.getMessage()]
    assert len(lines) == 1, lines  # rate-limited: the second batch's refusals wait for the next minute
    assert f"{source}->west" in lines[0] and f"topic '{source}.b' partition 5" in lines[0]


def test_a_replayed_or_restarted_batch_refuses_the_same_subjects(redis_url: str, monkeypatch):
    client = redis.Redis.from_url(redis_url)
    straight = f"s{uuid.uuid4().hex[:8]}"
    sink = _sink(redis_url)
    for batch_id, rows in enumerate(_batches(straight)):
        write(sink, rows, batch_id)

    # The same input, the commit of batch 1 failing once (Redis gone mid-batch), then a new process.
    crashed = f"s{uuid.uuid4().hex[:8]}"
    first, batches = _sink(redis_url), _batches(crashed)
    write(first, batches[0], 0)
    real_execute = redis.client.Pipeline.execute
    failures = iter([True])

    def failing_once(pipe, *args, **kwargs):
        if any(cmd[0][0] == "HSET" and str(cmd[0][1]).startswith(layout.batch_key(first.query_name))
               for cmd in pipe.command_stack) and next(failures, False):
            raise redis.ConnectionError("connection lost")
        return real_execute(pipe, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", failing_once)
    with pytest.raises(redis.ConnectionError):
        write(first, batches[1], 1)
    write(first, batches[1], 1)  # Spark's replay, in the same process
    restarted = RedisRollupSink(redis_url, first.query_name, max_subjects=CAP)
    write(restarted, batches[2], 2)
    assert _state(client, crashed) == _state(client, straight)
