"""The datasource as simpod-json-datasource 0.6.5 uses it: requests built as src/DataSource.ts builds
them, answers read as its parsers read them (tests/service/grafana_plugin.py restates both, citing
simPod/GrafanaJsonDatasource@v0.6.5 line by line). Rollups are written by the aggregator's own sink
into a real redis-server; tests/e2e/test_grafana_as_users_run_it.py runs the same findings through the
whole pipeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from pyspark.sql import Row

from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from tests.service.grafana_plugin import (
    escape_string_for_regex,
    health_check,
    process_payload,
    query_request,
    series_values,
    to_frames,
    variable_texts,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = 3
# record_count per window of each upstream topic; the sums (x WINDOWS) tell the topics apart.
EAST_TOPICS = {"orders": 1, "payments": 2, "my.topic": 3, "myXtopic": 4, "audit-log": 5}
NORTH_TOPICS = {"9": 6, "10": 7, "a" * 30: 8}  # numbers to order; a long name for backtracking


@dataclass(frozen=True)
class Site:
    east: str
    north: str
    west: str
    first_window: int
    last_window: int

    @property
    def range_ms(self) -> tuple[int, int]:
        return self.first_window, self.last_window + 10_000


def _row(target: str, source: str, upstream: str, metric: str, start: int, value: float) -> Row:
    return Row(target=target, source=source, topic=f"{source}.{upstream}", upstream_topic=upstream, group="",
               partition=layout.WHOLE_TOPIC, metric=metric, window_start=start, count=1, sum=value,
               min=value, max=value, last=value)


@pytest.fixture(scope="module")
def site(redis_url: str) -> Site:
    uid = uuid.uuid4().hex[:6]
    last = layout.window_start(int(time.time() * 1000), "10s") - 10_000
    s = Site(f"east{uid}", f"north{uid}", f"west{uid}", last - (WINDOWS - 1) * 10_000, last)
    rows = []
    for i in range(WINDOWS):
        start = s.first_window + i * 10_000
        for source, topics in ((s.east, EAST_TOPICS), (s.north, NORTH_TOPICS)):
            for topic, value in topics.items():
                rows.append(_row(s.west, source, topic, "record_count", start, value))
                rows.append(_row(s.west, source, topic, "byte_count", start, 100 * value))
    RedisRollupSink(redis_url, f"plugin_{uid}").write(rows, batch_id=0)
    return s


@pytest.fixture(scope="module")
def client(redis_url: str):
    from service.app import create_app

    return create_app({"REDIS_URL": redis_url}).test_client()


def query(client, site: Site, targets: list[dict], variables=None, filters=(), status: int = 200):
    body = query_request(targets, variables or {}, site.range_ms, filters)
    response = client.post("/grafana/query", json=body)
    assert response.status_code == status, response.get_data(as_text=True)
    return to_frames(response.get_json()) if status == 200 else response.get_json()


def target(metric: str, payload, editor_mode: str = "code", ref_id: str = "A") -> dict:
    return {"refId": ref_id, "target": metric, "payload": payload, "editorMode": editor_mode,
            "datasource": {"type": "simpod-json-datasource", "uid": "srm-east"}}


def topics_of(frames: list[dict]) -> dict[str, float]:
    """Upstream topic -> sum of its values, from the frames' labels."""
    return {f["labels"]["topic"]: sum(v for v, _ in f["points"]) for f in frames if f.get("labels")}


def sums(names: dict[str, int]) -> dict[str, int]:
    return {name: WINDOWS * value for name, value in names.items()}


# Finding 1 ------------------------------------------------------------------------------------------


def provisioned_urls() -> list[str]:
    provisioning = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/srm.yaml").read_text())
    return [d["url"] for d in provisioning["datasources"] if d["type"] == "simpod-json-datasource"]


def test_health_check_on_the_provisioned_and_documented_urls_as_written(client):
    """"Save & test" GETs the datasource URL itself (src/DataSource.ts:94-97), forwarded unchanged by
    Grafana's proxy, which does not follow redirects: the answer must be 200 on that very path."""
    readme = (ROOT / "docs/api.md").read_text()
    documented = "http://<service>:6670/grafana"
    assert f"URL `{documented}`" in readme
    urls = provisioned_urls()
    assert urls and all(u.endswith("/grafana") for u in urls)  # written without a trailing slash
    for url in [*urls, documented]:
        response = client.get(urlparse(url).path, follow_redirects=False)
        assert health_check(response.status_code), f"{url}: {response.status_code} {response.location}"
        assert "Location" not in response.headers


def test_every_grafana_route_answers_with_and_without_a_trailing_slash(client):
    """The plugin joins `${url}/<call>` (src/DataSource.ts:74, :146, :166, :200, :210,
    src/MetricFindQuery.ts:27): no route may redirect or 404 on either spelling."""
    rules = [r for r in client.application.url_map.iter_rules() if r.endpoint.startswith("grafana.")]
    assert len(rules) == 9
    for rule in rules:
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            for path in (rule.rule.rstrip("/"), rule.rule.rstrip("/") + "/"):
                body = {"key": "topic"} if method == "POST" else None
                response = client.open(path, method=method, json=body, follow_redirects=False)
                assert response.status_code == 200, f"{method} {path}: {response.status_code}"


# Finding 2: variables as the plugin formats them ---------------------------------------------------


def test_a_multi_value_variable_arrives_as_an_alternation_and_selects_that_set(client, site):
    payload = {"source": site.east, "topic": "$topic"}
    variables = {"topic": ["orders", "payments"]}
    sent = process_payload(payload, "code", variables)  # object payload: DataSource.ts:239-252
    assert sent["topic"] == "(orders|payments)"
    assert topics_of(query(client, site, [target("record_count", payload)], variables)) == sums(
        {"orders": 1, "payments": 2})
    # The builder's option list for the next editor, narrowed by that payload (DataSource.ts:139-161).
    body = {"metric": "record_count", "name": "topic",
            "payload": process_payload({"source": "$src"}, "builder", {"src": [site.east, site.north]})}
    assert body["payload"]["source"] == f"({site.east}|{site.north})"
    response = client.post("/grafana/metric-payload-options", json=body)
    assert [o["value"] for o in response.get_json()] == sorted([*EAST_TOPICS, *NORTH_TOPICS])


def test_escaped_single_values_from_both_grafana_escapers_mean_the_literal(client, site):
    for picked in ("my.topic", "audit-log"):
        for variables in ({"topic": picked}, {"topic": [picked]}):  # one value, or a one-item list
            frames = query(client, site, [target("record_count", {"source": site.east, "topic": "$topic"})],
                           variables)
            assert topics_of(frames) == sums({picked: EAST_TOPICS[picked]})
    # The legacy templating escaper also escapes "-" (@grafana/data string.js:3-12).
    assert escape_string_for_regex("audit-log") == r"audit\-log"
    frames = query(client, site, [target("record_count", {"source": site.east, "topic": r"audit\-log"})])
    assert topics_of(frames) == sums({"audit-log": 5})
    # A name sent unformatted (code-mode JSON, option lists) is that name: its dot is no wildcard.
    frames = query(client, site, [target("record_count", '{"source": "$src", "topic": "my.topic"}')],
                   {"src": site.east})
    assert topics_of(frames) == sums({"my.topic": 3})


def test_a_multi_metric_target_answers_one_series_per_metric_told_apart_by_name(client, site):
    variables = {"metric": ["byte_count", "record_count"]}
    frames = query(client, site, [target("$metric", {"source": site.east, "topic": "(orders|payments)"})],
                   variables)
    names = [f["name"] for f in frames]
    assert len(names) == 4 and len(set(names)) == 4  # the legend shows the frame name (fieldState.js)
    totals = series_values(frames)
    for topic, value in (("orders", 1), ("payments", 2)):
        assert totals[f"byte_count {site.east}->{site.west} {topic}"] == 100 * value * WINDOWS
        assert totals[f"record_count {site.east}->{site.west} {topic}"] == value * WINDOWS
    assert {f["labels"]["metric"] for f in frames} == {"byte_count", "record_count"}
    # A custom all value reaches us unformatted (scenes CustomAllValue): a pattern over metric names.
    frames = query(client, site, [target("re.*count", {"source": site.east, "topic": "orders"})])
    assert {f["labels"]["metric"] for f in frames} == {"record_count"}
    error = query(client, site, [target("(record_count|bogus)", {})], status=400)
    assert error["message"] == "targets[0].target: unknown metric 'bogus'; see POST /grafana/metrics"


def test_a_custom_all_value_or_other_pattern_runs_on_re2_or_is_refused(client, site):
    frames = query(client, site, [target("record_count", {"source": site.east, "topic": ".*"})])
    assert topics_of(frames) == sums(EAST_TOPICS)
    frames = query(client, site, [target("record_count", {"source": site.east, "topic": "pay.*|ord.*"})])
    assert topics_of(frames) == sums({"orders": 1, "payments": 2})
    error = query(client, site, [target("record_count", {"topic": r"(o)\1"})], status=400)
    assert error["message"].startswith(r"targets[0].payload.topic: pattern '(o)\\1' refused: not a pattern "
                                       "RE2 accepts")


def test_a_chained_variable_query_with_a_regex_formatted_value(client, site):
    """Variable queries (src/variable/VariableSupport.ts:41-46): string queries in regex format,
    JSON queries in json format; the answer read by src/response_parser.ts:6-31."""
    sources = [site.east, site.north]
    for payload in ({"target": f"topics source=({site.east}|{site.north})"},
                    {"target": "topics", "source": sources}):
        response = client.post("/grafana/variable", json={"payload": payload, "range": {}})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert [t for t, _ in variable_texts(response.get_json())] == sorted([*EAST_TOPICS, *NORTH_TOPICS])
    response = client.post("/grafana/variable", json={"payload": {"target": f"topics source={site.east}"}})
    assert variable_texts(response.get_json())[0] == ("audit-log", "audit-log")


# Finding 3: every ad-hoc operator -------------------------------------------------------------------


def _on(site: Site, *extra: dict) -> list[dict]:
    return [{"key": "target", "operator": "=", "value": site.west}, *extra]


def test_less_and_greater_than_compare_numbers_as_numbers_and_names_as_text(client, site):
    record_count = [target("record_count", {})]
    frames = query(client, site, record_count, filters=_on(site, {"key": "topic", "operator": "<",
                                                                   "value": "n"}))
    assert set(topics_of(frames)) == {"audit-log", "my.topic", "myXtopic", "9", "10", "a" * 30}
    frames = query(client, site, record_count, filters=_on(site, {"key": "topic", "operator": ">",
                                                                   "value": "n"}))
    assert set(topics_of(frames)) == {"orders", "payments"}
    # "10" > "9" as numbers, though "10" < "9" as text; a name against a number compares as text.
    frames = query(client, site, record_count, filters=_on(site, {"key": "source", "operator": "=",
                                                                   "value": site.north},
                                                            {"key": "topic", "operator": ">", "value": "9"}))
    assert set(topics_of(frames)) == {"10", "a" * 30}
    # The filter bar's value list, narrowed by the other filters (DataSource.ts:207-215).
    response = client.post("/grafana/tag-values", json={"key": "topic", "filters": _on(
        site, {"key": "source", "operator": ">", "value": site.east})})
    assert response.status_code == 200
    assert [v["text"] for v in response.get_json()] == sorted(NORTH_TOPICS)


# Operators of Grafana 11.3's filter bar (@grafana/scenes 5.20.4 AdHocFiltersVariable.js:33-67),
# then ones newer versions or other clients may send.
@pytest.mark.parametrize("operator", ["=", "!=", "=|", "!=|", "=~", "!~", "<", ">", "<=", ">=", "<>", "~="])
def test_no_operator_fails_the_panel(client, site, operator):
    filters = _on(site, {"key": "topic", "operator": operator, "value": "orders", "values": ["orders"]})
    frames = query(client, site, [target("record_count", {"source": site.east})], filters=filters)
    supported = operator not in ("<>", "~=")
    assert all(f["meta"] is None for f in frames) if supported else frames
    if not supported:
        assert set(topics_of(frames)) == set(EAST_TOPICS)  # the filter is ignored, the rest applies
        notice = frames[0]["meta"]["notices"][0]
        assert notice == {"severity": "warning",
                          "text": f"filter topic {operator} orders: operator {operator!r} not supported "
                                  "here, ignored"}
        assert all(f["meta"] == frames[0]["meta"] for f in frames)


def test_an_empty_answer_still_carries_the_notice(client, site):
    filters = _on(site, {"key": "source", "operator": "=", "value": "nowhere"},
                  {"key": "topic", "operator": "<>", "value": "x"})
    frames = query(client, site, [target("record_count", {}, ref_id="B")], filters=filters)
    assert frames == [{"name": "", "refId": "B", "labels": None, "points": [],
                       "meta": {"notices": [{"severity": "warning",
                                             "text": "filter topic <> x: operator '<>' not supported here, "
                                                     "ignored"}]}}]


def test_user_patterns_never_run_on_python_re(redis_url, site):
    """``(.+)+X`` against a 30-character topic name backtracks for minutes on Python's ``re``, which
    holds the GIL meanwhile: the query runs in a child process, killed if it is not done in 20 s."""
    filters = _on(site, {"key": "topic", "operator": "=~", "value": "(.+)+X"})
    body = query_request([target("record_count", {"topic": "(.+)+Y"})], {}, site.range_ms, filters)
    ask = (
        "import json, sys\n"
        "from service.app import create_app\n"
        "client = create_app({'REDIS_URL': sys.argv[1]}).test_client()\n"
        "response = client.post('/grafana/query', json=json.loads(sys.argv[2]))\n"
        "print(response.status_code, json.dumps(response.get_json()))\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", ask, redis_url, json.dumps(body)], cwd=ROOT,
                              capture_output=True, text=True, timeout=20, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("a user pattern took more than 20 s: it ran on a backtracking engine")
    assert done.stdout.split(maxsplit=1) == ["200", "[]\n"]
    import service.grafana.filters
    import service.grafana.queries
    import service.grafana.variable_values

    for module in (service.grafana.filters, service.grafana.queries, service.grafana.variable_values):
        source = Path(module.__file__).read_text()
        assert "import re\n" not in source and "from re " not in source, module.__name__
