"""Per-app singletons: the flask-smorest Api and the Redis-backed metrics reader."""

from __future__ import annotations

import redis
from flask import Flask, current_app
from flask_smorest import Api

from service.api.common import Timestamp
from service.metrics_reader import MetricsReader

api = Api()
READER_KEY = "srm.metrics_reader"


def init_app(app: Flask) -> None:
    api.init_app(app)
    api.register_field(Timestamp, "string", None)
    client = redis.Redis.from_url(app.config["REDIS_URL"], socket_timeout=5, health_check_interval=30)
    app.extensions[READER_KEY] = MetricsReader(client)


def metrics_reader() -> MetricsReader:
    return current_app.extensions[READER_KEY]
