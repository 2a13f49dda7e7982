"""One micro-batch's partial windows and latest records (window_partials) sorted by what the sink does.

Pure: no Redis, no Spark. Partials are grouped by hash tag (target, source, topic) so the sink merges a
whole topic's series with one script call, and Redis Cluster keeps them on one slot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aggregator import redis_layout as layout
from aggregator.rollups import INVALID_KIND
from aggregator.window_partials import BatchPartials
from driver.wire.raw_metrics import METRICS

LOG = logging.getLogger(__name__)

Subject = tuple[str, str, str, str, str, str]  # kind, target, source, topic, partition, group
TagKey = tuple[str, str, str]  # target, source, topic


@dataclass
class InvalidWindow:
    series: layout.SeriesId
    window: layout.WindowAggregate
    excerpt: str


@dataclass
class BatchPlan:
    # hash tag -> series -> its partial finest windows in the batch
    partials: dict[TagKey, dict[layout.SeriesId, list[layout.WindowAggregate]]] = field(default_factory=dict)
    invalid: list[InvalidWindow] = field(default_factory=list)
    # subject -> newest record (decoded payload) in the batch
    latest: dict[Subject, dict[str, Any]] = field(default_factory=dict)
    index_hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    index_sets: dict[str, set[str]] = field(default_factory=dict)
    max_event_ts: int | None = None

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]], latest: Iterable[Mapping[str, Any]] = (),
           excerpts: Mapping[tuple[str, str, int, int], str] | None = None) -> BatchPlan:
        plan = cls()
        for row in rows:
            plan.add(row, excerpts or {})
        for record in latest:
            plan.add_latest(record)
        return plan

    @classmethod
    def of_partials(cls, batch: BatchPartials) -> BatchPlan:
        return cls.of(batch.windows, batch.latest, batch.excerpts)

    def windows_of(self, series: layout.SeriesId) -> list[layout.WindowAggregate]:
        return self.partials.get((series.target, series.source, series.topic), {}).get(series, [])

    def all_partials(self) -> Iterable[tuple[layout.SeriesId, list[layout.WindowAggregate]]]:
        for by_series in self.partials.values():
            yield from by_series.items()

    def add(self, row: Mapping[str, Any], excerpts: Mapping[tuple[str, str, int, int], str]) -> None:
        start, partition = int(row["window_start"]), int(row["partition"])
        target, source, topic = row["target"], row["source"], row["topic"]
        if row["kind"] == INVALID_KIND:
            series = layout.SeriesId(target, source, topic, partition, layout.INVALID_RECORDS_METRIC)
            window = _window(row, layout.INVALID_RECORDS_METRIC, start)
            self._add_window(series, window)
            excerpt = excerpts.get((target, source, partition, start), "")
            self.invalid.append(InvalidWindow(series, window, excerpt))
            self._index(series, None)
            return
        ts = int(row["max_ts"])
        self.max_event_ts = ts if self.max_event_ts is None else max(self.max_event_ts, ts)
        group = row["group"] or None
        for name in METRICS:
            if row.get(f"{name}__n") is None:
                continue
            series = layout.SeriesId(target, source, topic, partition, name, group)
            self._add_window(series, _window(row, name, start))
            self._index(series, row["upstream_topic"])

    def _add_window(self, series: layout.SeriesId, window: layout.WindowAggregate) -> None:
        tag = (series.target, series.source, series.topic)
        self.partials.setdefault(tag, {}).setdefault(series, []).append(window)

    def add_latest(self, record: Mapping[str, Any]) -> None:
        """The newest record of a subject in the batch (window_partials.latest_records)."""
        subject = (record["kind"], record["target"], record["source"], record["topic"],
                   str(record["partition"]), record.get("group") or "")
        known = self.latest.get(subject)
        if known is None or known["ts"] < record["ts"]:
            self.latest[subject] = dict(record)

    def _index(self, series: layout.SeriesId, upstream_topic: str | None) -> None:
        if upstream_topic and series.topic != layout.ALL_TOPICS:
            topics = self.index_hashes.setdefault(layout.topics_key(series.target, series.source), {})
            topics[series.topic] = upstream_topic
        entries = [(layout.targets_key(), series.target), (layout.sources_key(series.target), series.source)]
        if series.group is not None:
            entries.append((layout.groups_key(series.target, series.source), series.group))
        if series.partition != layout.WHOLE_TOPIC and series.topic != layout.ALL_TOPICS:
            entries.append((layout.partitions_key(series.target, series.source, series.topic),
                            str(series.partition)))
        for key, member in entries:
            self.index_sets.setdefault(key, set()).add(member)


def _window(row: Mapping[str, Any], name: str, start: int) -> layout.WindowAggregate:
    last_ts = row[f"{name}__last_ts"]
    return layout.WindowAggregate(start, row[f"{name}__n"], row[f"{name}__sum"], row[f"{name}__min"],
                                  row[f"{name}__max"], row[f"{name}__last"],
                                  start if last_ts is None else int(last_ts))
