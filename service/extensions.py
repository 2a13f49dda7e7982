"""Per-app extensions (the flask-smorest Api, the Redis-backed reader) and our Blueprint hook."""

from __future__ import annotations

from typing import Any

import flask_smorest
from flask import Flask, current_app, request
from flask_smorest import Api
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import HTTPException

from clients import redis_connection
from service.api.common import TimeRangeArgs, Timestamp, plain_time_range
from service.metrics_reader import MetricsReader

API_KEY = "srm.api"
READER_KEY = "srm.metrics_reader"


class ArgumentsParser(FlaskParser):
    # A bad query parameter is the caller's error: 400 with the parameter named, as the API promises.
    DEFAULT_VALIDATION_STATUS = 400

    def parse(self, argmap: Any, req: Any = None, *, location: str | None = None, **kwargs: Any) -> Any:
        # The metric endpoints' time range is most of the API's requests: its common form is loaded by
        # the same rules without a marshmallow pass (bench/RESULTS.md, "plain_time_range").
        if type(argmap) is TimeRangeArgs and location == "query" and kwargs.get("validate") is None:
            loaded = plain_time_range(request.args)
            if loaded is not None:
                return loaded
        return super().parse(argmap, req, location=location, **kwargs)


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = ArgumentsParser()


def _invalid_names(errors: dict) -> list[str]:
    """Parameter names from webargs' {location: {name: [messages]}} errors."""
    return sorted({name for by_name in errors.values() if isinstance(by_name, dict) for name in by_name})


class ServiceApi(Api):
    """Every error answers JSON with a `message` a person can act on."""

    def handle_http_exception(self, error: HTTPException):
        payload, code, headers = super().handle_http_exception(error)
        if "message" not in payload:
            if "errors" in payload:
                payload["message"] = "invalid parameter: " + ", ".join(_invalid_names(payload["errors"]))
            elif code == 404:
                payload["message"] = f"no such path: {request.path}"
            elif code == 413:
                limit = current_app.config["MAX_CONTENT_LENGTH"]
                payload["message"] = f"request body over {limit} bytes (service.max.request.bytes)"
            elif code == 405:
                payload["message"] = f"{request.method} is not allowed on {request.path}"
            else:
                payload["message"] = error.description or error.name
        return payload, code, headers


def init_app(app: Flask) -> Api:
    api = ServiceApi(app)
    api.register_field(Timestamp, "string", None)
    app.extensions[API_KEY] = api
    client = redis_connection.connect(app.config["REDIS_URL"])
    app.extensions[READER_KEY] = MetricsReader(client, int(app.config["MAX_POINTS_PER_REQUEST"]))
    return api


def metrics_reader() -> MetricsReader:
    return current_app.extensions[READER_KEY]
