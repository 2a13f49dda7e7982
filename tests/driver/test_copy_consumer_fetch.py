"""The copy consumer's bounded prefetch does not idle the copy (issue 19's throughput).

librdkafka stops fetching for a partition while its fetch queue holds ``replication.fetch.queue.max.bytes``
and, by default, looks again only a second later (``fetch.queue.backoff.ms``). A loop that empties the
queue in milliseconds then waits out the rest of each second: the 8-partition bench copied at a quarter
of its rate with the 16 MiB default. The copy consumer fetches again soon after the queue has room.

The test tells the two behaviours apart without a speed target: it reads the same 24 MiB twice, through
a 1 MiB fetch queue and through one that holds the whole topic, and bounds the difference, the time
spent waiting for refills. A loop spending 10 ms per batch waited 5.7 s with the one-second backoff and
0.2 s without it (idle machine); the reads themselves slow down alike on a loaded machine, the backoff
does not.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from contract.config import Replication, SrmConfig, load_config
from driver import replication_clients as clients
from driver.send_queue import QueueLimits
from driver.source_watch import SourceWatch
from stack import srm_properties
from tests.driver.replication_cluster_ops import create_topic

pytestmark = pytest.mark.integration

PARTITIONS, RECORDS, VALUE_BYTES = 8, 24_000, 1024  # 24 MiB
FETCH_QUEUE_BYTES = 1 << 20  # librdkafka's least: fetch.max.bytes >= message.max.bytes
WHOLE_TOPIC_BYTES = 64 << 20
COPY_S_PER_BATCH = 0.01
REFILL_WAITS_BOUND_S = 3.0


def test_a_full_fetch_queue_is_refilled_soon_after_the_loop_empties_it(
        kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east = kafka_clusters["east"]
    topic = f"fetch-refill-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": east, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, bytes(VALUE_BYTES), key=str(i).encode(), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(30) == 0
    del producer
    path = srm_properties.write(tmp_path / "srm.properties", kafka_clusters, [("east", "west")],
                                "redis://127.0.0.1:1/0")
    config = load_config(str(path))
    replication = next(r for r in config.replications() if (r.source, r.target) == ("east", "west"))
    unbounded = copy_all(config, replication, topic, WHOLE_TOPIC_BYTES)
    bounded = copy_all(config, replication, topic, FETCH_QUEUE_BYTES)
    assert bounded - unbounded < REFILL_WAITS_BOUND_S, (
        f"24 MiB through a 1 MiB fetch queue took {bounded:.1f} s, {unbounded:.1f} s through one holding "
        f"the whole topic: each refill waited out a backoff")


def copy_all(config: SrmConfig, replication: Replication, topic: str, fetch_queue_bytes: int) -> float:
    """Seconds the copy consumer takes to hand over every record of `topic` to a loop that spends
    COPY_S_PER_BATCH on each batch."""
    limits = QueueLimits(max_records=100_000, max_bytes=32 << 20, fetch_max_bytes=fetch_queue_bytes)
    consumer = clients.copy_consumer(config, replication, limits, SourceWatch("east"))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        read, began = 0, time.monotonic()
        deadline = time.monotonic() + 120
        while read < RECORDS and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(2000, timeout=0.1) if m.error() is None]
            read += len(batch)
            time.sleep(COPY_S_PER_BATCH)  # the copy's own work: the fetch queue fills meanwhile
        took = time.monotonic() - began
    finally:
        consumer.close()
    assert read == RECORDS, f"read {read} of {RECORDS} records within 120 s"
    return took
