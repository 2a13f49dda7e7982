"""Per group-partition checkpoint metrics, drained into raw-metrics `GroupMetrics` every `metrics.period`.

What `checkpoint_latency_ms` measures here: the time from when the checkpoint task first saw a
group's committed upstream offset (the listing of the group's offsets on the source) until the target
acknowledged the checkpoint record that carries it. MM2 measures "now - checkpoint record timestamp"
at acknowledgement, and its record timestamp is the listing time, so both agree when the offset could
be translated at once; ours also counts the rounds spent waiting for an offset sync that makes the
offset translatable, which is the delay an operator failing over actually suffers. The broker does not
return commit timestamps through the Admin API, so the listing time is the earliest commit time known.

Used only from the checkpoint worker's thread (delivery callbacks run inside its poll/flush calls),
so no locking is needed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from contract.records.raw_metrics import GroupMetrics, LatencySummary

LOG = logging.getLogger(__name__)

GroupPartition = tuple[str, str, int]  # group, upstream topic, partition


@dataclass
class GroupPartitionStats:
    """Latest offsets of one group-partition and the checkpoint latencies of the current period."""

    group: str
    upstream_topic: str
    downstream_topic: str
    partition: int
    upstream_offset: int | None = None
    downstream_offset: int | None = None
    source_end_offset: int | None = None
    first_seen_ms: int = 0
    latencies: list[float] = field(default_factory=list)

    def group_lag(self) -> int | None:
        """Records the group still has to consume on the source (never negative)."""
        if self.source_end_offset is None or self.upstream_offset is None:
            return None
        return max(0, self.source_end_offset - self.upstream_offset)

    def report(self, ts: int, period_ms: int, source: str, target: str) -> GroupMetrics:
        record = GroupMetrics(
            ts=ts, period_ms=period_ms, source=source, target=target, group=self.group,
            topic=self.downstream_topic, upstream_topic=self.upstream_topic, partition=self.partition,
            checkpoint_latency_ms=LatencySummary.of(self.latencies),
            group_upstream_offset=self.upstream_offset, group_downstream_offset=self.downstream_offset,
            group_lag=self.group_lag())
        self.latencies = []
        return record


class CheckpointStats:
    """Checkpoint metrics of one replication."""

    def __init__(self, source: str, target: str, now_ms: int) -> None:
        self.source, self.target = source, target
        self._partitions: dict[GroupPartition, GroupPartitionStats] = {}
        self._last_report_ms = now_ms

    def observe(self, key: GroupPartition, downstream_topic: str, upstream_offset: int,
                source_end_offset: int | None, listed_ms: int) -> GroupPartitionStats:
        """Record a committed offset seen at `listed_ms`; a changed offset restarts its latency clock."""
        group, upstream_topic, partition = key
        stats = self._partitions.get(key)
        if stats is None:
            stats = self._partitions[key] = GroupPartitionStats(
                group, upstream_topic, downstream_topic, partition, first_seen_ms=listed_ms)
        if stats.upstream_offset != upstream_offset:
            stats.upstream_offset, stats.first_seen_ms = upstream_offset, listed_ms
        stats.downstream_topic = downstream_topic
        if source_end_offset is not None:
            stats.source_end_offset = source_end_offset
        return stats

    def checkpointed(self, key: GroupPartition, upstream_offset: int, downstream_offset: int,
                     acked_ms: int) -> None:
        """The target acknowledged a checkpoint of `key`."""
        stats = self._partitions.get(key)
        if stats is None:
            return
        stats.downstream_offset = downstream_offset
        if stats.upstream_offset == upstream_offset:
            stats.latencies.append(float(max(0, acked_ms - stats.first_seen_ms)))

    def retain(self, keys: Iterable[GroupPartition]) -> None:
        """Forget group-partitions no longer committed on the source or no longer replicated."""
        keep = set(keys)
        for key in set(self._partitions) - keep:
            del self._partitions[key]

    def drain(self, now_ms: int) -> list[GroupMetrics]:
        period_ms = max(0, now_ms - self._last_report_ms)
        self._last_report_ms = now_ms
        return [stats.report(now_ms, period_ms, self.source, self.target)
                for stats in self._partitions.values() if stats.upstream_offset is not None]
