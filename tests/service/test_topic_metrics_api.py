"""/v2/topic-metrics over real Redis data written through the aggregator's sink and layout."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import Row

from aggregator.redis_sink import RedisRollupSink
from contract.redis_layout import WHOLE_TOPIC
from service.app import create_app

pytestmark = pytest.mark.integration

T0 = 1_700_002_800_000


def window(topic: str, metric: str, start: int, count: float, total: float, low: float, high: float,
           last: float) -> Row:
    return Row(target="west", source="east", topic=f"east.{topic}", upstream_topic=topic, group="",
               partition=WHOLE_TOPIC, metric=metric, window_start=start, count=count, sum=total, min=low,
               max=high, last=last)


@pytest.fixture
def topic(redis_url: str) -> str:
    name = f"orders{uuid.uuid4().hex[:6]}"
    RedisRollupSink(redis_url, f"api_{name}").write([
        window(name, "record_count", T0, 2, 30, 10, 20, 20),
        window(name, "record_count", T0 + 10_000, 1, 5, 5, 5, 5),
        window(name, "replication_latency_ms", T0, 30, 90, 1, 9, 4),
        window(name, "replication_latency_ms", T0 + 10_000, 10, 10, 1, 1, 1),
        window(name, "records_lag", T0, 2, 10, 4, 6, 6),
        window(name, "records_lag", T0 + 10_000, 1, 2, 2, 2, 2),
    ], batch_id=0)
    return name


@pytest.fixture
def client(redis_url: str):
    return create_app({"REDIS_URL": redis_url}).test_client()


def get(client, topic: str, metric: str, **params):
    params = {"from": T0, "to": T0 + 60_000, "granularity": "10s", **params}
    return client.get(f"/v2/topic-metrics/east/west/{topic}/{metric}", query_string=params)


def test_counter_value_is_the_sum_over_the_range(client, topic):
    body = get(client, topic, "record_count").get_json()
    assert body["topic"] == f"east.{topic}" and body["upstreamTopic"] == topic
    assert (body["value"], body["sum"], body["min"], body["max"], body["avg"]) == (35, 35, 5, 30, 17.5)
    assert [(p["ts"], p["value"]) for p in body["series"]] == [(T0, 30), (T0 + 10_000, 5)]
    assert body["granularity"] == "10s" and body["from"] == T0


def test_latency_value_is_the_record_weighted_average(client, topic):
    body = get(client, topic, "replication_latency_ms").get_json()
    assert body["value"] == pytest.approx(100 / 40)
    assert (body["min"], body["max"], body["count"]) == (1, 9, 40)


def test_gauge_value_is_the_last_level(client, topic):
    body = get(client, topic, "records_lag").get_json()
    assert (body["value"], body["min"], body["max"]) == (2, 2, 6)


def test_coarser_granularity_and_iso_dates(client, topic):
    body = get(client, topic, "record_count", granularity="1m", **{"from": "2023-11-14T23:00:00Z"}).get_json()
    assert [(p["ts"], p["value"]) for p in body["series"]] == [(T0, 35)]


def test_empty_range_answers_nulls(client, topic):
    body = get(client, topic, "record_count", **{"from": T0 + 3_600_000, "to": T0 + 7_200_000}).get_json()
    assert body["value"] is None and body["series"] == []


@pytest.mark.parametrize("path, message", [
    ("/v2/topic-metrics/east/west/{topic}/no_such_metric", "unknown metric 'no_such_metric'"),
    ("/v2/topic-metrics/east/west/missing/record_count", "no topic 'missing'"),
    ("/v2/topic-metrics/nowhere/west/{topic}/record_count", "no replication from 'nowhere'"),
    ("/v2/topic-metrics/east/nowhere/{topic}/record_count", "target cluster 'nowhere'"),
])
def test_unknown_things_are_404_with_a_message(client, topic, path, message):
    response = client.get(path.format(topic=topic))
    assert response.status_code == 404
    assert message in response.get_json()["message"]


@pytest.mark.parametrize("params, field", [
    ({"from": "yesterday"}, "from"), ({"to": "2023-13-45"}, "to"), ({"granularity": "5m"}, "granularity"),
    ({"from": T0 + 10, "to": T0}, "from"),
])
def test_bad_parameters_are_400_naming_the_parameter(client, topic, params, field):
    response = get(client, topic, "record_count", **params)
    assert response.status_code == 400
    assert field in response.get_json()["errors"]["query"]
