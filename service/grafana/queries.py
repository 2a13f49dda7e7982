"""Pure rules of the Grafana datasource: the subjects series come from, which windows answer a
target, and the frames Grafana's `toDataFrame` reads (time series, tables, annotation tables).

Which subjects a target selects (payload values, ad-hoc filters) is `service.grafana.filters`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contract.records.raw_metrics import SERVED_METRICS as METRICS
from contract.redis_layout import WINDOWS, WindowAggregate
from contract.status import ReplicationState
from service.health.replication_health import ReplicationHealth
from service.metric_summary import downsample, point_of

FILTER_KEYS = ("source", "target", "topic", "group")
STATUS_TABLE = "replication_status"
ALERTS = "alerts"
# Lag in seconds is interpolated by the aggregator at each report and kept only as the latest value
# (redis_layout.partition_latest_key): it is served as the current value, one point at its report time.
DEFAULT_MAX_POINTS = 1000


class QueryError(ValueError):
    """A request the datasource cannot answer; the message names the offending field."""


@dataclass(frozen=True)
class Subject:
    """One series source: a topic of a replication, or a checkpointed group of one."""

    source: str
    target: str
    topic: str | None = None  # remote topic
    upstream_topic: str | None = None
    group: str | None = None

    def labels(self) -> dict[str, str]:
        values = {
            "source": self.source,
            "target": self.target,
            "topic": self.upstream_topic,
            "remote_topic": self.topic,
            "group": self.group,
        }
        return {k: v for k, v in values.items() if v is not None}


def plan(from_ms: int, to_ms: int, interval_ms: float | None, max_points: int | None) -> tuple[str, int]:
    """(stored window, bucket ms): the coarsest window no wider than Grafana's interval, and buckets
    wide enough that the series has at most ``max_points`` points."""
    span = max(1, to_ms - from_ms)
    points = max(2, int(max_points or DEFAULT_MAX_POINTS))
    wanted = max(float(interval_ms or 0), span / (points - 1))
    fitting = [w for w in WINDOWS.values() if w.size_ms <= wanted]
    window = fitting[-1] if fitting else next(iter(WINDOWS.values()))
    bucket = window.size_ms * max(1, math.ceil(wanted / window.size_ms))
    return window.name, bucket


def datapoints(metric: str, windows: Sequence[WindowAggregate], bucket_ms: int) -> list[list[float]]:
    kind = METRICS[metric].kind
    return [[point_of(kind, w).value, w.start_ms] for w in downsample(windows, bucket_ms)]


def timeserie(
    metric: str, subject: Subject, windows: Sequence[WindowAggregate], bucket_ms: int, ref_id: str | None
) -> dict:
    where = subject.group or subject.upstream_topic or ""
    name = f"{metric} {subject.source}->{subject.target} {where}".rstrip()
    answer = {
        "target": name,
        "datapoints": datapoints(metric, windows, bucket_ms),
        "tags": {**subject.labels(), "metric": metric},
    }
    if ref_id:
        answer["refId"] = ref_id
    return answer


def table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence], ref_id: str | None) -> dict:
    answer = {
        "type": "table",
        "columns": [{"text": text, "type": kind} for text, kind in columns],
        "rows": [list(row) for row in rows],
    }
    if ref_id:
        answer["refId"] = ref_id
    return answer


STATUS_COLUMNS = (
    ("Time", "time"),
    ("Source", "string"),
    ("Target", "string"),
    ("State", "string"),
    ("Lag status", "string"),
    ("Reason", "string"),
    ("Total lag", "number"),
    ("Explanation", "string"),
)
# Column names Grafana's annotation support maps by name (maintainer, simPod issues #225, #169).
ANNOTATION_COLUMNS = (
    ("time", "time"),
    ("timeEnd", "time"),
    ("title", "string"),
    ("text", "string"),
    ("tags", "string"),
)


def status_rows(healths: Iterable[ReplicationHealth], now_ms: int) -> list[list]:
    return [
        [
            h.report_ts or now_ms,
            h.source,
            h.target,
            str(h.state),
            str(h.lag.status),
            str(h.lag.reason),
            h.lag.total_lag,
            h.explanation,
        ]
        for h in healths
    ]


def alert_rows(healths: Iterable[ReplicationHealth], now_ms: int) -> list[list]:
    """Annotations for what needs a look now: replications not ACTIVE, partitions whose lag is not OK."""
    rows = []
    for h in healths:
        flow = f"{h.source}->{h.target}"
        if h.state is not ReplicationState.ACTIVE:
            rows.append(
                [
                    h.report_ts or now_ms,
                    now_ms,
                    f"{flow} {h.state}",
                    h.explanation,
                    f"{h.source},{h.target},{h.state}",
                ]
            )
        for p in h.lag.problems:
            since = p.end.ts_ms if p.end else now_ms
            rows.append(
                [
                    since,
                    now_ms,
                    f"{flow} {p.topic}[{p.partition}] {p.reason}",
                    f"lag evaluation {p.status} ({p.reason}); current lag {p.current_lag} records",
                    f"{h.source},{h.target},{p.reason}",
                ]
            )
    return sorted(rows, key=lambda row: row[0])
