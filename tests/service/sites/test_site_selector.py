"""The `site` selector of the read endpoints: local answers in the plain shape, remote and `all` answers
in the per-site envelope, unknown sites 404, a dead site only makes the answer partial.

The remote site is the real app served over HTTP on loopback (same Redis as the local one); the
discovery registry is a stand-in listing it (tests/e2e/test_multi_site.py covers discovery via Kafka).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from werkzeug.serving import make_server

from service.app import create_app
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY
from service.sites.gateway import Gateway, SiteAccess, parse_allowed_hosts
from service.sites.registry import EXPIRED_STATUS, RemoteService
from service.sites.site_selector import SiteAnswersSchema

pytestmark = pytest.mark.integration


@dataclass
class ListedServices:
    """Stands in for the Kafka-fed Registry."""

    live: list[RemoteService] = field(default_factory=list)
    expired: list[RemoteService] = field(default_factory=list)

    def services(self) -> list[RemoteService]:
        return list(self.live)

    def expired_services(self) -> list[RemoteService]:
        return list(self.expired)


def remote(site: str, port: int) -> RemoteService:
    return RemoteService(f"{site}@{port}", site, f"http://127.0.0.1:{port}", "127.0.0.1", port, "http", "",
                         (site,), "test", int(time.time() * 1000), 10.0)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def far_site(redis_url: str) -> Iterator[int]:
    server = make_server("127.0.0.1", 0, create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "far"}),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


@pytest.fixture(scope="module")
def gateway_client(redis_url: str, far_site: int):
    app = create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "hq"})
    gateway = Gateway("hq", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(5.0))
    app.extensions[GATEWAY_KEY] = gateway
    app.extensions[REGISTRY_KEY] = ListedServices([remote("far", far_site), remote("dead", closed_port())],
                                                  [remote("gone", closed_port())])
    yield app.test_client()
    gateway.close()


def statuses(body: dict) -> dict[str, str]:
    assert not SiteAnswersSchema().validate(body), body
    return {s["site"]: s["status"] for s in body["sites"]}


def test_local_and_the_own_site_name_answer_the_plain_shape(gateway_client, scenario):
    for query in ({}, {"site": "local"}, {"site": "hq"}):
        body = gateway_client.get("/v2/replications", query_string=query).get_json()
        assert "replications" in body and "sites" not in body


def test_all_sites_answer_per_site_and_a_dead_site_only_makes_it_partial(gateway_client, scenario):
    response = gateway_client.get("/v2/replications", query_string={"site": "all"})
    assert response.status_code == 200
    body = response.get_json()
    assert statuses(body) == {"hq": "ok", "far": "ok", "dead": "error: cannot connect",
                              "gone": EXPIRED_STATUS}
    assert body["partial"] is True and set(body["results"]) == {"hq", "far"}
    for site in ("hq", "far"):  # the remote answered for itself (site=local), in the plain shape
        pairs = {(r["source"], r["target"]) for r in body["results"][site]["replications"]}
        assert (scenario.east, scenario.west) in pairs


def test_one_remote_site_is_asked_alone_with_the_query_forwarded(gateway_client, scenario):
    query = {**scenario.span, "site": "far"}
    path = f"/v2/topic-metrics/{scenario.east}/{scenario.west}/orders/record_count"
    body = gateway_client.get(path, query_string=query).get_json()
    assert statuses(body) == {"far": "ok"} and body["partial"] is False
    assert body["results"]["far"]["value"] == 80  # 8 windows x 10 records: the range was forwarded
    assert body["results"]["far"]["from"] == scenario.first_window


def test_the_local_part_of_all_is_serialized_like_the_plain_answer(gateway_client, scenario):
    path = f"/v2/replications/{scenario.east}/{scenario.west}"
    plain = gateway_client.get(path).get_json()
    body = gateway_client.get(path, query_string={"site": "all"}).get_json()
    assert body["results"]["hq"] == plain and "topicNames" in plain


def test_a_site_that_does_not_know_the_subject_reports_its_404_as_its_status(gateway_client, scenario):
    body = gateway_client.get("/v2/replications/nowhere/nobody", query_string={"site": "all"}).get_json()
    found = statuses(body)
    assert found["hq"].startswith("error: HTTP 404: no metrics for target cluster 'nobody'")
    assert found["far"].startswith("error: HTTP 404: ")
    assert body["results"] == {} and body["partial"] is True


def test_an_unknown_site_answers_404_naming_the_known_ones(gateway_client, scenario):
    response = gateway_client.get("/v2/clusters", query_string={"site": "atlantis"})
    assert response.status_code == 404
    assert "unknown site 'atlantis'" in response.get_json()["message"]
    assert "far" in response.get_json()["message"]


def test_a_service_that_is_no_gateway_answers_all_with_itself(redis_url, scenario):
    client = create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "solo"}).test_client()
    body = client.get("/v2/clusters", query_string={"site": "all"}).get_json()
    assert statuses(body) == {"solo": "ok"} and body["partial"] is False
    assert scenario.west in {c["cluster"] for c in body["results"]["solo"]["clusters"]}
    assert client.get("/v2/clusters", query_string={"site": "far"}).status_code == 404


def test_a_site_whose_advertisements_stopped_is_reported_not_called(gateway_client, scenario):
    body = gateway_client.get("/v2/clusters", query_string={"site": "gone"}).get_json()
    assert statuses(body) == {"gone": EXPIRED_STATUS} and body["partial"] is True


def grafana_query(scenario, *targets: dict) -> dict:
    return {"range": {"from": scenario.first_window, "to": scenario.last_window + 10_000},
            "intervalMs": 10_000, "maxDataPoints": 100, "targets": list(targets)}


def test_grafana_targets_ask_the_site_in_their_payload_and_say_where_frames_come_from(gateway_client,
                                                                                      scenario):
    here = {"refId": "A", "target": "record_count", "payload": {"source": scenario.east,
                                                                 "aggregate": "replication"}}
    far = {"refId": "B", "target": "record_count", "payload": {"source": scenario.east, "site": "far",
                                                                "aggregate": "replication"}}
    every = {"refId": "C", "target": "replication_status",
             "payload": {"source": scenario.east, "site": "all"}}
    response = gateway_client.post("/grafana/query", json=grafana_query(scenario, here, far, every))
    assert response.status_code == 200, response.get_data(as_text=True)
    frames = response.get_json()
    series = {f["refId"]: f for f in frames if f.get("type") != "table"}
    assert series["A"]["target"] == f"record_count {scenario.east}->{scenario.west}"
    assert "site" not in series["A"]["tags"]  # this site's own frames stay as they were
    assert series["B"]["target"] == f"far: record_count {scenario.east}->{scenario.west}"
    assert series["B"]["tags"]["site"] == "far" and series["B"]["datapoints"] == series["A"]["datapoints"]
    tables = [f for f in frames if f.get("type") == "table"]
    assert {t["rows"][0][0] for t in tables} == {"hq", "far"}  # the dead site adds nothing
    assert all(t["columns"][0] == {"text": "Site", "type": "string"} for t in tables)


def test_grafana_lists_the_sites_and_refuses_an_unknown_one(gateway_client, scenario):
    options = gateway_client.post("/grafana/metric-payload-options", json={"name": "site"}).get_json()
    assert [o["value"] for o in options] == ["local", "all", "dead", "far", "hq"]
    unknown = {"refId": "A", "target": "record_count", "payload": {"site": "atlantis"}}
    response = gateway_client.post("/grafana/query", json=grafana_query(scenario, unknown))
    assert response.status_code == 400 and "atlantis" in response.get_json()["message"]
