"""Status and lag evaluation of replications and checkpointed groups, read in bulk.

Shared by the REST resources, the Grafana datasource and the Prometheus exposition: it asks the
MetricsReader for data and the pure rules (service.health.replication_health) for verdicts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from service.health.lag_evaluation import Evaluation, EvaluationPolicy
from service.health.replication_health import (
    GROUP_OFFSETS,
    PARTITION_OFFSETS,
    ReplicationHealth,
    current_lags,
    evaluate_offsets,
    lookback_ms,
    metrics_period_ms,
    replication_health,
    worst_lag_seconds,
)
from service.metrics_reader import MetricsReader, Replication


@dataclass(frozen=True)
class GroupHealth:
    group: str
    lag: Evaluation
    lag_seconds: float | None = None  # the worst of the group's partitions, latest


def now_ms() -> int:
    return int(time.time() * 1000)


def replication_healths(
    reader: MetricsReader, replications: Sequence[Replication], at_ms: int | None = None
) -> list[ReplicationHealth]:
    """Every replication's state and lag evaluation; Burrow users' "one call for all" (#407, #729)."""
    at_ms = now_ms() if at_ms is None else at_ms
    latest = reader.replication_latest([(r.source, r.target) for r in replications])
    healths = []
    for replication in replications:
        report = latest[(replication.source, replication.target)]
        period = metrics_period_ms(report)
        since = at_ms - lookback_ms(EvaluationPolicy.for_metrics_period(period), period)
        windows = reader.offset_windows(replication, PARTITION_OFFSETS, since, at_ms)
        healths.append(
            replication_health(
                replication.source,
                replication.target,
                report,
                windows,
                reader.partition_latest(replication),
                at_ms,
            )
        )
    return healths


def group_healths(
    reader: MetricsReader,
    replication: Replication,
    groups: Sequence[str],
    period_ms: int,
    at_ms: int | None = None,
) -> list[GroupHealth]:
    at_ms = now_ms() if at_ms is None else at_ms
    policy = EvaluationPolicy.for_metrics_period(period_ms)
    since = at_ms - lookback_ms(policy, period_ms)
    answers = []
    for group in groups:
        windows = reader.offset_windows(replication, GROUP_OFFSETS, since, at_ms, group=group)
        latest = reader.group_latest(replication, group)
        lags = current_lags(latest, "group_lag")
        answers.append(GroupHealth(group, evaluate_offsets(windows, at_ms, policy, lags),
                                   worst_lag_seconds(latest)))
    return answers
