"""Pure glue between what Redis holds and the status rules (replication_status, lag_evaluation).

The aggregator keeps the driver's last replication report as a latest-value record and the offset
history as gauge windows; these functions turn them into the rules' inputs and verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from contract.lag_evaluation import Evaluation, EvaluationPolicy, evaluate, observations
from contract.records.raw_metrics import READER_KINDS
from contract.redis_layout import WindowAggregate
from contract.settings import DEFAULT_METRICS_PERIOD_MS
from contract.status import ReplicationState
from service.health.replication_status import ReplicationLatest, replication_state

PARTITION_OFFSETS = ("upstream_offset", "records_lag")
GROUP_OFFSETS = ("group_upstream_offset", "group_lag")

PartitionKey = tuple[str, int]
OffsetWindows = Mapping[PartitionKey, tuple[list[WindowAggregate], list[WindowAggregate]]]


@dataclass(frozen=True)
class ReaderStatus:
    """One of the driver's readers of untrusted records, as its last replication report told."""

    reader: str  # raw_metrics.READER_KINDS
    rejected: int  # records refused since the reporting driver process started
    alive: bool
    last_rejection: str | None = None


@dataclass(frozen=True)
class ReplicationHealth:
    source: str
    target: str
    state: ReplicationState
    explanation: str
    metrics_period_ms: int
    report_ts: int | None
    lag: Evaluation
    lag_seconds: float | None = None  # the worst partition's latest lag in seconds
    readers: tuple[ReaderStatus, ...] = ()  # empty: the driver reports none (an older driver)


def reader_statuses(latest: Mapping | None) -> tuple[ReaderStatus, ...]:
    """The readers of the driver's last replication report (aggregator.latest_values.readers_of), in
    READER_KINDS order; entries that are not what the aggregator writes are left out."""
    readers = (latest or {}).get("readers")
    if not isinstance(readers, Mapping):
        return ()
    statuses = []
    for kind in READER_KINDS:
        health = readers.get(kind)
        if not isinstance(health, Mapping):
            continue
        rejected = health.get("rejected")
        if isinstance(rejected, int) and not isinstance(rejected, bool) and rejected >= 0:
            last = health.get("last_rejection")
            statuses.append(ReaderStatus(kind, rejected, health.get("alive") is True,
                                         last if isinstance(last, str) else None))
    return tuple(statuses)


def worst_lag_seconds(latest: Mapping[PartitionKey, Mapping]) -> float | None:
    """The largest latest lag in seconds among the partitions; None while none is known."""
    known = [float(v["lag_seconds"]) for v in latest.values()
             if isinstance(v.get("lag_seconds"), int | float) and not isinstance(v.get("lag_seconds"), bool)
             and math.isfinite(v["lag_seconds"])]
    return max(known, default=None)


def metrics_period_ms(latest: Mapping | None) -> int:
    period = (latest or {}).get("period_ms")
    return int(period) if isinstance(period, int | float) and period > 0 else DEFAULT_METRICS_PERIOD_MS


def latest_report(latest: Mapping | None) -> ReplicationLatest | None:
    """The replication record as the status rules want it; None when the driver reported nothing."""
    if not latest:
        return None
    counts = latest.get("recent_record_counts") or ()
    heartbeat = latest.get("last_heartbeat_ts")
    probe = latest.get("target_cluster")  # the aggregator's probe of the target (cluster_watch)
    down_since, down_error = None, None
    if isinstance(probe, dict) and probe.get("reachable") is False and isinstance(probe.get("since"), int):
        down_since, down_error = probe["since"], str(probe.get("error") or "") or None
    return ReplicationLatest(
        enabled=bool(latest.get("enabled", True)),
        status=str(latest.get("status") or ""),
        report_ts_ms=int(latest["ts"]),
        last_heartbeat_ts_ms=int(heartbeat) if isinstance(heartbeat, int | float) else None,
        recent_record_counts=tuple(int(c) for c in counts if isinstance(c, int | float)),
        error=latest.get("error") or None,
        target_unreachable_since_ms=down_since,
        target_error=down_error,
    )


def evaluate_offsets(
    windows: OffsetWindows,
    now_ms: int,
    policy: EvaluationPolicy,
    current_lags: Mapping[PartitionKey, int] | None = None,
) -> Evaluation:
    history = {key: observations(offsets, lags) for key, (offsets, lags) in windows.items()}
    return evaluate(history, now_ms, policy=policy, current_lags=current_lags)


def current_lags(latest: Mapping[PartitionKey, Mapping], field: str) -> dict[PartitionKey, int]:
    """Lag at the newest report per partition (Burrow's current_lag), from latest-value records."""
    return {
        key: int(value[field]) for key, value in latest.items() if isinstance(value.get(field), int | float)
    }


def replication_health(
    source: str,
    target: str,
    latest: Mapping | None,
    windows: OffsetWindows,
    partition_latest: Mapping[PartitionKey, Mapping],
    now_ms: int,
) -> ReplicationHealth:
    """From the offset windows of every partition: for rollups without the aggregator's lag verdicts."""
    policy = EvaluationPolicy.for_metrics_period(metrics_period_ms(latest))
    lag = evaluate_offsets(windows, now_ms, policy, current_lags(partition_latest, "records_lag"))
    return judged_health(source, target, latest, lag, worst_lag_seconds(partition_latest), now_ms)


def judged_health(source: str, target: str, latest: Mapping | None, lag: Evaluation,
                  lag_seconds: float | None, now_ms: int) -> ReplicationHealth:
    """The replication's state from the driver's report, with its lag evaluation made already."""
    period = metrics_period_ms(latest)
    state, explanation = replication_state(latest_report(latest), now_ms, period)
    report_ts = int(latest["ts"]) if latest else None
    return ReplicationHealth(source, target, state, explanation, period, report_ts, lag, lag_seconds,
                             reader_statuses(latest))
