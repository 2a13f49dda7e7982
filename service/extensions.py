"""Per-app extensions (the flask-smorest Api, the Redis-backed reader) and our Blueprint hook."""

from __future__ import annotations

import flask_smorest
import redis
from flask import Flask, current_app
from flask_smorest import Api
from webargs.flaskparser import FlaskParser

from service.api.common import Timestamp
from service.metrics_reader import MetricsReader

API_KEY = "srm.api"
READER_KEY = "srm.metrics_reader"


class ArgumentsParser(FlaskParser):
    # A bad query parameter is the caller's error: 400 with the parameter named, as the API promises.
    DEFAULT_VALIDATION_STATUS = 400


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = ArgumentsParser()


def init_app(app: Flask) -> Api:
    api = Api(app)
    api.register_field(Timestamp, "string", None)
    app.extensions[API_KEY] = api
    client = redis.Redis.from_url(app.config["REDIS_URL"], socket_timeout=5, health_check_interval=30)
    app.extensions[READER_KEY] = MetricsReader(client)
    return api


def metrics_reader() -> MetricsReader:
    return current_app.extensions[READER_KEY]
