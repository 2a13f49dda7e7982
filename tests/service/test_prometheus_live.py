"""A real Prometheus (Debian's `prometheus`) scrapes a live srm-service and evaluates deploy/prometheus's
rules: the series arrive with their labels, and the FAILED replication's alert fires.

The scenario's Redis holds east->west (lag 12.5 s, group billing 9.5 s) and north->west FAILED
(tests/service/conftest.py). The rules are the deployed ones with `for:` set to 0 s and the scrape and
evaluation every second, so the alert fires within seconds instead of minutes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from stack.kafka_cluster import free_port, wait_for_port
from stack.prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "srm-alerts.yml"
DEADLINE_S = 90.0


def started(args: list[str], log: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            **kwargs)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def api(port: int, path: str, **query: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)["data"]


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as answer:
            return answer.status == 200
    except OSError:  # 503 while its storage opens
        return False


def eventually(probe, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} within {DEADLINE_S:.0f} s"
        time.sleep(1)


@pytest.mark.e2e
def test_prometheus_scrapes_the_service_and_fires_the_failed_replication_alert(scenario, tmp_path):
    service_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "srm.properties"
    config.write_text(f"""clusters = {scenario.west}
{scenario.west}.bootstrap.servers = 127.0.0.1:{free_port()}
service.target.clusters = {scenario.west}
redis.url = {scenario.redis_url}
service.port = {service_port}
service.workers = 1
""")
    (tmp_path / "srm-alerts.yml").write_text(re.sub(r"\bfor: \w+", "for: 0s", RULES.read_text()))
    (tmp_path / "prometheus.yml").write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [srm-alerts.yml]
scrape_configs:
  - job_name: srm-service
    static_configs:
      - targets: ["127.0.0.1:{service_port}"]
""")
    service = started([sys.executable, "-m", "service", "--config", str(config)], tmp_path / "service.log",
                      cwd=ROOT)
    prometheus = None
    try:
        wait_for_port(service_port, 60, service)
        prometheus = started([require("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                              f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                             tmp_path / "prometheus.log", cwd=tmp_path)
        wait_for_port(prometheus_port, 60, prometheus)
        eventually(lambda: ready(prometheus_port), "Prometheus ready")

        def series(query: str) -> list[dict]:
            return api(prometheus_port, "query", query=query)["result"]

        east = {"source": scenario.east, "target": scenario.west}
        lag = eventually(lambda: series(f'srm_replication_lag_seconds{{source="{scenario.east}"}}'),
                         "srm_replication_lag_seconds scraped")
        assert {k: lag[0]["metric"][k] for k in east} == east and float(lag[0]["value"][1]) == 12.5
        group = series(f'srm_group_lag_seconds{{source="{scenario.east}",group="billing"}}')
        assert [float(g["value"][1]) for g in group] == [9.5]
        assert [float(v["value"][1]) for v in series(
            f'srm_raw_records_invalid_total{{source="{scenario.east}"}}')] == [3.0]
        assert series('up{job="srm-service"}')[0]["value"][1] == "1"

        def failed_alerts() -> list[dict]:
            # The session's Redis may hold other tests' replications: this scenario's only.
            return [a for a in api(prometheus_port, "alerts")["alerts"]
                    if a["labels"]["alertname"] == "SrmReplicationFailed" and a["state"] == "firing"
                    and a["labels"]["target"] == scenario.west]

        (alert,) = eventually(failed_alerts, "SrmReplicationFailed firing")
        assert alert["labels"]["source"] == scenario.north
        assert alert["labels"]["severity"] == "critical"
        assert alert["annotations"]["summary"] == f"Replication {scenario.north}->{scenario.west} is FAILED"
    finally:
        if prometheus is not None:
            stop(prometheus)
        stop(service)
