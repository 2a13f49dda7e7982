"""The upstream topic-metric request answered in front of Flask (service.api.topics.fast_path) answers
exactly what the Flask view answers, takes only the plain requests, and leaves every other one to the app."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
from flask import Flask, request_started
from pyspark.sql import Row
from werkzeug.test import Client

from aggregator.redis_sink import RedisRollupSink
from contract.redis_layout import WHOLE_TOPIC
from service.app import create_app
from service.prometheus_exposition import REQUESTS_REGISTRY

pytestmark = pytest.mark.integration

T0 = 1_700_002_800_000
RULE = "/v2/topic-metrics/<string:source>/<string:target>/<string:upstreamTopic>/<string:metric>"
TOKEN = "s3cret-token"
PATH = "/v2/topic-metrics/east/west"


@pytest.fixture(scope="module")
def topic(redis_url: str) -> str:
    name = f"fast{uuid.uuid4().hex[:6]}"
    rows = [Row(target="west", source="east", topic=f"east.{name}", upstream_topic=name, group="",
                partition=WHOLE_TOPIC, metric=metric, window_start=T0 + i * 10_000, count=2 + i, sum=30.5 * i,
                min=1.0, max=9.5 + i, last=4.0 + i)
            for metric in ("record_count", "replication_latency_ms", "records_lag") for i in range(6)]
    RedisRollupSink(redis_url, f"fast_{name}").write(rows, batch_id=0)
    return name


class Answers:
    """The app as served (fast path in front) and Flask alone, with the requests Flask itself handled."""

    def __init__(self, app: Flask) -> None:
        self.served = app.test_client()
        self.flask_only = Client(Flask.wsgi_app.__get__(app), app.response_class)
        self.flask_requests = 0
        request_started.connect(self._count, app)

    def _count(self, sender: Flask, **_: object) -> None:
        self.flask_requests += 1

    def both(self, method: str, url: str, **kwargs: Any):
        before = self.flask_requests
        served = self.served.open(url, method=method, **kwargs)
        took_fast_path = self.flask_requests == before
        flask_only = self.flask_only.open(url, method=method, **kwargs)
        return served, flask_only, took_fast_path


def span(**extra: object) -> str:
    query = {"from": T0, "to": T0 + 60_000, "granularity": "10s", **extra}
    return "&".join(f"{k}={v}" for k, v in query.items())


def assert_same(served, flask_only) -> None:
    assert served.status_code == flask_only.status_code
    assert served.headers["Content-Type"] == flask_only.headers["Content-Type"]
    assert int(served.headers["Content-Length"]) == len(served.get_data())
    assert timeless(served.get_json()) == timeless(flask_only.get_json())


def timeless(answer: dict) -> dict:
    """A fan-out's answer without the time each site took."""
    for site in answer.get("sites", ()):
        site.pop("elapsed_ms", None)
    return answer


@pytest.mark.parametrize("metric", ["record_count", "replication_latency_ms", "records_lag"])
@pytest.mark.parametrize("extra", [{}, {"site": "local"}, {"granularity": "1m"}, {"granularity": "auto"}])
def test_a_plain_request_is_answered_in_front_of_flask_as_flask_answers_it(redis_url, topic, metric, extra):
    answers = Answers(create_app({"REDIS_URL": redis_url}))
    served, flask_only, fast = answers.both("GET", f"{PATH}/{topic}/{metric}?{span(**extra)}")
    assert fast
    assert served.status_code == 200 and served.get_json()["series"]
    assert_same(served, flask_only)


@pytest.mark.parametrize("path, query", [
    ("{topic}/record_count", "from=2023-11-15T00:20:00Z&to=2023-11-15T00:30:00Z"),  # ISO dates
    ("{topic}/record_count", span() + "&from=1"),  # repeated
    ("{topic}/record_count", span() + "&foo=1"),  # unknown
    ("{topic}/record_count", span() + "&site=all"),  # a fan-out
    ("{topic}/record_count", span(granularity="2m")),  # a 400 naming the parameter
    ("{topic}/record_count", f"from={T0 + 1}&to={T0}"),  # from after to
    ("{topic}/record_count", "from=%31&to=2"),  # percent-encoded
    ("{topic}/record_count", "from=+1&to=2"),
    ("{topic}/record_count", "from=&to=2"),
    ("{topic}/no_such_metric", span()),  # 404s
    ("nosuchtopic/record_count", span()),
    ("{topic}/record_count/", span()),
    ("{topic}/record_count/x", span()),
    ("{topic}%C3%A9/record_count", span()),  # not ASCII
])
def test_anything_else_is_left_to_flask(redis_url, topic, path, query):
    answers = Answers(create_app({"REDIS_URL": redis_url}))
    served, flask_only, fast = answers.both("GET", f"{PATH}/{path.format(topic=topic)}?{query}")
    assert not fast
    assert_same(served, flask_only)


def test_other_methods_and_a_body_are_left_to_flask(redis_url, topic):
    answers = Answers(create_app({"REDIS_URL": redis_url}))
    url = f"{PATH}/{topic}/record_count?{span()}"
    for method, kwargs in (("HEAD", {}), ("OPTIONS", {}), ("POST", {}), ("GET", {"data": b"x"})):
        served, flask_only, fast = answers.both(method, url, **kwargs)
        assert not fast and served.status_code == flask_only.status_code, method


def test_a_read_over_the_budget_is_flasks_400(redis_url, topic):
    answers = Answers(create_app({"REDIS_URL": redis_url, "MAX_POINTS_PER_REQUEST": 3}))
    now = int(time.time() * 1000)  # the budget counts the windows within retention only
    recent = span(**{"from": now - 600_000, "to": now})
    served, flask_only, fast = answers.both("GET", f"{PATH}/{topic}/record_count?{recent}")
    assert not fast and served.status_code == 400
    assert "service.max.points.per.request" in served.get_json()["message"]
    assert_same(served, flask_only)


def test_auth_is_checked_and_a_rejection_is_flasks_401(redis_url, topic):
    answers = Answers(create_app({"REDIS_URL": redis_url, "AUTH_TOKEN": TOKEN}))
    url = f"{PATH}/{topic}/record_count?{span()}"
    served, flask_only, fast = answers.both("GET", url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert fast and served.status_code == 200
    assert_same(served, flask_only)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        served, flask_only, fast = answers.both("GET", url, headers=headers)
        assert not fast and served.status_code == 401 and "WWW-Authenticate" in served.headers
        assert_same(served, flask_only)


def test_redis_down_is_the_apps_503(free_redis_url):
    answers = Answers(create_app({"REDIS_URL": free_redis_url}))
    served, flask_only, fast = answers.both("GET", f"{PATH}/orders/record_count?{span()}")
    assert fast and served.status_code == 503 and "Redis" in served.get_json()["message"]
    assert_same(served, flask_only)


def test_the_request_is_counted_under_the_views_rule(redis_url, topic):
    client = create_app({"REDIS_URL": redis_url}).test_client()

    def answered(code: int) -> float:
        labels = {"endpoint": RULE, "code": str(code), "pid": str(os.getpid())}
        return REQUESTS_REGISTRY.get_sample_value("srm_service_requests_total", labels) or 0.0

    before = answered(200)
    assert client.get(f"{PATH}/{topic}/record_count?{span()}").status_code == 200
    assert answered(200) == before + 1
