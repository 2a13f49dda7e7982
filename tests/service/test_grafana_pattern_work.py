"""What one Grafana request may spend on value lists and regular expressions.

Before: a payload value list was merged in quadratic time before any budget (a 190 KB body cost
4.1 s of CPU, 1 MiB minutes), and regex filters ran once per target x metric x subject x filter,
outside the point budget (a 225-byte query over 1,000 topics: 3.5 s).
"""

from __future__ import annotations

import pytest

from service import point_budget
from service.app import create_app
from service.grafana.filters import filters_of, payload_filters, select
from service.grafana.queries import QueryError, Subject
from service.grafana.variable_values import MAX_VALUES, RefusedValue, selector_of

TOPICS = [Subject("east", "west", f"east.t{i}", f"t{i}") for i in range(1_000)]


APP = create_app({"REDIS_URL": "redis://127.0.0.1:1/0"})


def in_a_request(limit: int, work):
    """``work()`` in one request with a point budget of ``limit``; (result, points spent)."""
    with APP.test_request_context("/grafana/query", method="POST"):
        point_budget.start_request(limit)
        result = work()
        return result, point_budget.current(limit).spent


def test_value_lists_are_capped():
    names = [f"t{i}" for i in range(MAX_VALUES)]
    assert len(selector_of(names, "payload.topic").literals) == MAX_VALUES
    with pytest.raises(RefusedValue, match="1001 values, over the limit of 1000"):
        selector_of([*names, "one-more"], "payload.topic")
    with pytest.raises(QueryError, match="over the limit of 1000"):
        payload_filters({"topic": [*names, "one-more"]})
    with pytest.raises(QueryError, match="over the limit of 1000"):
        filters_of([{"key": "topic", "operator": "=|", "values": [*names, "one-more"]}])
    with pytest.raises(RefusedValue, match="1001 names, over the limit of 1000"):
        selector_of("(" + "|".join([*names, "one-more"]) + ")", "payload.topic")


def test_regex_matches_are_charged_against_the_request_budget_once_per_name():
    def twice() -> list[Subject]:
        filters, _ = filters_of([{"key": "topic", "operator": "=~", "value": "t.*9"}])
        first = select(TOPICS, filters)
        spent = point_budget.current(0).spent
        assert select(TOPICS, filters) == first
        assert point_budget.current(0).spent == spent  # the second pass is answered from the memo
        return first

    chosen, spent = in_a_request(10_000, twice)
    assert len(chosen) == 100
    assert 1_000 < spent <= 2_001  # 1,000 topics, each under its upstream and maybe its remote name
    with pytest.raises(point_budget.OverBudget, match="service.max.points.per.request"):
        in_a_request(1_500, twice)


def test_patterns_per_request_and_their_size_are_capped():
    huge = [{"key": "topic", "operator": "=~", "value": "(.{1,100}){1,5}x"}]  # DFA out of memory: slow
    with pytest.raises(QueryError, match="program of size"):
        in_a_request(10_000, lambda: filters_of(huge))
    many = [{"key": "topic", "operator": "=~", "value": f"t{i}.*"} for i in range(33)]
    with pytest.raises(QueryError, match="more than 32 distinct patterns"):
        in_a_request(10_000, lambda: filters_of(many))
    assert len(in_a_request(10_000, lambda: filters_of(many[:32]))[0][0]) == 32
