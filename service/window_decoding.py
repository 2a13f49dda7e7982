"""One metric's windows out of a subject's stored members: checked one by one, or by a fast path.

A member holds every metric of its subject's window (contract.redis_layout: `<start>;<i>:<count>:<sum>:
<min>:<max>:<last>:<last ts>;...`), so a reader picks the one segment of the metric it answers for. A
window whose member holds no segment for the metric is simply absent for that metric.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TypeGuard

import orjson

from contract import redis_layout as layout
from service.metric_summary import WindowColumns

LOG = logging.getLogger(__name__)

Windows = list[layout.WindowAggregate]

# A picked window: the member's start, then its segment's fields after the metric index.
ROW_FIELDS = 7  # start, count, sum, min, max, last, last ts
# The bytes a picked window made only of JSON numbers and ':' can hold; any other (a letter of nan or inf,
# a space, a bracket, a quote) sends the reply through the checked decoder.
NUMBER_BYTES = b"0123456789.eE+-:"


def _decode_windows(members: Iterable[bytes | str], metric: str) -> Windows:
    """The checked path: each member through the contract's decoder."""
    windows = []
    for member in members:
        try:
            window = layout.metric_window(member, metric)
        except ValueError as exc:
            # One corrupt member must not hide the rest of the series; it is logged, not served.
            LOG.warning("skipping %s", exc)
            continue
        if window is not None:
            windows.append(window)
    return windows


def window_columns(members: Sequence[bytes | str], metric: str) -> WindowColumns:
    """One metric's windows in a reply, column by column: the API's hot path (120 members per answer).

    Only the metric's segment of each member is cut out (bytes.find, no split of the other metrics), and
    the cut rows parse as one JSON array in orjson's C parser (which rounds as float() does) instead of
    a float() call per field and a dataclass per window. Anything the fast path cannot vouch for sends the
    whole reply through the checked decoder, which logs and skips only the bad members.
    """
    try:
        starts, measures, _ = _fast_columns(members, metric)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return WindowColumns.of(_decode_windows(members, metric))
    return WindowColumns(starts, *measures)


def metric_windows(members: Sequence[bytes | str], metric: str) -> Windows:
    """One metric's windows in a reply, in member order: window_columns' fast path, as WindowAggregates
    (for merging subjects), with the checked decoder as its fallback."""
    try:
        starts, measures, last_ts = _fast_columns(members, metric)
    except ValueError:
        return _decode_windows(members, metric)
    return list(map(layout.WindowAggregate, starts, *measures, last_ts))


def _fast_columns(members: Sequence[bytes | str], metric: str
                  ) -> tuple[list[int], list[list[float]], list[int]]:
    """(starts, [counts, sums, mins, maxs, lasts], last ts) of the members holding `metric`; ValueError
    where the checked decoder might answer otherwise."""
    raw = members if _of_bytes(members) else [m.encode() if isinstance(m, str) else m for m in members]
    rows = _metric_rows(raw, metric)
    if not rows:
        return [], [[], [], [], [], []], []
    starts, *measures, last_ts = map(list, zip(*rows, strict=True))
    if set(map(type, starts)) != {int} or set(map(type, last_ts)) != {int}:
        raise ValueError("a start or last ts that is not an integer")
    counts, *rest = (list(map(float, column)) for column in measures)
    if min(counts) <= 0:  # the contract's decoder refuses a window without samples
        raise ValueError("a window of no samples")
    return starts, [counts, *rest], last_ts


def _of_bytes(members: Sequence[bytes | str]) -> TypeGuard[Sequence[bytes]]:
    """A reply's members are all bytes or all str (the client's decode_responses)."""
    return not members or isinstance(members[0], bytes)


def _metric_rows(members: Sequence[bytes], metric: str) -> list[list[int | float]]:
    """[start, count, sum, min, max, last, last ts] of each member with a segment for `metric`.

    It checks what it serves (the start and the metric's first segment) and that a member without that
    segment has segments of seven fields. The rest of a member is left unread, as the point of this path:
    a fault there (another metric's segment, the metric twice) is the checked decoder's to find, when a
    reply takes that path.
    """
    tag = b";%d:" % layout.METRIC_INDEX[metric]  # ';' opens a segment, so a match is its index only
    picked = []
    for member in members:
        at = member.find(tag)
        if at < 0:
            # Absent for this metric, if it is a member: a start then segments of seven fields each.
            if not 0 < member.count(b":") == 6 * member.count(b";"):
                raise ValueError("a member without the fields of its segments")
            continue
        end = member.find(b";", at + len(tag))
        if end < 0:
            end = len(member)
        # The start, then the segment from the ':' after its index.
        picked.append(member[:member.index(b";")] + member[at + len(tag) - 1:end])
    if not picked:
        return []
    if b":".join(picked).translate(None, NUMBER_BYTES):
        raise ValueError("a window with more than numbers")
    rows = orjson.loads(b"[[%b]]" % b"],[".join(picked).replace(b":", b","))
    if len(rows) != len(picked) or set(map(len, rows)) != {ROW_FIELDS}:
        raise ValueError("a window that is not seven numbers")
    return rows
