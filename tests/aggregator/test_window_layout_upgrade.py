"""Old-layout windows (one sorted set per metric) moved into the current layout, against a real Redis."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import cast

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator import window_layout_upgrade as upgrade
from aggregator.query import RollupQuerySpec
from aggregator.supervisor import QuerySupervisor, RestartCounter
from aggregator.window_layout_upgrade import UpgradeCounts, upgrade_windows
from contract import legacy_redis_layout as legacy
from contract import redis_layout as layout
from contract.redis_layout import SeriesId, WindowAggregate

T0 = 1_700_002_800_000  # a whole hour
ODD_GROUP = "a:b|c{d}%"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def target(client: redis.Redis) -> Iterator[str]:
    """A target of its own, its keys (old and new layout) deleted after the test."""
    name = f"up-{uuid.uuid4().hex[:8]}"
    yield name
    tag = legacy.legacy_target_pattern(name).removeprefix("srm:ts:")
    for pattern in (f"srm:ts:{tag}", f"srm:win:{tag}", f"srm:wh:{tag}"):
        keys = list(client.scan_iter(match=pattern))
        if keys:
            client.delete(*keys)


def subjects(target: str) -> list[SeriesId]:
    """A topic-partition, the whole topic and a consumer group's partition (metric set per key)."""
    return [SeriesId(target, "east", "east.t", 0, ""),
            SeriesId(target, "east", "east.t", layout.WHOLE_TOPIC, ""),
            SeriesId(target, "east", "east.t", 0, "", group=ODD_GROUP)]


METRICS = [("record_count", "byte_count", "replication_latency_ms"), ("record_count", "records_lag"),
           ("group_lag", "group_upstream_offset")]


def put_old(client: redis.Redis, series: SeriesId, window: str, members: list[str], ttl_ms: int) -> str:
    key = legacy.legacy_series_key(series, window)
    client.zadd(key, {m: int(m.split(":")[0]) if m.split(":")[0].isdigit() else 0 for m in members})
    client.pexpire(key, ttl_ms)
    return key


def read_new(client: redis.Redis, series: SeriesId, window: str) -> dict[int, dict[str, tuple]]:
    """start -> metric -> (count, sum, min, max, last, last ts) of the current key (a hash), its fields and
    newest start checked."""
    out = {}
    fields = cast(dict, client.hgetall(layout.series_key(series, window)))
    newest = fields.pop(layout.NEWEST_FIELD.encode(), None)
    for name, member in fields.items():
        start, metrics = layout.decode_member(member)
        assert int(name) == start
        out[start] = {m: (a.count, a.sum, a.min, a.max, a.last, a.last_ts) for m, a in metrics.items()}
    assert (int(newest) if newest is not None else None) == max(out, default=None)
    return out


def sorted_keys(client: redis.Redis, target: str) -> list[bytes]:
    return list(client.scan_iter(match=legacy.sorted_target_pattern(target)))


def old_keys(client: redis.Redis, target: str) -> list[bytes]:
    return list(client.scan_iter(match=legacy.legacy_target_pattern(target)))


def test_every_metric_of_a_subject_lands_in_one_member_per_window(client, target, redis_url):
    other = f"{target}-other"
    other_key = put_old(client, SeriesId(other, "east", "east.t", 0, "record_count"), "10s",
                        [f"{T0}:1:1:1:1:1"], 60_000)
    expected: dict[tuple[int, str], dict[int, dict[str, tuple]]] = {}
    expiry: dict[tuple[int, str], int] = {}
    for n, (subject, metrics) in enumerate(zip(subjects(target), METRICS, strict=True)):
        for window in ("10s", "1h"):
            size = layout.WINDOWS[window].size_ms
            for i, metric in enumerate(metrics):
                series = SeriesId(subject.target, subject.source, subject.topic, subject.partition, metric,
                                  subject.group)
                # One window with its last ts, one without (it reads as the window's start).
                members = [f"{T0}:{i + 2}:{n + 10.5}:1:{i + 7}:{i + 3}:{T0 + 1234}",
                           f"{T0 + size}:1:5:5:5:5"]
                key = put_old(client, series, window, members, layout.key_ttl_ms(window) - 1000 * (i + n))
                expiry[(n, window)] = max(expiry.get((n, window), 0), client.pexpiretime(key))
                got = expected.setdefault((n, window), {})
                got.setdefault(T0, {})[metric] = (i + 2, n + 10.5, 1, i + 7, i + 3, T0 + 1234)
                got.setdefault(T0 + size, {})[metric] = (1, 5, 5, 5, 5, T0 + size)

    counts = upgrade_windows(client, target)

    # 14 keys of a metric each into 6 sorted sets of a subject each, those into 6 hashes.
    assert counts == UpgradeCounts(keys_moved=2 * 7 + 3 * 2, windows_written=3 * 2 * 2)
    assert old_keys(client, target) == [] and sorted_keys(client, target) == []
    for (n, window), windows in expected.items():
        subject = subjects(target)[n]
        assert read_new(client, subject, window) == windows
        assert client.pexpiretime(layout.series_key(subject, window)) >= expiry[(n, window)]
    assert client.zrange(other_key, 0, -1) == [f"{T0}:1:1:1:1:1".encode()]  # another target's: untouched

    before = {(n, w): read_new(client, subjects(target)[n], w) for n, w in expected}
    assert upgrade_windows(client, target) == UpgradeCounts()
    assert {(n, w): read_new(client, subjects(target)[n], w) for n, w in expected} == before
    client.delete(other_key)


def test_a_window_the_new_layout_already_holds_is_merged_not_overwritten(client, target):
    subject = subjects(target)[0]
    new_key = layout.series_key(subject, "10s")
    existing = {"record_count": WindowAggregate(T0, 3, 30, 5, 15, 9, T0 + 9000),
                "record_age_ms": WindowAggregate(T0, 1, 4, 4, 4, 4, T0 + 1)}
    later = layout.encode_member(T0 + 20_000, {"record_count": WindowAggregate(T0 + 20_000, 1, 1, 1, 1, 1)})
    client.hset(new_key, mapping={str(T0): layout.encode_member(T0, existing), str(T0 + 20_000): later,
                                  layout.NEWEST_FIELD: T0 + 20_000})
    client.pexpire(new_key, layout.key_ttl_ms("10s"))
    new_expiry = client.pexpiretime(new_key)
    put_old(client, SeriesId(target, "east", "east.t", 0, "record_count"), "10s",
            [f"{T0}:2:6:1:5:2:{T0 + 100}"], 60_000)
    put_old(client, SeriesId(target, "east", "east.t", 0, "byte_count"), "10s", [f"{T0}:2:7:3:4:3"], 60_000)

    assert upgrade_windows(client, target) == UpgradeCounts(keys_moved=2 + 1, windows_written=1)

    assert read_new(client, subject, "10s") == {
        T0: {"record_count": (5, 36, 1, 15, 9, T0 + 9000),  # last: the newer of the two (new side's)
             "byte_count": (2, 7, 3, 4, 3, T0),
             "record_age_ms": (1, 4, 4, 4, 4, T0 + 1)},
        T0 + 20_000: {"record_count": (1, 1, 1, 1, 1, T0 + 20_000)}}
    assert client.pexpiretime(new_key) >= new_expiry  # the longer expiry of both sides is kept
    assert old_keys(client, target) == []


def test_an_unreadable_member_is_skipped_and_counted_the_rest_moved(client, target, caplog):
    subject = subjects(target)[0]
    bad_key = put_old(client, SeriesId(target, "east", "east.t", 0, "record_count"), "1m",
                      [f"{T0}:1:2:2:2:2", "garbage", f"{T0 + 60_000}:0:0:0:0:0"], 60_000)
    put_old(client, SeriesId(target, "east", "east.t", 0, "byte_count"), "1m", [f"{T0 + 60_000}:1:8:8:8:8"],
            60_000)
    # Keys the current layout cannot name stay where they are.
    unknown = put_old(client, SeriesId(target, "east", "east.t", 0, "retired_metric"), "1m",
                      [f"{T0}:1:1:1:1:1"], 60_000)
    bogus = legacy.legacy_target_pattern(target).replace("*", "bogus")
    client.zadd(bogus, {"x": 0})

    with caplog.at_level(logging.WARNING, logger=upgrade.__name__):
        counts = upgrade_windows(client, target)

    assert counts == UpgradeCounts(keys_moved=2 + 1, windows_written=2, members_skipped=2, keys_skipped=2)
    assert read_new(client, subject, "1m") == {T0: {"record_count": (1, 2, 2, 2, 2, T0)},
                                               T0 + 60_000: {"byte_count": (1, 8, 8, 8, 8, T0 + 60_000)}}
    mine = [r for r in caplog.records if r.name == upgrade.__name__]  # not an earlier test's thread's
    warnings = [r.getMessage() for r in mine]
    assert any(bad_key in w and "garbage" in w for w in warnings), warnings
    assert not any(r.exc_info for r in mine)
    assert sorted(old_keys(client, target)) == sorted([unknown.encode(), bogus.encode()])


def test_a_concurrent_write_aborts_the_group_which_is_read_and_moved_again(client, target, monkeypatch):
    subject = subjects(target)[0]
    new_key = legacy.sorted_series_key(subject, "10s")
    put_old(client, SeriesId(target, "east", "east.t", 0, "record_count"), "10s", [f"{T0}:1:1:1:1:1"], 60_000)
    read, calls = upgrade._read_group, []

    def racing_read(*args):
        move = read(*args)
        if not calls:  # the aggregator writes the window between the upgrade's read and its MULTI
            written = {"byte_count": WindowAggregate(T0, 1, 2, 2, 2, 2)}
            client.zadd(new_key, {layout.encode_member(T0, written): T0})
        calls.append(move)
        return move

    monkeypatch.setattr(upgrade, "_read_group", racing_read)
    assert upgrade_windows(client, target) == UpgradeCounts(keys_moved=1 + 1, windows_written=1)
    assert len(calls) == 2
    assert read_new(client, subject, "10s") == {T0: {"record_count": (1, 1, 1, 1, 1, T0),
                                                     "byte_count": (1, 2, 2, 2, 2, T0)}}


def test_a_sorted_set_of_the_layout_before_becomes_its_hash(client, target, caplog):
    subject = subjects(target)[1]
    old_key = legacy.sorted_series_key(subject, "1m")
    windows = {start: {"record_count": WindowAggregate(start, 1, n, n, n, n, start + 5)}
               for n, start in enumerate((T0, T0 + 60_000, T0 + 120_000), 1)}
    members = {layout.encode_member(s, w): s for s, w in windows.items()}
    client.zadd(old_key, {**members, "garbage": T0 + 180_000})
    client.pexpire(old_key, 90_000)
    # Another target's sorted set and a key that only looks like one stay where they are.
    other = legacy.sorted_series_key(replace(subject, target=f"{target}-other"), "1m")
    client.zadd(other, {layout.encode_member(T0, windows[T0]): T0})
    bogus = legacy.sorted_target_pattern(target).replace("*", "bogus")
    client.zadd(bogus, {"x": 0})

    with caplog.at_level(logging.WARNING, logger=upgrade.__name__):
        counts = upgrade_windows(client, target)

    assert counts == UpgradeCounts(keys_moved=1, windows_written=3, members_skipped=1, keys_skipped=1)
    assert read_new(client, subject, "1m") == {
        s: {"record_count": (1, n, n, n, n, s + 5)} for n, s in enumerate(windows, 1)}
    assert 0 < client.pttl(layout.series_key(subject, "1m")) <= 90_000
    assert sorted(sorted_keys(client, target)) == [bogus.encode()]
    assert client.exists(other) and any("garbage" in r.getMessage() for r in caplog.records)
    assert upgrade_windows(client, target) == UpgradeCounts(keys_skipped=1)
    client.delete(other, bogus)


class StoppedQuery:
    isActive = False
    lastProgress = None

    def exception(self) -> None:
        return None


def supervisor_of(target: str, redis_url: str, upgrade_layout) -> tuple[QuerySupervisor, list[str]]:
    spec = RollupQuerySpec(target=target, bootstrap_servers="unused:9092", redis_url=redis_url,
                           checkpoint_dir="unused")
    starts: list[str] = []

    def start(spark: SparkSession, spec: RollupQuerySpec) -> StreamingQuery:
        starts.append(spec.target)
        return cast(StreamingQuery, StoppedQuery())  # what the supervisor reads of one

    # No session: the supervisor takes none where its queries are stand-ins.
    return QuerySupervisor(cast(SparkSession, None), [spec], backoff_s=0.0, start=start,
                           counter=RestartCounter({}), upgrade_layout=upgrade_layout), starts


def test_the_supervisor_moves_a_target_before_its_query_first_starts_and_only_then(client, target, redis_url,
                                                                                    caplog):
    put_old(client, SeriesId(target, "east", "east.t", 0, "record_count"), "10s", [f"{T0}:1:1:1:1:1"], 60_000)
    runs = []

    def upgrade_layout(url: str, name: str) -> UpgradeCounts:
        runs.append(name)
        return upgrade.upgrade_target(url, name)

    supervisor, starts = supervisor_of(target, redis_url, upgrade_layout)
    with caplog.at_level(logging.INFO, logger=upgrade.__name__):
        supervisor.start_all()
    assert runs == starts == [target] and old_keys(client, target) == []
    assert any("1 windows moved" in r.getMessage() and target in r.getMessage() for r in caplog.records)
    for _ in range(2):  # the query stopped: it starts again (back-off 0), without moving again
        supervisor.check()
    assert runs == [target] and starts == [target] * 3
    supervisor.stop_all()


def test_a_query_waits_for_its_move_when_redis_failed_it(target, redis_url):
    failures = [redis.ConnectionError("Connection refused")]

    def upgrade_layout(url: str, name: str) -> UpgradeCounts:
        if failures:
            raise failures.pop()
        return UpgradeCounts()

    supervisor, starts = supervisor_of(target, redis_url, upgrade_layout)
    supervisor.start_all()
    assert starts == [] and supervisor.queries == {}
    assert supervisor.check() == [f"rollup_{target}"] and starts == [target]
    supervisor.stop_all()
