"""`/v2/topic-metrics/...`: a topic's metric addressed by its upstream (source) name."""

from __future__ import annotations

from dataclasses import asdict

from flask.views import MethodView
from flask_smorest import abort

from service.api.common import TimeRangeArgs
from service.api.topics.schemas import TopicMetricSchema
from service.extensions import Blueprint, metrics_reader
from service.metrics_reader import NotFound

blp = Blueprint("topic-metrics", __name__, url_prefix="/v2/topic-metrics",
                description="Metrics of replicated topics (SRM v2 paths)")


@blp.route("/<string:source>/<string:target>/<string:upstreamTopic>/<string:metric>")
class TopicMetricByUpstream(MethodView):
    @blp.arguments(TimeRangeArgs, location="query", as_kwargs=True)
    @blp.response(200, TopicMetricSchema)
    @blp.alt_response(404, description="Unknown cluster, topic or metric")
    def get(self, source: str, target: str, upstreamTopic: str, metric: str,  # noqa: N803
            from_ms: int, to_ms: int, granularity: str) -> dict:
        """One metric of a topic, addressed by source, target and upstream topic name.

        Works with every replication policy, including prefixless (identity) replication.
        """
        reader = metrics_reader()
        try:
            reader.require_metric(metric)
            topic = reader.remote_topic(source, target, upstreamTopic)
            answer = reader.topic_metric(source, target, topic, metric, from_ms, to_ms, granularity)
        except NotFound as exc:
            abort(404, message=str(exc))
        return {"source": source, "target": target, "upstreamTopic": upstreamTopic, "topic": topic,
                "from_ms": from_ms, "to_ms": to_ms, **asdict(answer)}
