"""The rollup sink on a real Redis: partials merged into every window size exactly, replays change
nothing, latest values derived from the merged history."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import cast

import pyarrow as pa
import pytest
import redis

from aggregator import latest_writes
from aggregator.raw_records import INVALID_KIND
from aggregator.redis_sink import RedisRollupSink
from aggregator.window_partials import ALL_METRICS, STATS, BatchPartials, latest_of, partials_schema
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics, ReplicationMetrics
from tests.aggregator.streaming_input import judged_as_a_task, snapshot

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000  # an hour boundary


def partial(start_ms: int, count: float, total: float, low: float, high: float, last: float,
            partition: int = 0, metric: str = "record_count", topic: str = "east.orders",
            source: str = "east",
            last_ts: int | None = None, kind: str = "partition", level: str = "p",
            max_ts: int | None = None) -> dict:
    """A row of rollups.window_partials with one metric set."""
    row = {"kind": kind, "level": level, "target": "west", "source": source, "group": "", "topic": topic,
           "partition": partition, "window_start": start_ms, "max_ts": max_ts or last_ts or start_ms,
           "upstream_topic": None if topic == layout.ALL_TOPICS else "orders"}
    row |= {f"{name}__{s}": None for name in ALL_METRICS for s in (*STATS, "last_ts")}
    row |= {f"{metric}__n": count, f"{metric}__sum": total, f"{metric}__min": low, f"{metric}__max": high,
            f"{metric}__last": last, f"{metric}__last_ts": last_ts or start_ms}
    return row


def row(start_ms: int, count: float, total: float, low: float, high: float, last: float, **kw) -> dict:
    return partial(start_ms, count, total, low, high, last, **kw)


@pytest.fixture
def sink(redis_url: str) -> RedisRollupSink:
    return RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}")


def members(client: redis.Redis, window: str, metric: str = "record_count", partition: int = 0,
            topic: str = "east.orders") -> list[layout.WindowAggregate]:
    key = layout.series_key(layout.SeriesId("west", "east", topic, partition, metric), window)
    held = layout.hash_members(cast(dict, client.hgetall(key)))
    return [w for m in held if (w := layout.metric_window(m, metric)) is not None]


def test_partials_merge_into_every_window_size(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    write(sink, [row(HOUR, 1, 10, 10, 10, 10, topic=topic), row(HOUR + 10_000, 2, 5, 1, 4, 4, topic=topic),
                row(HOUR + 60_000, 1, 7, 7, 7, 7, topic=topic)], batch_id=0)
    client = sink.client
    assert members(client, "1m", topic=topic) == [
        layout.WindowAggregate(HOUR, 3, 15, 1, 10, 4), layout.WindowAggregate(HOUR + 60_000, 1, 7, 7, 7, 7)]
    assert members(client, "1h", topic=topic) == [layout.WindowAggregate(HOUR, 4, 22, 1, 10, 7)]
    # A later batch brings more samples of a 10 s window: they merge in, and the parents follow. Its
    # `last` is older than the stored one, so the stored last stays.
    write(sink, [row(HOUR + 10_000, 1, 6, 6, 6, 6, topic=topic, last_ts=HOUR + 10_001)], batch_id=1)
    assert members(client, "10s", topic=topic)[1] == layout.WindowAggregate(HOUR + 10_000, 3, 11, 1, 6, 6)
    assert members(client, "1h", topic=topic) == [layout.WindowAggregate(HOUR, 5, 28, 1, 10, 7)]
    assert members(client, "1h", topic=topic)[0].last_ts == HOUR + 60_000


def snapshot_of(sink: RedisRollupSink, topic: str) -> dict:
    return snapshot(sink.client, match=f"*{topic}*")


def test_replayed_batches_leave_redis_identical(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    batch = [row(HOUR + i * 10_000, 1, i, i, i, i, partition=i % 2, topic=topic) for i in range(12)]
    write(sink, batch, batch_id=5)
    before = snapshot_of(sink, topic)
    write(sink, batch, batch_id=5)  # Spark re-runs the last batch after a crash
    write(sink, batch, batch_id=4)
    assert sink.last_batch_id() == 5
    assert snapshot_of(sink, topic) == before


def test_one_batch_or_many_give_the_same_windows(redis_url: str):
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(2)]
    # Two partials per window in the split run: the same samples, differently cut.
    starts = [HOUR + i * 10_000 for i in range(9)]
    whole = [row(t, 2, 2 * i + 1, i, i + 1, i + 1, topic=topics[0], last_ts=t + 5)
             for i, t in enumerate(starts)]
    halves = [[row(t, 1, i, i, i, i, topic=topics[1], last_ts=t + 1) for i, t in enumerate(starts)],
              [row(t, 1, i + 1, i + 1, i + 1, i + 1, topic=topics[1], last_ts=t + 5)
               for i, t in enumerate(starts)]]
    one, many = (RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}") for _ in range(2))
    write(one, whole, batch_id=0)
    write(many, halves[1], batch_id=0)
    write(many, halves[0], batch_id=1)

    def rename(snapshot: dict, topic: str) -> dict:
        return {k.replace(topic, "T"): v for k, v in snapshot.items()}

    assert rename(snapshot_of(one, topics[0]), topics[0]) == rename(snapshot_of(many, topics[1]), topics[1])


def test_retention_trims_old_windows_and_keys_expire(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    retention = layout.WINDOWS["10s"].retention_ms
    write(sink, [row(HOUR, 1, 1, 1, 1, 1, topic=topic)], batch_id=0)
    write(sink, [row(HOUR + retention + 10_000, 1, 2, 2, 2, 2, topic=topic)], batch_id=1)
    assert [m.start_ms for m in members(sink.client, "10s", topic=topic)] == [HOUR + retention + 10_000]
    key = layout.series_key(layout.SeriesId("west", "east", topic, 0, "record_count"), "10s")
    assert 0 < cast(int, sink.client.pttl(key)) <= layout.key_ttl_ms("10s")


def test_discovery_indexes(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    write(sink, [row(HOUR, 1, 1, 1, 1, 1, partition=3, topic=topic),
                row(HOUR, 1, 1, 1, 1, 1, partition=layout.WHOLE_TOPIC, topic=topic)], batch_id=0)
    client = sink.client
    assert b"west" in cast(set, client.smembers(layout.targets_key()))
    assert b"east" in cast(set, client.smembers(layout.sources_key("west")))
    assert client.hget(layout.topics_key("west", "east"), topic) == b"orders"
    assert client.smembers(layout.partitions_key("west", "east", topic)) == {b"3"}


def test_index_sets_sent_when_they_change_or_their_lifetime_is_due(sink: RedisRollupSink):
    """A partition set the sink wrote is not sent again with the same members within EXPIRY_RENEWAL_MS; a
    new member, a due renewal, or a sink that forgot what it wrote sends it whole."""
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    key = layout.partitions_key("west", "east", topic)
    client = sink.client
    write(sink, [row(HOUR, 1, 1, 1, 1, 1, partition=3, topic=topic)], batch_id=0)
    client.persist(key)  # a lifetime the next SADD and PEXPIRE would set again
    write(sink, [row(HOUR + 10_000, 1, 1, 1, 1, 1, partition=3, topic=topic)], batch_id=1)
    assert client.pttl(key) == -1, "the same members, within the renewal period: not sent"
    write(sink, [row(HOUR + 20_000, 1, 1, 1, 1, 1, partition=4, topic=topic)], batch_id=2)
    assert client.smembers(key) == {b"3", b"4"}
    assert 0 < cast(int, client.pttl(key)) <= layout.INDEX_TTL_MS
    client.persist(key)
    sink._forget()  # as a failed batch leaves it
    write(sink, [row(HOUR + 30_000, 1, 1, 1, 1, 1, partition=3, topic=topic)], batch_id=3)
    assert 0 < cast(int, client.pttl(key)) <= layout.INDEX_TTL_MS


def latest_row(record, topic: str, partition: int, source: str = "east") -> dict:
    """A record as window_partials.latest_records gives it."""
    fields = {k: v for k, v in asdict(record).items() if v is not None and not isinstance(v, dict)}
    return fields | {"source": source, "topic": topic, "partition": partition, "group": ""}


def write(sink: RedisRollupSink, rows: list[dict], batch_id: int) -> None:
    """Partial-window rows and latest records (those without a window) as one batch."""
    windows = [r for r in rows if "window_start" in r]
    table = pa.Table.from_pylist(windows, schema=partials_schema())
    batch = BatchPartials(table, latest_of(r for r in rows if "window_start" not in r), {})
    sink.write(judged_as_a_task(sink, batch), batch_id)


def partition_report(ts: int, topic: str, end: int, lag: int) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=10_000, source="east", target="west", topic=topic,
                            upstream_topic="orders", partition=0, record_count=1, byte_count=1,
                            records_lag=lag, source_end_offset=end, upstream_offset=end - lag - 1,
                            target_offset=7)


def test_latest_values_never_go_back_in_time(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    key = layout.partition_latest_key("west", "east", topic)
    write(sink, [row(HOUR, 1, 100, 100, 100, 100, metric="source_end_offset", topic=topic),
                latest_row(partition_report(HOUR + 5000, topic, 100, 0), topic, 0)], batch_id=0)
    assert layout.decode_latest(cast(bytes, sink.client.hget(key, "0")))["lag_seconds"] == 0.0
    newer = partition_report(HOUR + 25_000, topic, 300, 150)
    write(sink, [row(HOUR + 10_000, 1, 200, 200, 200, 200, metric="source_end_offset", topic=topic),
                row(HOUR + 20_000, 1, 300, 300, 300, 300, metric="source_end_offset", topic=topic),
                latest_row(newer, topic, 0)], batch_id=1)
    value = layout.decode_latest(cast(bytes, sink.client.hget(key, "0")))
    # Next offset to replicate 150: half-way between 100 (HOUR+5 s) and 200 (HOUR+15 s) -> 15 s ago.
    assert value == {"ts": HOUR + 25_000, "records_lag": 150, "lag_seconds": pytest.approx(15.0),
                     "source_end_offset": 300, "upstream_offset": 149, "target_offset": 7}
    write(sink, [latest_row(partition_report(HOUR + 15_000, topic, 200, 0), topic, 0)],
               batch_id=2)  # a late report
    assert layout.decode_latest(cast(bytes, sink.client.hget(key, "0")))["ts"] == HOUR + 25_000



def test_a_stale_field_is_left_while_its_neighbours_in_the_hash_are_written(sink: RedisRollupSink):
    """Latest values go to Redis one call per hash: each field is still judged by its own ts."""
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    key = layout.partition_latest_key("west", "east", topic)
    write(sink, [latest_row(partition_report(HOUR + 25_000, topic, 300, 0), topic, p) for p in (0, 1)],
          batch_id=0)
    write(sink, [latest_row(partition_report(HOUR + 15_000, topic, 200, 0), topic, 0),  # late
                 latest_row(partition_report(HOUR + 35_000, topic, 400, 0), topic, 1)], batch_id=1)
    fields = cast(dict, sink.client.hgetall(key))
    stored = {f.decode(): layout.decode_latest(v)["ts"] for f, v in fields.items()}
    assert stored == {"0": HOUR + 25_000, "1": HOUR + 35_000}
    assert 0 < cast(int, sink.client.pttl(key)) <= layout.LATEST_TTL_MS


def test_a_restarted_sink_reads_each_field_once_and_keeps_a_newer_stored_value(redis_url: str):
    """Newest wins, decided by the sink from what it wrote; a sink new to a field (a restart: another
    process wrote it) reads it first, so a newer stored value stays and an older one is replaced."""
    key = f"latest:{uuid.uuid4().hex[:6]}"
    first = RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}")
    first._write_latest([(key, "0", {"ts": 10, "v": "sink"}), (key, "1", {"ts": 10, "v": "sink"})])
    first.client.hset(key, mapping={"0": layout.encode_latest({"ts": 30, "v": "before"}),
                                    "1": layout.encode_latest({"ts": 5, "v": "before"})})
    restarted = RedisRollupSink(redis_url, first.query_name)
    restarted._write_latest([(key, "0", {"ts": 20, "v": "sink"}), (key, "1", {"ts": 20, "v": "sink"})])
    fields = cast(dict, restarted.client.hgetall(key))
    stored = {f.decode(): layout.decode_latest(v) for f, v in fields.items()}
    assert stored == {"0": {"ts": 30, "v": "before"}, "1": {"ts": 20, "v": "sink"}}
    assert 0 < cast(int, restarted.client.pttl(key)) <= layout.LATEST_TTL_MS


def test_a_hash_of_thousands_of_fields_is_written_in_chunks(redis_url: str, monkeypatch: pytest.MonkeyPatch):
    """A replication's verdicts are one hash: more fields than one HSET takes."""
    monkeypatch.setattr(latest_writes, "FIELDS_PER_HSET", 700)
    key = f"latest:{uuid.uuid4().hex[:6]}"
    first = RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}")
    first._write_latest([(key, str(p), {"ts": 10}) for p in range(5_000)])
    first.client.hset(key, "4321", layout.encode_latest({"ts": 99}))
    restarted = RedisRollupSink(redis_url, first.query_name)
    restarted._write_latest([(key, str(p), {"ts": 20}) for p in range(5_000)])
    fields = cast(dict, restarted.client.hgetall(key))
    stored = {f.decode(): layout.decode_latest(v)["ts"] for f, v in fields.items()}
    assert stored == {str(p): 99 if p == 4321 else 20 for p in range(5_000)}
    assert 0 < cast(int, restarted.client.pttl(key)) <= layout.LATEST_TTL_MS


def test_a_value_the_field_holds_already_is_not_sent_again(sink: RedisRollupSink):
    """A replayed batch's values are the ones Redis holds: not sent. A value of the same ts that differs
    is (derived again from more windows), and after a failed write the sink reads the field again."""
    key = f"latest:{uuid.uuid4().hex[:6]}"
    sink._write_latest([(key, "0", {"ts": 10, "v": 1}), (key, "0", {"ts": 9, "v": 0})])  # the newest wins
    sink.client.hset(key, "0", "seen")  # a mark: whatever is sent next replaces it
    sink._write_latest([(key, "0", {"ts": 10, "v": 1})])
    assert sink.client.hget(key, "0") == b"seen"
    sink._write_latest([(key, "0", {"ts": 9, "v": 2})])  # older: not written either
    assert sink.client.hget(key, "0") == b"seen"
    sink.latest_writer.clear()  # as a failed write leaves it: the field is read, "seen" is no value
    sink._write_latest([(key, "0", {"ts": 10, "v": 1})])
    assert layout.decode_latest(cast(bytes, sink.client.hget(key, "0"))) == {"ts": 10, "v": 1}
    sink._write_latest([(key, "0", {"ts": 10, "v": 3})])
    assert layout.decode_latest(cast(bytes, sink.client.hget(key, "0"))) == {"ts": 10, "v": 3}


def test_a_hash_lifetime_is_set_at_its_first_write_and_renewed_once_a_period(
        sink: RedisRollupSink, monkeypatch: pytest.MonkeyPatch):
    """A PEXPIRE at every write was half a batch's commands: the writer sets a hash's lifetime the first
    time it writes it (and after it forgot what it wrote), then again once EXPIRY_RENEWAL_MS passed."""
    key = f"latest:{uuid.uuid4().hex[:6]}"
    sink._write_latest([(key, "0", {"ts": 10})])
    assert 0 < cast(int, sink.client.pttl(key)) <= layout.LATEST_TTL_MS
    sink.client.persist(key)  # a mark: whatever PEXPIRE comes next sets a lifetime again
    sink._write_latest([(key, "0", {"ts": 11})])
    assert sink.client.pttl(key) == -1, "renewed within the period"
    assert layout.decode_latest(cast(bytes, sink.client.hget(key, "0")))["ts"] == 11
    monkeypatch.setattr(latest_writes, "EXPIRY_RENEWAL_MS", 0)
    sink._write_latest([(key, "0", {"ts": 12})])
    assert 0 < cast(int, sink.client.pttl(key)) <= layout.LATEST_TTL_MS
    monkeypatch.undo()
    sink.client.persist(key)
    sink.latest_writer.clear()  # as a failed write leaves it
    sink._write_latest([(key, "0", {"ts": 13})])
    assert 0 < cast(int, sink.client.pttl(key)) <= layout.LATEST_TTL_MS


def test_latest_values_split_into_hsets_keep_each_fields_rule(sink: RedisRollupSink,
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(latest_writes, "FIELDS_PER_HSET", 1)  # an HSET a field
    topics = [f"east.t{uuid.uuid4().hex[:6]}" for _ in range(3)]
    write(sink, [latest_row(partition_report(HOUR + 25_000, t, 300, 0), t, p)
                 for t in topics for p in (0, 1)], batch_id=0)
    write(sink, [latest_row(partition_report(HOUR + (15_000 if i == 1 else 35_000), t, 400, 0), t, 0)
                 for i, t in enumerate(topics)], batch_id=1)  # the second topic's report is late
    keys = [layout.partition_latest_key("west", "east", t) for t in topics]
    stored = [layout.decode_latest(cast(bytes, sink.client.hget(key, "0")))["ts"] for key in keys]
    assert stored == [HOUR + 35_000, HOUR + 25_000, HOUR + 35_000]
    assert all(layout.decode_latest(cast(bytes, sink.client.hget(key, "1")))["ts"] == HOUR + 25_000
               for key in keys)


def test_replication_counts_follow_windows_that_come_after_the_report(sink: RedisRollupSink):
    source = f"s{uuid.uuid4().hex[:6]}"
    report = ReplicationMetrics(ts=HOUR + 20_000, period_ms=10_000, source=source, target="west",
                                status="RUNNING", workers=1, tasks=2, topics_replicated=3)
    write(sink, [latest_row(report, layout.ALL_TOPICS, layout.WHOLE_TOPIC, source)],
               batch_id=0)
    key = layout.replication_status_key("west", source)
    replication = layout.decode_latest(cast(bytes, sink.client.hget(key, "replication")))
    assert replication["recent_record_counts"][-1] == 0
    # The partition records of the same report arrive in the next batch (another Kafka partition).
    counts = row(HOUR + 20_000, 2, 9, 4, 5, 5, topic=layout.ALL_TOPICS, partition=layout.WHOLE_TOPIC,
                 source=source, level="r")
    write(sink, [counts], batch_id=1)
    value = layout.decode_latest(cast(bytes, sink.client.hget(key, "replication")))
    assert value["recent_record_counts"][-3:] == [0, 0, 9]
    assert (value["status"], value["tasks"], value["topics_replicated"]) == ("RUNNING", 2, 3)


def test_a_batch_of_replication_reports_only(sink: RedisRollupSink):
    source = f"s{uuid.uuid4().hex[:6]}"
    report = ReplicationMetrics(ts=HOUR + 1000, period_ms=10_000, source=source, target="west",
                                status="PAUSED")
    no_metrics = partial(HOUR, 1, 1, 1, 1, 1, topic=layout.ALL_TOPICS, partition=layout.WHOLE_TOPIC,
                         source=source, kind="replication") | {"record_count__n": None}
    write(sink, [no_metrics, latest_row(report, layout.ALL_TOPICS, layout.WHOLE_TOPIC, source)], batch_id=0)
    key = layout.replication_status_key("west", source)
    value = layout.decode_latest(cast(bytes, sink.client.hget(key, "replication")))
    assert value["status"] == "PAUSED" and sink.last_batch_id() == 0


def test_invalid_records_are_counted_once(sink: RedisRollupSink):
    source = f"s{uuid.uuid4().hex[:6]}"

    def invalid(start: int, count: int, first_offset: int, last_offset: int) -> dict:
        return partial(start, count, count, first_offset, last_offset, last_offset, topic=layout.ALL_TOPICS,
                       source=source, metric=layout.INVALID_RECORDS_METRIC, kind=INVALID_KIND)

    total = layout.invalid_records_key("west", source)
    write(sink, [invalid(HOUR, 2, 0, 1)], batch_id=0)
    write(sink, [invalid(HOUR, 1, 2, 2), invalid(HOUR + 10_000, 1, 3, 3)], batch_id=1)
    assert int(cast(bytes, sink.client.get(total))) == 4
    write(sink, [invalid(HOUR + 10_000, 1, 3, 3)], batch_id=1)  # replayed: skipped
    assert int(cast(bytes, sink.client.get(total))) == 4
    key = layout.series_key(layout.SeriesId("west", source, layout.ALL_TOPICS, 0,
                                            layout.INVALID_RECORDS_METRIC), "1m")
    windows = [layout.metric_window(m, layout.INVALID_RECORDS_METRIC)
               for m in layout.hash_members(cast(dict, sink.client.hgetall(key)))]
    assert [(w.count, w.min, w.max) for w in windows if w is not None] == [(4, 0, 3)]


def test_history_kept_across_batches_equals_redis(redis_url: str):
    """A sink that kept the end-offset history and a fresh one reading it from Redis agree."""
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    scope = f"test_{uuid.uuid4().hex[:8]}"
    kept = RedisRollupSink(redis_url, scope)
    first = latest_row(partition_report(HOUR + 1000, topic, 0, 0), topic, 0)
    for k in range(5):
        end, start = 100 * k, HOUR + k * 10_000
        ends = row(start, 1, end, end, end, end, metric="source_end_offset", topic=topic,
                   last_ts=start + 5000)
        write(kept, [first] * (k == 0) + [ends], batch_id=k)
    report = partition_report(HOUR + 55_000, topic, 600, 250)
    fresh = RedisRollupSink(redis_url, scope)
    assert fresh.history.series == {}
    key = layout.partition_latest_key("west", "east", topic)
    values = []
    for sink in (kept, fresh):
        sink.client.hdel(key, "0")
        last = sink.last_batch_id()
        assert last is not None  # both wrote batches to this scope
        write(sink, [latest_row(report, topic, 0)], batch_id=last + 1)
        values.append(layout.decode_latest(cast(bytes, sink.client.hget(key, "0"))))
    # Next offset to replicate 350: half-way between 300 (HOUR+35 s) and 400 (HOUR+45 s) -> 15 s ago.
    assert values[0] == values[1] and values[0]["lag_seconds"] == pytest.approx(15.0)


@pytest.mark.parametrize("window", list(layout.WINDOWS))
def test_each_window_size_keeps_its_own_retention(sink: RedisRollupSink, window: str):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    spec = layout.WINDOWS[window]
    later = HOUR + spec.retention_ms + spec.size_ms
    write(sink, [row(HOUR, 1, 1, 1, 1, 1, topic=topic)], batch_id=0)
    write(sink, [row(later, 1, 2, 2, 2, 2, topic=topic)], batch_id=1)
    starts = {w: [m.start_ms for m in members(sink.client, w, topic=topic)] for w in layout.WINDOWS}
    assert starts[window] == [layout.window_start(later, window)]
    for coarser in list(layout.WINDOWS)[list(layout.WINDOWS).index(window) + 1:]:
        assert len(starts[coarser]) == 2, f"{coarser} windows outlive the {window} retention"
    for name in layout.WINDOWS:
        key = layout.series_key(layout.SeriesId("west", "east", topic, 0, "record_count"), name)
        assert 0 < cast(int, sink.client.pttl(key)) <= layout.key_ttl_ms(name)
    index = layout.partitions_key("west", "east", topic)
    assert 0 < cast(int, sink.client.pttl(index)) <= layout.INDEX_TTL_MS
