"""Reads one single-partition MM2 internal topic (offset syncs, checkpoints): first to its end, then on.

MM2 compatible: only partition 0 is read, from the beginning, and a record that does not decode is
logged with its topic, partition and offset and skipped, never fatal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from contract.records.mm2 import RECORD_PARTITION, WireFormatError

LOG = logging.getLogger(__name__)

BATCH = 500
WATERMARK_TIMEOUT_S = 10.0

RecordHandler = Callable[[Message], None]


class InternalTopicFeed:
    """A consumer assigned to partition 0 of `topic`, feeding every decodable record to `handle`."""

    def __init__(self, consumer: Consumer, alias: str, topic: str, handle: RecordHandler) -> None:
        self.consumer, self.alias, self.topic, self._handle = consumer, alias, topic, handle
        self.skipped = 0
        self.consumer.assign([TopicPartition(topic, RECORD_PARTITION, OFFSET_BEGINNING)])

    def read_to_end(self, stopping: threading.Event, timeout_s: float) -> bool:
        """Apply every record up to the end offset seen now; False if stopped or out of time."""
        deadline = time.monotonic() + timeout_s
        watermarks = self._watermarks(stopping, deadline)
        if watermarks is None:
            return False
        low, high = watermarks
        while not stopping.is_set() and time.monotonic() < deadline:
            if high <= low or self._position() >= high:
                LOG.info("read %s on %s to its end (offset %d)", self.topic, self.alias, high)
                return True
            self.poll(0.5)
        return False

    def poll(self, timeout_s: float) -> int:
        """Apply the records available within `timeout_s`; returns how many were read."""
        messages = self.consumer.consume(BATCH, timeout=timeout_s)
        for message in messages:
            error = message.error()
            if error is None:
                self._apply(message)
            elif error.code() != KafkaError._PARTITION_EOF:
                LOG.warning("reading %s on %s: %s", self.topic, self.alias, error)
        return len(messages)

    def _watermarks(self, stopping: threading.Event, deadline: float) -> tuple[int, int] | None:
        """(low, high) of partition 0; retried while a just-created topic is not yet known."""
        while True:
            try:
                return self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, RECORD_PARTITION), timeout=WATERMARK_TIMEOUT_S)
            except KafkaException as exc:
                if stopping.is_set() or time.monotonic() >= deadline:
                    LOG.warning("cannot read the end offset of %s on %s: %s", self.topic, self.alias, exc)
                    return None
                LOG.debug("end offset of %s on %s not known yet: %s", self.topic, self.alias, exc)
                stopping.wait(0.5)

    def close(self) -> None:
        self.consumer.close()

    def _position(self) -> int:
        [position] = self.consumer.position([TopicPartition(self.topic, RECORD_PARTITION)])
        return position.offset

    def _apply(self, message: Message) -> None:
        try:
            self._handle(message)
        except (WireFormatError, ValueError) as exc:
            self.skipped += 1
            LOG.warning("skipping undecodable record %s[%d]@%d on %s: %s", message.topic(),
                        message.partition(), message.offset(), self.alias, exc)
