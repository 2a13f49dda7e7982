"""Reads a reset plan back as `kafka-consumer-groups --reset-offsets --from-file` does (test helper):
the plan is split on "\\n" with Java semantics and every line parsed as `topic,partition,offset`."""

from __future__ import annotations

import re
from typing import Final

from driver import offset_export
from driver.offset_export import TopicPartition

# Digits only: int() would also accept "+5", " 5" and "1_000", which the tool does not.
_DIGITS: Final = re.compile(r"[0-9]+")


class ResetPlanError(ValueError):
    """A reset plan line that the tool would reject or misread."""

    def __init__(self, line_number: int, message: str) -> None:
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number


def parse_csv(text: str) -> dict[TopicPartition, int]:
    """Read a one-group reset plan; raises ResetPlanError naming the bad line."""
    offsets: dict[TopicPartition, int] = {}
    first_seen: dict[TopicPartition, int] = {}
    for line_number, line in enumerate(_plan_lines(text), start=1):
        topic, partition, offset = _parse_line(line_number, line)
        key = (topic, partition)
        if key in first_seen:
            raise ResetPlanError(
                line_number,
                f"{topic}-{partition} already set on line {first_seen[key]}",
            )
        first_seen[key] = line_number
        offsets[key] = offset
    return offsets


def _plan_lines(text: str) -> list[str]:
    # The tool splits on "\n" with Java semantics: trailing empty lines vanish.
    lines = text.split("\n")
    while lines and lines[-1] in ("", "\r"):
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _parse_line(line_number: int, line: str) -> tuple[str, int, int]:
    fields = line.split(",")
    if len(fields) != 3:
        raise ResetPlanError(line_number, f"expected 'topic,partition,offset', got {line!r}")
    topic, partition_text, offset_text = fields
    partition = _parse_number(line_number, "partition", partition_text)
    offset = _parse_number(line_number, "offset", offset_text)
    problem = offset_export.record_problem(topic, partition, offset)
    if problem is not None:
        raise ResetPlanError(line_number, problem)
    return topic, partition, offset


def _parse_number(line_number: int, name: str, text: str) -> int:
    if _DIGITS.fullmatch(text) is None:
        raise ResetPlanError(line_number, f"{name} must be a non-negative integer, got {text!r}")
    return int(text)
