"""Decoding values as the simpod plugin formats them (service/grafana/variable_values.py), filters'
operators and notices (service/grafana/filters.py), and the site selector: pure rules."""

from __future__ import annotations

import pytest

from clients import linear_regex
from service.grafana.filters import filters_of, ordered, payload_filters, select
from service.grafana.queries import QueryError, Subject
from service.grafana.variable_values import NestedObject, RefusedValue, selector_of
from service.sites.gateway import UnknownSite
from service.sites.grafana_site_answers import by_site, target_sites
from tests.service.grafana_plugin import escape_regex, escape_string_for_regex, format_regex


def names(raw: object) -> frozenset[str] | None:
    selector = selector_of(raw, "payload.topic")
    if selector is None:
        return None
    assert not selector.patterns, f"{raw!r} was read as a pattern"
    return selector.literals


@pytest.mark.parametrize("name", ["orders", "my.topic", "audit-log", "a_b", "10", "my group", "x/y", "t(1)",
                                  "a|b", "$price", "C++", "[x]", "é.ü"])
@pytest.mark.parametrize("escape", [escape_regex, escape_string_for_regex])
def test_every_name_comes_back_from_both_escapers(name, escape):
    assert names(format_regex(name, escape)) == {name}
    assert names(format_regex([name], escape)) == {name}  # a one-item multi-value: the item alone


@pytest.mark.parametrize("escape", [escape_regex, escape_string_for_regex])
def test_alternations_come_back_as_sets(escape):
    picked = ["orders", "my.topic", "audit-log", "a|b", "t(1)"]
    assert names(format_regex(picked, escape)) == set(picked)
    assert names(["(orders|payments)", r"my\.topic"]) == {"orders", "payments", "my.topic"}


@pytest.mark.parametrize("raw", [None, "", "$__all", "*", "All", [], ["orders", "$__all"]])
def test_all_values_select_everything(raw):
    assert selector_of(raw, "payload.topic") is None


def test_scalars_are_their_text_as_the_plugin_writes_them():
    assert names(7) == {"7"} and names(True) == {"true"} and names(1.5) == {"1.5"}
    assert names("()") == {""}  # the empty alternation: no real name


@pytest.mark.parametrize("raw, matching, other", [
    (".*", "anything", None),
    ("ord.*", "orders", "payments"),
    (r"\d+", "10", "x1"),
    ("pay.*|ord.*", "orders", "audit-log"),
    ("(ord|pay).*", "payments", "audit-log"),
    ("[a-c]+", "abc", "abd"),
])
def test_anything_else_is_a_full_match_pattern_on_re2(raw, matching, other):
    selector = selector_of(raw, "payload.topic")
    assert selector is not None and [p.text for p in selector.patterns] == [raw]
    assert selector.matches(matching)
    assert other is None or not selector.matches(other)


def test_refusals_name_the_field():
    with pytest.raises(RefusedValue, match=r"^payload\.topic: pattern '\(a\)\\\\1' refused: .*RE2"):
        selector_of(r"(a)\1", "payload.topic")
    with pytest.raises(RefusedValue, match=r"^payload\.topic: pattern '\(x{79}…' is 601 characters long"):
        selector_of("(" + "x" * 600, "payload.topic")
    with pytest.raises(NestedObject, match=r"^payload\.topic\[1\]: a name, a list of names or a pattern"):
        selector_of(["a", {"b": 1}], "payload.topic")
    with pytest.raises(NestedObject):
        selector_of("[object Object]", "payload.topic")


def test_without_re2_names_and_sets_still_work_and_patterns_are_refused(monkeypatch):
    monkeypatch.setattr(linear_regex, "_re2", None)
    linear_regex._compile.cache_clear()
    try:
        assert names(r"(orders|my\.topic)") == {"orders", "my.topic"}
        with pytest.raises(RefusedValue, match="package google-re2"):
            selector_of("ord.*", "payload.topic")
    finally:
        linear_regex._compile.cache_clear()


ORDERS = Subject("east", "west", "east.orders", "orders")
NINE = Subject("north", "west", "north.9", "9")
TEN = Subject("north", "west", "north.10", "10")


def test_payload_filters_decode_values_and_report_nested_objects():
    notices: list[str] = []
    filters = payload_filters({"topic": "(orders|9)", "source": {"x": 1}}, "targets[0].payload", notices)
    assert select([ORDERS, NINE, TEN], filters) == [ORDERS, NINE]
    assert notices == ["targets[0].payload.source: a name, a list of names or a pattern was expected, "
                       "not an object; ignored"]
    with pytest.raises(QueryError, match=r"^targets\[0\]\.payload\.topic: pattern"):
        payload_filters({"topic": "a(?=b)"}, "targets[0].payload")


@pytest.mark.parametrize("a, op, b, expected", [
    ("10", ">", "9", True), ("10", "<", "9", False),  # numbers
    ("1e3", ">", "999", True), ("-1", "<", "0", True),
    ("orders", "<", "p", True), ("10", "<", "9x", True),  # text when either side is not a number
    ("nan", ">", "1", True), ("1_0", ">", "9", False),  # float() would read these; we do not
    ("5", "<=", "5", True), ("5", ">=", "6", False),
])
def test_ordering_is_numeric_when_both_sides_are_numbers(a, op, b, expected):
    assert ordered(a, op, b) is expected


def test_ordering_on_topic_compares_the_upstream_name():
    (f,), _ = filters_of([{"key": "topic", "operator": "<", "value": "n"}])
    # The remote name "east.orders" is below "n"; the upstream "orders" is not.
    assert select([ORDERS], [f]) == []


def test_filters_skip_what_they_cannot_apply_with_a_notice():
    raw = [
        "junk",
        {"key": "topic", "operator": "<>", "value": "x"},
        {"key": "topic", "operator": 5, "value": "x"},
        {"key": "topic", "operator": "=", "value": {"a": 1}},
        {"key": "topic", "operator": "<", "values": ["a", "b"], "value": "a"},
        {"key": "City", "operator": "<>", "value": "Berlin"},  # another datasource's key: silent
        {"key": "topic", "operator": "=|", "values": ["orders", 9]},
    ]
    filters, notices = filters_of(raw)
    assert notices == [
        "filters[0]: not a filter object, ignored",
        "filter topic <> x: operator '<>' not supported here, ignored",
        "filters[2].operator: not a string, filter on topic ignored",
        "filters[3]: the value of the filter on topic is not text, ignored",
    ]
    assert [(f.key, f.operator) for f in filters] == [("topic", "<"), ("topic", "=|")]
    assert select([ORDERS, NINE, TEN], filters[1:]) == [ORDERS, NINE]


def test_site_selector_reads_the_plugin_formatting():
    assert target_sites({"payload": {"site": r"east\-1"}}) == ["east-1"]
    assert target_sites({"payload": {"site": "(east|west)"}}) == ["east", "west"]
    assert target_sites({"payload": {"site": "$__all"}}) == ["local"]
    assert target_sites({"payload": {}}) == ["local"]
    groups = by_site([{"refId": "A", "target": "x", "payload": {"site": "(east|west)", "topic": "t"}}])
    assert groups == {"east": [{"refId": "A", "target": "x", "payload": {"topic": "t"}}],
                      "west": [{"refId": "A", "target": "x", "payload": {"topic": "t"}}]}
    with pytest.raises(UnknownSite, match=r"^pattern 'e.\*': name a site, a list of sites, or all"):
        target_sites({"payload": {"site": "e.*"}})
