"""The time-range query arguments, parsed as the views parse them (webargs through service.extensions'
parser): defaults, accepted forms, and 400s naming the parameter."""

from __future__ import annotations

import pytest
from werkzeug.exceptions import HTTPException

from service.api import common
from service.api.common import DEFAULT_RANGE_MS, TimeRangeArgs
from service.app import create_app
from service.extensions import ArgumentsParser

T0 = 1_700_000_000_000


@pytest.fixture
def app():
    return create_app({"REDIS_URL": "redis://127.0.0.1:1/0"})  # never connected: parsing only


def parse(app, query: str) -> dict:
    with app.test_request_context(f"/v2/x?{query}"):
        return ArgumentsParser().parse(TimeRangeArgs(), location="query")


def bad_parameters(app, query: str) -> dict:
    with pytest.raises(HTTPException) as error:
        parse(app, query)
    assert error.value.code == 400
    return error.value.data["messages"]["query"]


def test_defaults_are_the_last_two_hours_at_auto_granularity(app, monkeypatch):
    monkeypatch.setattr(common.time, "time", lambda: T0 / 1000)
    assert parse(app, "") == {"from_ms": T0 - DEFAULT_RANGE_MS, "to_ms": T0, "granularity": "auto"}
    assert parse(app, f"to={T0}")["from_ms"] == T0 - DEFAULT_RANGE_MS
    assert parse(app, f"from={T0 - 5}")["to_ms"] == T0


def test_epoch_ms_and_iso_dates_give_the_same_range(app):
    iso = parse(app, "from=2023-11-14T22:13:20Z&to=2023-11-14T22:13:20.5%2B00:00")
    assert iso == parse(app, f"from={T0}&to={T0 + 500}") == {"from_ms": T0, "to_ms": T0 + 500,
                                                             "granularity": "auto"}
    assert parse(app, "from=2023-11-14T22:13:20&to=2023-11-14T22:13:20")["from_ms"] == T0  # no zone: UTC


@pytest.mark.parametrize("granularity", ["10s", "1m", "1h", "auto"])
def test_every_window_and_auto_are_granularities(app, granularity):
    assert parse(app, f"to={T0}&granularity={granularity}")["granularity"] == granularity


@pytest.mark.parametrize("query, field", [
    ("from=yesterday", "from"), ("to=2023-13-45", "to"), ("granularity=5m", "granularity"),
    (f"from={T0 + 10}&to={T0}", "from"), ("to=%C2%B2", "to"),
])
def test_bad_parameters_are_400_naming_the_parameter(app, query, field):
    assert list(bad_parameters(app, query)) == [field]


def test_from_after_to_says_so(app):
    assert bad_parameters(app, f"from={T0 + 1}&to={T0}") == {"from": ["`from` must not be after `to`"]}
