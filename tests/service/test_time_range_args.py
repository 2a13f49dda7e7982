"""The time-range query arguments, parsed as the views parse them (webargs through service.extensions'
parser): defaults, accepted forms, and 400s naming the parameter."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marshmallow import EXCLUDE, ValidationError
from werkzeug.datastructures import MultiDict
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
    return vars(error.value)["data"]["messages"]["query"]  # flask-smorest's abort sets `data` on it


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


# What a caller may put in each parameter: the plain forms, ISO date-times, padding, signs, other digits,
# and garbage; each parameter may also be absent.
VALUES = st.one_of(
    st.integers(-10**19, 10**19).map(str),
    st.sampled_from(["", " ", "1m", "10s", "1h", "auto", "AUTO", " 1m", "1m ", "5m", "²", "１２",
                     "2023-11-14T22:13:20Z", "2023-11-14T22:13:20", "+5", "-0", "0x10", " 17 ", "\t17\n"]),
    st.text(alphabet="0123456789-+ :TZ.", max_size=24),
)
QUERIES = st.dictionaries(st.sampled_from(["from", "to", "granularity", "site", "other"]), VALUES)


@settings(max_examples=400, deadline=None)
@given(query=QUERIES)
def test_the_plain_load_answers_as_the_schema_or_leaves_it_to_the_schema(query):
    """The hot path (common.plain_time_range) either loads exactly what TimeRangeArgs loads, or declines
    (None): it never accepts what the schema refuses, nor answers other values."""
    with patch.object(common.time, "time", lambda: T0 / 1000):
        plain = common.plain_time_range(MultiDict(query))
        try:
            loaded = TimeRangeArgs().load(query, unknown=EXCLUDE)
        except ValidationError:
            assert plain is None
            return
    assert plain is None or plain == loaded


def test_the_common_query_takes_the_plain_load(app, monkeypatch):
    """The metric endpoints' usual query never reaches marshmallow (the API's hot path)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("marshmallow loaded a plain query")

    monkeypatch.setattr(TimeRangeArgs, "load", refuse)
    assert parse(app, f"from={T0}&to={T0 + 500}&granularity=1m&site=local") == {
        "from_ms": T0, "to_ms": T0 + 500, "granularity": "1m"}


def test_a_repeated_parameter_is_read_by_its_first_value_on_both_paths(app):
    assert parse(app, f"from={T0}&from=x&to={T0 + 1}")["from_ms"] == T0
    assert list(bad_parameters(app, f"from=x&from={T0}")) == ["from"]
