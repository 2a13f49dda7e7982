"""Application factory of the SRM service (flask-smorest)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import redis
import swagger_ui_bundle
from flask import Flask, Response, current_app, jsonify, request

from contract.settings import DEFAULT_REDIS_URL, DEFAULT_SERVICE_PORT
from contract.untrusted import shown
from service import auth, extensions, point_budget
from service.api.clusters.resources import blp as clusters
from service.api.groups.resources import blp as groups
from service.api.ops.resources import blp as operations
from service.api.ops.resources import prometheus
from service.api.partitions.resources import blp as partition_metrics
from service.api.replications.resources import blp as replications
from service.api.services.resources import blp as services
from service.api.topics.fast_path import TopicMetricFastPath, redis_unavailable_body
from service.api.topics.resources import blp as topic_metrics
from service.grafana.resources import blp as grafana
from service.prometheus_exposition import count_request
from service.sites.service_directory import SERVICES_KEY, LocalServiceDirectory

LOG = logging.getLogger(__name__)

BLUEPRINTS = (clusters, replications, topic_metrics, partition_metrics, groups, services, operations, grafana)
SWAGGER_ASSETS = "/swagger-ui-assets"


class DefaultSettings:
    API_TITLE = "SRM Service"
    API_VERSION = "v2"
    OPENAPI_VERSION = "3.0.3"
    OPENAPI_URL_PREFIX = "/"
    OPENAPI_JSON_PATH = "openapi.json"
    # Swagger UI from the swagger-ui-bundle package's files: no CDN, works offline.
    OPENAPI_SWAGGER_UI_PATH = "/swagger-ui"
    OPENAPI_SWAGGER_UI_URL = SWAGGER_ASSETS + "/"
    API_SPEC_OPTIONS = {
        "components": {
            "securitySchemes": {
                "basicAuth": {"type": "http", "scheme": "basic"},
                "bearerAuth": {"type": "http", "scheme": "bearer"},
            }
        },
        # Authentication is optional (properties file): an empty requirement means "none needed".
        "security": [{}, {"basicAuth": []}, {"bearerAuth": []}],
    }
    REDIS_URL = DEFAULT_REDIS_URL
    AUTH_USERNAME: str | None = None
    AUTH_PASSWORD: str | None = None
    AUTH_TOKEN: str | None = None
    CORS_ORIGINS: tuple[str, ...] = ()  # service.cors.allowed.origins
    SERVICE_PROTOCOL = "http"
    SERVICE_HOST = "127.0.0.1"
    SERVICE_PORT = DEFAULT_SERVICE_PORT
    SERVICE_ROOT_PATH = ""
    SERVICE_TARGET_CLUSTERS: tuple[str, ...] = ()
    SERVICE_SITE = "local"
    # The caps on one request's cost (service.max.points.per.request, service.max.request.bytes,
    # service.grafana.max.targets).
    MAX_POINTS_PER_REQUEST = point_budget.DEFAULT_MAX_POINTS
    MAX_CONTENT_LENGTH = 1_048_576
    GRAFANA_MAX_TARGETS = 50
    # Errors answer JSON with the failing parameter named; never an HTML trace.
    PROPAGATE_EXCEPTIONS = False


def _redis_unavailable(error: redis.RedisError) -> tuple[Response, int]:
    LOG.warning("Redis error on %s: %s", shown(request.path, 200), error)
    return jsonify(redis_unavailable_body(error)), 503


def _over_budget(error: point_budget.OverBudget) -> tuple[Response, int]:
    return jsonify(code=400, status="Bad Request", message=str(error)), 400


def _start_budget() -> None:
    point_budget.start_request(int(current_app.config["MAX_POINTS_PER_REQUEST"]))


def _count(response: Response) -> Response:
    count_request(request.url_rule.rule if request.url_rule else None, response.status_code)
    return response


def _local_directory(app: Flask) -> LocalServiceDirectory:
    c = app.config
    return LocalServiceDirectory(
        c["SERVICE_PROTOCOL"],
        c["SERVICE_HOST"],
        int(c["SERVICE_PORT"]),
        c["SERVICE_ROOT_PATH"],
        tuple(c["SERVICE_TARGET_CLUSTERS"]),
        c["SERVICE_SITE"],
    )


def collapse_slashes(wsgi_app: Callable) -> Callable:
    """`//metrics` -> `/metrics`: Grafana joins `<url>/metrics`, so a datasource URL with a trailing slash
    would otherwise be redirected (or fail) on every call."""

    def app(environ: dict, start_response: Callable) -> Any:
        path = environ.get("PATH_INFO", "")
        if "//" in path:
            environ["PATH_INFO"] = re.sub("/{2,}", "/", path)
        return wsgi_app(environ, start_response)

    return app


def create_app(settings: dict[str, Any] | None = None) -> Flask:
    app = Flask(
        "srm-service", static_folder=swagger_ui_bundle.swagger_ui_path, static_url_path=SWAGGER_ASSETS
    )
    app.config.from_object(DefaultSettings)
    app.config.update(settings or {})
    api = extensions.init_app(app)
    for blueprint in BLUEPRINTS:
        api.register_blueprint(blueprint)
    app.register_blueprint(prometheus)
    app.register_error_handler(redis.RedisError, _redis_unavailable)
    app.register_error_handler(point_budget.OverBudget, _over_budget)
    app.before_request(_start_budget)
    app.after_request(_count)
    app.extensions.setdefault(SERVICES_KEY, _local_directory(app))
    auth.init_app(
        app,
        auth.Credentials(app.config["AUTH_USERNAME"], app.config["AUTH_PASSWORD"], app.config["AUTH_TOKEN"]),
    )
    app.wsgi_app = collapse_slashes(TopicMetricFastPath(app, app.wsgi_app))  # type: ignore[method-assign]
    return app
