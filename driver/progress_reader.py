"""Reads replication progress from `mm2-offsets.<source>.internal` on the target (the record format is
``driver.progress_record``, MM2's Connect offsets, so MM2 and this driver can take over from each
other).

The topic may hold other connectors' keys (checkpoints, heartbeats) and other sources' clusters: the
reader keeps only what it was asked for and skips, with a warning, records that do not parse.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from clients import kafka_clients
from clients.record_guard import RecordGuard
from driver.progress_record import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    SourcePartition,
    decode_key,
    decode_value,
)

LOG = logging.getLogger(__name__)

READ_POLL_S: Final = 0.2
RETRY_BACKOFF_S: Final = 0.5


class ProgressReadTimeout(RuntimeError):
    """The progress topic could not be read to its end in time (e.g. a transaction left open)."""


class ProgressReader:
    """Tails the progress topic of one source cluster; `read_to_end` catches up before a seek.

    One long-lived consumer with every partition assigned from the beginning, so each catch-up only
    reads what was written since the last one. It reads `read_committed`: progress written inside a
    transaction counts only once committed (exactly-once mode), and "the end" is the high watermark
    seen when the catch-up starts, so a transaction still open blocks until it commits or is aborted.
    """

    def __init__(self, consumer: Consumer, admin: AdminClient, topic: str, cluster: str,
                 guard: RecordGuard | None = None) -> None:
        self.consumer, self.admin, self.topic, self.cluster = consumer, admin, topic, cluster
        self._offsets: dict[tuple[str, int], int] = {}
        # End offsets reported by EOF events: past trailing transaction markers, which the consumer's
        # position never moves over, and reported only once per arrival at the end.
        self._eof: dict[int, int] = {}
        self._assigned = False
        # A guard from the caller outlives this reader: its count is then a total over restarts.
        self.guard = guard or RecordGuard(f"progress reader of {topic}", max_key_bytes=MAX_KEY_BYTES,
                                          max_value_bytes=MAX_VALUE_BYTES, logger=LOG)

    @property
    def skipped(self) -> int:
        """Records refused (too large, not decodable, out of range): counted, logged and passed over."""
        return self.guard.rejected

    def last_replicated(self, topic: str, partition: int) -> int | None:
        return self._offsets.get((topic, partition))

    def read_to_end(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ends = self._end_offsets_retrying(deadline)
        remaining = {p for p, end in ends.items() if self._position(p) < end}
        while remaining:
            if time.monotonic() > deadline:
                raise ProgressReadTimeout(f"{self.topic}: partitions {sorted(remaining)} "
                                          f"not read to their end in {timeout_s:.0f} s")
            for message in self.consumer.consume(500, timeout=READ_POLL_S):
                self._apply(message, ends, remaining)
            remaining = {p for p in remaining if self._position(p) < ends[p]}

    def close(self) -> None:
        self.consumer.close()

    def _end_offsets_retrying(self, deadline: float) -> dict[int, int]:
        while True:
            try:
                return self._end_offsets()
            except KafkaException as exc:  # e.g. leaders of a just-created topic not elected yet
                if time.monotonic() > deadline:
                    raise
                LOG.info("%s end offsets not available yet (%s); retrying", self.topic, exc.args[0].str())
                time.sleep(RETRY_BACKOFF_S)

    def _end_offsets(self) -> dict[int, int]:
        metadata = self.consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
        if metadata is None or metadata.error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{self.topic} is missing"))
        partitions = sorted(metadata.partitions)
        if not self._assigned:
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            self._assigned = True
        # One ListOffsets request for all partitions: asking the consumer partition by partition waits
        # out its fetch long-poll each time.
        requests = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in partitions}
        futures = self.admin.list_offsets(requests, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                          request_timeout=30)
        return {tp.partition: kafka_clients.await_result(self.admin, future).offset
                for tp, future in futures.items()}

    def _position(self, partition: int) -> int:
        position = self.consumer.position([TopicPartition(self.topic, partition)])[0].offset
        return max(position, self._eof.get(partition, 0), 0)

    def _apply(self, message: Message, ends: dict[int, int], remaining: set[int]) -> None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                # read_committed: EOF comes at the last stable offset, past control records.
                partition, end = message.partition(), message.offset()
                assert partition is not None and end is not None  # an end-of-partition event has both
                self._eof[partition] = end
                if end >= ends.get(partition, 0):
                    remaining.discard(partition)
                return
            raise KafkaException(error)
        decoded = self.guard.read(message, _progress)
        if decoded is None:
            return
        source, offset = decoded
        if source is None or source.cluster != self.cluster:
            return
        if offset is None:
            self._offsets.pop((source.topic, source.partition), None)
        else:
            self._offsets[(source.topic, source.partition)] = offset


def _progress(key: bytes | None, value: bytes | None) -> tuple[SourcePartition | None, int | None]:
    source = decode_key(key)
    # Other connectors' values are theirs to judge: only ours must hold an offset.
    return source, decode_value(value) if source is not None else None
