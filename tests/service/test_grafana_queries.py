"""Pure rules of the Grafana datasource: window plans, filters (both spellings' shapes), frames."""

from __future__ import annotations

import re

import pytest

from contract.redis_layout import WindowAggregate
from service.grafana.catalog import metric_descriptors
from service.grafana.filters import Filter, filters_of, payload_filters, select
from service.grafana.queries import QueryError, Subject, plan, table, timeserie
from service.sites.grafana_site_answers import by_site, tagged

HOUR = 3_600_000
ORDERS = Subject("east", "west", "east.orders", "orders")
PAYMENTS = Subject("east", "west", "east.payments", "payments")
EVENTS = Subject("north", "west", "north.events", "events")


@pytest.mark.parametrize(
    "span_ms, interval_ms, max_points, expected",
    [
        (HOUR, 10_000, 1920, ("10s", 10_000)),
        (HOUR, 60_000, 1920, ("1m", 60_000)),
        (HOUR, 5_000, 10, ("1m", 420_000)),  # 10 points over an hour: 7-minute buckets of 1-min windows
        (30 * 24 * HOUR, 0, 1000, ("1m", 44 * 60_000)),
        (HOUR, None, None, ("10s", 10_000)),
    ],
)
def test_plan_picks_the_coarsest_fitting_window_and_bucket(span_ms, interval_ms, max_points, expected):
    assert plan(0, span_ms, interval_ms, max_points) == expected


def test_plan_never_exceeds_max_data_points():
    for max_points in (2, 3, 7, 50, 999):
        window, bucket = plan(1_000, 1_000 + 6 * HOUR, 1, max_points)
        assert 6 * HOUR // bucket + 1 <= max_points


def test_filters_from_grafana_shapes():
    raw = [
        {"key": "source", "operator": "=", "value": "east"},
        {"key": "topic", "operator": "=~", "value": "pay.*"},
        {"key": "target", "operator": "=|", "values": ["west", "south"]},
        {"key": "City", "operator": "=", "value": "Berlin", "condition": "AND"},
    ]
    filters, notices = filters_of(raw)
    assert notices == []
    assert [f.key for f in filters] == ["source", "topic", "target"]
    assert select([ORDERS, PAYMENTS, EVENTS], filters) == [PAYMENTS]
    assert select(
        [ORDERS, PAYMENTS, EVENTS], filters_of([{"key": "topic", "operator": "!~", "value": "pay.*"}])[0]
    ) == [ORDERS, EVENTS]


def test_topic_filters_match_upstream_or_remote_names():
    assert select([ORDERS, EVENTS], [Filter.equal("topic", "north.events")]) == [EVENTS]


def test_a_bad_pattern_names_the_field():
    with pytest.raises(QueryError, match=re.escape("filters[0].value: pattern '(' refused")):
        filters_of([{"key": "source", "operator": "=~", "value": "("}])


def test_payload_values_and_lists_select_and_all_means_no_filter():
    assert select([ORDERS, EVENTS], payload_filters({"source": ["north", "x"], "topic": "$__all"})) == [
        EVENTS
    ]
    assert payload_filters("not a mapping") == []


def test_frames():
    windows = [WindowAggregate(0, 1, 3, 3, 3, 3), WindowAggregate(10_000, 1, 4, 4, 4, 4)]
    series = timeserie("record_count", ORDERS, windows, 20_000, "A")
    assert series["datapoints"] == [[7, 0]] and series["refId"] == "A"
    assert series["tags"] == {
        "source": "east",
        "target": "west",
        "topic": "orders",
        "remote_topic": "east.orders",
        "metric": "record_count",
    }
    assert table([("Time", "time")], [(1,)], None) == {
        "type": "table",
        "columns": [{"text": "Time", "type": "time"}],
        "rows": [[1]],
    }


def test_metric_descriptors_offer_payload_editors():
    lag = next(m for m in metric_descriptors() if m["value"] == "group_lag")
    assert {p["name"] for p in lag["payloads"]} == {"source", "target", "topic", "group", "site", "aggregate"}


def test_targets_are_grouped_by_their_site_and_forwarded_without_it():
    targets = [{"refId": "A", "target": "x", "payload": {"site": "west", "source": "east"}},
               {"refId": "B", "target": "y"},
               {"refId": "C", "target": "z", "data": {"site": "west"}},
               {"refId": "D", "target": "w", "payload": {"site": "$__all"}}]
    groups = by_site(targets)
    assert list(groups) == ["west", "local"]
    assert groups["west"] == [{"refId": "A", "target": "x", "payload": {"source": "east"}},
                              {"refId": "C", "target": "z", "data": {}}]
    assert [t["refId"] for t in groups["local"]] == ["B", "D"]


def test_frames_from_another_site_say_which_site():
    frames = [{"target": "record_count east->west", "datapoints": [[1, 2]], "tags": {"source": "east"}},
              {"type": "table", "columns": [{"text": "Time", "type": "time"}], "rows": [[5], [6]]}, "junk"]
    series, table = tagged("north", frames)
    assert series["target"] == "north: record_count east->west"
    assert series["tags"] == {"source": "east", "site": "north"}
    assert table["columns"][0] == {"text": "Site", "type": "string"}
    assert table["rows"] == [["north", 5], ["north", 6]]
    assert tagged("north", {"message": "not a list"}) == []
