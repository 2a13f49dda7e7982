"""Bounded cost per request: a point budget (series x windows), `auto` inside it, Grafana's caps."""

from __future__ import annotations

import time

import orjson
import pytest

from contract import redis_layout as layout
from service import point_budget
from service.app import create_app

HOUR, DAY = 3_600_000, 86_400_000


def test_a_windows_range_is_clipped_to_its_retention():
    now = 1_800_000_000_000
    assert point_budget.windows_in("1m", now - HOUR, now, now) == 61
    # from=0 costs what the retention holds (7 days and the TTL slack), not 56 years of minutes.
    assert point_budget.windows_in("1m", 0, now, now) == (7 * DAY + layout.TTL_SLACK_MS) // 60_000 + 1
    assert point_budget.windows_in("10s", 0, now - DAY, now) == 0  # the whole range is past retention


def test_a_read_past_the_budget_names_the_limit_and_the_coarser_granularity_that_fits():
    budget = point_budget.PointBudget(limit=1000)
    now = int(time.time() * 1000)
    point_budget.charge(budget, 2, "1m", now - HOUR, now)  # 2 x 61
    assert budget.spent == 122
    with pytest.raises(point_budget.OverBudget) as refused:
        point_budget.charge(budget, 10, "1m", now - 2 * HOUR, now)
    message = str(refused.value)
    assert "10 series x 121 windows of 1m = 1210 points" in message
    assert "over the limit of 1000 points per request (service.max.points.per.request)" in message
    assert "granularity=1h fits" in message
    assert budget.spent == 122  # a refused read spends nothing
    with pytest.raises(point_budget.OverBudget, match="no granularity fits"):
        point_budget.charge(budget, 1000, "1m", now - 2 * HOUR, now)


def test_auto_takes_the_finest_window_inside_the_budget():
    now = int(time.time() * 1000)
    assert point_budget.auto_window(point_budget.PointBudget(10_000), 1, now - 2 * HOUR, now) == "10s"
    assert point_budget.auto_window(point_budget.PointBudget(10_000), 20, now - 2 * HOUR, now) == "1m"
    assert point_budget.auto_window(point_budget.PointBudget(10_000), 200, now - 2 * HOUR, now) == "1h"
    with pytest.raises(point_budget.OverBudget):
        point_budget.auto_window(point_budget.PointBudget(10), 20, now - 2 * HOUR, now)


@pytest.fixture(scope="module")
def small_budget(redis_url: str):
    return create_app({"REDIS_URL": redis_url, "MAX_POINTS_PER_REQUEST": 1000, "GRAFANA_MAX_TARGETS": 3,
                       "MAX_CONTENT_LENGTH": 10_000}).test_client()


@pytest.mark.integration
def test_a_request_past_the_budget_is_a_400_naming_the_limit_and_what_fits(small_budget, scenario):
    path = f"/v2/topic-metrics/{scenario.east}/{scenario.west}/orders/record_count"
    two_days = {"from": scenario.now_ms - 2 * DAY, "to": scenario.now_ms}
    refused = small_budget.get(path, query_string={**two_days, "granularity": "1m"})
    assert refused.status_code == 400
    message = refused.get_json()["message"]
    assert "limit of 1000 points per request (service.max.points.per.request)" in message
    assert "granularity=1h fits" in message
    assert small_budget.get(path, query_string={**two_days, "granularity": "1h"}).status_code == 200
    auto = small_budget.get(path, query_string={"from": scenario.now_ms - 3 * HOUR, "to": scenario.now_ms})
    assert auto.status_code == 200 and auto.get_json()["granularity"] == "1m"  # 10s: 1081 points
    # The budget is the request's, not the worker's: the next request starts afresh.
    assert small_budget.get(path, query_string={**two_days, "granularity": "1h"}).status_code == 200


@pytest.mark.integration
def test_cluster_info_is_bounded_as_a_whole(small_budget, scenario):
    hours = {"from": scenario.now_ms - 2 * HOUR, "to": scenario.now_ms}
    path = f"/v2/cluster-info/{scenario.west}"
    # Two replications x 4 metrics, one replication-level series each whatever the topics: 8 x 721 at 10s.
    refused = small_budget.get(path, query_string={**hours, "granularity": "10s"})
    assert refused.status_code == 400
    assert "8 series x 721 windows of 10s" in refused.get_json()["message"]
    assert "granularity=1m fits" in refused.get_json()["message"]  # 8 x 121 = 968 <= 1000
    auto = small_budget.get(path, query_string=hours)
    assert auto.status_code == 200 and auto.get_json()["granularity"] == "1m"


@pytest.mark.integration
def test_grafana_queries_have_a_target_cap_and_a_body_cap(small_budget, scenario):
    # Only this scenario's target: the shared Redis holds other tests' clusters too.
    targets = [{"target": "record_count", "refId": r, "payload": {"target": scenario.west}} for r in "ABCD"]
    body = {"range": {"from": scenario.first_window, "to": scenario.now_ms}, "targets": targets}
    refused = small_budget.post("/grafana/query", json=body)
    assert refused.status_code == 400
    assert refused.get_json()["message"] == ("targets: 4 targets, over the limit of 3 per query "
                                             "(service.grafana.max.targets)")
    assert small_budget.post("/grafana/query", json={**body, "targets": targets[:3]}).status_code == 200
    huge = orjson.dumps({**body, "targets": targets[:1], "padding": "x" * 20_000})
    too_big = small_budget.post("/grafana/query", data=huge, content_type="application/json")
    assert too_big.status_code == 413
    assert too_big.get_json()["message"] == "request body over 10000 bytes (service.max.request.bytes)"


def test_the_caps_come_from_the_properties_file_and_must_be_positive():
    from contract.config import ConfigError, parse_config
    from service.__main__ import app_settings

    base = "clusters = east, west\neast.bootstrap.servers = h:1\nwest.bootstrap.servers = h:2\n"
    caps = "service.max.points.per.request = 5000\nservice.grafana.max.targets = 7\n"
    settings = app_settings(parse_config(base + caps + "service.max.request.bytes = 999\n"))
    assert (settings["MAX_POINTS_PER_REQUEST"], settings["GRAFANA_MAX_TARGETS"],
            settings["MAX_CONTENT_LENGTH"]) == (5000, 7, 999)
    defaults = app_settings(parse_config(base))
    assert defaults["MAX_POINTS_PER_REQUEST"] == point_budget.DEFAULT_MAX_POINTS
    with pytest.raises(ConfigError, match="service.grafana.max.targets"):
        app_settings(parse_config(base + "service.grafana.max.targets = 0\n"))
