"""The Grafana JSON datasource (simpod 0.6.x contract) answering the bodies the plugin really sends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.service.conftest import WINDOWS

pytestmark = pytest.mark.integration


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def query_body(scenario, targets: list[dict], **extra) -> dict:
    """A DataQueryRequest as the plugin POSTs it, unknown keys included (the plugin's DataQueryRequest)."""
    start, end = scenario.first_window, scenario.last_window + 10_000
    return {
        "app": "dashboard",
        "requestId": "Q102",
        "timezone": "",
        "panelId": 2,
        "dashboardId": 1893,
        "dashboardUID": "abc",
        "range": {"from": iso(start), "to": iso(end), "raw": {"from": "now-3h", "to": "now"}},
        "rangeRaw": {"from": "now-3h", "to": "now"},
        "interval": "10s",
        "intervalMs": 10_000,
        "maxDataPoints": 1920,
        "targets": targets,
        "scopedVars": {"__interval": {"text": "10s", "value": "10s"}},
        "startTime": 1574418203842,
        **extra,
    }


def target(metric: str, **payload) -> dict:
    return {
        "refId": "A",
        "target": metric,
        "payload": payload,
        "editorMode": "code",
        "datasource": {"type": "simpod-json-datasource", "uid": "x"},
    }


def post(client, path: str, body) -> list:
    response = client.post(f"/grafana{path}", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_test_connection(client):
    assert client.get("/grafana/").status_code == 200


def test_a_trailing_slash_in_the_datasource_url_is_tolerated(client):
    assert client.post("/grafana//metrics", json={}).status_code == 200
    assert client.get("/grafana//").status_code == 200


@pytest.mark.parametrize("body", [{}, {"metric": "DescribeMetricList", "payload": {"namespace": "acs_rds"}}])
def test_metrics_list_with_payload_editors(client, body):
    metrics = {m["value"]: m for m in post(client, "/metrics", body)}
    assert {"record_count", "group_lag", "replication_status", "alerts"} <= set(metrics)
    assert [p["name"] for p in metrics["group_lag"]["payloads"]][:4] == ["source", "target", "topic", "group"]


def test_payload_options_follow_the_chosen_payload(client, scenario):
    body = {"metric": "record_count", "payload": {"source": scenario.east}, "name": "topic"}
    assert post(client, "/metric-payload-options", body) == [
        {"label": "orders", "value": "orders"},
        {"label": "payments", "value": "payments"},
    ]
    assert post(client, "/metric-payload-options", {"metric": "x", "payload": {}, "name": "nonsense"}) == []


def test_query_time_series_per_topic_with_tags(client, scenario):
    answer = post(client, "/query", query_body(scenario, [target("record_count", source=scenario.east)]))
    assert {s["tags"]["topic"] for s in answer} == {"orders", "payments"}
    orders = next(s for s in answer if s["tags"]["topic"] == "orders")
    assert orders["refId"] == "A" and orders["tags"]["target"] == scenario.west
    assert orders["datapoints"][0] == [10, scenario.first_window] and len(orders["datapoints"]) == 8


def test_query_honours_max_data_points_and_interval(client, scenario):
    body = query_body(
        scenario,
        [target("record_count", source=scenario.east, topic="orders")],
        intervalMs=1000,
        maxDataPoints=3,
    )
    (series,) = post(client, "/query", body)
    assert 0 < len(series["datapoints"]) <= 3
    assert sum(v for v, _ in series["datapoints"]) == 80  # counters add up across merged windows


def test_query_aggregates_per_replication_and_multi_value_payloads(client, scenario):
    body = query_body(
        scenario,
        [
            target(
                "record_count",
                source=[scenario.east, scenario.north],
                target=scenario.west,
                aggregate="replication",
            )
        ],
    )
    answer = {s["tags"]["source"]: s for s in post(client, "/query", body)}
    assert answer[scenario.east]["datapoints"][0][0] == 20 and answer[scenario.north]["datapoints"][0][0] == 1


@pytest.mark.parametrize("spelling", ["filters", "adhocFilters"])
def test_both_filter_spellings(client, scenario, spelling):
    filters = [
        {"key": "target", "operator": "=", "value": scenario.west},
        {"key": "topic", "operator": "=~", "value": "pay.*"},
        {"key": "City", "operator": "=", "value": "x"},
    ]
    answer = post(client, "/query", query_body(scenario, [target("byte_count")], **{spelling: filters}))
    assert [s["tags"]["topic"] for s in answer] == ["payments"]


def test_hidden_and_empty_targets_are_not_drawn(client, scenario):
    targets = [
        {**target("record_count", source=scenario.east), "hide": True},
        {"refId": "B"},
        {"refId": "C", "target": ""},
    ]
    assert post(client, "/query", query_body(scenario, targets)) == []
    assert post(client, "/query", {}) == []


def test_status_table_and_alert_annotations(client, scenario):
    body = query_body(
        scenario,
        [
            target("replication_status", target=scenario.west),
            {**target("alerts", target=scenario.west), "refId": "B"},
        ],
    )
    body["range"]["to"] = iso(scenario.now_ms + 60_000)  # alerts are current: they start up to now
    status, alerts = post(client, "/query", body)
    assert status["type"] == "table" and [c["text"] for c in status["columns"]][:4] == [
        "Time",
        "Source",
        "Target",
        "State",
    ]
    assert {(r[1], r[3]) for r in status["rows"]} == {(scenario.east, "ACTIVE"), (scenario.north, "FAILED")}
    assert [c["text"] for c in alerts["columns"]] == ["time", "timeEnd", "title", "text", "tags"]
    titles = " | ".join(r[2] for r in alerts["rows"])
    assert "FAILED" in titles and "STALL" in titles and alerts["refId"] == "B"


def test_group_metric_series(client, scenario):
    (series,) = post(
        client, "/query", query_body(scenario, [target("group_lag", group="billing", source=scenario.east)])
    )
    assert series["tags"]["group"] == "billing" and series["datapoints"][-1][0] == 9


def test_unknown_metric_and_bad_filter_are_400_with_a_message(client, scenario):
    response = client.post("/grafana/query", json=query_body(scenario, [target("bogus")]))
    assert response.status_code == 400 and "targets[0].target" in response.get_json()["message"]
    bad = query_body(
        scenario, [target("record_count")], filters=[{"key": "topic", "operator": "=~", "value": "("}]
    )
    response = client.post("/grafana/query", json=bad)
    assert response.status_code == 400 and "filters[0].value" in response.get_json()["message"]
    response = client.post("/grafana/query", json={"range": {"from": "yesterday"}})
    assert response.status_code == 400 and "range" in response.get_json()["errors"]["json"]


def test_variable_queries(client, scenario):
    topics = post(
        client,
        "/variable",
        {
            "payload": {"target": f"topics source={scenario.east}"},
            "range": {"from": iso(scenario.first_window), "to": iso(scenario.now_ms)},
        },
    )
    assert topics == [
        {"__text": "orders", "__value": "orders"},
        {"__text": "payments", "__value": "payments"},
    ]
    raw_json = post(
        client, "/variable", {"payload": {"target": "topics", "unknown": "ignored", "source": scenario.north}}
    )
    assert raw_json == [{"__text": "events", "__value": "events"}, {"__text": "ledger", "__value": "ledger"}]
    assert post(client, "/variable", {}) == []
    response = client.post("/grafana/variable", json={"payload": {"target": "everything"}})
    assert response.status_code == 400 and "unknown query 'everything'" in response.get_json()["message"]


def test_tag_keys_and_values(client, scenario):
    assert {k["text"] for k in post(client, "/tag-keys", {})} == {"source", "target", "topic", "group"}
    values = post(
        client,
        "/tag-values",
        {"key": "source", "filters": [{"key": "target", "operator": "=", "value": scenario.west}]},
    )
    assert values == [{"text": scenario.east}, {"text": scenario.north}]
    assert post(client, "/tag-values", {"key": "City"}) == []


def test_legacy_search_and_annotations(client, scenario):
    assert "record_count" in post(client, "/search", {"target": "record"})
    body = {
        "range": {"from": iso(scenario.first_window), "to": iso(scenario.now_ms + 60_000)},
        "annotation": {"name": "alerts", "enable": True, "query": "alerts"},
    }
    annotations = post(client, "/annotations", body)
    assert any(a["title"].endswith("FAILED") and a["annotation"]["name"] == "alerts" for a in annotations)


def test_lag_seconds_history_per_replication_topic_and_group(client, scenario):
    span = {"from": iso(scenario.first_window), "to": iso(scenario.last_window + 10_000)}
    per_replication = post(client, "/query", query_body(
        scenario, [target("lag_seconds", source=scenario.east, aggregate="replication")], range=span))
    assert [s["target"] for s in per_replication] == [f"lag_seconds {scenario.east}->{scenario.west}"]
    values = [value for value, _ in per_replication[0]["datapoints"]]
    assert values == [10.0 * i for i in range(WINDOWS)]  # the stuck partition, one point a window
    per_topic = post(client, "/query", query_body(scenario, [target("lag_seconds", source=scenario.east)],
                                                  range=span))
    assert [v for v, _ in {s["tags"]["topic"]: s for s in per_topic}["orders"]["datapoints"]] == values
    groups = post(client, "/query", query_body(
        scenario, [target("group_lag_seconds", source=scenario.east, group=["billing"])], range=span))
    assert [v for s in groups for v, _ in s["datapoints"]] == [2.0 + i for i in range(WINDOWS)]
    names = {m["value"] for m in post(client, "/metrics", {})}
    assert {"lag_seconds", "group_lag_seconds"} <= names
