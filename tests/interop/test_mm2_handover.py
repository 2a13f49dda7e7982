"""Migration both ways between Apache MirrorMaker 2 (dedicated mode) and our driver, under live traffic.

One replicator copies part of a topic while a producer keeps writing and a group keeps committing on
the source, stops cleanly (SIGTERM), and the other continues from `mm2-offsets.east.internal`, the
Connect offsets both keep in the same bytes. Then: every remote partition equals its source partition
(no record copied twice, none skipped, same order); the successor's first offset sync is at the first
record it copied; the group's checkpoints never move back across the hand-over; Apache's
RemoteClusterUtils still translates the group within offset.lag.max + 1 of its exact position.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from contract.records.mm2 import OffsetSync
from driver import progress_record
from tests.interop.conftest import MirrorProbe
from tests.interop.mm2 import MirrorMaker
from tests.interop.support import (
    OFFSET_LAG_MAX,
    Driver,
    alter_group_offsets,
    create_topic,
    end_offsets,
    read_all,
    read_partitions,
    tag,
    total_records,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.integration]

PARTITIONS = 3
FIRST_LEG_RECORDS = 1000
GROUP_LAG = 40  # the group commits this far behind the producer
STEADY_RECORDS = 400


class Traffic:
    """A producer writing `p<partition>-<nnnn>` round-robin, and a group committing behind it."""

    def __init__(self, east: str, topic: str, group: str) -> None:
        self.east, self.topic, self.group = east, topic, group
        self.produced = [0] * PARTITIONS
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._commit, daemon=True)]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> dict[int, int]:
        """Stops both; returns the group's final committed offsets."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        final = self.committed_now()
        alter_group_offsets(self.east, self.group, self.topic, final)
        return final

    def committed_now(self) -> dict[int, int]:
        return {p: max(0, n - GROUP_LAG) for p, n in enumerate(self.produced)}

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.east, "linger.ms": 5, "enable.idempotence": True})
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                producer.produce(self.topic, value=f"p{partition}-{self.produced[partition]:04d}".encode(),
                                 partition=partition)
                self.produced[partition] += 1
            producer.poll(0)
            time.sleep(0.015)  # about 200 records/s
        assert producer.flush(30) == 0

    def _commit(self) -> None:
        while not self._stop.wait(0.7):
            alter_group_offsets(self.east, self.group, self.topic, self.committed_now())


def progress_of(west: str, topic: str) -> dict[int, int]:
    """The last replicated offset per partition in mm2-offsets.east.internal, as Connect reads it."""
    last: dict[int, int] = {}
    # Connect's default offsets topic has 25 partitions; read in one consumer, offset order kept a partition
    for messages in read_partitions(west, "mm2-offsets.east.internal", range(25)).values():
        for message in messages:
            source = progress_record.decode_key(message.key())
            if source is not None and source.topic == topic and source.cluster == "east":
                value = progress_record.decode_value(message.value())
                if value is not None:
                    last[source.partition] = value
    return last


def syncs_from(east: str, topic: str, start: int) -> dict[int, list[tuple[int, int]]]:
    syncs: dict[int, list[tuple[int, int]]] = {}
    for message in read_all(east, "mm2-offset-syncs.west.internal", 0):
        if message.offset() >= start:
            sync = OffsetSync.decode(message.key(), message.value())
            if sync.topic == topic:
                syncs.setdefault(sync.partition, []).append((sync.upstream_offset, sync.downstream_offset))
    return syncs


Replicator = Callable[[Path, dict[str, str], str, str], "Stoppable"]


class Stoppable:
    def __init__(self, stop: Callable[[], object], alive: Callable[[], bool],
                 tail: Callable[[], str]) -> None:
        self.stop, self.alive, self.tail = stop, alive, tail


def start_mm2(workdir: Path, bootstraps: dict[str, str], topic: str, group: str) -> Stoppable:
    mm2 = MirrorMaker(workdir / "mm2", bootstraps, "east", "west", {
        "east->west.topics": topic, "east->west.groups": group, "sync.topic.acls.enabled": "false",
        "emit.checkpoints.interval.seconds": 1, "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": 1, "refresh.topics.interval.seconds": 2,
        "refresh.groups.interval.seconds": 2,
        # A top-level offset.flush.interval.ms is ignored in dedicated mode: it is a target-cluster key.
        "west.offset.flush.interval.ms": 1000}).start()
    return Stoppable(mm2.stop, lambda: mm2.process.running, lambda: mm2.process.log_tail(60))


def start_driver(workdir: Path, bootstraps: dict[str, str], topic: str, group: str) -> Stoppable:
    driver = Driver(workdir / "driver", bootstraps, [("east", "west")],
                    {"topics": topic, "groups": group, "emit.checkpoints.interval.seconds": 1,
                     "sync.group.offsets.interval.seconds": 1}).start()
    return Stoppable(driver.stop, lambda: driver.process.running, lambda: driver.process.log_tail(60))


def hand_over(kafka_clusters: dict[str, str], probe: MirrorProbe, tmp_path: Path,
              first: Callable[..., Stoppable], second: Callable[..., Stoppable]) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    suffix = tag()
    topic, group, remote = f"handover-{suffix}", f"g-{suffix}", f"east.handover-{suffix}"
    create_topic(east, topic, PARTITIONS)
    bootstraps = {"east": east, "west": west}
    traffic = Traffic(east, topic, group).start()
    replicators: list[Stoppable] = []
    try:
        replicators.append(first(tmp_path, bootstraps, topic, group))
        wait_until(lambda: total_records(west, remote, PARTITIONS) >= FIRST_LEG_RECORDS, 150,
                   f"the first replicator to copy {FIRST_LEG_RECORDS} records")
        # An operator stops the first replicator once it has stored progress for every partition: MM2
        # flushes its source offsets every second, and under load a partition's first flush can come
        # after the records (seen once: no stored offset of partition 0 when MM2 was stopped).
        wait_until(lambda: set(progress_of(west, topic)) == set(range(PARTITIONS)), 60,
                   "the first replicator's progress stored for every partition")
        replicators[0].stop()
        assert not replicators[0].alive()
        handed_over = progress_of(west, topic)
        assert set(handed_over) == set(range(PARTITIONS)), handed_over
        syncs_before = end_offsets(east, "mm2-offset-syncs.west.internal", 1)[0]

        replicators.append(second(tmp_path, bootstraps, topic, group))
        wait_until(lambda: total_records(west, remote, PARTITIONS) > sum(handed_over.values()) + 300, 150,
                   "the second replicator to copy 300 more records")
        # MM2 keeps one due offset sync per partition while its 10 in-flight sync sends are unanswered,
        # so in its catch-up burst after the hand-over its syncs can lie ~1,000 offsets apart (seen:
        # 2890 then 3799), and its checkpoints are within offset.lag.max + 1 only where it copied at the
        # producer's pace. So the traffic goes on until the successor is STEADY_RECORDS per partition
        # past the backlog it found.
        backlog = sum(end_offsets(east, topic, PARTITIONS).values())
        wait_until(lambda: total_records(west, remote, PARTITIONS) >= backlog + STEADY_RECORDS * PARTITIONS,
                   150, f"the second replicator to copy {STEADY_RECORDS} per partition past its backlog")
        final = traffic.stop()
        source_ends = end_offsets(east, topic, PARTITIONS)
        wait_until(lambda: end_offsets(west, remote, PARTITIONS) == source_ends, 60,
                   f"west to hold all of {source_ends}")

        # Every remote partition equals its source partition: no duplicate, no gap, same order.
        for partition in range(PARTITIONS):
            source = [m.value() for m in read_all(east, topic, partition)]
            copied = [m.value() for m in read_all(west, remote, partition)]
            assert copied == source, f"partition {partition}: {len(copied)} copied, {len(source)} at source"

        # Our driver's first sync per partition is at the first record it copied. MM2 sends its first
        # sync only if no later one of the partition comes before a permit frees: after a hand-over it
        # starts with a backlog burst, and was seen starting at 746 where it resumed at 342.
        successor = syncs_from(east, topic, syncs_before)
        for partition, last in handed_over.items():
            first_sync = successor[partition][0]
            if second is start_driver:
                assert first_sync == (last + 1, last + 1), (partition, last, successor[partition][:3])
            else:
                assert first_sync[0] >= last + 1 and first_sync[0] == first_sync[1], (partition, first_sync)

        # Apache's RemoteClusterUtils translates the group within the bound, and the checkpoints the
        # two replicators wrote never move back.
        last_answer: list[dict[int, int]] = []

        def translated() -> dict[int, int] | None:
            answer = probe("translate", west, "east", group, "15000")
            offsets = {int(k.rsplit(":", 1)[1]): v for k, v in answer.items()
                       if k.rsplit(":", 1)[0] == remote}
            last_answer[:] = [offsets]
            within = all(final[p] - (OFFSET_LAG_MAX + 1) <= offsets.get(p, -1) <= final[p] for p in final)
            return offsets if within else None

        try:
            wait_until(translated, 30, f"translateOffsets within the bound of {final}")
        except AssertionError as timed_out:
            successor_syncs = syncs_from(east, topic, syncs_before)
            raise AssertionError(f"{timed_out}; Apache's last answer: {last_answer}; "
                                 f"syncs since the hand-over: {successor_syncs}") from None
        checkpoints = probe("decode", west, "east.checkpoints.internal", "checkpoint")
        assert checkpoints["failures"] == 0
        for partition in range(PARTITIONS):
            downstream = [c["downstream"] for c in checkpoints["records"]
                          if c["group"] == group and c["topic"] == remote and c["partition"] == partition]
            assert downstream and downstream == sorted(downstream), (partition, downstream)
        assert replicators[1].alive(), replicators[1].tail()
    except BaseException:
        for replicator in replicators:
            print(f"--- replicator log tail ---\n{replicator.tail()}")
        raise
    finally:
        traffic._stop.set()
        for replicator in replicators:
            replicator.stop()


def test_mm2_then_driver(kafka_clusters: dict[str, str], mirror_probe: MirrorProbe, tmp_path: Path) -> None:
    hand_over(kafka_clusters, mirror_probe, tmp_path, start_mm2, start_driver)


def test_driver_then_mm2(kafka_clusters: dict[str, str], mirror_probe: MirrorProbe, tmp_path: Path) -> None:
    hand_over(kafka_clusters, mirror_probe, tmp_path, start_driver, start_mm2)
