"""Health (always open, no Redis), readiness (Redis answers) and the Prometheus `/metrics` text."""

from __future__ import annotations

import flask
import redis
from flask import Response
from flask.views import MethodView

from service.api.ops.schemas import HealthSchema, ReadinessSchema
from service.extensions import Blueprint, metrics_reader
from service.prometheus_exposition import exposition

blp = Blueprint("operations", __name__, description="Health, readiness and Prometheus")
prometheus = flask.Blueprint("prometheus", __name__)

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@blp.route("/health")
class Health(MethodView):
    @blp.response(200, HealthSchema)
    def get(self) -> dict:
        """Liveness: the process answers (no Redis involved; never behind authentication)."""
        return {"status": "UP"}


@blp.route("/ready")
class Readiness(MethodView):
    @blp.response(200, ReadinessSchema)
    @blp.alt_response(503, schema=ReadinessSchema, description="Redis does not answer")
    def get(self) -> tuple[dict, int] | dict:
        """Readiness: Redis answers, so metric queries can be served (Burrow's READY / STARTING)."""
        try:
            metrics_reader().ping()
        except redis.RedisError as exc:
            return {"status": "STARTING", "redis": f"error: {exc}"}, 503
        return {"status": "READY", "redis": "ok"}


@prometheus.get("/metrics")
def prometheus_metrics() -> Response:
    return Response(exposition(metrics_reader()), content_type=PROMETHEUS_CONTENT_TYPE)
