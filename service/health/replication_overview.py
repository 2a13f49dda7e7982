"""Status and lag evaluation of replications and checkpointed groups, read in bulk.

Shared by the REST resources, the Grafana datasource and the Prometheus exposition: it asks the
MetricsReader for data and the pure rules (service.health.replication_health) for verdicts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from contract.lag_evaluation import Evaluation, EvaluationPolicy, lookback_ms
from contract.lag_verdicts import evaluation_of_summary, evaluation_of_verdicts
from service.health.replication_health import (
    GROUP_OFFSETS,
    PARTITION_OFFSETS,
    ReplicationHealth,
    current_lags,
    evaluate_offsets,
    judged_health,
    metrics_period_ms,
    replication_health,
    worst_lag_seconds,
)
from service.metrics_reader import MetricsReader, Replication

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupHealth:
    group: str
    lag: Evaluation
    lag_seconds: float | None = None  # the worst of the group's partitions, latest


def now_ms() -> int:
    return int(time.time() * 1000)


def replication_healths(
    reader: MetricsReader, replications: Sequence[Replication], at_ms: int | None = None,
    every_partition: bool = False,
) -> list[ReplicationHealth]:
    """Every replication's state and lag evaluation; Burrow users' "one call for all" (#407, #729).

    The lag evaluation comes from the aggregator's summary of its partitions' verdicts, one read per
    replication whatever its partitions (contract.lag_verdicts); listing every partition (`every_partition`)
    or a summary a partition may have turned STOP since reads the replication's verdicts. Rollups without
    verdicts (an older aggregator) are evaluated from every partition's offset windows."""
    at_ms = now_ms() if at_ms is None else at_ms
    pairs = [(r.source, r.target) for r in replications]
    latest = reader.replication_latest(pairs)
    summaries = reader.lag_summaries(pairs)
    healths = []
    for replication, pair in zip(replications, pairs, strict=True):
        report = latest[pair]
        judged = _judged(reader, replication, summaries[pair], at_ms, every_partition)
        if judged is not None:
            healths.append(judged_health(*pair, report, *judged, at_ms))
            continue
        period = metrics_period_ms(report)
        since = at_ms - lookback_ms(EvaluationPolicy.for_metrics_period(period), period)
        windows = reader.offset_windows(replication, PARTITION_OFFSETS, since, at_ms)
        healths.append(
            replication_health(*pair, report, windows, reader.partition_latest(replication), at_ms)
        )
    return healths


def _judged(reader: MetricsReader, replication: Replication, summary: dict | None, at_ms: int,
            every_partition: bool) -> tuple[Evaluation, float | None] | None:
    """(lag evaluation, worst lag in seconds) from the aggregator's verdicts; None without them."""
    if summary is None:
        return None
    try:
        if not every_partition and (judged := evaluation_of_summary(summary, at_ms)) is not None:
            return judged
        return evaluation_of_verdicts(reader.lag_verdicts(replication), at_ms)
    except ValueError as exc:
        LOG.warning("lag verdicts of %s->%s unreadable, evaluating its windows: %s", replication.source,
                    replication.target, exc)
        return None


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
