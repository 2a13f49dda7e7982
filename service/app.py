"""Application factory of the SRM service (flask-smorest)."""

from __future__ import annotations

from typing import Any

from flask import Flask

from service import extensions
from service.api.topics.resources import blp as topic_metrics

BLUEPRINTS = (topic_metrics,)


class DefaultSettings:
    API_TITLE = "SRM Service"
    API_VERSION = "v2"
    OPENAPI_VERSION = "3.0.3"
    OPENAPI_URL_PREFIX = "/"
    OPENAPI_JSON_PATH = "openapi.json"
    REDIS_URL = "redis://127.0.0.1:6379/0"
    # Errors answer JSON with the failing parameter named; never an HTML trace.
    PROPAGATE_EXCEPTIONS = False


def create_app(settings: dict[str, Any] | None = None) -> Flask:
    app = Flask("srm-service")
    app.config.from_object(DefaultSettings)
    app.config.update(settings or {})
    api = extensions.init_app(app)
    for blueprint in BLUEPRINTS:
        api.register_blueprint(blueprint)
    return app
