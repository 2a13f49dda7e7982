"""`/v2/topic-metrics/...`: a topic's metric addressed by its upstream or its downstream (remote) name."""

from __future__ import annotations

from flask import Response
from flask.views import MethodView

from service.api.common import TimeRangeArgs, json_response, metric_body, metric_response, unknown_answers_404
from service.api.topics.schemas import TopicMetricSchema
from service.extensions import Blueprint, metrics_reader
from service.metrics_reader import MetricsReader
from service.sites.site_selector import site_selectable

blp = Blueprint(
    "topic-metrics",
    __name__,
    url_prefix="/v2/topic-metrics",
    description="Metrics of replicated topics (SRM v2 paths)",
)
# The upstream form's endpoint, also answered in front of Flask for its plain requests (fast_path).
ENDPOINT = "topic-metrics.TopicMetricByUpstream"


def topic_answer(source: str, target: str, upstream: str, topic: str, metric: str, from_ms: int, to_ms: int,
                 granularity: str) -> Response:
    answer = metrics_reader().topic_metric(source, target, topic, metric, from_ms, to_ms, granularity)
    identity = {"source": source, "target": target, "upstreamTopic": upstream, "topic": topic,
                "from": from_ms, "to": to_ms}
    return metric_response(identity, answer)


def upstream_topic_body(reader: MetricsReader, source: str, target: str, upstream: str, metric: str,
                        from_ms: int, to_ms: int, granularity: str) -> dict:
    """The answer of TopicMetricByUpstream (and of fast_path, which serves its plain requests)."""
    topic, answer = reader.upstream_topic_metric(source, target, upstream, metric, from_ms, to_ms,
                                                 granularity)
    identity = {"source": source, "target": target, "upstreamTopic": upstream, "topic": topic,
                "from": from_ms, "to": to_ms}
    return metric_body(identity, answer)


@blp.route("/<string:source>/<string:target>/<string:upstreamTopic>/<string:metric>")
class TopicMetricByUpstream(MethodView):
    @blp.arguments(TimeRangeArgs(), location="query", as_kwargs=True)
    @site_selectable(blp, TopicMetricSchema, not_found="unknown cluster, topic or metric")
    def get(self, source: str, target: str, upstreamTopic: str, metric: str,
            from_ms: int, to_ms: int, granularity: str) -> Response:
        """One metric of a topic, addressed by source, target and upstream topic name.

        Works with every replication policy, including prefixless (identity) replication.
        """
        with unknown_answers_404():
            return json_response(upstream_topic_body(metrics_reader(), source, target, upstreamTopic, metric,
                                                     from_ms, to_ms, granularity))


@blp.route("/<string:target>/<string:downstreamTopic>/<string:metric>")
class TopicMetricByDownstream(MethodView):
    @blp.arguments(TimeRangeArgs(), location="query", as_kwargs=True)
    @site_selectable(blp, TopicMetricSchema, not_found="unknown cluster, topic or metric")
    def get(
        self,
        target: str,
        downstreamTopic: str,
        metric: str,
        from_ms: int,
        to_ms: int,
        granularity: str,
    ) -> Response:
        """One metric of a topic, addressed by target cluster and remote (downstream) topic name.

        With prefixless replication two sources can feed one remote topic; the first source found answers,
        so prefer the upstream form there (SRM convention).
        """
        reader = metrics_reader()
        with unknown_answers_404():
            reader.require_metric(metric)
            source, upstream = reader.downstream_topic(target, downstreamTopic)
        return topic_answer(source, target, upstream, downstreamTopic, metric, from_ms, to_ms, granularity)
