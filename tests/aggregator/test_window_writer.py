"""Windows merged one batch behind the query (window_writer), on real Redis: the same windows as merged
at once, a crash between staging and merging repaired on restart, and never a batch merged twice."""

from __future__ import annotations

import uuid

import pytest
from streaming_input import snapshot

from aggregator.redis_sink import RedisRollupSink, windows_merged
from aggregator.window_partials import of_windows
from aggregator.window_writer import WindowWriter, decode_partials, encode_partials, stage
from contract import redis_layout as layout

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000


def batch(topic: str, first_window: int, windows: int = 8):
    """Record counts of two partitions of `topic` in consecutive 10 s windows."""
    return of_windows([
        {"target": "west", "source": "east", "topic": topic, "upstream_topic": "orders", "partition": p,
         "metric": "record_count", "window_start": HOUR + (first_window + i) * 10_000, "count": 1,
         "sum": i + p, "min": i + p, "max": i + p, "last": i + p}
        for i in range(windows) for p in (0, 1)])


def run(sink: RedisRollupSink, topic: str, batches: range = range(3)) -> dict:
    for batch_id in batches:
        sink.write(batch(topic, 4 * batch_id), batch_id)
    sink.windows.wait_idle()
    return {k.replace(topic, "T"): v for k, v in snapshot(sink.client, match=f"*{topic}*").items()}


def new_sink(redis_url: str, scope: str | None = None, background: bool = True) -> RedisRollupSink:
    return RedisRollupSink(redis_url, scope or f"test_{uuid.uuid4().hex[:8]}", merge_in_background=background)


def test_windows_merged_later_equal_windows_merged_at_once(redis_url: str):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    later, now = new_sink(redis_url), new_sink(redis_url, background=False)
    assert run(later, topics[0]) == run(now, topics[1])
    assert windows_merged(later.client, later.query_name, None)
    assert later.client.exists(layout.staged_batch_key(later.batch_scope, 2)) == 0  # deleted once merged


def test_batches_staged_but_not_merged_before_a_crash_are_merged_on_restart(redis_url: str):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    expected = run(new_sink(redis_url, background=False), topics[1])
    crashed = new_sink(redis_url)
    crashed.windows.submit = lambda *_: None  # the process dies before its window writer merges anything
    for batch_id in range(2):
        crashed.write(batch(topics[0], 4 * batch_id), batch_id)
    assert not windows_merged(crashed.client, crashed.query_name, None)
    restarted = new_sink(redis_url, crashed.query_name)
    restarted.write(batch(topics[0], 4), 1)  # Spark replays the last batch: already committed, skipped
    assert run(restarted, topics[0], batches=range(2, 3)) == expected


def test_a_batch_merged_by_another_writer_is_not_merged_again(redis_url: str):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    sink = new_sink(redis_url, background=False)
    sink.write(batch(topic, 0), 0)
    before = snapshot(sink.client, match=f"*{topic}*")
    # e.g. the writer of a query stopped and started again in the same process, still busy with it
    WindowWriter(sink.client, sink.batch_scope).apply(0, batch(topic, 0).windows)
    assert snapshot(sink.client, match=f"*{topic}*") == before


def test_staged_partials_round_trip_through_arrow_ipc():
    windows = batch("east.orders", 0).windows
    assert decode_partials(encode_partials(windows)).equals(windows)


def test_batches_merged_together_equal_batches_merged_one_by_one(redis_url: str):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    together, one_by_one = new_sink(redis_url, background=False), new_sink(redis_url, background=False)
    # Overlapping windows (batch 1 repeats three of batch 0's): merged together they must add up the same.
    together.windows.apply_all([(0, batch(topics[0], 0).windows), (1, batch(topics[0], 5).windows)])
    one_by_one.windows.apply(0, batch(topics[1], 0).windows)
    one_by_one.windows.apply(1, batch(topics[1], 5).windows)

    def renamed(sink: RedisRollupSink, topic: str) -> dict:
        return {k.replace(topic, "T"): v for k, v in snapshot(sink.client, match=f"*{topic}*").items()}

    assert renamed(together, topics[0]) == renamed(one_by_one, topics[1])
    assert together.client.get(layout.applied_batch_key(together.batch_scope)) == b"1"


def test_staging_the_next_batch_does_not_abort_a_merge_in_progress(redis_url: str):
    sink = new_sink(redis_url, background=False)
    sink.write(batch("east.orders", 0), 0)
    applied = layout.applied_batch_key(sink.batch_scope)
    with sink.client.pipeline(transaction=True) as merge:
        merge.watch(applied)  # as WindowWriter.apply does while it merges batch 1
        staging = sink.client.pipeline(transaction=True)
        stage(staging, sink.batch_scope, 2, batch("east.orders", 4).windows)
        staging.execute()
        merge.multi()
        merge.set(applied, 1)
        assert merge.execute() == [True]  # a WatchError had the staging touched the applied id
