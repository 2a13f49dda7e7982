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

import pyarrow as pa

from aggregator.window_partials import partials_schema, relabel, roll_up, window_starts, with_schema
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
    """Partial 10 s windows (window_partials' columns) of the samples at every level: each sample a
    partial of one, rolled up as window_partials rolls up its own levels. In Arrow: a batch has a sample
    per partition (a few thousand), and dicts per sample and level cost ~25 ms a batch."""
    by_kind: dict[str, list[LagSample]] = {}
    for sample in samples:
        by_kind.setdefault(sample.kind, []).append(sample)
    tables = [_kind_partials(kind, mine) for kind, mine in by_kind.items()]
    return pa.concat_tables(tables) if tables else partials_schema().empty_table()


def _kind_partials(kind: str, samples: list[LagSample]) -> pa.Table:
    metric = METRIC_OF_KIND[kind]
    ts = pa.array([s.ts for s in samples], pa.int64())
    seconds = pa.array([s.seconds for s in samples], pa.float64())
    own = pa.table({
        "kind": pa.array([kind] * len(samples), pa.string()), "level": pa.array(["p"] * len(samples)),
        "target": pa.array([s.target for s in samples], pa.string()),
        "source": pa.array([s.source for s in samples], pa.string()),
        "group": pa.array([s.group for s in samples], pa.string()),
        "topic": pa.array([s.topic for s in samples], pa.string()),
        "partition": pa.array([s.partition for s in samples], pa.int32()),
        "window_start": window_starts(ts, FINEST_WINDOW.size_ms),
        "max_ts": ts, "upstream_topic": pa.nulls(len(samples), pa.string()),
        f"{metric}__n": pa.array([1.0] * len(samples)), f"{metric}__sum": seconds,
        f"{metric}__min": seconds, f"{metric}__max": seconds, f"{metric}__last": seconds,
        f"{metric}__last_ts": ts,
    })
    levels = [roll_up(own, [metric])]
    levels.append(roll_up(relabel(own, level="t", partition=WHOLE_TOPIC), [metric]))
    if kind == "partition":
        levels.append(roll_up(relabel(own, level="r", topic=ALL_TOPICS, partition=WHOLE_TOPIC), [metric]))
    return with_schema(pa.concat_tables(levels))
