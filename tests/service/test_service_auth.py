"""Optional Basic / bearer authentication from the properties file; open health and docs."""

from __future__ import annotations

import base64
import logging

import pytest

from contract.config import parse_config
from service.__main__ import ServiceServer, app_settings, check_auth_settings, main, startup_warnings
from service.app import create_app

PROPERTIES = """clusters = east, west
east.bootstrap.servers = localhost:1
west.bootstrap.servers = localhost:2
east->west.enabled = true
service.auth.basic.username = ops
service.auth.basic.password = s3cret-pw
service.auth.token = t0ken-value
service.target.clusters = west
"""


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def secured(caplog):
    caplog.set_level(logging.DEBUG)
    settings = app_settings(parse_config(PROPERTIES, "srm.properties"))
    return create_app(settings).test_client()


@pytest.mark.parametrize("headers", [basic("ops", "s3cret-pw"), {"Authorization": "Bearer t0ken-value"}])
def test_right_credentials_pass(secured, headers):
    response = secured.get("/v2/services", headers=headers)
    assert response.status_code == 200
    assert response.get_json()["services"][0]["target_clusters"] == ["west"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        basic("ops", "wrong"),
        basic("eve", "s3cret-pw"),
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic !!!"},
        {"Authorization": "Digest x"},
    ],
)
def test_missing_or_wrong_credentials_are_401(secured, headers):
    response = secured.get("/v2/services", headers=headers)
    assert response.status_code == 401
    assert (
        "Basic" in response.headers["WWW-Authenticate"] and "Bearer" in response.headers["WWW-Authenticate"]
    )
    assert response.get_json()["message"].startswith("authentication required")


def test_grafana_and_prometheus_need_credentials_too(secured):
    assert secured.post("/grafana/tag-keys", json={}).status_code == 401
    assert secured.get("/metrics").status_code == 401


def test_health_and_docs_stay_open(secured):
    assert secured.get("/health").status_code == 200
    assert secured.get("/openapi.json").status_code == 200
    assert secured.get("/swagger-ui").status_code == 200


def test_secrets_never_reach_the_log(secured, caplog):
    secured.get("/v2/services", headers=basic("ops", "wrong"))
    secured.get("/v2/services", headers={"Authorization": "Bearer t0ken-value"})
    assert "s3cret-pw" not in caplog.text and "t0ken-value" not in caplog.text
    assert "rejected GET /v2/services" in caplog.text


def test_without_settings_the_api_is_open():
    assert create_app().test_client().get("/v2/services").status_code == 200


def test_half_configured_basic_auth_is_refused(tmp_path, capsys):
    settings = app_settings(parse_config(PROPERTIES.replace("service.auth.basic.password = s3cret-pw\n", "")))
    assert "service.auth.basic.password is required" in check_auth_settings(settings)
    path = tmp_path / "srm.properties"
    path.write_text(PROPERTIES.replace("service.auth.basic.username = ops\n", ""))
    assert main(["--config", str(path)]) == 2
    assert "service.auth.basic.username is required" in capsys.readouterr().err


def test_bad_port_is_named_at_start_up(tmp_path, capsys):
    path = tmp_path / "srm.properties"
    path.write_text(PROPERTIES + "service.advertised.port = eighty\n")
    assert main(["--config", str(path)]) == 2
    assert "service.advertised.port" in capsys.readouterr().err


def test_errors_answer_json_never_html():
    client = create_app().test_client()
    response = client.post("/v2/services")
    assert response.status_code == 405 and "POST is not allowed" in response.get_json()["message"]


def test_logged_paths_cannot_forge_log_lines(secured, caplog):
    assert secured.get("/v2/x%0aFORGED%20line").status_code == 401
    rejected = [r.getMessage() for r in caplog.records if "rejected GET" in r.getMessage()]
    assert rejected and all("\n" not in line for line in rejected)
    assert any("/v2/x\\nFORGED line" in line for line in rejected)


def _open(host: str) -> str:
    without_auth = "".join(line + "\n" for line in PROPERTIES.splitlines() if "service.auth" not in line)
    return without_auth + f"service.host = {host}\n"


def test_an_open_api_is_announced_loudly_at_start(tmp_path, monkeypatch, caplog):
    assert startup_warnings(parse_config(PROPERTIES)) == []
    (loopback,) = startup_warnings(parse_config(_open("127.0.0.1")))
    assert "authentication is off: anyone who can reach 127.0.0.1:6670 reads every metric" in loopback
    (everyone,) = startup_warnings(parse_config(_open("0.0.0.0")))
    assert "not loopback" in everyone

    path = tmp_path / "srm.properties"
    path.write_text(_open("0.0.0.0"))
    monkeypatch.setattr(ServiceServer, "run", lambda self: None)  # start-up only, no gunicorn
    with caplog.at_level(logging.WARNING):
        assert main(["--config", str(path)]) == 0
    (record,) = [r for r in caplog.records if "authentication is off" in r.getMessage()]
    assert record.levelno == logging.ERROR


def test_an_allowlisted_network_without_a_port_is_named_at_start(tmp_path, monkeypatch, caplog):
    """Before: ``10.0.0.0/8`` (the docs' own example) let any writer of ``heartbeats`` aim the gateway at
    any port in that range and read the JSON back, and nothing said so."""
    path = tmp_path / "srm.properties"
    path.write_text(PROPERTIES + "service.remote.allowed.hosts = 10.0.0.0/8, https://fd00::/64, "
                                 "10.9.0.0/16:6670, [fd01::/64]:6670, 127.0.0.1, *.srm.example.com\n")
    monkeypatch.setattr(ServiceServer, "run", lambda self: None)  # start-up only, no gunicorn
    with caplog.at_level(logging.WARNING):
        assert main(["--config", str(path)]) == 0
    named = [r.getMessage() for r in caplog.records if "network without a port" in r.getMessage()]
    assert len(named) == 2
    assert "'10.0.0.0/8'" in named[0] and "'https://fd00::/64'" in named[1]


def test_cors_only_for_configured_origins():
    unused = "redis://127.0.0.1:1/0"
    default = create_app({"REDIS_URL": unused}).test_client()
    answer = default.get("/grafana/", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in answer.headers  # was "*"
    assert "Origin" in answer.headers.get("Vary", "")

    settings = app_settings(parse_config(PROPERTIES + "service.cors.allowed.origins = https://grafana.example.com\n"))
    grafana = create_app(settings | {"REDIS_URL": unused}).test_client()
    preflight = grafana.options("/grafana/query", headers={
        "Origin": "https://grafana.example.com", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 200  # a preflight has no credentials: auth lets it through
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://grafana.example.com"
    other = grafana.options("/grafana/query", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
