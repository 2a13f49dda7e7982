"""Reset plans for `kafka-consumer-groups --reset-offsets --from-file`.

Format, as the tool reads it (Jackson CSV schema `topic,partition,offset`, no
header; the plan is split on "\\n" and every line parsed as one record):

    orders,0,1042
    orders,1,977

The three-column form is only read when exactly one `--group` is given; with
several groups the tool expects `group,topic,partition,offset`. The tool itself
writes one record per line, each terminated by "\\n", and so does `export_csv`.
Kafka topic names are limited to [a-zA-Z0-9._-], so no field ever needs quoting.
An empty plan is an empty string, which the tool rejects: there is nothing to do.

Used by operators' failover tooling and the service when exporting translated
group offsets.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Final

LOG = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

MAX_TOPIC_LENGTH: Final = 249
MAX_PARTITION: Final = 2**31 - 1
MAX_OFFSET: Final = 2**63 - 1
_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")
# Digits only: int() would also accept "+5", " 5" and "1_000", which the tool does not.
_DIGITS: Final = re.compile(r"[0-9]+")


class ResetPlanError(ValueError):
    """A reset plan line that the tool would reject or misread."""

    def __init__(self, line_number: int, message: str) -> None:
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number


def export_csv(offsets: Mapping[TopicPartition, int]) -> str:
    """Reset plan for one group, sorted by topic then partition number."""
    lines = []
    for (topic, partition), offset in sorted(offsets.items()):
        _check_record(topic, partition, offset)
        lines.append(f"{topic},{partition},{offset}\n")
    LOG.debug("exported reset plan of %d partitions", len(lines))
    return "".join(lines)


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
    problem = _record_problem(topic, partition, offset)
    if problem is not None:
        raise ResetPlanError(line_number, problem)
    return topic, partition, offset


def _parse_number(line_number: int, name: str, text: str) -> int:
    if _DIGITS.fullmatch(text) is None:
        raise ResetPlanError(line_number, f"{name} must be a non-negative integer, got {text!r}")
    return int(text)


def _check_record(topic: str, partition: int, offset: int) -> None:
    problem = _record_problem(topic, partition, offset)
    if problem is not None:
        raise ValueError(problem)


def _record_problem(topic: str, partition: int, offset: int) -> str | None:
    if not _is_valid_topic(topic):
        return f"invalid topic name {topic!r}"
    if not 0 <= partition <= MAX_PARTITION:
        return f"partition {partition} out of range for {topic!r}"
    if not 0 <= offset <= MAX_OFFSET:
        return f"offset {offset} out of range for {topic}-{partition}"
    return None


def _is_valid_topic(topic: str) -> bool:
    return (
        isinstance(topic, str)
        and len(topic) <= MAX_TOPIC_LENGTH
        and topic not in (".", "..")
        and _TOPIC.fullmatch(topic) is not None
    )
