"""A replication's summary of its partitions' verdicts (contract.lag_verdicts.summary_record) as array
operations over the verdicts' columns: the sink summarises every replication it keeps at every batch, and
over 100,000 partitions the summary a verdict at a time (each parsed and aged as an object) cost ~1 s.

The columns are read out of the verdict records once (a list comprehension a field); the aging (STOP once
a silence passes its bound), the worst partition, the most lagging one, the total lag and the first
moment a verdict can change are numpy; only the problems (the partitions at WARN or worse, which the
summary lists whole) are records again. A record with an integer past 2^53 (exact only in Python) is
summarised by summary_record itself. tests/aggregator/test_verdict_summaries.py checks both agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contract import lag_verdicts
from contract.lag_evaluation import _SEVERITY, Reason, Status

EXACT_BELOW = 2**53
_NONE = -(2**62)  # an absent observation's ts (never compared: masked)
_SEVERITY_OF = {str(reason): severity for reason, severity in _SEVERITY.items()}


def _ts(observation: Any) -> int:
    return _NONE if observation is None else int(observation[0])


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


def _partition_order(records: Sequence[Mapping[str, Any]], kept: np.ndarray) -> list[int]:
    """The kept records' positions in partition order (topic, then partition), as the evaluation lists
    them: one stable lexsort (numpy compares str by code point, as Python does, but drops trailing NULs), or
    Python's sort where a topic holds a NUL or a partition number does not fit int64."""
    topics = [str(r["topic"]) for r in records]
    partitions = [int(r["partition"]) for r in records]
    try:
        if "\x00" in "".join(topics):
            raise OverflowError
        order = np.lexsort((np.array(partitions, np.int64), np.array(topics, str)))
    except OverflowError:
        order = np.array(sorted(range(len(records)), key=lambda i: (topics[i], partitions[i])), np.int64)
    return order[kept[order]].tolist()


def summary_record(records: Sequence[Mapping[str, Any]], at_ms: int) -> dict[str, Any]:
    """lag_verdicts.summary_record(records, at_ms)."""
    if not records:
        return lag_verdicts.summary_record(records, at_ms)
    start = [_ts(r.get("start")) for r in records]
    end = [_ts(r.get("end")) for r in records]
    lookback = [int(r.get("lookback_ms") or 0) for r in records]
    current = [int(r["current_lag"]) for r in records]
    stop_after = [int(r.get("stop_after_ms") or 0) for r in records]
    allowed = [int(r.get("allowed_lag") or 0) for r in records]
    integers = [*current, *lookback, *stop_after, *allowed, *(t for t in (*start, *end) if t != _NONE)]
    if max(map(abs, integers)) >= EXACT_BELOW:
        return lag_verdicts.summary_record(records, at_ms)
    start_a, end_a = np.array(start, np.int64), np.array(end, np.int64)
    observed = (start_a != _NONE) & (end_a != _NONE)
    lookback_a = np.array(lookback, np.int64)
    kept = (end_a == _NONE) | (end_a >= at_ms - lookback_a)
    order = _partition_order(records, kept)
    if not order:
        return lag_verdicts.summary_record([], at_ms)
    rows = np.array(order, np.int64)
    current_a = np.array(current, np.int64)[rows]
    start_k, end_k, lookback_k = start_a[rows], end_a[rows], lookback_a[rows]
    stop_at = end_k + np.maximum(end_k - start_k, np.array(stop_after, np.int64)[rows]) + 1
    may_stop = observed[rows] & (current_a > np.array(allowed, np.int64)[rows])
    stopped = may_stop & (at_ms >= stop_at)
    status = [str(records[i]["status"]) for i in order]
    reason = [str(records[i]["reason"]) for i in order]
    for k in np.flatnonzero(stopped).tolist():
        status[k], reason[k] = str(Status.ERR), str(Reason.STOP)
    severity = np.array([_SEVERITY_OF[r] for r in reason])
    worst = int(np.argmax(severity))
    most = int(np.argmax(current_a))
    changes = np.minimum(np.where(observed[rows], start_k + lookback_k + 1, np.iinfo(np.int64).max),
                         np.where(end_k != _NONE, end_k + lookback_k + 1, np.iinfo(np.int64).max))
    not_stopped = np.array(reason) != str(Reason.STOP)
    changes = np.where(may_stop & not_stopped, np.minimum(changes, stop_at), changes)
    complete = sum(float(records[i]["complete"]) == 1.0 for i in order)
    seconds = np.array([_seconds(records[i].get("lag_seconds")) for i in order])

    def aged(k: int) -> dict[str, Any]:
        record = records[order[k]]
        return {**record, "status": status[k], "reason": reason[k]}

    until = int(changes.min())
    return {
        "ts": at_ms, "partitions": len(order), "status": status[worst], "reason": reason[worst],
        "complete": complete / len(order), "total_lag": sum(current[i] for i in order),
        "max_lag": aged(most), "problems": [aged(k) for k, s in enumerate(status) if s != str(Status.OK)],
        "lag_seconds": None if np.isnan(seconds).all() else float(np.nanmax(seconds)),
        "valid_until_ms": None if until == np.iinfo(np.int64).max else until,
    }
