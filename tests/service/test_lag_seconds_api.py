"""Lag in seconds over REST v2 and Prometheus: a metric with history at every level (partition, topic,
replication, group), the latest figure in replication and group answers, and the raw-metrics totals."""

from __future__ import annotations

from tests.service.conftest import WINDOWS

HISTORY = [10.0 * i for i in range(WINDOWS)]


def values(answer: dict) -> list[float]:
    return [point["value"] for point in answer["series"]]


def get(client, path: str, scenario) -> dict:
    span = scenario.span
    response = client.get(path, query_string={"from": span["from"], "to": span["to"], "granularity": "10s"})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_lag_seconds_is_a_gauge_with_history_at_every_level(client, scenario):
    e, w = scenario.east, scenario.west
    replication = get(client, f"/v2/replication-metrics/{e}/{w}/lag_seconds", scenario)
    assert values(replication) == HISTORY
    # A gauge: the range's value is the newest window's, with min, max and avg of the windows' samples.
    assert (replication["value"], replication["min"], replication["max"]) == (HISTORY[-1], 0.0, HISTORY[-1])
    assert replication["avg"] == sum(HISTORY) / len(HISTORY)
    assert values(get(client, f"/v2/topic-metrics/{e}/{w}/orders/lag_seconds", scenario)) == HISTORY
    assert values(get(client, f"/v2/partition-metrics/{e}/{w}/orders/1/lag_seconds", scenario)) == HISTORY
    assert set(values(get(client, f"/v2/partition-metrics/{e}/{w}/orders/0/lag_seconds", scenario))) == {0.0}
    group = get(client, f"/v2/group-metrics/{e}/{w}/billing/group_lag_seconds", scenario)
    assert values(group) == [2.0 + i for i in range(WINDOWS)]
    assert group["value"] == 2.0 + WINDOWS - 1


def test_a_group_metric_name_is_not_a_partition_metric(client, scenario):
    response = client.get(f"/v2/replication-metrics/{scenario.east}/{scenario.west}/group_lag_seconds")
    assert response.status_code == 404 and "lag_seconds" in response.get_json()["message"]


def test_replication_and_group_answers_carry_the_latest_lag_in_seconds_and_record_totals(client, scenario):
    e, w = scenario.east, scenario.west
    answer = client.get(f"/v2/replications/{e}/{w}").get_json()
    assert answer["lag_seconds"] == 12.5  # the worst partition's latest figure
    assert (answer["invalid_records"], answer["late_records"]) == (3, 2)
    assert [(g["group"], g["lag_seconds"]) for g in answer["groups"]] == [("billing", 9.5)]
    answers = client.get("/v2/replications").get_json()["replications"]
    listed = {(r["source"], r["target"]): r for r in answers}
    assert listed[(e, w)]["lag_seconds"] == 12.5
    assert listed[(scenario.north, w)]["lag_seconds"] is None  # nothing known yet
    assert client.get(f"/v2/groups/{e}/{w}/billing").get_json()["lag_seconds"] == 9.5
    assert client.get(f"/v2/groups/{e}/{w}").get_json()["groups"][0]["lag_seconds"] == 9.5


def test_prometheus_exposes_lag_seconds_of_replications_and_groups_and_the_record_totals(client, scenario):
    text = client.get("/metrics").get_data(as_text=True)
    pair = f'source="{scenario.east}",target="{scenario.west}"'
    assert f"srm_replication_lag_seconds{{{pair}}} 12.5" in text
    assert f'srm_group_lag_seconds{{group="billing",{pair}}} 9.5' in text
    assert f'srm_group_records_lag{{group="billing",{pair}}} 9.0' in text
    assert f"srm_raw_records_invalid_total{{{pair}}} 3.0" in text
    assert f"srm_raw_records_late_total{{{pair}}} 2.0" in text
    assert f'srm_topic_metric{{metric="lag_seconds",{pair},topic="{scenario.east}.orders"}}' in text
    assert f"srm_replication_metrics_period_seconds{{{pair}}} 5.0" in text
    assert "srm_replication_report_age_seconds{" in text and "srm_group_checkpoint_age_seconds{" in text
