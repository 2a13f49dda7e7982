"""Windows staged with the batch's commit, then merged (window_writer), on real Redis: the same windows
merged in the sink's merge thread as at once, a crash between staging and merging repaired on restart,
and never a batch merged twice."""

from __future__ import annotations

import uuid
from typing import cast

import pytest
import redis

from aggregator.redis_sink import RedisRollupSink, windows_merged
from aggregator.window_partials import of_windows
from aggregator.window_writer import (
    WindowWriter,
    decode_partials,
    encode_partials,
    stage,
    transaction_answers,
)
from contract import redis_layout as layout
from tests.aggregator.streaming_input import snapshot

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


def new_sink(redis_url: str, scope: str | None = None, background: bool = False) -> RedisRollupSink:
    return RedisRollupSink(redis_url, scope or f"test_{uuid.uuid4().hex[:8]}", merge_in_background=background)


def test_windows_merged_in_the_thread_equal_windows_merged_at_once(redis_url: str):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    later, now = new_sink(redis_url, background=True), new_sink(redis_url)
    assert run(later, topics[0]) == run(now, topics[1])
    assert windows_merged(later.client, later.query_name, None)
    assert later.client.exists(layout.staged_batch_key(later.batch_scope, 2)) == 0  # deleted once merged
    later.close(30)


def test_batches_staged_but_not_merged_before_a_crash_are_merged_on_restart(redis_url: str,
                                                                           monkeypatch: pytest.MonkeyPatch):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    expected = run(new_sink(redis_url), topics[1])
    crashed = new_sink(redis_url)
    # The process dies before its window writer merges anything.
    monkeypatch.setattr(crashed.windows, "submit", lambda *_: None)
    for batch_id in range(2):
        crashed.write(batch(topics[0], 4 * batch_id), batch_id)
    assert not windows_merged(crashed.client, crashed.query_name, None)
    restarted = new_sink(redis_url, crashed.query_name)
    restarted.write(batch(topics[0], 4), 1)  # Spark replays the last batch: already committed, skipped
    assert run(restarted, topics[0], batches=range(2, 3)) == expected


def test_a_batch_merged_by_another_writer_is_not_merged_again(redis_url: str):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    sink = new_sink(redis_url)
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
    together, one_by_one = new_sink(redis_url), new_sink(redis_url)
    assert isinstance(together.windows, WindowWriter) and isinstance(one_by_one.windows, WindowWriter)
    # Overlapping windows (batch 1 repeats three of batch 0's): merged together they must add up the same.
    together.windows.apply_all([(0, batch(topics[0], 0).windows), (1, batch(topics[0], 5).windows)])
    one_by_one.windows.apply(0, batch(topics[1], 0).windows)
    one_by_one.windows.apply(1, batch(topics[1], 5).windows)

    def renamed(sink: RedisRollupSink, topic: str) -> dict:
        return {k.replace(topic, "T"): v for k, v in snapshot(sink.client, match=f"*{topic}*").items()}

    assert renamed(together, topics[0]) == renamed(one_by_one, topics[1])
    assert together.client.get(layout.applied_batch_key(together.batch_scope)) == b"1"


def test_staging_the_next_batch_does_not_abort_a_merge_in_progress(redis_url: str):
    sink = new_sink(redis_url)
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


def topics_batch(prefix: str, topics: int, first_window: int):
    """Record counts of one partition of each of `topics` topics: spread over the merge's parts."""
    return of_windows([
        {"target": "west", "source": "east", "topic": f"{prefix}{t}", "upstream_topic": f"t{t}",
         "partition": 0, "metric": "record_count", "window_start": HOUR + (first_window + i) * 10_000,
         "count": 1, "sum": i + t, "min": i + t, "max": i + t, "last": i + t}
        for i in range(4) for t in range(topics)])


def test_a_merge_cut_off_part_way_is_finished_on_restart_without_merging_a_part_twice(redis_url: str,
                                                                                     monkeypatch):
    prefixes = [f"east.t{uuid.uuid4().hex[:6]}-" for _ in range(2)]
    whole, cut = new_sink(redis_url), new_sink(redis_url)
    for batch_id in range(2):
        whole.write(topics_batch(prefixes[0], 24, 4 * batch_id), batch_id)
    cut.write(topics_batch(prefixes[1], 24, 0), 0)
    merged: list[list] = []
    assert isinstance(cut.windows, WindowWriter)  # merging inline
    real_parts = cut.windows.parts

    def seen_parts(*args):
        for part, calls in real_parts(*args):
            merged.append(calls)
            yield part, calls

    monkeypatch.setattr(cut.windows, "parts", seen_parts)
    send = cut.windows.send_part

    def dies_in_the_third_part(pipe, calls, then):
        if len(merged) == 3:
            raise ConnectionError("the process died between the merge's second and third part")
        return send(pipe, calls, then)

    monkeypatch.setattr(cut.windows, "send_part", dies_in_the_third_part)
    with pytest.raises(ConnectionError):
        cut.write(topics_batch(prefixes[1], 24, 4), 1)
    progress = cast(dict, cut.client.hgetall(layout.merging_batches_key(cut.batch_scope)))
    assert (progress[b"first"], progress[b"last"]) == (b"1", b"1")
    assert len(progress[b"parts"].split(b",")) == 2  # the first two parts are in Redis
    assert cut.client.get(layout.applied_batch_key(cut.batch_scope)) == b"0"

    restarted = WindowWriter(cut.client, cut.batch_scope)  # a new process: nothing kept
    restarted.recover(1)

    def renamed(sink: RedisRollupSink, prefix: str) -> dict:
        return {k.replace(prefix, "P"): v for k, v in snapshot(sink.client, match=f"*{prefix}*").items()}

    assert renamed(cut, prefixes[1]) == renamed(whole, prefixes[0])
    assert not cut.client.exists(layout.merging_batches_key(cut.batch_scope))
    assert cut.client.get(layout.applied_batch_key(cut.batch_scope)) == b"1"


@pytest.mark.parametrize("restarted", [False, True])
def test_a_key_written_again_past_its_retention_keeps_only_its_retention(redis_url: str, restarted: bool):
    """Kept windows (the same writer: a grid longer than the hash) or read back (a new writer: the key's
    newest window) bound the trim; either way the old windows go and the newest field follows."""
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    first = new_sink(redis_url)
    first.write(batch(topic, 0), 0)
    gap = (layout.WINDOWS["10s"].retention_ms + 20 * 60_000) // 10_000  # windows
    later = new_sink(redis_url) if restarted else first
    later.write(batch(topic, gap), 1 if later is first else 0)
    for window, kept in (("10s", range(gap, gap + 8)), ("1m", [*range(0, 8), *range(gap, gap + 8)])):
        key = layout.series_key(layout.SeriesId("west", "east", topic, 0, "record_count"), window)
        fields = cast(dict, first.client.hgetall(key))
        newest = int(fields.pop(layout.NEWEST_FIELD.encode()))
        starts = sorted(int(f) for f in fields)
        assert starts == sorted({layout.window_start(HOUR + i * 10_000, window) for i in kept})
        assert newest == starts[-1]


def test_a_key_written_on_and_on_is_trimmed_to_its_retention_by_its_grid(redis_url: str):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    sink = new_sink(redis_url)
    for batch_id, first in enumerate(range(0, 2_400, 400)):
        sink.write(batch(topic, first, 400), batch_id)
    key = layout.series_key(layout.SeriesId("west", "east", topic, 1, "record_count"), "10s")
    fields = cast(dict, sink.client.hgetall(key))
    assert int(fields.pop(layout.NEWEST_FIELD.encode())) == HOUR + 2_399 * 10_000
    cut = 2_399 - layout.WINDOWS["10s"].retention_ms // 10_000
    assert sorted(int(f) for f in fields) == [HOUR + i * 10_000 for i in range(cut, 2_400)]


def staged_only(sink: RedisRollupSink, batches: list, monkeypatch: pytest.MonkeyPatch) -> WindowWriter:
    """Commits (stages) `batches` through the sink, merging none; a writer of the sink's query."""
    monkeypatch.setattr(sink.windows, "submit", lambda *_: None)
    for batch_id, windows in enumerate(batches):
        sink.write(windows, batch_id)
    return WindowWriter(sink.client, sink.batch_scope)


def renamed(sink: RedisRollupSink, name: str) -> dict:
    return {k.replace(name, "T"): v for k, v in snapshot(sink.client, match=f"*{name}*").items()}


def test_batches_merged_at_the_finest_size_then_at_every_size_equal_batches_merged_at_every_size(
        redis_url: str, monkeypatch: pytest.MonkeyPatch):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    expected = run(new_sink(redis_url), topics[1], range(4))
    sink = new_sink(redis_url)
    writer = staged_only(sink, [batch(topics[0], 4 * b) for b in range(4)], monkeypatch)
    scope = sink.batch_scope

    def coarse() -> dict:
        return {k: v for k, v in renamed(sink, topics[0]).items() if not k.endswith(":10s")}

    writer.merge_staged([0])
    before = coarse()
    writer.merge_staged([1], every_size=False)
    writer.merge_staged([2], every_size=False)
    assert writer.behind and coarse() == before  # the 1 min and 1 h windows wait
    assert (sink.client.get(layout.applied_batch_key(scope)),
            sink.client.get(layout.finest_applied_batch_key(scope))) == (b"0", b"2")
    assert not windows_merged(sink.client, sink.query_name, None)
    assert sink.client.exists(*(layout.staged_batch_key(scope, b) for b in (1, 2))) == 2  # kept for them
    writer.merge_staged([3])
    assert renamed(sink, topics[0]) == expected and not writer.behind
    assert sink.client.get(layout.applied_batch_key(scope)) == b"3"
    assert sink.client.exists(layout.finest_applied_batch_key(scope), *(layout.staged_batch_key(scope, b)
                                                                        for b in range(4))) == 0


def test_a_restart_merges_at_every_size_what_was_merged_at_the_finest_only(redis_url: str,
                                                                           monkeypatch: pytest.MonkeyPatch):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    expected = run(new_sink(redis_url), topics[1], range(3))
    sink = new_sink(redis_url)
    writer = staged_only(sink, [batch(topics[0], 4 * b) for b in range(3)], monkeypatch)
    writer.merge_staged([0])
    writer.merge_staged([1], every_size=False)
    writer.merge_staged([2], every_size=False)
    restarted = WindowWriter(sink.client, sink.batch_scope)  # a new process: nothing kept
    restarted.recover(2)
    assert renamed(sink, topics[0]) == expected and windows_merged(sink.client, sink.query_name, None)


def test_a_merge_at_every_size_cut_off_part_way_is_finished_on_restart(redis_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch):
    prefixes = [f"east.t{uuid.uuid4().hex[:6]}-" for _ in range(2)]
    whole = new_sink(redis_url)
    for batch_id in range(3):
        whole.write(topics_batch(prefixes[0], 24, 4 * batch_id), batch_id)
    cut = new_sink(redis_url)
    writer = staged_only(cut, [topics_batch(prefixes[1], 24, 4 * b) for b in range(3)], monkeypatch)
    writer.merge_staged([0])
    writer.merge_staged([1], every_size=False)
    sent: list[int] = []
    real_parts = writer.parts

    def dies_in_the_third_part(*args):
        for part, calls in real_parts(*args):
            if len(sent) == 2:
                raise ConnectionError("the process died between the merge's second and third part")
            sent.append(part)
            yield part, calls

    monkeypatch.setattr(writer, "parts", dies_in_the_third_part)
    with pytest.raises(ConnectionError):
        writer.merge_staged([2])
    progress = cast(dict, cut.client.hgetall(layout.merging_batches_key(cut.batch_scope)))
    assert (progress[b"first"], progress[b"last"], progress[b"sizes"]) == (b"1", b"2", b"all")
    restarted = WindowWriter(cut.client, cut.batch_scope)
    restarted.recover(2)
    assert renamed(cut, prefixes[1]) == renamed(whole, prefixes[0])


def test_a_transactions_answers_read_in_bulk_are_redis_pys_answers(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    key = f"answers{uuid.uuid4().hex[:8]}"
    # Enough commands that their QUEUED answers come in many reads; then one Redis refuses as it queues.
    many = [("HSET", f"{key}:{i % 7}", str(i), "x" * 600) for i in range(40_000)]
    for commands, refused in ((many, False), ([*many[:5], ("HSET", key), *many[5:9]], True)):
        answers = []
        for bulk in (True, False):
            client.delete(*(f"{key}:{i}" for i in range(7)))  # each run's HSETs answer alike
            connection = client.connection_pool.get_connection()
            try:
                connection.send_packed_command(connection.pack_commands([("MULTI",), *commands, ("EXEC",)]))
                if bulk:
                    answers.append(transaction_answers(connection, len(commands)))
                else:
                    for _ in range(len(commands) + 1):
                        connection.read_response()
                    answers.append(connection.read_response())
            except redis.ResponseError as exc:
                answers.append(str(exc))
                connection.disconnect()
            finally:
                client.connection_pool.release(connection)
        assert answers[0] == answers[1]
        assert isinstance(answers[0], str) == refused
    assert answers[0].startswith("wrong number of arguments")
    # A transaction a changed WATCHed key aborts: no answer, as redis-py gives it.
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command("WATCH", key)
        assert connection.read_response() == b"OK"
        client.set(key, "changed")
        connection.send_packed_command(connection.pack_commands([("MULTI",), *many[:3], ("EXEC",)]))
        assert transaction_answers(connection, 3) is None
    finally:
        client.connection_pool.release(connection)
    client.delete(key, *(f"{key}:{i}" for i in range(7)))
