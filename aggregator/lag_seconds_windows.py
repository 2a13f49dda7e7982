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

from collections.abc import Iterable, Sequence
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
    tables = [lag_seconds_columns(kind, *(list(c) for c in zip(*((s.target, s.source, s.topic, s.partition,
                                                                   s.group, s.ts, s.seconds) for s in mine),
                                                                 strict=True)))
              for kind, mine in by_kind.items()]
    return pa.concat_tables(tables) if tables else partials_schema().empty_table()


def lag_seconds_columns(kind: str, target: Sequence[str], source: Sequence[str], topic: Sequence[str],
                        partition: Sequence[int], group: Sequence[str], ts: Sequence[int],
                        seconds: Sequence[float], *, one_a_subject: bool = False) -> pa.Table:
    """lag_seconds_partials of one kind's samples given as columns. `one_a_subject`: no two samples of one
    subject (a batch's newest report each), so that each is its own partial at level `p` as it is."""
    metric = METRIC_OF_KIND[kind]
    n = len(ts)
    ts = pa.array(ts, pa.int64())
    seconds = pa.array(seconds, pa.float64())
    own = pa.table({
        "kind": pa.array([kind] * n, pa.string()), "level": pa.array(["p"] * n),
        "target": pa.array(target, pa.string()), "source": pa.array(source, pa.string()),
        "group": pa.array(group, pa.string()), "topic": pa.array(topic, pa.string()),
        "partition": pa.array(partition, pa.int32()),
        "window_start": window_starts(ts, FINEST_WINDOW.size_ms),
        "max_ts": ts, "upstream_topic": pa.nulls(n, pa.string()),
        f"{metric}__n": pa.array([1.0] * n), f"{metric}__sum": seconds,
        f"{metric}__min": seconds, f"{metric}__max": seconds, f"{metric}__last": seconds,
        f"{metric}__last_ts": ts,
    })
    levels = [own if one_a_subject else roll_up(own, [metric])]
    levels.append(roll_up(relabel(own, level="t", partition=WHOLE_TOPIC), [metric]))
    if kind == "partition":
        levels.append(roll_up(relabel(own, level="r", topic=ALL_TOPICS, partition=WHOLE_TOPIC), [metric]))
    return with_schema(pa.concat_tables(levels))
