"""deploy/prometheus/: the alert rules and the scrape config pass Prometheus's own checks, and the
rules' unit tests (srm-alerts.test.yml) pass under `promtool test rules`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from stack.prerequisites import require

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "srm-alerts.yml"
REQUIRED_ALERTS = {"SrmReplicationFailed", "SrmReplicationInactive", "SrmReplicationLagSecondsHigh",
                   "SrmReplicationLagSecondsCritical", "SrmNoRawMetrics", "SrmCheckpointsStale",
                   "SrmAggregatorRestarting"}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.usefixtures("external_processes")
def test_promtool_checks_the_rules():
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.usefixtures("external_processes")
def test_promtool_checks_the_scrape_config_and_the_rule_files_it_names():
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.usefixtures("external_processes")
def test_the_rules_unit_tests_pass():
    done = promtool("test", "rules", "srm-alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_every_required_alert_exists_and_is_unit_tested():
    assert REQUIRED_ALERTS <= set(alerts())
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS_DIR / "srm-alerts.test.yml").read_text()))
    assert tested == set(alerts()), "every alert needs a promtool unit test"


@pytest.mark.usefixtures("external_processes")
def test_promtool_fails_a_broken_rule(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: srm_up >\n")
    done = subprocess.run([require("promtool"), "check", "rules", str(broken)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0  # the checks above would catch a bad rule


def test_compose_runs_prometheus_on_these_files_and_scrapes_each_site_service_and_the_gateway():
    root = PROMETHEUS_DIR.parents[1]
    services = yaml.safe_load((root / "compose.yaml").read_text())["services"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    scraped = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())["scrape_configs"][0]
    targets = {t for group in scraped["static_configs"] for t in group["targets"]}
    scraped_services = {name for name in services if name.startswith("service-") or name == "gateway"}
    assert targets == {f"{name}:6670" for name in scraped_services}
