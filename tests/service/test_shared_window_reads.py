"""The reader picks one metric out of a subject's shared sorted set (contract.redis_layout), written here
straight through the layout so that these tests do not depend on the aggregator's writer."""

from __future__ import annotations

import uuid

import pytest
import redis

from contract import redis_layout as layout
from contract.redis_layout import SeriesId, WindowAggregate
from service.metrics_reader import NEWEST_LOOKBACK, MetricsReader, Replication

START = 1_700_000_040_000
MINUTE = 60_000


@pytest.fixture
def reader(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    yield MetricsReader(client)
    client.close()


@pytest.fixture
def names() -> tuple[str, str]:
    uid = uuid.uuid4().hex[:6]
    return f"west{uid}", f"east{uid}"


def agg(start: int, value: float) -> WindowAggregate:
    return WindowAggregate(start, 1, value, value, value, value, start + 1)


def store(client: redis.Redis, series: SeriesId, windows: dict[int, dict[str, float]],
          size: str = "1m") -> None:
    """One member per window start, holding the metrics given for it."""
    members = {str(start): layout.encode_member(start, {m: agg(start, v) for m, v in held.items()})
               for start, held in windows.items()}
    client.hset(layout.series_key(series, size), mapping={**members, layout.NEWEST_FIELD: max(windows)})


def test_newest_window_of_a_metric_is_the_newest_member_holding_it(reader, names):
    target, source = names
    topic = SeriesId(target, source, f"{source}.t", layout.WHOLE_TOPIC, "record_count")
    store(reader.client, topic, {
        START: {"record_count": 1, "replication_latency_ms": 40, "records_lag": 3},
        START + MINUTE: {"record_count": 2, "records_lag": 4},  # no records: no latency
        START + 2 * MINUTE: {"record_count": 0.5},
    })
    asked = [SeriesId(target, source, topic.topic, layout.WHOLE_TOPIC, m)
             for m in ("record_count", "replication_latency_ms", "records_lag", "target_offset")]
    newest = reader.newest_windows(asked, "1m")
    assert [(w.start_ms, w.sum) if w else None for w in newest] == [
        (START + 2 * MINUTE, 0.5), (START, 40), (START + MINUTE, 4), None]


def test_a_metric_quiet_past_the_look_back_has_no_newest_window(reader, names):
    target, source = names
    series = SeriesId(target, source, f"{source}.t", layout.WHOLE_TOPIC, "record_age_ms")
    windows = {START + i * MINUTE: {"record_count": i + 1} for i in range(1, NEWEST_LOOKBACK + 1)}
    store(reader.client, series, {START: {"record_age_ms": 9}, **windows})
    assert reader.newest_windows([series], "1m") == [None]
    # The look-back counts window starts back from the newest, held or not: the newest ten are in it.
    inside = START + MINUTE
    member = layout.encode_member(inside, {"record_age_ms": agg(inside, 8), "record_count": agg(inside, 2)})
    reader.client.hset(layout.series_key(series, "1m"), str(inside), member)
    assert reader.newest_windows([series], "1m")[0].sum == 8


def test_metrics_of_one_subject_read_apart_from_one_set(reader, names):
    target, source = names
    offset = SeriesId(target, source, f"{source}.t", 0, "source_end_offset")
    lag = SeriesId(target, source, f"{source}.t", 0, "records_lag")
    other = SeriesId(target, source, f"{source}.t", 1, "records_lag")
    store(reader.client, offset, {START: {"source_end_offset": 100, "records_lag": 5},
                                  START + MINUTE: {"source_end_offset": 110}}, "10s")
    store(reader.client, other, {START: {"records_lag": 7}}, "10s")
    found = reader.windows([offset, lag, other], "10s", START, START + MINUTE, charged=False)
    assert [[(w.start_ms, w.last) for w in windows] for windows in found] == [
        [(START, 100), (START + MINUTE, 110)], [(START, 5)], [(START, 7)]]


def test_a_topic_metric_skips_windows_without_it_and_corrupt_members(reader, names, caplog):
    target, source = names
    series = SeriesId(target, source, f"{source}.t", layout.WHOLE_TOPIC, "record_count")
    store(reader.client, series, {START: {"record_count": 3, "byte_count": 30},
                                  START + MINUTE: {"byte_count": 20},
                                  START + 2 * MINUTE: {"record_count": 4}})
    reader.client.hset(layout.series_key(series, "1m"), str(START + 3 * MINUTE), b"garbage")
    end = START + 3 * MINUTE
    answer = reader.topic_metric(source, target, series.topic, "record_count", START, end, "1m")
    assert [(p.ts, p.value) for p in answer.series] == [(START, 3), (START + 2 * MINUTE, 4)]
    assert "not a window member: 'garbage'" in caplog.text


def test_replication_level_metrics_share_their_members(reader, names):
    target, source = names
    whole = SeriesId(target, source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "record_count")
    store(reader.client, whole, {START: {"record_count": 3, "byte_count": 30}})
    replication = Replication(source, target, {f"{source}.t": "t"})
    found = reader.replication_level_members([replication], ("record_count", "byte_count"), "1m",
                                             START, START)
    assert found[(source, target, "record_count")] is found[(source, target, "byte_count")]
    answer = reader.replication_metric(replication, "byte_count", START, START, "1m")
    assert answer.value == 30
