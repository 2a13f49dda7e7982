"""A replication scenario in real Redis, written the way the aggregator writes it.

Windows go through aggregator.redis_sink.RedisRollupSink (pyspark Rows, no SparkSession needed) and the
latest values through redis_layout.encode_latest. Cluster names carry a uuid so tests sharing the
session's Redis never see each other's replications.

Scenario, relative to now (10 s windows, metrics period 5 s):
- `east -> west` RUNNING with records: topics `orders` (p0 catching up to lag 0, p1 stuck at offset 100
  with lag 50: STALL) and `payments` (p0 lag growing: WARN); group `billing` checkpoints `orders`.
- `north -> west` reported FAILED with an error text; topic `events`.
- lag in seconds (`lag_seconds`, `group_lag_seconds`) with history: orders p1 10 s more each window.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from pyspark.sql import Row

from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from service.app import create_app

WINDOWS = 8
PERIOD_MS = 5_000


@dataclass(frozen=True)
class Scenario:
    east: str
    west: str
    north: str
    now_ms: int
    first_window: int
    last_window: int
    redis_url: str

    @property
    def span(self) -> dict:
        return {"from": self.first_window, "to": self.last_window + 10_000, "granularity": "10s"}


def row(
    target: str,
    source: str,
    topic: str,
    upstream: str | None,
    partition: int,
    metric: str,
    start: int,
    value: float,
    count: float = 1,
    group: str = "",
) -> Row:
    return Row(
        target=target,
        source=source,
        topic=topic,
        upstream_topic=upstream,
        group=group,
        partition=partition,
        metric=metric,
        window_start=start,
        count=count,
        sum=value * count,
        min=value,
        max=value,
        last=value,
    )


def scenario_rows(s: Scenario) -> list[Row]:
    e, w, n = s.east, s.west, s.north
    rows = []
    for i in range(WINDOWS):
        start = s.first_window + i * 10_000
        for topic, upstream in ((f"{e}.orders", "orders"), (f"{e}.payments", "payments")):
            rows += [
                row(w, e, topic, upstream, layout.WHOLE_TOPIC, "record_count", start, 10),
                row(w, e, topic, upstream, layout.WHOLE_TOPIC, "byte_count", start, 1000),
                row(w, e, topic, upstream, layout.WHOLE_TOPIC, "replication_latency_ms", start, 4, 10),
            ]
        rows += [
            # orders p0 catches up: offset grows, lag falls to 0 -> OK
            row(w, e, f"{e}.orders", "orders", 0, "upstream_offset", start, 10 * (i + 1)),
            row(w, e, f"{e}.orders", "orders", 0, "records_lag", start, WINDOWS - 1 - i),
            # orders p1 stuck: same offset, lag 50 all along -> STALL
            row(w, e, f"{e}.orders", "orders", 1, "upstream_offset", start, 100),
            row(w, e, f"{e}.orders", "orders", 1, "records_lag", start, 50),
            row(
                w, e, f"{e}.orders", "orders", layout.WHOLE_TOPIC, "records_lag", start, 50 + WINDOWS - 1 - i
            ),
            # payments p0 falls behind: lag grows -> WARN
            row(w, e, f"{e}.payments", "payments", 0, "upstream_offset", start, 5 * (i + 1)),
            row(w, e, f"{e}.payments", "payments", 0, "records_lag", start, i + 1),
            # group billing on orders p0: its lag grows -> WARN
            row(
                w, e, f"{e}.orders", "orders", 0, "group_upstream_offset", start, 3 * (i + 1), group="billing"
            ),
            row(w, e, f"{e}.orders", "orders", 0, "group_lag", start, i + 2, group="billing"),
            row(
                w, e, f"{e}.orders", "orders", layout.WHOLE_TOPIC, "group_lag", start, i + 2, group="billing"
            ),
            row(
                w,
                e,
                f"{e}.orders",
                "orders",
                layout.WHOLE_TOPIC,
                "checkpoint_latency_ms",
                start,
                7,
                2,
                group="billing",
            ),
            # lag in seconds as the aggregator derives it: orders p1 (stuck) falls behind by 10 s a
            # window, p0 stays at 0; the topic and the replication take the worst partition
            *[row(w, e, f"{e}.orders", "orders", p, "lag_seconds", start, 10.0 * i)
              for p in (1, layout.WHOLE_TOPIC)],
            row(w, e, f"{e}.orders", "orders", 0, "lag_seconds", start, 0.0),
            row(w, e, layout.ALL_TOPICS, None, layout.WHOLE_TOPIC, "lag_seconds", start, 10.0 * i),
            *[row(w, e, f"{e}.orders", "orders", p, "group_lag_seconds", start, 2.0 + i, group="billing")
              for p in (0, layout.WHOLE_TOPIC)],
            row(w, n, f"{n}.events", "events", layout.WHOLE_TOPIC, "record_count", start, 1),
            # identity (prefixless) policy: the remote topic keeps its upstream name
            row(w, n, "ledger", "ledger", layout.WHOLE_TOPIC, "byte_count", start, 64),
        ]
        # Replication level, as the aggregator rolls the topics above up (window_partials, level `r`).
        whole = layout.ALL_TOPICS, None, layout.WHOLE_TOPIC
        rows += [
            row(w, e, whole[0], whole[1], whole[2], "record_count", start, 10, 2),
            row(w, e, whole[0], whole[1], whole[2], "byte_count", start, 1000, 2),
            row(w, e, whole[0], whole[1], whole[2], "replication_latency_ms", start, 4, 20),
            row(w, n, whole[0], whole[1], whole[2], "record_count", start, 1),
            row(w, n, whole[0], whole[1], whole[2], "byte_count", start, 64),
        ]
    return rows


def write_latest(s: Scenario) -> None:
    client = redis.Redis.from_url(s.redis_url)
    encode = layout.encode_latest
    client.hset(
        layout.replication_status_key(s.west, s.east),
        "replication",
        encode(
            {
                "ts": s.now_ms - 1_000,
                "period_ms": PERIOD_MS,
                "status": "RUNNING",
                "enabled": True,
                "last_heartbeat_ts": s.now_ms - 1_000,
                "recent_record_counts": [10, 12],
                "workers": 1,
                "tasks": 2,
                "topics_replicated": 2,
                "readers": {
                    "progress": {"rejected": 3, "alive": True,
                                 "last_rejection": "mm2-offsets.x.internal[4]@7: ValueError: bad"},
                    "control": {"rejected": 0, "alive": False, "last_rejection": None},
                },
            }
        ),
    )
    client.hset(
        layout.replication_status_key(s.west, s.north),
        "replication",
        encode(
            {
                "ts": s.now_ms - 2_000,
                "period_ms": PERIOD_MS,
                "status": "FAILED",
                "error": "broker unreachable",
                "enabled": True,
                "recent_record_counts": [0, 0],
            }
        ),
    )
    client.hset(
        layout.partition_latest_key(s.west, s.east, f"{s.east}.orders"),
        mapping={
            "0": encode({"ts": s.now_ms, "records_lag": 0, "lag_seconds": 0.0, "upstream_offset": 80}),
            "1": encode({"ts": s.now_ms, "records_lag": 50, "lag_seconds": 12.5, "upstream_offset": 100}),
        },
    )
    client.set(layout.invalid_records_key(s.west, s.east), 3)
    client.set(layout.late_records_key(s.west, s.east), 2)
    client.hset(
        layout.group_latest_key(s.west, s.east, "billing"),
        f"{s.east}.orders|0",
        encode({"ts": s.now_ms, "group_lag": 9, "lag_seconds": 9.5}),
    )
    client.close()


@pytest.fixture(scope="module")
def scenario(redis_url: str) -> Scenario:
    uid = uuid.uuid4().hex[:6]
    now_ms = int(time.time() * 1000)
    last = layout.window_start(now_ms, "10s") - 10_000
    s = Scenario(
        f"east{uid}", f"west{uid}", f"north{uid}", now_ms, last - (WINDOWS - 1) * 10_000, last, redis_url
    )
    RedisRollupSink(redis_url, f"svc_{uid}").write(scenario_rows(s), batch_id=0)
    write_latest(s)
    return s


@pytest.fixture(scope="module")
def client(redis_url: str):
    return create_app({"REDIS_URL": redis_url}).test_client()


@pytest.fixture
def free_redis_url() -> str:
    """A Redis URL nothing listens on."""
    from stack.kafka_cluster import free_port

    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(server side, client side) of one loopback TCP connection, for the gunicorn worker patches."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    yield server, client
    client.close()
    server.close()
