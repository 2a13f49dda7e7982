"""Per-app extensions (the flask-smorest Api, the Redis-backed reader) and our Blueprint hook."""

from __future__ import annotations

import flask_smorest
import redis
from flask import Flask, current_app, request
from flask_smorest import Api
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import HTTPException

from service.api.common import Timestamp
from service.metrics_reader import MetricsReader

API_KEY = "srm.api"
READER_KEY = "srm.metrics_reader"


class ArgumentsParser(FlaskParser):
    """webargs' Flask parser, remembering the query arguments that do not depend on the clock.

    A dashboard asks for many series over one time range, so one query string comes again and again:
    marshmallow validates it once per worker, and a repeat costs a dictionary lookup. Only a schema with
    a ``clock_free(args)`` method is remembered, and only when it says the given arguments parse to the
    same values at any time (a default of "now" does not); a bad query is never remembered.
    """

    # A bad query parameter is the caller's error: 400 with the parameter named, as the API promises.
    DEFAULT_VALIDATION_STATUS = 400
    MEMO_SIZE = 1024

    def __init__(self) -> None:
        super().__init__()
        self.memo: dict[tuple[int, bytes], dict] = {}

    def parse(self, argmap, req=None, *, location=None, **kwargs):  # noqa: ANN001, ANN201
        req = req if req is not None else request
        clock_free = getattr(argmap, "clock_free", None)
        if location != "query" or clock_free is None or not clock_free(req.args):
            return super().parse(argmap, req, location=location, **kwargs)
        # One schema instance per decorated view, always parsed with that view's options.
        key = (id(argmap), req.query_string)
        parsed = self.memo.get(key)
        if parsed is None:
            parsed = super().parse(argmap, req, location=location, **kwargs)
            if len(self.memo) >= self.MEMO_SIZE:
                self.memo.clear()
            self.memo[key] = parsed
        return dict(parsed)


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = ArgumentsParser()


def _invalid_names(errors: dict) -> list[str]:
    """Parameter names from webargs' {location: {name: [messages]}} errors."""
    return sorted({name for by_name in errors.values() if isinstance(by_name, dict) for name in by_name})


class ServiceApi(Api):
    """Every error answers JSON with a `message` a person can act on."""

    def handle_http_exception(self, error: HTTPException):  # noqa: ANN201
        payload, code, headers = super().handle_http_exception(error)
        if "message" not in payload:
            if "errors" in payload:
                payload["message"] = "invalid parameter: " + ", ".join(_invalid_names(payload["errors"]))
            elif code == 404:
                payload["message"] = f"no such path: {request.path}"
            elif code == 405:
                payload["message"] = f"{request.method} is not allowed on {request.path}"
            else:
                payload["message"] = error.description or error.name
        return payload, code, headers


def init_app(app: Flask) -> Api:
    api = ServiceApi(app)
    api.register_field(Timestamp, "string", None)
    app.extensions[API_KEY] = api
    client = redis.Redis.from_url(
        app.config["REDIS_URL"], socket_connect_timeout=2, socket_timeout=5, health_check_interval=30
    )
    app.extensions[READER_KEY] = MetricsReader(client)
    return api


def metrics_reader() -> MetricsReader:
    return current_app.extensions[READER_KEY]
