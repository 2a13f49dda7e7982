"""The advertiser child of the real ``srm-service`` gunicorn master is started again when it dies.

Before: the master started it once; after it died (OOM killer, a crash) the site stopped advertising
for the rest of the deployment's life, and gateways reported it expired while it served.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from tests.service.test_prometheus_live import started, stop

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def advertiser_pids(parent: int) -> list[int]:
    """The advertiser processes whose parent is ``parent`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and b"service.sites.advertiser" in command:
            found.append(int(entry.name))
    return found


def eventually(probe, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s"
        time.sleep(0.2)
    return found


def scraped(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode().splitlines()


def test_a_dead_advertiser_is_started_again_and_counted(tmp_path, kafka_clusters):
    port = free_port()
    config = srm_properties.write(tmp_path / "srm.properties", kafka_clusters, [], "redis://127.0.0.1:1/0", {
        "service.target.clusters": "west", "service.site": f"restart-{uuid.uuid4().hex[:6]}",
        "service.host": "127.0.0.1", "service.port": port, "service.workers": 1})
    service = started([sys.executable, "-m", "service", "--config", str(config)], tmp_path / "service.log",
                      cwd=ROOT)
    try:
        wait_for_port(port, 60, service)
        (first,) = eventually(lambda: advertiser_pids(service.pid), "the advertiser process")
        os.kill(first, signal.SIGKILL)
        (second,) = eventually(lambda: [p for p in advertiser_pids(service.pid) if p != first],
                               "a new advertiser process")
        # The master's thread counts the restart in memory the worker reads: waited for, not read once.
        eventually(lambda: "srm_service_advertiser_restarts_total 1.0" in scraped(port),
                   "the restart counted in /metrics")
        assert second != first
    finally:
        stop(service)
