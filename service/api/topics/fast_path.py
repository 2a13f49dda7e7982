"""The API's most asked answer, a topic's metric by its upstream name, served in front of Flask.

Dashboards ask `GET /v2/topic-metrics/<source>/<target>/<upstream topic>/<metric>?from=..&to=..` far more
than anything else, and for that answer Flask's request context, URL map, the argument and response
wrappers and the response object cost about a quarter of a worker's Python time (bench/RESULTS.md).
This WSGI layer answers the plain form of that request itself, through the same functions as the view
(`TopicMetricByUpstream`): the same auth check, point budget, reader, answer body and request count.

It answers only what it can vouch for: GET, an ASCII path of exactly the route's four names, no body,
a query of only `from`, `to`, `granularity` and `site` in the common form (`plain_time_range`: epoch ms
in order, a known granularity; `site` local or this site's name), and a 200. Everything else goes to
the Flask app untouched: another method or path, an ISO date, a repeated, unknown or encoded parameter,
a rejected credential (the app answers 401 and logs it), an unknown topic or metric (404), a read over
the budget (400), a fan-out to other sites. So the view and its schema stay the contract and the
OpenAPI document is unchanged; a Redis failure answers the app's 503.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import redis
from flask import Flask

from contract.untrusted import shown
from service import auth, point_budget
from service.api.common import plain_time_range
from service.api.topics.resources import ENDPOINT, upstream_topic_body
from service.extensions import READER_KEY
from service.metrics_reader import NotFound
from service.prometheus_exposition import count_request
from service.sites.site_selector import local_site

LOG = logging.getLogger(__name__)

PREFIX = "/v2/topic-metrics/"
QUERY_KEYS = frozenset(["from", "to", "granularity", "site"])
# A query needing no percent- or plus-decoding: anything else is the app's to parse.
PLAIN_QUERY = re.compile(r"[A-Za-z0-9_.=&-]*")
JSON_HEADERS = "Content-Type", "application/json"

WsgiApp = Callable[[dict, Callable], Iterable[bytes]]


class TopicMetricFastPath:
    """WSGI middleware: the plain upstream topic-metric request answered without Flask, the rest by `app`."""

    def __init__(self, flask_app: Flask, app: WsgiApp) -> None:
        self.flask_app, self.app = flask_app, app
        self.rule = next(r.rule for r in flask_app.url_map.iter_rules() if r.endpoint == ENDPOINT)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        request = self._plain_request(environ)
        if request is None:
            return self.app(environ, start_response)
        config = self.flask_app.config
        point_budget.start_request(int(config["MAX_POINTS_PER_REQUEST"]))
        reader = self.flask_app.extensions[READER_KEY]
        try:
            body = orjson.dumps(upstream_topic_body(reader, *request))
        except (NotFound, point_budget.OverBudget):
            return self.app(environ, start_response)  # the app words the 404 or the 400
        except redis.RedisError as error:
            return self._unavailable(environ, start_response, error)
        count_request(self.rule, 200)
        start_response("200 OK", [JSON_HEADERS, ("Content-Length", str(len(body)))])
        return [body]

    def _plain_request(self, environ: dict) -> tuple[str, str, str, str, int, int, str] | None:
        """(source, target, upstream topic, metric, from, to, granularity) of a request this layer answers."""
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not path.startswith(PREFIX) or not path.isascii():
            return None
        if environ.get("CONTENT_LENGTH") not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in environ:
            return None
        names = path[len(PREFIX):].split("/")
        if len(names) != 4 or not all(names):
            return None
        query = self._query(environ.get("QUERY_STRING", ""))
        if query is None or not self._authorized(environ):
            return None
        times = plain_time_range(query)
        if times is None:
            return None
        source, target, upstream, metric = names
        return source, target, upstream, metric, times["from_ms"], times["to_ms"], times["granularity"]

    def _query(self, text: str) -> dict[str, str] | None:
        if not PLAIN_QUERY.fullmatch(text):
            return None
        query: dict[str, str] = {}
        for pair in text.split("&") if text else ():
            key, sign, value = pair.partition("=")
            if not sign or key not in QUERY_KEYS or key in query:
                return None
            query[key] = value
        site = query.pop("site", None)
        if site is not None and site not in ("local", local_site(self.flask_app)):
            return None
        return query

    def _authorized(self, environ: dict) -> bool:
        credentials: auth.Credentials = self.flask_app.extensions[auth.AUTH_KEY]
        return not credentials.required or credentials.accepts(environ.get("HTTP_AUTHORIZATION"))

    def _unavailable(self, environ: dict, start_response: Callable, error: redis.RedisError) -> list[bytes]:
        LOG.warning("Redis error on %s: %s", shown(environ.get("PATH_INFO", ""), 200), error)
        body = orjson.dumps(redis_unavailable_body(error))
        count_request(self.rule, 503)
        start_response("503 SERVICE UNAVAILABLE", [JSON_HEADERS, ("Content-Length", str(len(body)))])
        return [body]


def redis_unavailable_body(error: redis.RedisError) -> dict[str, Any]:
    return {"code": 503, "status": "Service Unavailable",
            "message": f"the metrics store (Redis) is not available: {type(error).__name__}"}
