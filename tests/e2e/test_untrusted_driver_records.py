"""Poison in the driver's internal topics shows in the replication status, and the driver copies on.

Every hop is real: the driver process replicates a source into a target (aliases of this test's own,
so its progress, offset-syncs and metrics topics are its alone), reads poison progress records,
poison offset syncs and, once running, poison srm-control records; its replication report carries the
refusal counts and whether each reader reads (raw metrics), the Spark rollup query keeps them as the
replication's latest value in Redis, and the service (gunicorn) shows them in
`/v2/replications/<source>/<target>` and `/metrics`.

`srm-control.internal` is one topic per cluster, shared with other tests: the control count is judged
as a difference from what the driver reported before this test's poison.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from aggregator.query import RollupQuerySpec, start_rollup_query
from contract.records.mm2 import OffsetSync
from contract.replication_policy import CONTROL_TOPIC, progress_topic
from driver.progress_record import (
    PROGRESS_TOPIC_CONFIGS,
    PROGRESS_TOPIC_PARTITIONS,
    SourcePartition,
    encode_key,
    encode_value,
)
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from tests.e2e.http_polling import poll_json

pytestmark = pytest.mark.e2e

TOPIC_PARTITIONS = 2


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[name].result()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]],
            partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        if partition is None:
            producer.produce(topic, key=key, value=value)
        else:
            producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def readers_of(answer: dict) -> dict[str, dict]:
    return {reader["reader"]: reader for reader in answer.get("readers") or []}


def scraped(text: str, name: str, labels: dict[str, str]) -> float:
    """The value of one sample of the Prometheus text whose labels include `labels`."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:_total)?\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    pytest.fail(f"no {name} sample with labels {labels} in the scrape:\n{text}")


@pytest.fixture
def run(tmp_path: Path, kafka_clusters: dict[str, str], redis_url: str, spark):
    run_id = uuid.uuid4().hex[:8]
    source, target = f"ps{run_id}", f"pt{run_id}"
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"orders-{run_id}"
    create_topic(east, topic, TOPIC_PARTITIONS)
    produce(east, topic, [(f"k{i}".encode(), f"before-{i}".encode()) for i in range(20)])
    # Poison waiting in the progress topic (read when the worker takes its partitions) and in the offset
    # syncs the checkpoint worker follows (read from the start): a RecursionError's worth of nesting, an
    # offset beyond 64 bits for one of our own partitions, a topic named `*`; a sync for topic `*`.
    progress = progress_topic(source)
    create_topic(west, progress, PROGRESS_TOPIC_PARTITIONS, dict(PROGRESS_TOPIC_CONFIGS))
    produce(west, progress, [
        (b"[" * 3000, encode_value(1)),
        (encode_key(SourcePartition(source, topic, 1)), b'{"offset":1' + b"0" * 30 + b"}"),
        (encode_key(SourcePartition(source, "*", 0)), encode_value(5)),
    ])
    syncs = f"mm2-offset-syncs.{target}.internal"
    create_topic(east, syncs, 1, {"cleanup.policy": "compact"})
    forged = OffsetSync("*", 0, 5, 5)
    produce(east, syncs, [(forged.encode_key(), forged.encode_value())], partition=0)

    config = srm_properties.write(
        tmp_path / "srm.properties", {source: east, target: west}, [(source, target)], redis_url,
        {"metrics.period": 1, "refresh.topics.interval.seconds": 1, "service.port": free_port(),
         "service.workers": 1, "emit.checkpoints.interval.seconds": 1})
    port = int(config.read_text().split("service.port = ")[1].split()[0])
    processes, query = [], None
    try:
        for name in ("driver", "service"):
            process = ManagedProcess.python_module(name, name, ["--config", str(config)], tmp_path)
            processes.append(process.start())
        query = start_rollup_query(spark, RollupQuerySpec(
            target=target, bootstrap_servers=west, redis_url=redis_url,
            checkpoint_dir=str(tmp_path / "checkpoints"), trigger_interval="1 second",
            watermark_delay_ms=60_000, topics_pattern=rf"srm-metrics\.{source}\.internal"))
        wait_for_port(port, 30, processes[-1].process)
        yield {"url": f"http://127.0.0.1:{port}", "source": source, "target": target, "topic": topic,
               "progress": progress, "syncs": syncs, "east": east, "west": west}
    finally:
        if query is not None:
            query.stop()
        for process in processes:
            process.stop()
            print(f"--- {process.name} log ---\n{process.log_tail(60)}")


def test_rejected_driver_records_show_in_the_replication_status(run: dict):
    status_url = f"{run['url']}/v2/replications/{run['source']}/{run['target']}"

    def all_readers_report(answer: dict) -> bool:
        readers = readers_of(answer)
        return (readers.get("progress", {}).get("rejected", 0) >= 3
                and readers.get("offset_syncs", {}).get("rejected", 0) >= 1
                and "control" in readers and all(r["alive"] for r in readers.values()))

    first = poll_json(status_url, all_readers_report, 180)
    assert first is not None, "the service never answered the replication's status"
    readers = readers_of(first)
    assert all_readers_report(first), readers
    assert run["progress"] in readers["progress"]["last_rejection"]
    assert run["syncs"] in readers["offset_syncs"]["last_rejection"]
    assert "offset sync topic" in readers["offset_syncs"]["last_rejection"]

    # Poison the live srm-control reader: deep nesting in the key, a value over its cap.
    control_before = readers["control"]["rejected"]
    produce(run["west"], CONTROL_TOPIC, [(b"[" * 3000, b"{}"), (b"[1]", b"x" * 5000)], partition=0)
    produce(run["east"], run["topic"], [(f"k{i}".encode(), f"after-{i}".encode()) for i in range(30)])

    def control_counted(answer: dict) -> bool:
        control = readers_of(answer).get("control", {})
        return control.get("rejected", 0) >= control_before + 2 and control.get("alive") is True

    after = poll_json(status_url, control_counted, 120)
    assert after is not None and control_counted(after), readers_of(after or {})
    assert "srm-control.internal[0]@" in readers_of(after)["control"]["last_rejection"]

    # The driver copied on: every record, the ones produced after the poison included, is replicated,
    # and the replication stays ACTIVE.
    remote = f"{run['source']}.{run['topic']}"
    admin = AdminClient({"bootstrap.servers": run["west"]})
    deadline, copied = time.monotonic() + 60, 0
    while time.monotonic() < deadline and copied < 50:  # at least once: a copy may repeat
        futures = admin.list_offsets({TopicPartition(remote, p): OffsetSpec.latest()
                                      for p in range(TOPIC_PARTITIONS)}, request_timeout=10)
        copied = sum(f.result().offset for f in futures.values())
        time.sleep(1)
    assert copied >= 50
    # ACTIVE needs records in the last two metrics periods (1 s each here): keep a trickle flowing.
    state, deadline = None, time.monotonic() + 60
    while state != "ACTIVE" and time.monotonic() < deadline:
        produce(run["east"], run["topic"], [(b"k", b"trickle")])
        state = requests.get(status_url, timeout=10).json()["state"]
        time.sleep(0.5)
    assert state == "ACTIVE"

    text = requests.get(f"{run['url']}/metrics", timeout=10).text
    labels = {"source": run["source"], "target": run["target"]}
    assert scraped(text, "srm_driver_records_rejected", {**labels, "reader": "progress"}) >= 3
    assert scraped(text, "srm_driver_records_rejected", {**labels, "reader": "control"}) >= control_before + 2
    assert scraped(text, "srm_driver_records_rejected", {**labels, "reader": "offset_syncs"}) >= 1
    for reader in ("progress", "control", "offset_syncs"):
        assert scraped(text, "srm_driver_reader_up", {**labels, "reader": reader}) == 1.0
