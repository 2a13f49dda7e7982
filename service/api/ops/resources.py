"""Health (always open, no Redis), readiness (Redis answers) and the Prometheus `/metrics` text."""

from __future__ import annotations

import logging
import time

import flask
import redis
from flask import Response
from flask.views import MethodView

from service.api.ops.schemas import HealthSchema, ReadinessSchema
from service.extensions import Blueprint, metrics_reader
from service.prometheus_exposition import exposition
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY

LOG = logging.getLogger(__name__)
LOG_EVERY_S = 60.0
_last_logged = [0.0]

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
    @blp.alt_response(503, schema=ReadinessSchema,
                      description="Redis does not answer, or a gateway's discovery stopped")
    def get(self) -> tuple[dict, int] | dict:
        """Readiness: Redis answers, so metric queries can be served (Burrow's READY / STARTING); on a
        gateway, its discovery of other sites reads on. Unauthenticated: no host, port or error text."""
        answer: dict = {"redis": "ok"}
        try:
            metrics_reader().ping()
        except redis.RedisError as exc:
            answer["redis"] = "unavailable"
            if time.monotonic() - _last_logged[0] >= LOG_EVERY_S:
                _last_logged[0] = time.monotonic()
                LOG.warning("readiness: Redis does not answer: %s", exc)
        registry = flask.current_app.extensions.get(REGISTRY_KEY)
        if registry is not None and hasattr(registry, "is_alive"):
            answer["discovery"] = "ok" if registry.is_alive() else "stopped"
            answer["rejected_records"] = int(getattr(registry, "skipped_records", 0))
        ready = answer["redis"] == "ok" and answer.get("discovery", "ok") == "ok"
        answer["status"] = "READY" if ready else "STARTING"
        return answer if ready else (answer, 503)


@prometheus.get("/metrics")
def prometheus_metrics() -> Response:
    extensions = flask.current_app.extensions
    return Response(exposition(metrics_reader(), extensions.get(GATEWAY_KEY), extensions.get(REGISTRY_KEY)),
                    content_type=PROMETHEUS_CONTENT_TYPE)
