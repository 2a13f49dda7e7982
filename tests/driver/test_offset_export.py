"""Reset plans for kafka-consumer-groups --reset-offsets --from-file."""

from __future__ import annotations

import random

import pytest

from driver.offset_export import export_csv
from tests.driver.reset_plan_reader import ResetPlanError, parse_csv


def test_export_is_headerless_topic_partition_offset_lines() -> None:
    text = export_csv({("orders", 1): 977, ("orders", 0): 1042})

    assert text == "orders,0,1042\norders,1,977\n"


def test_export_sorts_by_topic_then_partition_number() -> None:
    offsets = {("b", 0): 1, ("a", 10): 2, ("a", 2): 3, ("A.x", 0): 4}

    assert export_csv(offsets).splitlines() == ["A.x,0,4", "a,2,3", "a,10,2", "b,0,1"]


def test_export_of_nothing_is_empty() -> None:
    assert export_csv({}) == ""


@pytest.mark.parametrize(
    ("key", "offset", "message"),
    [
        (("bad,topic", 0), 1, "invalid topic"),
        (("", 0), 1, "invalid topic"),
        ((".", 0), 1, "invalid topic"),
        (("x" * 250, 0), 1, "invalid topic"),
        (("t", -1), 1, "partition"),
        (("t", 2**31), 1, "partition"),
        (("t", 0), -1, "offset"),
        (("t", 0), 2**63, "offset"),
    ],
)
def test_export_rejects_what_the_tool_cannot_read(key: tuple[str, int], offset: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        export_csv({key: offset})


def test_round_trip_of_random_plans() -> None:
    rng = random.Random(3)
    alphabet = "abcXYZ019._-"
    for _ in range(200):
        offsets = {
            ("".join(rng.choices(alphabet, k=rng.randrange(2, 12))), rng.randrange(0, 64)): rng.randrange(
                0, 2**63
            )
            for _ in range(rng.randrange(1, 20))
        }
        offsets = {key: value for key, value in offsets.items() if key[0] not in (".", "..")}
        text = export_csv(offsets)

        assert parse_csv(text) == offsets
        assert export_csv(parse_csv(text)) == text


def test_parse_accepts_missing_final_newline_and_crlf() -> None:
    assert parse_csv("t,0,5") == {("t", 0): 5}
    assert parse_csv("t,0,5\r\nt,1,6\r\n") == {("t", 0): 5, ("t", 1): 6}
    assert parse_csv("") == {}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("t,0,5\nt,1\n", 2, "expected 'topic,partition,offset'"),
        ("g,t,0,5\n", 1, "expected 'topic,partition,offset'"),
        ("t,0,5\n\nt,1,6\n", 2, "expected"),
        ("t,zero,5\n", 1, "partition must be a non-negative integer"),
        ("t,0,-5\n", 1, "offset must be a non-negative integer"),
        ("t,0, 5\n", 1, "offset must be"),
        ("t,0,1_000\n", 1, "offset must be"),
        ("t,0,5\nt!,0,5\n", 2, "invalid topic"),
        ("t,0,5\nu,0,1\nt,0,6\n", 3, "t-0 already set on line 1"),
        ("topic,partition,offset\n", 1, "partition must be"),
    ],
)
def test_parse_errors_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ResetPlanError, match=message) as caught:
        parse_csv(text)

    assert caught.value.line_number == line
    assert str(caught.value).startswith(f"line {line}: ")
