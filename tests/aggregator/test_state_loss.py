"""The sink and its window merge facing a Redis that lost the query's state (flushed between or during
batches), on real Redis: nothing is written into the emptied Redis, and the rebuild's first batch says
where the rebuilt history starts."""

from __future__ import annotations

import uuid

import pytest
import redis

from aggregator.redis_sink import RedisRollupSink
from aggregator.window_partials import of_windows
from aggregator.window_writer import WindowWriter, stage
from contract import redis_layout as layout
from tests.aggregator.streaming_input import snapshot

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000


def batch(target: str, topic: str, first_window: int):
    return of_windows([
        {"target": target, "source": "east", "topic": topic, "upstream_topic": "orders", "partition": 0,
         "metric": "record_count", "window_start": HOUR + (first_window + i) * 10_000, "count": 1,
         "sum": i, "min": i, "max": i, "last": i}
        for i in range(4)])


def first_batch(redis_url: str) -> tuple[RedisRollupSink, str, str]:
    target, topic = f"t{uuid.uuid4().hex[:8]}", f"east.t{uuid.uuid4().hex[:6]}"
    sink = RedisRollupSink(redis_url, f"rollup_{target}", target=target).bind(uuid.uuid4().hex)
    sink.write(batch(target, topic, 0), 0)
    return sink, target, topic


def forget(client: redis.Redis, target: str, sink: RedisRollupSink) -> None:
    """What FLUSHALL does to this test's keys (the session's Redis is shared with other tests)."""
    for pattern in layout.target_rollup_patterns(target, sink.query_name):
        for key in client.scan_iter(match=pattern):
            client.delete(key)


def test_a_batch_finding_the_sink_state_gone_writes_nothing(redis_url: str):
    sink, target, topic = first_batch(redis_url)
    forget(sink.client, target, sink)
    sink.write(batch(target, topic, 4), 1, require_state=True)
    assert sink.state_lost and snapshot(sink.client, match=f"*{target}*") == {}


def test_a_flush_while_the_batch_commits_aborts_its_transaction(redis_url: str, monkeypatch):
    sink, target, topic = first_batch(redis_url)
    other = redis.Redis.from_url(redis_url)

    def flushed_meanwhile(pipe, plan) -> None:  # as RedisRollupSink._write_index
        forget(other, target, sink)  # while the batch's MULTI is being queued

    monkeypatch.setattr(sink, "_write_index", flushed_meanwhile)
    sink.write(batch(target, topic, 4), 1, require_state=True)
    assert sink.state_lost
    assert snapshot(sink.client, match=f"*{target}*") == {}  # no staged batch, no sink state


def test_staged_batches_are_not_merged_into_a_redis_that_lost_their_state(redis_url: str):
    sink, target, topic = first_batch(redis_url)
    client = sink.client
    pipe = client.pipeline(transaction=True)
    stage(pipe, sink.batch_scope, 1, batch(target, topic, 4).windows)
    pipe.execute()
    windows = batch(target, topic, 4).windows
    forget(client, target, sink)  # after the writer read the staged copy (a restart's recover)
    WindowWriter(client, sink.batch_scope).apply_all([(1, windows)], staged=True)
    assert snapshot(client, match=f"*{target}*") == {}


def test_the_first_batch_after_a_rebuild_records_where_the_history_starts(redis_url: str):
    target, topic = f"t{uuid.uuid4().hex[:8]}", f"east.t{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(redis_url)
    key = layout.rebuild_key(target)
    client.hset(key, mapping={"detected_ts": 1, "checkpoint_kept": "/c/east.lost-1"})
    try:
        sink = RedisRollupSink(redis_url, f"rollup_{target}", target=target).bind(uuid.uuid4().hex)
        sink.write(batch(target, topic, 3), 0)
        sink.write(batch(target, topic, 0), 1)  # an older window later does not move the start
        assert client.hget(key, "history_from_ts") == str(HOUR + 30_000).encode()
        fresh = f"t{uuid.uuid4().hex[:8]}"  # a target never rebuilt gets no record
        RedisRollupSink(redis_url, f"rollup_{fresh}", target=fresh).write(batch(fresh, topic, 0), 0)
        assert not client.exists(layout.rebuild_key(fresh))
    finally:
        client.delete(key)
