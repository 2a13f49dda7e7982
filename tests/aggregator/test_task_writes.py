"""A task writing its own latest values and verdicts (aggregator.task_writes) and keeping its verdicts'
summary parts (aggregator.task_verdicts), against a real Redis: newest wins by ts over what Redis holds,
with or without the task's record; a replay leaves Redis as it was; subjects the cap has not admitted go to
the driver; hash lifetimes are set once and renewed hourly; parts made apart combine into the summary of
all, and the sink ages the parts of a Kafka partition whose task stopped running (STOP while the aggregator
runs)."""

from __future__ import annotations

import fnmatch
import uuid
from typing import cast

import numpy as np
import pyarrow as pa
import pytest
import redis

from aggregator import task_verdicts
from aggregator.latest_writes import EXPIRY_RENEWAL_MS
from aggregator.task_verdicts import VerdictPlace
from aggregator.task_writes import ROWS_SCHEMA, TaskWrites, write_own
from aggregator.verdict_summaries import VerdictColumns
from contract import lag_verdicts
from contract import redis_layout as layout

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
RAW = "srm-metrics.east.internal"


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def rows(*fields: tuple[str, str, int, str]) -> pa.Table:
    return pa.table([pa.array([f[k] for f in fields], t.type) for k, t in enumerate(ROWS_SCHEMA)],
                    schema=ROWS_SCHEMA)


def admitted_everything(rows: pa.Table) -> list[tuple[str, str, str] | None]:
    return [("west", "east", f"{key}|{name}|") for key, name in zip(rows["key"].to_pylist(),
                                                                   rows["field"].to_pylist(), strict=True)]


def admit(client: redis.Redis, table: pa.Table) -> None:
    for admitted in admitted_everything(table):
        assert admitted is not None
        client.zadd(layout.subjects_key("west", "east"), {admitted[2]: 0})


def test_newest_wins_over_the_record_and_over_redis(client: redis.Redis):
    target = f"w{uuid.uuid4().hex[:6]}"
    writes = TaskWrites(target, RAW, 0, T0)
    key = f"latest:{uuid.uuid4().hex[:6]}"
    first = rows((key, "0", 10, '{"ts":10,"v":1}'), (key, "1", 10, '{"ts":10,"v":1}'),
                 (key, "0", 9, '{"ts":9,"v":0}'))  # the newest of a field given twice wins
    admit(client, first)
    deferred, written, stats = write_own(client, writes, first, admitted_everything)
    assert deferred.num_rows == 0 and stats.written == 2 and stats.read == 2
    assert client.hgetall(key) == {b"0": b'{"ts":10,"v":1}', b"1": b'{"ts":10,"v":1}'}
    assert sorted(written.to_pylist()) == [f"{key}\x000", f"{key}\x001"]
    # From the record now: an older value is not written, an equal one replaces (a replay: the same bytes).
    replay = rows((key, "0", 9, '{"ts":9}'), (key, "1", 10, '{"ts":10,"v":2}'))
    _, _, stats = write_own(client, writes, replay, admitted_everything)
    assert stats.known == 2 and stats.read == 0 and stats.written == 1
    assert client.hgetall(key) == {b"0": b'{"ts":10,"v":1}', b"1": b'{"ts":10,"v":2}'}
    # The record lost, Redis holding newer: read from Redis, not rolled back.
    client.delete(writes.key)
    client.hset(key, "0", '{"ts":50}')
    _, _, stats = write_own(client, writes, rows((key, "0", 20, '{"ts":20}')), admitted_everything)
    assert stats.read == 1 and stats.written == 0 and client.hget(key, "0") == b'{"ts":50}'


def test_a_replayed_batch_leaves_redis_as_it_was(client: redis.Redis):
    target = f"w{uuid.uuid4().hex[:6]}"
    writes = TaskWrites(target, RAW, 3, T0)
    key = f"latest:{uuid.uuid4().hex[:6]}"
    batch = rows(*((key, str(p), 100 + p, f'{{"ts":{100 + p}}}') for p in range(50)))
    admit(client, batch)
    write_own(client, writes, batch, admitted_everything)
    before = cast(dict, client.hgetall(key))
    write_own(client, writes, rows((key, "7", 300, '{"ts":300}')), admitted_everything)
    write_own(client, writes, batch, admitted_everything)  # replayed after a newer one: nothing rolls back
    after = client.hgetall(key)
    assert after == {**before, b"7": b'{"ts":300}'}


def test_subjects_not_admitted_yet_are_left_to_the_driver(client: redis.Redis):
    target = f"w{uuid.uuid4().hex[:6]}"
    writes = TaskWrites(target, RAW, 0, T0)
    key = f"latest:{uuid.uuid4().hex[:6]}"
    batch = rows((key, "0", 10, '{"ts":10}'), (key, "1", 10, '{"ts":10}'))
    admit(client, batch.slice(0, 1))
    deferred, _, stats = write_own(client, writes, batch, admitted_everything)
    assert deferred.to_pylist() == [{"key": key, "field": "1", "ts": 10, "json": '{"ts":10}'}]
    assert client.hgetall(key) == {b"0": b'{"ts":10}'} and stats.deferred == 1
    admit(client, batch)  # the cap admitted it in that batch's commit; the driver wrote it
    client.hset(key, "1", '{"ts":10}')
    deferred, _, stats = write_own(client, writes, rows((key, "1", 11, '{"ts":11}')), admitted_everything)
    assert deferred.num_rows == 0 and stats.read == 1 and client.hget(key, "1") == b'{"ts":11}'


def test_a_hash_lifetime_is_set_at_its_first_write_and_renewed_once_a_period(client: redis.Redis):
    target = f"w{uuid.uuid4().hex[:6]}"
    key = f"latest:{uuid.uuid4().hex[:6]}"
    batch = rows((key, "0", 10, '{"ts":10}'))
    admit(client, batch)

    def write(ts: int, now: int) -> None:
        write_own(client, TaskWrites(target, RAW, 0, now),
                  rows((key, "0", ts, f'{{"ts":{ts}}}')), admitted_everything)

    write(10, T0)
    assert 0 < cast(int, client.pttl(key)) <= layout.LATEST_TTL_MS
    client.persist(key)  # a mark: whatever PEXPIRE comes next sets a lifetime again
    write(11, T0 + 1_000)
    assert client.pttl(key) == -1, "renewed within the period"
    write(12, T0 + EXPIRY_RENEWAL_MS)
    assert 0 < cast(int, client.pttl(key)) <= layout.LATEST_TTL_MS



def test_the_tasks_working_state_is_among_what_a_rebuild_clears():
    patterns = layout.target_rollup_patterns("west", "q")
    place = VerdictPlace("west", RAW, 3)
    for key in (TaskWrites("west", RAW, 3, T0).key, place.record_key, place.parts_key):
        assert any(fnmatch.fnmatchcase(key, p) for p in patterns), key


def verdict(topic: str, partition: int, ts: int, lag: int, end: int | None) -> dict:
    return {"ts": ts, "topic": topic, "partition": partition, "status": "OK" if lag <= 0 else "WARN",
            "reason": "OK" if lag <= 0 else "WARN", "complete": 1.0, "current_lag": lag,
            "start": None if end is None else [end - 20_000, 100, lag],
            "end": None if end is None else [end, 200, lag],
            "stop_after_ms": 15_000, "allowed_lag": 0, "lookback_ms": 100_000, "lag_seconds": None}


def table(target: str, records: list[dict]) -> pa.Table:
    fields = [lag_verdicts.verdict_field(r["topic"], r["partition"]) for r in records]
    return VerdictColumns.of_records(fields, records).table(target, "east")


def test_parts_of_two_tasks_combine_and_a_silent_one_turns_stop(client: redis.Redis):
    """Two Kafka partitions' tasks keep their partitions' verdicts; the sink's combination is the summary of
    all; one Kafka partition then brings no record: its task does not run, and the sink ages its parts from
    its record, its lagging partition turning STOP."""
    target = f"w{uuid.uuid4().hex[:6]}"
    first = [verdict("a", 0, T0, 0, T0), verdict("a", 1, T0, 5, T0)]
    second = [verdict("b", 0, T0, 3, T0)]
    for k, records in enumerate((first, second)):
        fresh = table(target, records)
        task_verdicts.keep_and_summarise(client, VerdictPlace(target, RAW, k), T0 + 1_000, fresh,
                                         np.ones(fresh.num_rows, bool), np.zeros(fresh.num_rows, bool))
        key = layout.lag_verdicts_key(target, "east")
        for r in records:  # as task_writes wrote them
            client.hset(key, lag_verdicts.verdict_field(r["topic"], r["partition"]), layout.encode_latest(r))
    parts = task_verdicts.stored_parts(client, target, T0 + 1_000)[(target, "east")]
    assert (layout.encode_latest(lag_verdicts.combined_summary(parts, T0 + 1_000))
            == layout.encode_latest(lag_verdicts.summary_record(first + second, T0 + 1_000)))
    # Kafka partition 0 goes on (newer reports), 1 goes silent: at T0 + 40 s its lagging partition is STOP.
    later = [verdict("a", 0, T0 + 39_000, 0, T0 + 39_000), verdict("a", 1, T0 + 39_000, 5, T0 + 39_000)]
    fresh = table(target, later)
    task_verdicts.keep_and_summarise(client, VerdictPlace(target, RAW, 0), T0 + 40_000, fresh,
                                     np.ones(2, bool), np.zeros(2, bool))
    for r in later:
        client.hset(layout.lag_verdicts_key(target, "east"),
                    lag_verdicts.verdict_field(r["topic"], r["partition"]), layout.encode_latest(r))
    summary = lag_verdicts.combined_summary(
        task_verdicts.stored_parts(client, target, T0 + 40_000)[(target, "east")], T0 + 40_000)
    assert summary == lag_verdicts.summary_record(later + second, T0 + 40_000)
    assert summary["reason"] == "STOP" and [p["topic"] for p in summary["problems"]] == ["a", "b"]


def test_a_replication_whose_verdicts_left_their_lookback_is_still_summarised(client: redis.Redis):
    """As the driver summarised every replication it kept: no partition in the lookback, a summary all the
    same (NOTFOUND, none), not the last one left standing."""
    target = f"w{uuid.uuid4().hex[:6]}"
    place = VerdictPlace(target, RAW, 0)
    fresh = table(target, [verdict("a", 0, T0, 5, T0)])
    task_verdicts.keep_and_summarise(client, place, T0 + 1_000, fresh, np.ones(1, bool), np.zeros(1, bool))
    none = fresh.slice(0, 0)  # a later batch without a report of it
    task_verdicts.keep_and_summarise(client, place, T0 + 500_000, none, np.ones(0, bool), np.zeros(0, bool))
    parts = task_verdicts.stored_parts(client, target, T0 + 500_000)[(target, "east")]
    assert lag_verdicts.combined_summary(parts, T0 + 500_000) == lag_verdicts.summary_record([], T0 + 500_000)
