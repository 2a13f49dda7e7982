"""compose.yaml: valid Compose, every image pinned, two sites + gateway + provisioned Grafana."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from contract.config import load_config
from service.sites.advertiser import advertiser_settings
from service.sites.gateway import Gateway

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "deploy" / "compose-spec" / "compose_spec.json"
SCHEMA_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"
GRAFANA = ROOT / "deploy" / "grafana"
SITES = ("east", "west")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_pin_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None: a tag other than latest, or a digest."""
    if _DIGEST.search(image):
        return None
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:  # no colon, or the colon was a registry port
        return f"{image!r} has no tag or digest"
    if tag == "latest":
        return f"{image!r} uses the moving tag 'latest'"
    return None


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft201909Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def test_the_vendored_schema_is_the_published_file():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_compose_file_follows_the_compose_specification(compose, validator):
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_check_rejects_a_broken_file(compose, validator):
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["restart_policy"] = "always"
    broken["services"]["grafana"]["ports"] = "3000:3000"
    assert len(list(validator.iter_errors(broken))) == 2


@pytest.mark.parametrize("image, pinned", [
    ("redis:7.0.15", True), ("grafana/grafana:11.3.0", True), ("redis", False), ("redis:latest", False),
    ("registry.local:5000/srm", False), ("registry.local:5000/srm:1.2", True),
    ("redis@sha256:" + "a" * 64, True),
])
def test_image_pin_rule(image, pinned):
    assert (image_pin_problem(image) is None) is pinned


def test_every_image_is_pinned(compose):
    images = {name: service.get("image") for name, service in compose["services"].items()}
    assert all(images.values()), f"services without an image: {[n for n, i in images.items() if not i]}"
    assert [problem for image in images.values() if (problem := image_pin_problem(image))] == []
    dockerfile = (ROOT / "Dockerfile").read_text()
    defaults = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", dockerfile, re.MULTILINE))
    stages = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", dockerfile, re.MULTILINE | re.IGNORECASE))
    images = [i for i in re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE) if i not in stages]
    from_lines = [interpolate(image, defaults) for image in images]
    assert from_lines and [p for image in from_lines if (p := image_pin_problem(image))] == []


def test_two_sites_each_with_kafka_redis_driver_aggregator_and_service(compose):
    services = compose["services"]
    for site in SITES:
        for part in ("kafka", "redis", "driver", "aggregator", "service"):
            assert f"{part}-{site}" in services
        assert services[f"kafka-{site}"]["image"].startswith("apache/kafka:")
        config = load_config(ROOT / "deploy" / "sites" / f"{site}.properties")
        for part in ("driver", "aggregator", "service"):
            assert any(f"deploy/sites/{site}.properties:" in v for v in services[f"{part}-{site}"]["volumes"])
        assert config.service_target_clusters == [site]
        settings = advertiser_settings(config)
        assert (settings.site, settings.host) == (site, f"service-{site}")


def test_the_gateway_watches_both_clusters_and_may_call_only_the_site_services(compose):
    assert any("deploy/sites/gateway.properties:" in v for v in compose["services"]["gateway"]["volumes"])
    config = load_config(ROOT / "deploy" / "sites" / "gateway.properties")
    assert sorted(config.service_remote_clusters) == sorted(SITES)
    gateway = Gateway.from_config(config)
    try:
        assert all(gateway.allowed.allows(f"service-{site}") for site in SITES)
        assert not gateway.allowed.allows("grafana")
    finally:
        gateway.close()


def test_grafana_is_pinned_with_the_json_datasource_plugin_and_provisioned(compose):
    grafana = compose["services"]["grafana"]
    plugin, _, version = grafana["environment"]["GF_INSTALL_PLUGINS"].partition(" ")
    assert plugin == "simpod-json-datasource" and re.fullmatch(r"\d+\.\d+\.\d+", version)
    mounts = {v.split(":")[1] for v in grafana["volumes"]}
    assert {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards"} <= mounts
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "srm.yaml").read_text())
    hosts = {re.match(r"http://([^:/]+):6670/grafana$", s["url"]).group(1) for s in sources["datasources"]}
    assert hosts == {"service-east", "service-west", "gateway"} and hosts <= set(compose["services"])
    assert {s["type"] for s in sources["datasources"]} == {"simpod-json-datasource"}
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "srm.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_the_dashboard_shows_every_required_view_per_site():
    dashboard = json.loads((GRAFANA / "dashboards" / "srm-replication.json").read_text())
    (site_variable,) = dashboard["templating"]["list"]
    assert site_variable["type"] == "datasource" and site_variable["query"] == "simpod-json-datasource"
    targets = [t for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert {t["target"] for t in targets} >= {"record_count", "byte_count", "replication_latency_ms",
                                              "records_lag", "lag_seconds", "checkpoint_latency_ms",
                                              "replication_status", "group_lag_seconds"}
    lag_panels = [p for p in dashboard["panels"] if p.get("title", "").endswith("lag in seconds")
                  or p.get("title") == "Lag in seconds"]
    assert {p["type"] for p in lag_panels} == {"timeseries"} and len(lag_panels) == 2  # history, not a stat
    assert {t["datasource"]["uid"] for t in targets} == {"${site}"}
    assert any(panel.get("repeat") == "site" for panel in dashboard["panels"])


def test_each_sites_redis_keeps_its_data_in_an_everysec_append_only_file_on_a_volume(compose):
    for site in SITES:
        redis_service = compose["services"][f"redis-{site}"]
        command = redis_service["command"]
        options = dict(zip(command[1::2], command[2::2], strict=True))
        assert (options["--appendonly"], options["--appendfsync"]) == ("yes", "everysec")
        volume, _, mount = redis_service["volumes"][0].partition(":")
        assert mount == "/data" and volume in compose["volumes"]  # a named volume, one per site
    assert compose["services"]["redis-east"]["volumes"] != compose["services"]["redis-west"]["volumes"]


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${NAME}` and `${NAME:-default}`, as far as compose.yaml uses them."""
    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(3) or ""
        return env.get(name) or default
    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", value, text)


def published_addresses(compose: dict, env: dict[str, str]) -> dict[str, set[str]]:
    """Service -> the host addresses its ports bind to, with `env` as the shell's environment."""
    return {name: {interpolate(str(port), env).rsplit(":", 2)[0] for port in service["ports"]}
            for name, service in compose["services"].items() if service.get("ports")}


def test_every_published_port_binds_to_loopback_unless_told_otherwise(compose):
    assert set().union(*published_addresses(compose, {}).values()) == {"127.0.0.1"}
    told = published_addresses(compose, {"SRM_PUBLISH_ADDRESS": "0.0.0.0"})
    assert {name for name, addresses in told.items() if addresses == {"0.0.0.0"}} == {
        "service-east", "service-west", "gateway"}


def test_grafana_and_prometheus_stay_on_loopback_whatever_srm_publish_address_says(compose):
    """Neither has authentication here (Grafana: anonymous viewers, datasources proxied to the services)."""
    for address in ("0.0.0.0", "10.1.2.3", "::"):
        told = published_addresses(compose, {"SRM_PUBLISH_ADDRESS": address})
        assert (told["grafana"], told["prometheus"]) == ({"127.0.0.1"}, {"127.0.0.1"}), address


def test_the_interpolation_reads_compose_defaults_and_overrides():
    assert interpolate("${A:-127.0.0.1}:${B:-6670}:6670", {"B": "7000"}) == "127.0.0.1:7000:6670"
    assert interpolate("${A}:1", {"A": "x"}) == "x:1"


def test_state_that_must_outlive_a_container_is_on_named_volumes(compose):
    services, volumes = compose["services"], compose["volumes"]
    for site in SITES:
        kafka = services[f"kafka-{site}"]
        log_dirs = kafka["environment"]["KAFKA_LOG_DIRS"]
        assert any(v.split(":")[1] == log_dirs and v.split(":")[0] in volumes for v in kafka["volumes"])
        checkpoints = load_config(ROOT / "deploy" / "sites" / f"{site}.properties").setting(
            "aggregator.checkpoint.dir")
        mounts = dict(reversed(v.split(":")[:2]) for v in services[f"aggregator-{site}"]["volumes"])
        assert mounts[checkpoints] in volumes
    named = [v.split(":")[0] for service in services.values() for v in service.get("volumes", [])
             if v.split(":")[0] in volumes]
    assert len(named) == len(set(named)) == len(volumes)  # one owner each, none unused
