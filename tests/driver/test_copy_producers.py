"""How an at-least-once worker spreads its partitions over producers (pure logic: stand-in producers
that answer metadata; the real brokers are in test_replication_integration.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import cast

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from contract.config import ConfigError, load_config
from driver.copy_producers import UNKNOWN_LEADER, CopyProducers, spread_settings
from driver.replication_stats import PartitionStats
from driver.target_writer import AtLeastOnceWriter, PartitionFlow
from tests.driver.test_send_queue import Producer as QueueProducer
from tests.driver.test_send_queue import Record


@dataclass
class Producer:
    """Answers metadata with the leaders given (topic -> partition -> broker); counts polls and flushes."""

    leaders: dict[str, dict[int, int]] = field(default_factory=dict)
    polls: int = 0
    flushes: int = 0
    refuse_metadata: bool = False

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        if self.refuse_metadata:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        partitions = {p: SimpleNamespace(leader=leader) for p, leader in self.leaders.get(topic, {}).items()}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return 0

    def flush(self, _timeout: float) -> int:
        self.flushes += 1
        return 0


def flows(topic: str, count: int) -> list[PartitionFlow]:
    return [PartitionFlow(topic, p, f"east.{topic}", PartitionStats(f"east.{topic}", topic, p))
            for p in range(count)]


def spread(first: Producer, per_broker: int, most: int) -> tuple[CopyProducers, list[Producer]]:
    made: list[Producer] = [first]

    def make() -> confluent_kafka.Producer:
        made.append(Producer())
        return cast(confluent_kafka.Producer, made[-1])

    return CopyProducers(cast(confluent_kafka.Producer, first), make, per_broker, most), made


def carried(placed: list[PartitionFlow]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for flow in placed:
        counts[flow.lane] = counts.get(flow.lane, 0) + 1
    return counts


def test_partitions_of_one_broker_fill_a_producer_before_the_next_is_made() -> None:
    first = Producer({"east.t": dict.fromkeys(range(1000), 1)})
    producers, made = spread(first, 250, 4)
    placed = flows("t", 1000)
    producers.place(placed)
    assert len(made) == 4 and producers.producers[0] is first
    assert carried(placed) == {0: 250, 1: 250, 2: 250, 3: 250}


def test_past_the_most_producers_the_partitions_share_them_evenly() -> None:
    producers, made = spread(Producer({"east.t": dict.fromkeys(range(1200), 1)}), 250, 4)
    placed = flows("t", 1200)
    producers.place(placed)
    assert len(made) == 4
    assert carried(placed) == {0: 300, 1: 300, 2: 300, 3: 300}


def test_each_broker_counts_its_own_partitions() -> None:
    # 600 partitions, half led by broker 1, half by broker 2: two producers of 150 + 150 each.
    producers, made = spread(Producer({"east.t": {p: 1 + p % 2 for p in range(600)}}), 150, 8)
    placed = flows("t", 600)
    producers.place(placed)
    assert len(made) == 2
    by_lane_and_broker: dict[tuple[int, int], int] = {}
    for flow in placed:
        key = (flow.lane, 1 + flow.partition % 2)
        by_lane_and_broker[key] = by_lane_and_broker.get(key, 0) + 1
    assert by_lane_and_broker == {(0, 1): 150, (0, 2): 150, (1, 1): 150, (1, 2): 150}


def test_partitions_that_leave_free_their_place_for_the_next() -> None:
    producers, made = spread(Producer({"east.t": dict.fromkeys(range(500), 1)}), 250, 4)
    placed = flows("t", 500)
    producers.place(placed)
    producers.leave(placed[:250])  # producer 0's partitions
    again = flows("t", 250)
    producers.place(again)
    assert len(made) == 2 and {flow.lane for flow in again} == {0}


def test_without_a_way_to_make_producers_or_with_0_every_partition_goes_to_the_first() -> None:
    first = Producer({"east.t": dict.fromkeys(range(600), 1)})
    for producers in (CopyProducers(cast(confluent_kafka.Producer, first)), spread(first, 0, 4)[0],
                      spread(first, 250, 1)[0]):
        placed = flows("t", 600)
        producers.place(placed)
        assert len(producers.producers) == 1 and carried(placed) == {0: 600}


def test_leaders_not_known_are_counted_as_one_broker() -> None:
    producers, made = spread(Producer(refuse_metadata=True), 100, 4)
    placed = flows("t", 300)
    producers.place(placed)
    assert len(made) == 3 and carried(placed) == {0: 100, 1: 100, 2: 100}
    assert UNKNOWN_LEADER == -1


def test_poll_and_flush_reach_every_producer() -> None:
    producers, made = spread(Producer({"east.t": dict.fromkeys(range(4), 1)}), 1, 4)
    producers.place(flows("t", 4))
    producers.poll()
    assert producers.flush(1.0) == 0
    assert [(p.polls, p.flushes) for p in made] == [(1, 1)] * 4


def test_the_writer_sends_each_partitions_records_through_its_own_producer_only() -> None:
    lanes = [QueueProducer(), QueueProducer()]
    leaders = SimpleNamespace(topics={"east.t": SimpleNamespace(
        error=None, partitions={p: SimpleNamespace(leader=1) for p in range(4)})})
    for lane in lanes:
        lane.list_topics = lambda topic, timeout: leaders  # type: ignore[attr-defined]
    made = iter(lanes[1:])
    producers = CopyProducers(cast(confluent_kafka.Producer, lanes[0]),
                              lambda: cast(confluent_kafka.Producer, next(made)), 2, 2)
    writer = AtLeastOnceWriter(cast(confluent_kafka.Producer, lanes[0]), "east", "mm2-offsets.east.internal",
                               None, producers=producers)
    writer.add(flows("t", 4))
    writer.write([Record("t", p, offset, f"{offset}".encode()) for p in range(4) for offset in range(3)])
    by_lane = [{partition for _, partition, _ in lane.produced} for lane in lanes]
    assert by_lane == [{0, 1}, {2, 3}]
    for lane in lanes:  # each partition's records in order, on its producer alone
        for partition in {partition for _, partition, _ in lane.produced}:
            assert [v for _, p, v in lane.produced if p == partition] == [b"0", b"1", b"2"]
        lane.acknowledge(len(lane.produced))
    assert {key: flow.acked for key, flow in writer.flows.items()} == {("t", p): 2 for p in range(4)}


def test_the_spread_comes_from_the_settings_and_refuses_what_cannot_work(tmp_path) -> None:
    path = tmp_path / "srm.properties"
    base = ("clusters = east, west\neast.bootstrap.servers = a:9092\n"
            "west.bootstrap.servers = b:9092\neast->west.enabled = true\n")
    for extra, spread_ in (("", (250, 4)),
                           ("east->west.replication.producer.partitions.per.broker = 0\n", (0, 4)),
                           ("replication.producers.max = 8\n", (250, 8))):
        path.write_text(base + extra)
        assert spread_settings(load_config(path), "east", "west") == spread_
    for key, bad in (("replication.producers.max", 0), ("replication.producer.partitions.per.broker", -1)):
        path.write_text(f"{base}{key} = {bad}\n")
        with pytest.raises(ConfigError, match=key):
            spread_settings(load_config(path), "east", "west")
