"""Every v2 endpoint against real Redis data written through the aggregator's sink and layout."""

from __future__ import annotations

import pytest
import redis

from contract import redis_layout as layout
from service.app import create_app

pytestmark = pytest.mark.integration


def test_clusters_list_both_roles(client, scenario):
    clusters = {c["cluster"]: c["roles"] for c in client.get("/v2/clusters").get_json()["clusters"]}
    assert clusters[scenario.west] == ["target"]
    assert clusters[scenario.east] == ["source"] and clusters[scenario.north] == ["source"]


def test_cluster_info_lists_replications_with_state_and_totals(client, scenario):
    body = client.get(f"/v2/cluster-info/{scenario.west}", query_string=scenario.span).get_json()
    states = {r["source"]: r["state"] for r in body["replications"]}
    assert states == {scenario.east: "ACTIVE", scenario.north: "FAILED"}
    # 8 windows x (10 orders + 10 payments + 1 events) records
    assert body["metrics"]["record_count"]["value"] == 8 * 21
    east = next(r for r in body["replications"] if r["source"] == scenario.east)
    assert (
        east["metrics"]["record_count"]["sum"] == 160
        and east["metrics"]["replication_latency_ms"]["avg"] == 4
    )


def test_cluster_info_defaults_to_two_hours(client, scenario):
    body = client.get(f"/v2/cluster-info/{scenario.east}").get_json()
    assert body["to"] - body["from"] == 2 * 3_600_000
    assert body["roles"] == ["source"] and [r["target"] for r in body["replications"]] == [scenario.west]


def test_replications_in_one_call_with_state_and_lag_evaluation(client, scenario):
    body = client.get("/v2/replications").get_json()
    mine = {(r["source"], r["target"]): r for r in body["replications"] if r["target"] == scenario.west}
    east = mine[(scenario.east, scenario.west)]
    assert east["state"] == "ACTIVE" and "22 records" in east["explanation"]
    assert (east["lag"]["status"], east["lag"]["reason"]) == ("ERR", "STALL")
    problems = {(p["topic"], p["partition"]): p["reason"] for p in east["lag"]["partitions"]}
    assert problems == {(f"{scenario.east}.orders", 1): "STALL", (f"{scenario.east}.payments", 0): "WARN"}
    assert east["lag"]["max_lag_partition"]["current_lag"] == 50
    failed = mine[(scenario.north, scenario.west)]
    assert failed["state"] == "FAILED" and "broker unreachable" in failed["explanation"]
    assert body["states"]["FAILED"] >= 1


def test_one_replication_with_topics_and_groups(client, scenario):
    body = client.get(
        f"/v2/replications/{scenario.east}/{scenario.west}", query_string={"all": "true"}
    ).get_json()
    assert {t["upstreamTopic"] for t in body["topicNames"]} == {"orders", "payments"}
    assert len(body["lag"]["partitions"]) == 3
    (group,) = body["groups"]
    assert group["group"] == "billing" and (group["lag"]["status"], group["lag"]["reason"]) == (
        "WARN",
        "WARN",
    )
    assert group["lag"]["total_lag"] == 9


def test_replication_metric_adds_up_its_topics(client, scenario):
    body = client.get(
        f"/v2/replication-metrics/{scenario.east}/{scenario.west}/record_count", query_string=scenario.span
    ).get_json()
    assert body["value"] == 160 and len(body["series"]) == 8 and body["series"][0]["value"] == 20


def test_topic_metric_by_downstream_name_matches_upstream_form(client, scenario):
    down = client.get(
        f"/v2/topic-metrics/{scenario.west}/{scenario.east}.orders/byte_count", query_string=scenario.span
    ).get_json()
    up = client.get(
        f"/v2/topic-metrics/{scenario.east}/{scenario.west}/orders/byte_count", query_string=scenario.span
    ).get_json()
    assert down == up and down["value"] == 8000 and down["upstreamTopic"] == "orders"


def test_prefixless_topics_are_found_by_either_name(client, scenario):
    up = client.get(f"/v2/topic-metrics/{scenario.north}/{scenario.west}/ledger/byte_count",
                    query_string=scenario.span)
    down = client.get(f"/v2/topic-metrics/{scenario.west}/ledger/byte_count", query_string=scenario.span)
    assert up.get_json() == down.get_json() and up.get_json()["value"] == 8 * 64


def test_partition_metric(client, scenario):
    body = client.get(
        f"/v2/partition-metrics/{scenario.east}/{scenario.west}/orders/1/records_lag",
        query_string=scenario.span,
    ).get_json()
    assert (body["partition"], body["value"], body["min"], body["max"]) == (1, 50, 50, 50)


def test_group_metrics_and_status(client, scenario):
    base = f"/v2/group-metrics/{scenario.east}/{scenario.west}/billing"
    lag = client.get(f"{base}/group_lag", query_string=scenario.span).get_json()
    assert lag["value"] == 9 and lag["min"] == 2
    latency = client.get(f"{base}/checkpoint_latency_ms", query_string={**scenario.span, "topic": "orders"})
    assert latency.get_json()["value"] == 7 and latency.get_json()["count"] == 16
    one = client.get(f"/v2/groups/{scenario.east}/{scenario.west}/billing").get_json()
    assert one["lag"]["status"] == "WARN"
    listed = client.get(f"/v2/groups/{scenario.east}/{scenario.west}").get_json()
    assert [g["group"] for g in listed["groups"]] == ["billing"]


@pytest.mark.parametrize(
    "path, message",
    [
        ("/v2/cluster-info/nowhere", "cluster 'nowhere'"),
        ("/v2/replications/{east}/nowhere", "target cluster 'nowhere'"),
        ("/v2/replications/nowhere/{west}", "no replication from 'nowhere'"),
        ("/v2/replication-metrics/{east}/{west}/bogus", "unknown metric 'bogus'"),
        ("/v2/topic-metrics/{west}/missing/record_count", "no remote topic 'missing'"),
        ("/v2/partition-metrics/{east}/{west}/orders/7/record_count", "no partition 7"),
        ("/v2/group-metrics/{east}/{west}/nobody/group_lag", "no checkpointed group 'nobody'"),
        ("/v2/group-metrics/{east}/{west}/billing/record_count", "unknown metric 'record_count'"),
        ("/v2/groups/{east}/{west}/nobody", "no checkpointed group 'nobody'"),
        ("/v2/no/such/path", "no such path"),
    ],
)
def test_unknown_things_are_404_with_a_message(client, scenario, path, message):
    response = client.get(path.format(east=scenario.east, west=scenario.west))
    assert response.status_code == 404 and message in response.get_json()["message"]


def test_bad_parameter_is_400_naming_it(client, scenario):
    response = client.get(
        f"/v2/replication-metrics/{scenario.east}/{scenario.west}/record_count",
        query_string={"granularity": "2m"},
    )
    assert response.status_code == 400
    assert "granularity" in response.get_json()["errors"]["query"]
    assert "granularity" in response.get_json()["message"]


@pytest.mark.parametrize("value", ["\u00b2", "9" * 30, "yesterday", "2026-02-30"])
def test_timestamps_that_do_not_parse_are_400(client, scenario, value):
    response = client.get(f"/v2/cluster-info/{scenario.west}", query_string={"from": value})
    assert response.status_code == 400 and "from" in response.get_json()["errors"]["query"]


def test_services_lists_the_local_service(client):
    (service,) = client.get("/v2/services").get_json()["services"]
    assert service["local"] is True and service["status"] == "ok" and service["port"] == 6670


def test_health_and_readiness(client):
    assert client.get("/health").get_json() == {"status": "UP"}
    assert client.get("/ready").get_json() == {"status": "READY", "redis": "ok"}


def test_prometheus_exposition_has_states_lags_and_own_health(client, scenario):
    response = client.get("/metrics")
    text = response.get_data(as_text=True)
    assert response.status_code == 200 and response.mimetype == "text/plain"
    flow = f'source="{scenario.north}",state="FAILED",target="{scenario.west}"'
    assert f"srm_replication_state{{{flow}}} 1.0" in text
    assert (
        f'srm_partition_lag_seconds{{partition="1",source="{scenario.east}",target="{scenario.west}",'
        f'topic="{scenario.east}.orders"}} 12.5'
    ) in text
    assert "srm_service_redis_up 1.0" in text and "srm_service_requests_total" in text


def test_replication_status_shows_the_drivers_readers(client, scenario):
    body = client.get("/v2/replications").get_json()
    mine = {r["source"]: r for r in body["replications"] if r["target"] == scenario.west}
    assert mine[scenario.east]["readers"] == [
        {"reader": "progress", "rejected": 3, "alive": True,
         "last_rejection": "mm2-offsets.x.internal[4]@7: ValueError: bad"},
        {"reader": "control", "rejected": 0, "alive": False, "last_rejection": None},
    ]
    assert mine[scenario.north]["readers"] == []  # a report without readers: an older driver
    one = client.get(f"/v2/replications/{scenario.east}/{scenario.west}").get_json()
    assert [r["reader"] for r in one["readers"]] == ["progress", "control"]


def test_prometheus_exposition_has_the_drivers_reader_counts(client, scenario):
    text = client.get("/metrics").get_data(as_text=True)
    flow = f'source="{scenario.east}",target="{scenario.west}"'
    assert f'srm_driver_records_rejected_total{{reader="progress",{flow}}} 3.0' in text
    assert f'srm_driver_reader_up{{reader="progress",{flow}}} 1.0' in text
    assert f'srm_driver_reader_up{{reader="control",{flow}}} 0.0' in text
    assert f'reader="progress",source="{scenario.north}"' not in text


def test_prometheus_exposition_has_the_aggregators_restart_counts(client, scenario, redis_url):
    # The aggregator's supervisor counts restarts in Redis; every target has the series, 0 until one.
    redis.Redis.from_url(redis_url).hincrby(layout.aggregator_restarts_key(scenario.west), "query", 3)
    text = client.get("/metrics").get_data(as_text=True)
    assert f'srm_aggregator_query_restarts_total{{target="{scenario.west}"}} 3.0' in text
    assert "merge_child" not in text  # the aggregator has no merge child to restart


def test_redis_down_is_503_with_a_message_and_not_ready(free_redis_url):
    client = create_app({"REDIS_URL": free_redis_url}).test_client()
    response = client.get("/v2/replications")
    assert response.status_code == 503 and "Redis" in response.get_json()["message"]
    ready = client.get("/ready")
    assert ready.status_code == 503
    # Unauthenticated: nothing of the Redis error (host, port, reason), only that it is unavailable.
    assert ready.get_json() == {"status": "STARTING", "redis": "unavailable"}
    port = free_redis_url.rsplit(":", 1)[1].split("/")[0]
    assert "127.0.0.1" not in ready.get_data(as_text=True) and port not in ready.get_data(as_text=True)
    assert client.get("/health").status_code == 200
    assert "srm_service_redis_up 0.0" in client.get("/metrics").get_data(as_text=True)
