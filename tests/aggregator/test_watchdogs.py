"""Watchdogs: a hung Redis and a stalled query are recovered from, counted, and the counts reach the
service's /metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator import supervisor as supervisor_module
from aggregator.query import RollupQuerySpec, start_rollup_query
from aggregator.supervisor import QuerySupervisor, RestartCounter, trigger_seconds
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from contract.replication_policy import metrics_topic
from service.app import create_app
from stack.redis_server import RedisServer
from tests.aggregator.streaming_input import (
    WORKING_STATE,
    create_topic,
    new_source,
    produce,
    snapshot,
    topic_pattern,
    wait_merged,
    wait_until,
)

T0 = 1_700_006_400_000
# "Redis SIGSTOPped for 2 minutes" against the product's defaults (10 s socket and 5 s connect timeouts,
# a first batch's 120 s grace) is played at a quarter of that time scale: the same outage counted in
# timeouts (twelve socket timeouts long), in 30 s instead of 120.
TIME_SCALE = 0.25
PAUSE_S = 120 * TIME_SCALE
REDIS_TIMEOUTS = f"?socket_timeout={10 * TIME_SCALE}&socket_connect_timeout={5 * TIME_SCALE}"
RECOVERY_S = 30


def report(source: str, ts: int, count: int, partition: int = 0) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=10_000, source=source, target="east", topic=f"{source}.t",
                            upstream_topic="t", partition=partition, record_count=count,
                            byte_count=count * 10)


def total(client: redis.Redis, source: str) -> float:
    series = layout.SeriesId("east", source, f"{source}.t", layout.WHOLE_TOPIC, "record_count")
    replies = layout.hash_members(cast(dict, client.hgetall(layout.series_key(series, "1h"))))
    return sum(w.sum for m in replies if (w := layout.metric_window(m, series.metric)) is not None)


def spec_for(bootstrap: str, url: str, source: str, checkpoints: str) -> RollupQuerySpec:
    return RollupQuerySpec(target="east", bootstrap_servers=bootstrap, redis_url=url,
                           checkpoint_dir=checkpoints, trigger_interval="500 milliseconds",
                           watermark_delay_ms=3_600_000,
                           topics_pattern=topic_pattern(source))


def rollups(client: redis.Redis) -> dict:
    """Every key but the per-checkpoint sink state, the tasks' offset records and the restart counts (which
    differ on purpose)."""
    return snapshot(client,
                    exclude=lambda key: key.startswith((*WORKING_STATE, f"{layout.PREFIX}:aggregator:")))


def uninterrupted_rollups(spark, bootstrap: str, source: str, tmp_path) -> dict:
    reference = RedisServer(tmp_path / "redis-reference").start()
    try:
        spec = spec_for(bootstrap, reference.url, source, str(tmp_path / "ref-ckpt"))
        query = start_rollup_query(spark, spec)
        try:
            query.processAllAvailable()
            wait_merged(reference.url, query)
        finally:
            query.stop()
        return rollups(redis.Redis.from_url(reference.url))
    finally:
        reference.cleanup()


def restart_counts(url: str) -> dict[bytes, bytes]:
    return cast(dict, redis.Redis.from_url(url).hgetall(layout.aggregator_restarts_key("east")))


@pytest.mark.integration
def test_redis_stopped_for_twelve_socket_timeouts_then_recovered_within_30_s_with_identical_rollups(
        spark, kafka_clusters, tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor_module, "FIRST_BATCH_GRACE_S", supervisor_module.FIRST_BATCH_GRACE_S
                        * TIME_SCALE)
    bootstrap, source = kafka_clusters["east"], new_source()
    create_topic(bootstrap, metrics_topic(source), partitions=2)
    produce(bootstrap, source, [report(source, T0 + i * 10_000, i + 1) for i in range(6)])
    server = RedisServer(tmp_path / "redis").start()
    client = redis.Redis.from_url(server.url)
    spec = spec_for(bootstrap, server.url + REDIS_TIMEOUTS, source, str(tmp_path / "ckpt"))
    supervisor = QuerySupervisor(spark, [spec], backoff_s=0.5).start_all()
    try:
        wait_until(lambda: supervisor.check() is not None and total(client, source) == 21,
                   what="first rollups")
        server.pause()
        paused_until = time.monotonic() + PAUSE_S
        sent = 0
        while time.monotonic() < paused_until:  # raw metrics keep coming while Redis hangs
            produce(bootstrap, source, [report(source, T0 + 60_000 + sent * 10_000, 100, sent % 2)])
            sent += 1
            supervisor.check()
            time.sleep(2.0)
        server.resume()
        resumed = time.monotonic()
        expected = 21 + 100 * sent
        wait_until(lambda: supervisor.check() is not None and total(client, source) == expected
                   and supervisor.queries["rollup_east"].isActive,
                   timeout_s=RECOVERY_S, what=f"all {sent} reports sent during the pause rolled up")
        wait_merged(server.url, supervisor.queries["rollup_east"])
        recovered_s = time.monotonic() - resumed
        assert recovered_s <= RECOVERY_S
        # The hung calls failed on the socket timeout and the query was restarted: counted, and scraped.
        # The counter writes from a thread of its own, once a second, and keeps what a hung Redis did not
        # take: every restart reaches Redis, some a few seconds after the supervisor counted it.
        counted = supervisor.restarts["rollup_east"]
        assert counted >= 1
        wait_until(lambda: int(restart_counts(server.url).get(b"query", 0)) == counted, 90,
                   f"{counted} restart(s) counted in Redis")
        restarts = int(restart_counts(server.url)[b"query"])
        metrics = create_app({"REDIS_URL": server.url}).test_client().get("/metrics").get_data(as_text=True)
        assert f'srm_aggregator_query_restarts_total{{target="east"}} {restarts}.0' in metrics
        time.sleep(2)  # a few more triggers: a batch merged twice would show now
        interrupted = rollups(client)
    finally:
        supervisor.stop_all()
        server.cleanup()
    assert interrupted == uninterrupted_rollups(spark, bootstrap, source, tmp_path)
    print(f"recovered {recovered_s:.1f} s after SIGCONT; {restarts} query restart(s)")


# --- the stall watchdog's rules, on stand-in queries ------------------------------------------------


@dataclass
class StandInQuery:
    """What the supervisor reads of a StreamingQuery."""

    batch: int | None = 0
    busy: bool = True  # a batch running with input waiting
    isActive: bool = True  # PySpark's name
    stopped: list[bool] = field(default_factory=list)
    id: str = "q"

    @property
    def lastProgress(self) -> dict | None:  # PySpark's name
        return None if self.batch is None else {"batchId": self.batch}

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self.busy, "isDataAvailable": self.busy, "message": "Processing new data"}

    def stop(self) -> None:
        self.stopped.append(True)
        self.isActive = False

    def exception(self) -> None:
        return None


@dataclass
class ClockedSupervisor(QuerySupervisor):
    """A supervisor over stand-in queries, with the clock its tests move (its time.monotonic)."""

    clock: list[float] = field(default_factory=lambda: [1000.0])


def stand_in_supervisor(queries: list[StandInQuery], monkeypatch) -> ClockedSupervisor:
    clock = [1000.0]
    monkeypatch.setattr("aggregator.supervisor.time.monotonic", lambda: clock[0])
    spec = RollupQuerySpec(target="east", bootstrap_servers="b", redis_url="redis://127.0.0.1:1/0",
                           checkpoint_dir="c", trigger_interval="2000 milliseconds")
    started = iter(queries)
    # No session: the supervisor takes none where its queries are stand-ins.
    supervisor = ClockedSupervisor(cast(SparkSession, None), [spec], backoff_s=0.0, stall_intervals=5,
                                   start=lambda _spark, _spec: cast(StreamingQuery, next(started)),
                                   find_sink=lambda *_: None,
                                   counter=RestartCounter({"east": spec.redis_url}),
                                   upgrade_layout=lambda *_: None,  # no Redis here to move windows in
                                   clock=clock)
    supervisor.start_all()
    return supervisor


def advance(supervisor: ClockedSupervisor, seconds: float) -> list[str]:
    supervisor.clock[0] += seconds
    return supervisor.check()


def wait_for_stop(query: StandInQuery) -> None:
    """The stop runs on a side thread (time.monotonic is the stand-in clock here, so no wait_until)."""
    for _ in range(500):
        if query.stopped:
            return
        time.sleep(0.01)
    raise AssertionError("the stalled query was not stopped")


def test_a_batch_running_for_the_stall_intervals_with_input_waiting_restarts_its_query(monkeypatch):
    first, second = StandInQuery(batch=3), StandInQuery(batch=None)
    supervisor = stand_in_supervisor([first, second], monkeypatch)
    assert advance(supervisor, 0) == []
    assert advance(supervisor, 9.9) == []  # 5 intervals of 2 s not yet over
    assert advance(supervisor, 0.2) == [] and supervisor.stalls == {"rollup_east": 1}
    wait_for_stop(first)
    assert advance(supervisor, 0) == ["rollup_east"]  # restarted at once, without the failure back-off
    assert supervisor.queries["rollup_east"] is second
    assert supervisor.counter._pending == {("east", "query"): 1}


def test_progress_or_no_input_is_not_a_stall(monkeypatch):
    query = StandInQuery(batch=3)
    supervisor = stand_in_supervisor([query], monkeypatch)
    advance(supervisor, 0)
    for _ in range(5):  # a new batch every 8 s: slow, but moving
        query.batch += 1
        assert advance(supervisor, 8) == []
    query.busy = False  # waiting for data: no progress events either, and nothing wrong
    assert advance(supervisor, 60) == [] and advance(supervisor, 60) == []
    assert supervisor.stalls == {} and not query.stopped


def test_trigger_intervals_read_as_query_specs_write_them():
    assert trigger_seconds("2000 milliseconds") == 2.0 and trigger_seconds("3 seconds") == 3.0
    with pytest.raises(ValueError, match="not a trigger interval"):
        trigger_seconds("soon")


def test_a_first_batch_gets_a_grace_before_it_counts_as_stalled(monkeypatch):
    query = StandInQuery(batch=None)  # no progress yet: the query's first batch
    supervisor = stand_in_supervisor([query], monkeypatch)
    advance(supervisor, 0)
    assert advance(supervisor, 60) == [] and advance(supervisor, 59) == []  # 5 intervals long over
    assert supervisor.stalls == {}
    advance(supervisor, 2)
    assert supervisor.stalls == {"rollup_east": 1}
    wait_for_stop(query)


class FlakyCounterClient:
    """A Redis client whose first calls fail the ways a hung or closed socket does."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.counts: dict[tuple[str, str], int] = {}

    def hincrby(self, key: str, field: str, times: int) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.counts[(key, field)] = self.counts.get((key, field), 0) + times


def test_restart_counts_a_failing_redis_did_not_take_are_kept_and_written_later() -> None:
    counter = RestartCounter({"east": "redis://127.0.0.1:1/0"})
    client = FlakyCounterClient([redis.TimeoutError("Timeout reading"), OSError(9, "Bad file descriptor")])
    counter._clients["redis://127.0.0.1:1/0"] = cast(redis.Redis, client)
    counter.add("east", "query")
    assert not counter.flush()
    counter.add("east", "query", 2)
    assert not counter.flush()  # an OSError is no RedisError: still kept, and the counter goes on
    assert counter.flush()
    assert client.counts == {(layout.aggregator_restarts_key("east"), "query"): 3}
