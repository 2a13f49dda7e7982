"""`/v2/replications` (all, with status, in one call), one replication, and replication-level metrics."""

from __future__ import annotations

from collections import Counter

from flask import Response
from flask.views import MethodView

from contract.lag_evaluation import Evaluation
from service.api.common import TimeRangeArgs, metric_response, unknown_answers_404
from service.api.replications.schemas import (
    ReplicationDetailSchema,
    ReplicationListSchema,
    ReplicationMetricSchema,
    ReplicationStatusSchema,
    StatusArgs,
)
from service.extensions import Blueprint, metrics_reader
from service.health.history_gap import history_gaps
from service.health.replication_health import ReplicationHealth
from service.health.replication_overview import GroupHealth, group_healths, replication_healths
from service.sites.site_selector import site_selectable

blp = Blueprint(
    "replications",
    __name__,
    url_prefix="/v2",
    description="Replications (source -> target): state, lag evaluation and metrics",
)


def evaluation_answer(evaluation: Evaluation, show_all: bool) -> dict:
    return {
        "status": evaluation.status,
        "reason": evaluation.reason,
        "complete": evaluation.complete,
        "total_lag": evaluation.total_lag,
        "max_lag_partition": evaluation.max_lag_partition,
        "partitions": list(evaluation.partitions if show_all else evaluation.problems),
    }


def group_answer(health: GroupHealth, show_all: bool) -> dict:
    return {"group": health.group, "lag": evaluation_answer(health.lag, show_all),
            "lag_seconds": health.lag_seconds}


def status_answer(health: ReplicationHealth, topics: int, show_all: bool = False,
                  totals: tuple[int, int] = (0, 0), history: dict | None = None) -> dict:
    return {
        "source": health.source,
        "target": health.target,
        "state": health.state,
        "explanation": health.explanation,
        "metrics_period_ms": health.metrics_period_ms,
        "report_ts": health.report_ts,
        "topics": topics,
        "lag": evaluation_answer(health.lag, show_all),
        "lag_seconds": health.lag_seconds,
        "invalid_records": totals[0],
        "late_records": totals[1],
        "readers": [{"reader": r.reader, "rejected": r.rejected, "alive": r.alive,
                     "last_rejection": r.last_rejection} for r in health.readers],
        "history": history,
    }


@blp.route("/replications")
class Replications(MethodView):
    @blp.arguments(StatusArgs, location="query", as_kwargs=True)
    @site_selectable(blp, ReplicationListSchema)
    def get(self, all: bool) -> dict:
        """Every replication with its state (ACTIVE/INACTIVE/FAILED/UNKNOWN) and lag evaluation."""
        reader = metrics_reader()
        replications = reader.replications()
        healths = replication_healths(reader, replications, every_partition=all)
        totals = reader.record_totals([(r.source, r.target) for r in replications])
        gaps = history_gaps(reader.client, [r.target for r in replications])
        answers = [status_answer(h, len(r.topics), all, totals[(r.source, r.target)], gaps[r.target])
                   for h, r in zip(healths, replications, strict=True)]
        return {"replications": answers, "states": dict(Counter(str(h.state) for h in healths))}


@blp.route("/replications/<string:source>/<string:target>")
class OneReplication(MethodView):
    @blp.arguments(StatusArgs, location="query", as_kwargs=True)
    @site_selectable(blp, ReplicationDetailSchema, not_found="unknown replication")
    def get(self, source: str, target: str, all: bool) -> dict:
        """One replication: state, lag evaluation, topics and its checkpointed groups' lag evaluation."""
        reader = metrics_reader()
        with unknown_answers_404():
            replication = reader.replication(source, target)
        health = replication_healths(reader, [replication], every_partition=all)[0]
        groups = group_healths(reader, replication, reader.groups(target, source), health.metrics_period_ms)
        answer = status_answer(health, len(replication.topics), all,
                               reader.record_totals([(source, target)])[(source, target)],
                               history_gaps(reader.client, [target])[target])
        answer["topic_names"] = [
            {"topic": t, "upstreamTopic": u} for t, u in sorted(replication.topics.items())
        ]
        answer["groups"] = [group_answer(g, all) for g in groups]
        return answer


@blp.route("/replication-metrics/<string:source>/<string:target>/<string:metric>")
class ReplicationMetric(MethodView):
    @blp.arguments(TimeRangeArgs(), location="query", as_kwargs=True)
    @site_selectable(blp, ReplicationMetricSchema, not_found="unknown replication or metric")
    def get(self, source: str, target: str, metric: str, from_ms: int, to_ms: int,
            granularity: str) -> Response:
        """One metric of a whole replication (all its topics) over a time range."""
        reader = metrics_reader()
        with unknown_answers_404():
            reader.require_metric(metric)
            replication = reader.replication(source, target)
        answer = reader.replication_metric(replication, metric, from_ms, to_ms, granularity)
        return metric_response({"source": source, "target": target, "from": from_ms, "to": to_ms}, answer)


# Re-exported for the cluster-info resource, which lists the same status records.
__all__ = ["blp", "status_answer", "evaluation_answer", "ReplicationStatusSchema"]
