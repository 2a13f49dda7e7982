"""Stored window members decoded: checked one by one, or column by column on the API's hot path."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import orjson

from contract import redis_layout as layout
from service.metric_summary import WindowColumns

LOG = logging.getLogger(__name__)

Windows = list[layout.WindowAggregate]


def _decode_windows(members: Iterable[bytes | str]) -> Windows:
    windows = []
    for member in members:
        try:
            windows.append(layout.decode_member(member))
        except ValueError as exc:
            # One corrupt member must not hide the rest of the series; it is logged, not served.
            LOG.warning("skipping %s", exc)
    return windows


# <start>:<count>:<sum>:<min>:<max>:<last>[:<last ts>], as layout.encode_member writes them; the summary
# needs the first six.
MEMBER_FIELDS = frozenset({6, 7})
# The bytes a member made only of JSON numbers and ':' can hold; any other (a letter of nan or inf, a space,
# a bracket, a quote) sends the reply through the checked decoder.
NUMBER_BYTES = b"0123456789.eE+-:"


def window_columns(members: Sequence[bytes | str]) -> WindowColumns:
    """A reply's members decoded column by column: the API's hot path (120 members per answer).

    A member is numbers joined by ':', so the whole reply parses as one JSON array of rows in orjson's C
    parser (which rounds as float() does), instead of 720 float() calls and a dataclass per member. Anything
    that is not six or seven plain numbers per member with an integer start (and last ts) goes through the
    checked decoder, which logs and skips only the bad members.
    """
    if not members:
        return WindowColumns([], [], [], [], [], [])
    raw = [m.encode() for m in members] if isinstance(members[0], str) else members
    try:
        rows = _member_rows(raw)  # type: ignore[arg-type]
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return WindowColumns.of(_decode_windows(members))
    if len(set(map(len, rows))) == 1:
        columns = list(zip(*rows, strict=True))
    else:  # members written before last ts was stored, next to newer ones
        columns = list(zip(*(row[:6] for row in rows), strict=True))
        columns.append([row[6] for row in rows if len(row) == 7])
    starts, measures, last_ts = columns[0], columns[1:6], columns[6:]
    if set(map(type, starts)) != {int} or any(set(map(type, ts)) != {int} for ts in last_ts):
        return WindowColumns.of(_decode_windows(members))
    return WindowColumns(list(starts), *(list(map(float, column)) for column in measures))


def _member_rows(members: Sequence[bytes]) -> list[list[int | float]]:
    """One row of numbers per member; ValueError unless every member is six or seven JSON numbers."""
    if b":".join(members).translate(None, NUMBER_BYTES):
        raise ValueError("a member with more than numbers")
    rows = orjson.loads(b"[[%b]]" % b"],[".join(members).replace(b":", b","))
    if len(rows) != len(members) or not set(map(len, rows)) <= MEMBER_FIELDS:
        raise ValueError("a member that is not six or seven numbers")
    return rows
