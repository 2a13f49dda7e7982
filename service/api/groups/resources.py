"""`/v2/groups/...` (checkpointed groups with lag evaluation) and `/v2/group-metrics/...`."""

from __future__ import annotations

from flask import Response
from flask.views import MethodView

from service.api.common import metric_response, unknown_answers_404
from service.api.groups.schemas import GroupListSchema, GroupMetricArgs, GroupMetricSchema
from service.api.replications.resources import group_answer
from service.api.replications.schemas import GroupStatusSchema, StatusArgs
from service.extensions import Blueprint, metrics_reader
from service.health.replication_health import metrics_period_ms
from service.health.replication_overview import group_healths
from service.sites.site_selector import site_selectable

blp = Blueprint(
    "groups",
    __name__,
    url_prefix="/v2",
    description="Consumer groups whose offsets are checkpointed (MM2 MirrorCheckpointConnector)",
)


def _period(source: str, target: str) -> int:
    return metrics_period_ms(metrics_reader().replication_latest([(source, target)])[(source, target)])


@blp.route("/groups/<string:source>/<string:target>")
class Groups(MethodView):
    @blp.arguments(StatusArgs, location="query", as_kwargs=True)
    @site_selectable(blp, GroupListSchema, not_found="unknown replication")
    def get(self, source: str, target: str, all: bool) -> dict:
        """Every checkpointed group of a replication with its Burrow-style lag evaluation."""
        reader = metrics_reader()
        with unknown_answers_404():
            replication = reader.replication(source, target)
        healths = group_healths(reader, replication, reader.groups(target, source), _period(source, target))
        return {
            "source": source,
            "target": target,
            "groups": [group_answer(g, all) for g in healths],
        }


@blp.route("/groups/<string:source>/<string:target>/<string:group>")
class OneGroup(MethodView):
    @blp.arguments(StatusArgs, location="query", as_kwargs=True)
    @site_selectable(blp, GroupStatusSchema, not_found="unknown replication or group")
    def get(self, source: str, target: str, group: str, all: bool) -> dict:
        """One checkpointed group's lag evaluation (Burrow's `/status`, or `/lag` with `all=true`)."""
        reader = metrics_reader()
        with unknown_answers_404():
            reader.require_group(source, target, group)
            replication = reader.replication(source, target)
        return group_answer(group_healths(reader, replication, [group], _period(source, target))[0], all)


@blp.route("/group-metrics/<string:source>/<string:target>/<string:group>/<string:metric>")
class GroupMetric(MethodView):
    @blp.arguments(GroupMetricArgs, location="query", as_kwargs=True)
    @site_selectable(blp, GroupMetricSchema, not_found="unknown replication, group, topic or metric")
    def get(
        self,
        source: str,
        target: str,
        group: str,
        metric: str,
        from_ms: int,
        to_ms: int,
        granularity: str,
        topic: str | None = None,
    ) -> Response:
        """One checkpoint metric of a group (checkpoint_latency_ms, group_lag, ...) over a time range."""
        reader = metrics_reader()
        with unknown_answers_404():
            reader.require_metric(metric, "group")
            reader.require_group(source, target, group)
            replication = reader.replication(source, target)
            remote = None if topic is None else reader.remote_topic(source, target, topic)
        answer = reader.group_metric(replication, group, metric, from_ms, to_ms, granularity, remote)
        identity = {"source": source, "target": target, "group": group, "upstreamTopic": topic,
                    "from": from_ms, "to": to_ms}
        return metric_response(identity, answer)
