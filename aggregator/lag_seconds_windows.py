"""Lag in seconds as a gauge with history: `lag_seconds` (partitions) and `group_lag_seconds` (groups).

The sink derives each partition and group report's lag in seconds with its latest value
(latest_values, kafka-lag-exporter's interpolation); each such figure is also one sample of a gauge
here, kept at the levels window_partials keeps:
- `p`: the partition (a group's: the group's topic-partition);
- `t`: the whole remote topic (for a group: the group on that topic);
- `r`: the whole replication (partitions only: a group's topics are merged when read, as its other
  metrics are).
As window_partials rolls up gauges: n/sum/min/max over the samples of a window, `last` the value of the
greatest (ts, value), so a topic's or replication's value is its worst partition's at the newest report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from aggregator.window_partials import partials_schema
from contract.redis_layout import ALL_TOPICS, FINEST_WINDOW, WHOLE_TOPIC

METRIC_OF_KIND = {"partition": "lag_seconds", "group": "group_lag_seconds"}


@dataclass(frozen=True)
class LagSample:
    kind: str  # "partition" or "group"
    target: str
    source: str
    topic: str
    partition: int
    group: str  # "" for a partition of a replication
    ts: int
    seconds: float


def lag_seconds_partials(samples: Iterable[LagSample]) -> pa.Table:
    """Partial 10 s windows (window_partials' columns) of the samples at every level."""
    rows: dict[tuple, dict[str, Any]] = {}
    for sample in samples:
        metric = METRIC_OF_KIND[sample.kind]
        start = sample.ts // FINEST_WINDOW.size_ms * FINEST_WINDOW.size_ms
        levels = [("p", sample.topic, sample.partition), ("t", sample.topic, WHOLE_TOPIC)]
        if sample.kind == "partition":
            levels.append(("r", ALL_TOPICS, WHOLE_TOPIC))
        for level, topic, partition in levels:
            key = (sample.kind, level, sample.target, sample.source, sample.group, topic, partition, start)
            row = rows.get(key)
            if row is None:
                rows[key] = _row(key, metric, sample)
                continue
            value = sample.seconds
            row[f"{metric}__n"] += 1
            row[f"{metric}__sum"] += value
            row[f"{metric}__min"] = min(row[f"{metric}__min"], value)
            row[f"{metric}__max"] = max(row[f"{metric}__max"], value)
            if (sample.ts, value) > (row[f"{metric}__last_ts"], row[f"{metric}__last"]):
                row[f"{metric}__last"], row[f"{metric}__last_ts"] = value, sample.ts
            row["max_ts"] = max(row["max_ts"], sample.ts)
    return pa.Table.from_pylist(list(rows.values()), schema=partials_schema())


def _row(key: tuple, metric: str, sample: LagSample) -> dict[str, Any]:
    kind, level, target, source, group, topic, partition, start = key
    value = sample.seconds
    return {"kind": kind, "level": level, "target": target, "source": source, "group": group,
            "topic": topic, "partition": partition, "window_start": start, "max_ts": sample.ts,
            f"{metric}__n": 1.0, f"{metric}__sum": value, f"{metric}__min": value, f"{metric}__max": value,
            f"{metric}__last": value, f"{metric}__last_ts": sample.ts}
