"""Reads one single-partition MM2 internal topic (offset syncs, checkpoints): first to its end, then on.

MM2 compatible: only partition 0 is read, from the beginning. Every record is untrusted: one that is
too large, does not decode or names something illegal is counted, logged with its topic, partition and
offset (at a bounded rate) and skipped, never fatal (``clients.record_guard.RecordGuard``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from clients.record_guard import RecordGuard
from contract.kafka_names import check_group, check_topic
from contract.records.mm2 import (
    CHECKPOINT_MAX_KEY_BYTES,
    CHECKPOINT_MAX_VALUE_BYTES,
    OFFSET_SYNC_MAX_KEY_BYTES,
    OFFSET_SYNC_MAX_VALUE_BYTES,
    RECORD_PARTITION,
    Checkpoint,
    OffsetSync,
)
from contract.untrusted import long

LOG = logging.getLogger(__name__)

BATCH = 500
WATERMARK_TIMEOUT_S = 10.0

RecordHandler = Callable[[Message], None]
OFFSET_SYNC_CAPS = {"max_key_bytes": OFFSET_SYNC_MAX_KEY_BYTES,
                    "max_value_bytes": OFFSET_SYNC_MAX_VALUE_BYTES}
CHECKPOINT_CAPS = {"max_key_bytes": CHECKPOINT_MAX_KEY_BYTES, "max_value_bytes": CHECKPOINT_MAX_VALUE_BYTES}


class InternalTopicFeed:
    """A consumer assigned to partition 0 of `topic`, feeding every decodable record to `handle`."""

    def __init__(self, consumer: Consumer, alias: str, topic: str, handle: RecordHandler, *,
                 max_key_bytes: int = CHECKPOINT_MAX_KEY_BYTES,
                 max_value_bytes: int = CHECKPOINT_MAX_VALUE_BYTES, guard: RecordGuard | None = None) -> None:
        self.consumer, self.alias, self.topic, self._handle = consumer, alias, topic, handle
        # A guard from the caller (driver.reader_health) outlives this feed and counts over restarts.
        self.guard = guard or RecordGuard(f"reader of {topic}", max_key_bytes=max_key_bytes,
                                          max_value_bytes=max_value_bytes, logger=LOG)
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

    @property
    def skipped(self) -> int:
        return self.guard.rejected

    def _apply(self, message: Message) -> None:
        self.guard.read(message, lambda _key, _value: self._handle(message), self.alias)


def checked_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint if its names are legal and its offsets real; Rejected naming the field otherwise
    (a forged one with a huge upstream offset would hold back every later checkpoint of its group)."""
    check_group(checkpoint.consumer_group_id, "checkpoint group")
    check_topic(checkpoint.topic, "checkpoint topic")
    long(checkpoint.partition, "checkpoint partition", 0)
    long(checkpoint.upstream_offset, "checkpoint upstream offset", 0)
    long(checkpoint.downstream_offset, "checkpoint downstream offset", 0)
    return checkpoint


def checked_offset_sync(sync: OffsetSync) -> OffsetSync:
    """The offset sync if its topic is a legal name and its offsets real; Rejected otherwise."""
    check_topic(sync.topic, "offset sync topic")
    long(sync.partition, "offset sync partition", 0)
    long(sync.upstream_offset, "offset sync upstream offset", 0)
    long(sync.downstream_offset, "offset sync downstream offset", 0)
    return sync
