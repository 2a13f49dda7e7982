"""Sites that answer garbage, and an open gateway: the fan-out stays whole, no credential leaves.

Before: a remote answer of deeply nested JSON raised RecursionError out of the call, an integer over
64 bits made orjson fail the merged answer, and a Grafana frame ``rows: [1]`` raised TypeError: each of
them turned the whole ``site=all`` answer into a 500. An open gateway (no ``service.auth.*``) sent its
stored per-site token with any caller's request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.config import parse_config
from service.app import create_app
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY
from service.sites.gateway import Gateway, SiteAccess, fan_out, parse_allowed_hosts
from tests.service.hostile_servers import (
    GARBAGE,
    SLOW_KINDS,
    GarbageHandler,
    HostileServer,
    Listed,
    SlowHandler,
    far_site_serving,
    remote,
    serving,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def garbage_sites() -> Iterator[dict[str, HostileServer]]:
    with serving(GarbageHandler, GARBAGE) as servers:
        yield servers


@pytest.fixture
def far_site(redis_url: str) -> Iterator[int]:
    with far_site_serving(redis_url) as port:
        yield port


def test_garbage_answers_become_those_sites_errors_and_the_rest_still_answers(
        redis_url, far_site, garbage_sites):
    app = create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "hq"})
    gateway = Gateway("hq", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(5.0))
    app.extensions[GATEWAY_KEY] = gateway
    app.extensions[REGISTRY_KEY] = Listed([remote("far", far_site)] + [
        remote(site, server.server_address[1]) for site, server in garbage_sites.items()])
    client = app.test_client()
    try:
        answer = client.get("/v2/replications", query_string={"site": "all"})
        assert answer.status_code == 200, answer.get_data(as_text=True)[:500]
        statuses = {s["site"]: s["status"] for s in answer.get_json()["sites"]}
        assert statuses["far"] == "ok" and statuses["hq"] == "ok"
        assert statuses["nested"] == "error: answer is not JSON"
        assert statuses["deep"] == "error: answer nested deeper than 64 levels"
        assert statuses["bigint"] == "ok"  # read as a float: the merged answer still serialises

        query = {"range": {"from": "2023-11-14T22:00:00Z", "to": "2023-11-14T23:00:00Z"},
                 "targets": [{"target": "replications", "type": "table", "payload": {"site": "all"}}]}
        grafana = client.post("/grafana/query", json=query)
        assert grafana.status_code == 200, grafana.get_data(as_text=True)[:500]
        frames = grafana.get_json()
        assert all(isinstance(row, list) for frame in frames for row in frame.get("rows", []))

        # An operator sees the bad answers on /metrics, counted per site and outcome.
        text = client.get("/metrics").get_data(as_text=True)
        assert _sample(text, "srm_gateway_site_answers_total", site="nested", outcome="malformed") == 2.0
        assert _sample(text, "srm_gateway_site_answers_total", site="deep", outcome="malformed") == 2.0
        assert _sample(text, "srm_gateway_site_answers_total", site="far", outcome="ok") == 1.0
        assert _sample(text, "srm_gateway_site_answers_total", site="far", outcome="error") == 1.0  # HTTP 400
        assert _sample(text, "srm_gateway_site_frames_dropped_total", site="badframe") == 2.0
        assert _sample(text, "srm_gateway_site_answers_total", site="hq", outcome="ok") is None  # local
    finally:
        gateway.close()


def _sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _config(port: int, extra: str) -> str:
    return ("clusters = a\na.bootstrap.servers = a:1\nservice.site = hq\n"
            f"service.remote.east.url = http://127.0.0.1:{port}\n"
            "service.remote.east.token = s3cret\n" + extra)


@pytest.mark.parametrize("extra, sent", [
    ("", None),  # an open gateway: anyone reaching it would use east's token
    ("service.auth.token = gw\n", "Bearer s3cret"),
    ("service.remote.credentials.without.auth = true\n", "Bearer s3cret"),
])
def test_an_open_gateway_sends_no_stored_credentials(garbage_sites, extra, sent):
    site = garbage_sites["bigint"]
    gateway = Gateway.from_config(parse_config(_config(site.server_address[1], extra)))
    try:
        (answer,) = fan_out(gateway, [remote("east", site.server_address[1])], "/v2/services").sites
    finally:
        gateway.close()
    assert answer.status == "ok"
    assert site.requests == [("/v2/services", sent)]


@pytest.fixture
def hostile_sites() -> Iterator[dict[str, HostileServer]]:
    with serving(SlowHandler, dict.fromkeys(SLOW_KINDS)) as servers:
        yield servers


def test_tarpits_end_at_their_deadline_and_cannot_starve_the_healthy_sites(far_site, hostile_sites):
    services = [remote("far", far_site)] + [remote(kind, server.server_address[1])
                                            for kind, server in hostile_sites.items()]
    timeouts = dict.fromkeys(SLOW_KINDS, 1.0) | {"far": 5.0}
    gateway = Gateway("hq", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(timeouts[site]))
    try:
        began = time.monotonic()
        answer = fan_out(gateway, services, "/v2/replications", [("site", "local")])
        took = time.monotonic() - began
        statuses = {a.site: a.status for a in answer.sites}
        assert took < 1.5, f"one fan-out took {took:.1f} s against 1 s deadlines: {statuses}"
        assert statuses == {"far": "ok", "body-drip": "timeout", "header-drip": "timeout",
                            "huge-declared": "error: answer larger than 1048576 bytes",
                            "endless": "error: answer larger than 1048576 bytes",
                            "gzip": "error: compressed answer (gzip) refused"}
        tarpit = hostile_sites["body-drip"]
        while not tarpit.closed_at and time.monotonic() - began < 1.5:
            time.sleep(0.05)
        assert tarpit.closed_at, "the tarpit's connection was still open 1.5 s after the call began"

        # 40 callers at once: a tarpit ties up only its own 4 threads (the calls waiting for them end at
        # their deadline) and after 3 timeouts in a row it is not called at all.
        answers: list[tuple[float, dict[str, str]]] = []

        def one_caller() -> None:
            started = time.monotonic()
            sites = fan_out(gateway, services, "/v2/replications", [("site", "local")]).sites
            answers.append((time.monotonic() - started, {a.site: a.status for a in sites}))

        callers = [threading.Thread(target=one_caller) for _ in range(40)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        assert len(answers) == 40
        assert all(statuses["far"] == "ok" for _, statuses in answers), answers
        assert max(took for took, _ in answers) < 5.0 + 0.5
        (_, after) = answers[0], fan_out(gateway, services, "/v2/replications").sites
        breaker = {a.site: a.status for a in after}
        for kind in ("body-drip", "header-drip"):
            assert breaker[kind].startswith("error: not called: "), breaker
    finally:
        gateway.close()


# Run in a fresh process, so its peak RSS is this fan-out's alone: the gateway of a worker with the
# default settings asks a site that answers a JSON list of zeros (ports in argv: a small, a big answer).
_FAN_OUT_IN_A_WORKER = """
import json, resource, sys
from contract.config import parse_config
from service.app import create_app
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY
from service.sites.gateway import Gateway
from tests.service.hostile_servers import Listed, remote

sites = dict(zip(("small", "huge", "many"), map(int, sys.argv[1:4])))
app = create_app({"REDIS_URL": "redis://127.0.0.1:1/0", "SERVICE_SITE": "hq"})
app.extensions[GATEWAY_KEY] = gateway = Gateway.from_config(parse_config(
    "clusters = a\\na.bootstrap.servers = a:1\\nservice.site = hq\\n"
    "service.remote.allowed.hosts = 127.0.0.1\\n"))
app.extensions[REGISTRY_KEY] = Listed([remote(site, port) for site, port in sites.items()])
client = app.test_client()
statuses = {}
for site in sites:  # the small answer first: the process is warm before the big ones
    if site == "huge":
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    answer = client.get("/v2/services", query_string={"site": site})
    statuses[site] = answer.get_json()["sites"][0]["status"]
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
gateway.close()
print(json.dumps({"statuses": statuses, "grown_mib": grown_kib / 1024}))
"""


def _zeros(count: int) -> bytes:
    return b"[" + b"0," * (count - 1) + b"0]"


def test_a_huge_answer_is_that_sites_error_and_the_workers_memory_stays_bounded():
    """Before: an 8 MiB answer ``[0,0,...]`` (within the default 8 MiB body cap) cost a worker about
    1 GB of peak RSS, 5 s of CPU and a 112 MiB reply: every zero became an object of ``items``."""
    huge = _zeros(4 * 2**20 - 1)  # 8 MiB less one byte
    many = _zeros(2**19 - 1)  # 1 MiB less one byte: under the body cap, over the values cap
    with serving(GarbageHandler, {"small": _zeros(10), "huge": huge, "many": many}) as servers:
        ports = [str(servers[site].server_address[1]) for site in ("small", "huge", "many")]
        child = subprocess.run([sys.executable, "-c", _FAN_OUT_IN_A_WORKER, *ports], capture_output=True,
                               text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert child.returncode == 0, child.stderr[-3000:]
    measured = json.loads(child.stdout.splitlines()[-1])
    assert measured["statuses"] == {"small": "ok", "huge": "error: answer larger than 1048576 bytes",
                                    "many": "error: answer has more than 200000 values"}
    assert measured["grown_mib"] < 100, measured
