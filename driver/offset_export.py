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

Used by `srm-control offsets --export` (failover runbooks: translated group offsets
ready for the tool).
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


def export_csv(offsets: Mapping[TopicPartition, int]) -> str:
    """Reset plan for one group, sorted by topic then partition number."""
    lines = []
    for (topic, partition), offset in sorted(offsets.items()):
        _check_record(topic, partition, offset)
        lines.append(f"{topic},{partition},{offset}\n")
    LOG.debug("exported reset plan of %d partitions", len(lines))
    return "".join(lines)


def _check_record(topic: str, partition: int, offset: int) -> None:
    problem = record_problem(topic, partition, offset)
    if problem is not None:
        raise ValueError(problem)


def record_problem(topic: str, partition: int, offset: int) -> str | None:
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
