"""N records produced on `east` come back as record_count = N over HTTP from the service.

Every hop is real: the driver process replicates east -> west and publishes raw metrics into west,
the Spark rollup query (official Kafka source) writes Redis, and the service (gunicorn) answers.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from aggregator.query import RollupQuerySpec, start_rollup_query
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess

pytestmark = pytest.mark.e2e

N = 1000
PARTITIONS = 3


def produce(bootstrap: str, topic: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode(),
                         headers=[("seq", str(i).encode())])
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    records: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        records += [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
    consumer.close()
    return records


@pytest.fixture
def pipeline(tmp_path: Path, kafka_clusters: dict[str, str], redis_url: str, spark):
    config = srm_properties.write(
        tmp_path / "srm.properties", kafka_clusters, [("east", "west")], redis_url,
        {"metrics.period": 1, "refresh.topics.interval.seconds": 1, "service.port": free_port(),
         "service.workers": 1})
    port = int(config.read_text().split("service.port = ")[1].split()[0])
    processes, query = [], None
    try:
        for name in ("driver", "service"):
            process = ManagedProcess.python_module(name, name, ["--config", str(config)], tmp_path)
            processes.append(process.start())
        query = start_rollup_query(spark, RollupQuerySpec(
            target="west", bootstrap_servers=kafka_clusters["west"], redis_url=redis_url,
            checkpoint_dir=str(tmp_path / "checkpoints"), trigger_interval="1 second",
            watermark_delay_ms=60_000))
        wait_for_port(port, 30, processes[-1].process)
        yield f"http://127.0.0.1:{port}"
    finally:
        if query is not None:
            query.stop()
        for process in processes:
            process.stop()
            print(f"--- {process.name} log ---\n{process.log_tail()}")


def test_record_count_flows_from_east_to_the_service(pipeline: str, kafka_clusters: dict[str, str]):
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    started_ms = int(time.time() * 1000) - 60_000
    produce(kafka_clusters["east"], topic, N)

    replicated = read_all(kafka_clusters["west"], f"east.{topic}", N)
    assert len(replicated) == N
    assert {m.partition() for m in replicated} == set(range(PARTITIONS))
    assert all(dict(m.headers())["seq"] for m in replicated)

    url = f"{pipeline}/v2/topic-metrics/east/west/{topic}/record_count"
    answer, deadline = None, time.monotonic() + 120
    while time.monotonic() < deadline:
        response = requests.get(url, params={"from": str(started_ms), "granularity": "10s"}, timeout=10)
        if response.status_code == 200:
            answer = response.json()
            if answer["value"] == N:
                break
        time.sleep(1)
    assert answer is not None, f"service never answered 200 for {url}: {response.status_code} {response.text}"
    assert answer["value"] == N
    assert answer["sum"] == N
    assert answer["topic"] == f"east.{topic}"
    assert sum(point["value"] for point in answer["series"]) == N

    latency = requests.get(f"{pipeline}/v2/topic-metrics/east/west/{topic}/replication_latency_ms",
                           params={"from": started_ms}, timeout=10).json()
    assert latency["count"] == N
    assert 0 <= latency["min"] <= latency["avg"] <= latency["max"]
