"""One micro-batch's partial windows (rows of rollups.window_partials) sorted by what the sink does.

Pure: no Redis, no Spark. Partials are grouped by hash tag (target, source, topic) so the sink merges a
whole topic's series with one script call, and Redis Cluster keeps them on one slot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aggregator import redis_layout as layout
from aggregator.rollups import INVALID_KIND
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
    _latest_order: dict[Subject, tuple[int, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> BatchPlan:
        plan = cls()
        for row in rows:
            plan.add(row)
        return plan

    def windows_of(self, series: layout.SeriesId) -> list[layout.WindowAggregate]:
        return self.partials.get((series.target, series.source, series.topic), {}).get(series, [])

    def all_partials(self) -> Iterable[tuple[layout.SeriesId, list[layout.WindowAggregate]]]:
        for by_series in self.partials.values():
            yield from by_series.items()

    def add(self, row: Mapping[str, Any]) -> None:
        start, partition = int(row["window_start"]), int(row["partition"])
        target, source, topic = row["target"], row["source"], row["topic"]
        if row["kind"] == INVALID_KIND:
            series = layout.SeriesId(target, source, topic, partition, layout.INVALID_RECORDS_METRIC)
            window = _window(row, layout.INVALID_RECORDS_METRIC, start)
            self._add_window(series, window)
            self.invalid.append(InvalidWindow(series, window, row["payload"] or ""))
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
        if row["level"] == "p" and row["payload"] is not None:
            self._add_latest((row["kind"], target, source, topic, str(partition), row["group"] or ""), ts,
                             row["payload"])

    def _add_window(self, series: layout.SeriesId, window: layout.WindowAggregate) -> None:
        tag = (series.target, series.source, series.topic)
        self.partials.setdefault(tag, {}).setdefault(series, []).append(window)

    def _add_latest(self, subject: Subject, ts: int, payload: str) -> None:
        order = (ts, payload)  # equal ts in two windows cannot happen; the text decides, whatever the split
        if subject in self._latest_order and self._latest_order[subject] >= order:
            return
        try:
            record = json.loads(payload)
        except ValueError:  # parsed by Spark, so this is not expected; never fatal
            LOG.warning("latest record of %s does not decode: %r", subject, payload[:200])
            return
        self._latest_order[subject] = order
        self.latest[subject] = record | {"ts": ts}

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
