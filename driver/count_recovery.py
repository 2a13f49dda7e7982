"""Counts of records a worker copied, recorded as progress, and died before reporting.

A worker counts what it copies and reports the counts every `metrics.period` (MM2's record-count: what
it sends, per period). A crash loses what it counted since its last report. Two records on the target
say how much that was, per source partition: the progress (``driver.progress_record``: the last
record copied and recorded) and the partition's last report in `srm-metrics.<source>.internal`
(``PartitionMetrics.upstream_offset``: the last record that report had counted). When a task starts a
partition, the records between the two are counted with its first report (``uncounted``).

What this does not bring back: byte counts and latencies of those records (only offsets are
recorded), and the counts of a partition that had never been reported when the crash came (its first
`metrics.period`). Records copied after the last recorded progress are copied again (at least once)
and counted again, as MM2 counts what it sends; in exactly-once mode nothing is copied twice.

The last reports are read from the tail of the metrics topic (``TAIL_RECORDS`` per partition of the
replication, with a floor and a cap), each record under a guard; a partition whose last report is
older than the tail gets no count back. A graceful release flushes its final report before giving
the partition up, so the next owner never counts what that report counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from clients.record_guard import RecordGuard
from contract.records import raw_metrics

LOG = logging.getLogger(__name__)

TAIL_RECORDS: Final = 8  # per replicated partition: a report of every partition each period, and others
MIN_TAIL: Final = 5_000
MAX_TAIL: Final = 500_000
READ_POLL_S: Final = 0.2
PartitionKey = tuple[str, int]


def uncounted(last_replicated: int | None, last_reported: int | None) -> int:
    """Records copied and recorded as progress (up to ``last_replicated``) that no report counted (the
    last one counted up to ``last_reported``); 0 when either is unknown."""
    if last_replicated is None or last_reported is None or last_replicated < 0:
        return 0
    return max(0, last_replicated - last_reported)


def tail_size(partitions: int) -> int:
    return max(MIN_TAIL, min(MAX_TAIL, TAIL_RECORDS * partitions))


class LastReports:
    """Reads the last reported upstream offset of partitions of one replication from the tail of its
    metrics topic; a record that does not parse is counted by the guard and passed over."""

    def __init__(self, source: str, target: str, topic: str, guard: RecordGuard | None = None) -> None:
        self.source, self.target, self.topic = source, target, topic
        self.guard = guard or RecordGuard(f"count recovery of {source}->{target}", max_key_bytes=1024,
                                          max_value_bytes=raw_metrics.MAX_VALUE_BYTES, logger=LOG)

    def read(self, consumer: Consumer, keys: Iterable[PartitionKey], tail: int,
             timeout_s: float) -> dict[PartitionKey, int]:
        """Upstream topic-partition -> the upstream offset its last report counted up to, for ``keys``
        found in the last ``tail`` records of each partition of the topic. Raises KafkaException when
        the topic cannot be read (the caller counts nothing back then)."""
        wanted = set(keys)
        deadline = time.monotonic() + timeout_s
        metadata = consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        if metadata is None or metadata.error is not None:
            return {}
        ends: dict[int, int] = {}
        starts = []
        for partition in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition),
                                                       timeout=max(0.1, deadline - time.monotonic()))
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(self.topic, partition, max(low, high - tail)))
        found: dict[PartitionKey, int] = {}
        if not starts:
            return found
        consumer.assign(starts)
        while ends:
            if time.monotonic() > deadline:
                raise KafkaException(f"{self.topic} not read to its end in {timeout_s:.0f} s")
            for message in consumer.consume(500, timeout=READ_POLL_S):
                self._take(message, wanted, found)
            # Ended where the consumer's position reaches the end, not on the record at the end - 1:
            # that offset may be a transaction marker, which is never handed out but is passed over.
            for position in consumer.position([TopicPartition(self.topic, p) for p in ends]):
                if position.offset >= ends[position.partition]:
                    del ends[position.partition]
        return found

    def _take(self, message: Message, wanted: set[PartitionKey], found: dict[PartitionKey, int]) -> None:
        if message.error() is None:
            report = self.guard.read(message, _decode)
            if (isinstance(report, raw_metrics.PartitionMetrics) and report.upstream_offset is not None
                    and (report.source, report.target) == (self.source, self.target)
                    and (report.upstream_topic, report.partition) in wanted):
                found[(report.upstream_topic, report.partition)] = report.upstream_offset


def _decode(_key: bytes | None, value: bytes | None) -> raw_metrics.RawMetrics | None:
    return None if value is None else raw_metrics.decode(value)
