"""`/v2/partition-metrics/...`: one metric of one remote topic-partition."""

from __future__ import annotations

from flask import Response
from flask.views import MethodView

from service.api.common import TimeRangeArgs, metric_response, unknown_answers_404
from service.api.partitions.schemas import PartitionMetricSchema
from service.extensions import Blueprint, metrics_reader
from service.metrics_reader import NotFound
from service.sites.site_selector import site_selectable

blp = Blueprint(
    "partition-metrics",
    __name__,
    url_prefix="/v2/partition-metrics",
    description="Metrics of one partition of a replicated topic",
)


@blp.route("/<string:source>/<string:target>/<string:upstreamTopic>/<int:partition>/<string:metric>")
class PartitionMetric(MethodView):
    @blp.arguments(TimeRangeArgs(), location="query", as_kwargs=True)
    @site_selectable(blp, PartitionMetricSchema, not_found="unknown cluster, topic, partition or metric")
    def get(
        self,
        source: str,
        target: str,
        upstreamTopic: str,
        partition: int,
        metric: str,
        from_ms: int,
        to_ms: int,
        granularity: str,
    ) -> Response:
        """One metric of a topic-partition, addressed by source, target and upstream topic name."""
        reader = metrics_reader()
        with unknown_answers_404():
            reader.require_metric(metric)
            topic = reader.remote_topic(source, target, upstreamTopic)
            if partition not in reader.partitions(target, source, [topic])[topic]:
                raise NotFound(f"no partition {partition} of {upstreamTopic!r} has metrics")
        answer = reader.topic_metric(source, target, topic, metric, from_ms, to_ms, granularity, partition)
        identity = {"source": source, "target": target, "upstreamTopic": upstreamTopic, "topic": topic,
                    "partition": partition, "from": from_ms, "to": to_ms}
        return metric_response(identity, answer)
