"""The raw metrics the real driver publishes, checked against a situation whose answers are known.

A backlog of records written ten minutes "ago" (CreateTime) drains: records_lag falls to 0 and never
rises, each report's lag is the source end minus the next offset to copy, record_age_ms is at least
ten minutes, and the record counts add up. A group commits at a known time: its checkpoint latency is
within one checkpoint interval of it, and the group's downstream offset is the checkpoint written.
A target whose ACLs refuse the driver's SCRAM user CREATE on a remote topic makes the replication
report FAILED naming that topic while its other topics are copied, and RUNNING once CREATE is granted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Message, Producer
from confluent_kafka.admin import AclOperation, AdminClient

from contract.records import raw_metrics
from contract.records.mm2 import Checkpoint, WireFormatError
from contract.records.raw_metrics import GroupMetrics, PartitionMetrics, ReplicationMetrics
from stack.kafka_cluster import KafkaCluster
from stack.secured_listeners import client_properties
from tests.guarded_target import LITERAL, PREFIXED, Grants, allow, replication_without_create
from tests.interop.support import (
    alter_group_offsets,
    create_topic,
    produce_values,
    read_all,
    read_partitions,
    running_driver,
    tag,
    total_records,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
BACKLOG = 20_000  # per partition
AGE_MS = 600_000


def metrics_of(west: str, start: int = 0) -> list[raw_metrics.RawMetrics]:
    return [raw_metrics.decode(m.value()) for m in read_all(west, "srm-metrics.east.internal", 0)
            if m.offset() >= start]


def test_records_lag_and_age_while_backlog_drains(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"backlog-{tag()}"
    create_topic(east, topic, PARTITIONS)
    written_at = int(time.time() * 1000)
    # Small batches: a fetch returns at least one whole batch, so they set how slowly the backlog drains.
    producer = Producer({"bootstrap.servers": east, "linger.ms": 5, "batch.size": 2048})
    for partition in range(PARTITIONS):
        for i in range(BACKLOG):
            producer.produce(topic, value=b"x" * 100, partition=partition, timestamp=written_at - AGE_MS)
            if i % 10_000 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0
    first_report = len(read_all(west, "srm-metrics.east.internal", 0)) if total_records(
        west, "srm-metrics.east.internal", 1) else 0

    # Small fetches and reports every 200 ms, so the drain spans several reports.
    settings = {"topics": topic, "emit.checkpoints.enabled": "false", "metrics.period": 0.2,
                "consumer.max.partition.fetch.bytes": 2048}
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        wait_until(lambda: total_records(west, f"east.{topic}", PARTITIONS) == PARTITIONS * BACKLOG, 180,
                   "the backlog on west")

        def drained() -> list[PartitionMetrics] | None:
            reports = [m for m in metrics_of(west, first_report)
                       if isinstance(m, PartitionMetrics) and m.upstream_topic == topic]
            done = {m.partition for m in reports if m.records_lag == 0}
            return reports if done == set(range(PARTITIONS)) else None

        reports = wait_until(drained, 90, "every partition to report records_lag 0")
        driver.assert_running()
    elapsed_ms = int(time.time() * 1000) - written_at

    for partition in range(PARTITIONS):
        mine = [m for m in reports if m.partition == partition]
        lags = [m.records_lag for m in mine if m.records_lag is not None]
        assert any(0 < lag <= BACKLOG for lag in lags), f"partition {partition}: lags {lags}"
        assert lags == sorted(lags, reverse=True), f"partition {partition}: lag rose: {lags}"
        for m in mine:
            if m.records_lag is not None and m.upstream_offset is not None:
                assert m.source_end_offset == BACKLOG
                assert m.records_lag == m.source_end_offset - (m.upstream_offset + 1)
        assert sum(m.record_count for m in mine) == BACKLOG
        ages = [m.record_age_ms for m in mine if m.record_age_ms is not None and m.record_age_ms.count]
        assert ages, f"partition {partition}: no record_age_ms"
        assert min(a.min for a in ages) >= AGE_MS
        assert max(a.max for a in ages) <= AGE_MS + elapsed_ms


def decoded_checkpoint(message: Message) -> Checkpoint | None:
    """None for what is not a checkpoint: the shared topic holds other tests' garbage on purpose."""
    try:
        return Checkpoint.decode(message.key(), message.value())
    except WireFormatError:
        return None


def test_checkpoint_latency(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    suffix = tag()
    topic, group = f"latency-{suffix}", f"g-{suffix}"
    create_topic(east, topic, 1)
    produce_values(east, topic, 1, 500)
    settings = {"topics": topic, "groups": group, "emit.checkpoints.interval.seconds": 1, "metrics.period": 1}
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        wait_until(lambda: total_records(west, f"east.{topic}", 1) == 500, 60, "the records on west")
        start = total_records(west, "srm-metrics.east.internal", 1)
        committed_at = time.monotonic()
        alter_group_offsets(east, group, topic, {0: 321})

        def reported() -> GroupMetrics | None:
            for m in metrics_of(west, start):
                if (isinstance(m, GroupMetrics) and m.group == group and m.checkpoint_latency_ms is not None
                        and m.checkpoint_latency_ms.count >= 1):
                    return m
            return None

        report = wait_until(reported, 90, f"a checkpoint latency of {group}")
        waited_ms = (time.monotonic() - committed_at) * 1000
        driver.assert_running()
    latency = report.checkpoint_latency_ms
    assert latency is not None and 0 <= latency.last <= min(waited_ms, 1_000 + 5_000)
    records = read_all(west, "east.checkpoints.internal", 0)
    ours = [c for c in map(decoded_checkpoint, records) if c is not None and c.consumer_group_id == group]
    assert ours and report.group_downstream_offset == ours[-1].downstream_offset
    assert report.group_upstream_offset == 321


# --- Where the reports go: a topic partition's and its groups' in one Kafka partition ---------------

TOPIC_PARTITIONS = 8
METRICS_PARTITIONS = 6


def test_a_partitions_reports_and_its_groups_share_a_kafka_partition(kafka_clusters: dict[str, str],
                                                                       tmp_path: Path) -> None:
    """The driver's own producers (the replication's for partition reports, the checkpoints' for group
    reports, each with the partitioner it is configured with) put every report of a topic partition and
    of its groups into one Kafka partition of a raw-metrics topic of several partitions: the task that
    reads a group's reports holds its partition's end offsets. Each subject stays in one Kafka partition."""
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    suffix = tag()
    source = f"placed{suffix}"  # east under an alias of its own: its raw-metrics topic is this test's
    topic, groups = f"placed-{suffix}", [f"g{i}-{suffix}" for i in range(2)]
    remote, metrics = f"{source}.{topic}", f"srm-metrics.{source}.internal"
    create_topic(east, topic, TOPIC_PARTITIONS)
    produce_values(east, topic, TOPIC_PARTITIONS, 20)
    for i, group in enumerate(groups):
        alter_group_offsets(east, group, topic, {p: 5 + i for p in range(TOPIC_PARTITIONS)})
    create_topic(west, metrics, METRICS_PARTITIONS, raw_metrics.TOPIC_CONFIGS)  # the driver keeps it

    def readable() -> bool:  # a topic just created answers NOT_LEADER_FOR_PARTITION for a moment
        try:
            return read_partitions(west, metrics, range(METRICS_PARTITIONS)) is not None
        except KafkaException:
            return False

    wait_until(readable, 60, f"every partition of {metrics} to have its leader")
    wanted = {("partition", p) for p in range(TOPIC_PARTITIONS)} | {
        (group, p) for group in groups for p in range(TOPIC_PARTITIONS)}
    settings = {"topics": topic, "groups": ",".join(groups), "emit.checkpoints.interval.seconds": 1,
                "emit.heartbeats.enabled": "false"}

    def placements() -> dict[tuple[str, int], list[tuple[int, bytes]]] | None:
        """(subject: "partition" or the group, topic partition) -> (Kafka partition, key) of each of its
        reports, once every subject has three (several reports from each producer)."""
        found: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        for kafka_partition, messages in read_partitions(west, metrics, range(METRICS_PARTITIONS)).items():
            for message in messages:
                report = raw_metrics.decode(message.value())
                if isinstance(report, PartitionMetrics | GroupMetrics) and report.topic == remote:
                    subject = report.group if isinstance(report, GroupMetrics) else "partition"
                    found.setdefault((subject, report.partition), []).append((kafka_partition, message.key()))
        return found if all(len(found.get(s, ())) >= 3 for s in wanted) else None

    with running_driver(tmp_path, {source: east, "west": west}, [(source, "west")], settings) as driver:
        found = wait_until(placements, 90, f"three reports of every partition of {topic} and of both groups")
        driver.assert_running()
    assert set(found) == wanted
    place: dict[tuple[str, int], tuple[int, bytes]] = {}
    for subject, reports in found.items():
        assert len(set(reports)) == 1, (subject, reports)  # one Kafka partition and key a subject
        place[subject] = reports[0]
    for group in groups:
        for p in range(TOPIC_PARTITIONS):
            assert place[(group, p)] == place[("partition", p)], (group, p, place)
    assert place[("partition", 3)][1] == f"partition|{source}|west|{remote}|3".encode()
    # Placed by key, not all in one: the co-location above is the partitioner's, for 8 keys over 6.
    assert len({kafka_partition for kafka_partition, _ in place.values()}) > 1


# --- The target refuses to create a remote topic ---------------------------------------------------


def replication_reports(west: str, start: int) -> list[ReplicationMetrics]:
    if total_records(west, "srm-metrics.east.internal", 1) <= start:  # none yet, or no topic yet
        return []
    return [m for m in metrics_of(west, start) if isinstance(m, ReplicationMetrics)]


def test_failed_status_when_target_refuses_remote_topic(kafka_clusters: dict[str, str],
                                                         guarded_west: KafkaCluster, tmp_path: Path) -> None:
    """The driver logs in to west as a user that may run the replication's internal topics and write
    to `east.*`, but not create topics there. Topic `a` has its remote topic created by an operator
    beforehand, `b` has none: the replication reports FAILED naming `east.b` and the authorization
    failure while it copies `a`; once CREATE is granted it reports RUNNING and copies `b` too. A topic
    `c` appearing while the driver runs is refused the same way, and recovers the same way."""
    east, west = kafka_clusters["east"], guarded_west.bootstrap_servers
    security = guarded_west.security
    assert security is not None
    principal = f"User:{security.user}"
    suffix = tag()
    a, b, c = (f"refused-{suffix}-{name}" for name in "abc")
    for topic in (a, b):
        create_topic(east, topic, 1)
        produce_values(east, topic, 1, 50)
    create_topic(west, f"east.{a}", 1)  # as an operator would, with the super user
    start = total_records(west, "srm-metrics.east.internal", 1)
    bootstraps = {"east": east, "west": guarded_west.secured_bootstrap("sasl_plaintext")}
    login = client_properties("sasl_plaintext", security)
    settings = {"topics": f"refused-{suffix}-.*", "emit.checkpoints.enabled": "false",
                **{f"west.{key}": value for key, value in login.items()}}

    def report(status: str, refused: str | None = None) -> Callable[[], ReplicationMetrics | None]:
        def found() -> ReplicationMetrics | None:
            for m in reversed(replication_reports(west, start)):
                if m.status == status and (refused is None or (m.error and f"'east.{refused}'" in m.error)):
                    return m
            return None
        return found

    def copied(topic: str, count: int) -> Callable[[], bool]:
        return lambda: total_records(west, f"east.{topic}", 1) == count

    grants = Grants(west)
    with grants:
        grants.grant(replication_without_create(principal, "east"))
        with running_driver(tmp_path, bootstraps, [("east", "west")], settings) as driver:
            failed = wait_until(report("FAILED", b), 90, f"a FAILED report naming east.{b}")
            assert failed.error is not None and "authoriz" in failed.error.lower(), failed.error
            assert f"east.{a}" not in failed.error, failed.error
            assert security.password not in failed.error
            # Refused is not stopped: the topic the target has is copied meanwhile.
            wait_until(copied(a, 50), 90, f"east.{a} on west")
            assert f"east.{b}" not in AdminClient({"bootstrap.servers": west}).list_topics(timeout=10).topics

            start = total_records(west, "srm-metrics.east.internal", 1)
            grants.grant(allow(principal, LITERAL, f"east.{b}", AclOperation.CREATE))
            wait_until(copied(b, 50), 90, f"east.{b} on west after the grant")
            running = wait_until(report("RUNNING"), 90, "a RUNNING report after the grant")
            assert running.error is None and running.topics_replicated == 2

            start = total_records(west, "srm-metrics.east.internal", 1)
            create_topic(east, c, 1)
            produce_values(east, c, 1, 20)
            failed = wait_until(report("FAILED", c), 40, f"a FAILED report naming east.{c}")
            assert failed.error is not None and "authoriz" in failed.error.lower(), failed.error
            assert security.password not in failed.error
            produce_values(east, a, 1, 10)  # the others keep flowing
            wait_until(copied(a, 60), 90, f"new records of {a} on west")

            start = total_records(west, "srm-metrics.east.internal", 1)
            grants.grant(allow(principal, PREFIXED, "east.", AclOperation.CREATE))
            wait_until(copied(c, 20), 40, f"east.{c} on west after the grant")
            running = wait_until(report("RUNNING"), 90, "a RUNNING report after the second grant")
            assert running.error is None and running.topics_replicated == 3
            driver.assert_running()
    assert security.password not in driver.log
