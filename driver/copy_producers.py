"""The producers an at-least-once worker copies through: its partitions spread over several, sized from
how many of them each target broker leads.

librdkafka puts one partition's batch in a produce request (its issue 1700), and a broker handles one
request of a connection at a time: it reads the next only once it has answered. With hundreds of a
worker's partitions led by one target broker, a record therefore waits in the producer's queue for
the requests of every other partition on that connection, however idle the broker is. Java's
producer (MM2's) sends all of a broker's ready partitions in one request. A worker here adds a
producer, with connections of its own that the broker serves side by side, for every
``replication.producer.partitions.per.broker`` partitions one broker leads, up to
``replication.producers.max``.

A partition keeps its producer for as long as the worker holds it, so its records stay in order and
librdkafka's idempotence and gapless guarantee hold for it as before. The first producer is the
replication's own and also carries progress and metrics. Exactly once is not spread: a task's records
and progress go in one transaction of its one transactional producer (`driver.transactional_writer`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from confluent_kafka import KafkaException, Producer

from contract.config import SrmConfig

LOG = logging.getLogger(__name__)

METADATA_TIMEOUT_S: Final = 5.0
UNKNOWN_LEADER: Final = -1


def spread_settings(config: SrmConfig, source: str, target: str) -> tuple[int, int]:
    """(partitions of one target broker a producer carries, the most producers) of a replication."""
    least = {"replication.producer.partitions.per.broker": 0, "replication.producers.max": 1}
    values = {key: config.setting(key, source, target) for key in least}
    for key, value in values.items():
        if value < least[key]:
            raise config.config_error(key, f"must be at least {least[key]}, got {value}", source, target)
    return values["replication.producer.partitions.per.broker"], values["replication.producers.max"]


class Placed(Protocol):
    """What is placed: a partition of a remote topic, told which producer carries it."""

    remote: str
    partition: int
    lane: int
    key: tuple[str, int]


class CopyProducers:
    def __init__(self, first: Producer, make: Callable[[], Producer] | None = None,
                 partitions_per_broker: int = 0, most: int = 1) -> None:
        """``make`` builds another producer; without it, or with ``partitions_per_broker`` 0, every
        partition goes to ``first``."""
        self.producers = [first]
        self._make, self._per_broker, self._most = make, partitions_per_broker, max(1, most)
        self._led: list[Counter[int]] = [Counter()]  # per producer: its partitions by leading broker
        self._placed: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (producer, leader)

    @property
    def spreading(self) -> bool:
        return self._make is not None and self._per_broker > 0 and self._most > 1

    def place(self, flows: Iterable[Placed]) -> None:
        """Gives each partition a producer: the one carrying fewest partitions of its leader, or a new
        one when every producer already carries ``partitions_per_broker`` of them."""
        flows = list(flows)
        leaders = self._leaders({flow.remote for flow in flows}) if self.spreading else {}
        for flow in flows:
            leader = leaders.get((flow.remote, flow.partition), UNKNOWN_LEADER)
            lane = min(range(len(self.producers)), key=lambda i: self._led[i][leader])
            full = self._led[lane][leader] >= self._per_broker
            if full and self.spreading and len(self.producers) < self._most:
                lane = self._add()
            self._led[lane][leader] += 1
            self._placed[flow.key] = (lane, leader)
            flow.lane = lane

    def leave(self, flows: Iterable[Placed]) -> None:
        for flow in flows:
            lane, leader = self._placed.pop(flow.key, (0, UNKNOWN_LEADER))
            self._led[lane][leader] -= 1

    def poll(self) -> None:
        for producer in self.producers:
            producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Flushes every producer within ``timeout_s`` in all; records still unacknowledged."""
        deadline = time.monotonic() + timeout_s
        return sum(producer.flush(max(0.0, deadline - time.monotonic())) for producer in self.producers)

    def _add(self) -> int:
        assert self._make is not None  # (spreading)
        self.producers.append(self._make())
        self._led.append(Counter())
        LOG.info("copying through %d producers (%d partitions per target broker each)", len(self.producers),
                 self._per_broker)
        return len(self.producers) - 1

    def _leaders(self, topics: set[str]) -> dict[tuple[str, int], int]:
        """The leading broker of each partition of ``topics``, from the first producer's metadata; a
        partition whose leader is not known yet is placed as one broker's (a spread that is off by then
        only costs latency, never order)."""
        leaders: dict[tuple[str, int], int] = {}
        for topic in topics:
            try:
                metadata = self.producers[0].list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
            except KafkaException as exc:
                LOG.info("leaders of %s not known (%s): its partitions spread as one broker's", topic, exc)
                continue
            if metadata is not None and metadata.error is None:
                leaders.update({(topic, p): info.leader for p, info in metadata.partitions.items()})
        return leaders
