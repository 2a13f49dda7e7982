"""The parsing rules for records and answers from outside, and the legal-name checks (pure logic)."""

from __future__ import annotations

import json
import math

import pytest

from contract import kafka_names
from contract.untrusted import Rejected, finite, long, parse_json, shown


def test_deep_nesting_is_rejected_where_json_raises_recursion_error() -> None:
    poison = b"[" * 3000
    with pytest.raises(RecursionError):
        json.loads(poison)
    with pytest.raises(Rejected, match="value is not JSON"):
        parse_json(poison, "value")


@pytest.mark.parametrize(
    "raw", [b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"1e400", b"\xff", None, b'"\\ud800"'])
def test_json_outside_the_standard_is_rejected(raw: bytes | None) -> None:
    with pytest.raises(Rejected):
        parse_json(raw, "value")


def test_numbers_must_be_finite_and_in_range() -> None:
    assert finite(3, "avg") == 3.0
    for bad in (math.nan, math.inf, -math.inf, True, "1", None, 10**400):
        with pytest.raises(Rejected, match="avg"):
            finite(bad, "avg")
    with pytest.raises(Rejected, match="interval"):
        finite(7200, "interval", 0.1, 3600)
    assert long(2**63 - 1, "offset") == 2**63 - 1
    for bad in (2**63, 10**30, 1.0, False):
        with pytest.raises(Rejected, match="offset"):
            long(bad, "offset")


def test_shown_escapes_control_characters_and_cuts() -> None:
    assert shown("a\nFORGED\x1b[31m") == "a\\nFORGED\\x1b[31m"
    assert "\n" not in shown(b"x\r\ny")
    assert shown("x" * 500, 10) == "x" * 10 + "…"


@pytest.mark.parametrize("name", ["*", ".", "..", "", "a" * 250, "a/b", "../x", "t\n", 5])
def test_illegal_topic_names(name: object) -> None:
    with pytest.raises(Rejected, match="not a legal Kafka topic name"):
        kafka_names.check_topic(name)


def test_legal_names() -> None:
    assert kafka_names.check_topic("a" * 249) == "a" * 249
    assert kafka_names.check_group("console-consumer-1") == "console-consumer-1"
    assert kafka_names.check_alias("us-west.1") == "us-west.1"
    assert kafka_names.check_site("east+west") == "east+west"


@pytest.mark.parametrize("name", ["all", "ALL", "local", "", "-x", "a b", "x" * 129])
def test_reserved_and_illegal_sites(name: str) -> None:
    with pytest.raises(Rejected):
        kafka_names.check_site(name)


@pytest.mark.parametrize("name", ["*", "", "g" * 1025, "bad\x00group"])
def test_illegal_groups(name: str) -> None:
    with pytest.raises(Rejected):
        kafka_names.check_group(name)
