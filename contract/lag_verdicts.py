"""The lag evaluation as the aggregator stores it: a verdict per partition, a summary per replication.

Burrow's rules (contract.lag_evaluation) read each partition's recent offset windows: a status answer over
a replication of 10,000 partitions would read 20,000 series and evaluate them, per request. So the
aggregator evaluates a partition when its report comes in (at the report's `ts`, from the windows it
writes), keeps a replication's verdicts in one hash (redis_layout.lag_verdicts_key, field
`<remote topic>|<partition>`) and their summary in the replication's latest hash (field `lag`,
redis_layout.replication_status_key). A reader answers from the summary alone.

Only the clock changes a verdict between reports: a lagging partition whose reports stopped turns STOP
once its silence passes the rule's bound, and a partition whose newest observation left the lookback
drops out (it has no windows left, as in the evaluation from windows). The summary is made at a moment
(`ts`, the aggregator's clock at the batch) with every verdict aged to it, and names the first moment any
of them can change (`valid_until_ms`); until then it is the answer as it stands, after it a reader ages
each verdict to its own clock (one hash read). The aggregator summarises every replication it keeps at
each batch, so while it runs the summaries stay valid.

Records are JSON objects carrying `ts` (epoch ms, the report evaluated), written as latest values are
(newer `ts` wins), so a replayed batch cannot roll a verdict back.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from typing import Any

from contract.lag_evaluation import (
    _SEVERITY,
    Evaluation,
    EvaluationPolicy,
    OffsetObservation,
    PartitionEvaluation,
    Reason,
    Status,
    aged,
    combine,
    stop_at_ms,
)

__all__ = ["aged_verdict", "combined_summary", "empty_parts", "evaluation_of_summary",
           "evaluation_of_verdicts", "summary_parts", "summary_record", "verdict_field", "verdict_of",
           "verdict_record"]


def verdict_field(topic: str, partition: int) -> str:
    return f"{topic}|{partition}"


def _observation(o: OffsetObservation | None) -> list[int] | None:
    return None if o is None else [o.ts_ms, o.offset, o.lag]


def _observation_of(raw: Any) -> OffsetObservation | None:
    if raw is None:
        return None
    ts, offset, lag = (int(x) for x in raw)
    return OffsetObservation(ts, offset, lag)


def verdict_record(p: PartitionEvaluation, ts: int, policy: EvaluationPolicy, lookback_ms: int,
                   lag_seconds: float | None) -> dict[str, Any]:
    """One partition's verdict at its report `ts` under `policy` over the windows of `lookback_ms` before
    it, with its latest lag in seconds."""
    return {
        "ts": ts, "topic": p.topic, "partition": p.partition, "status": str(p.status),
        "reason": str(p.reason), "complete": p.complete, "current_lag": p.current_lag,
        "start": _observation(p.start), "end": _observation(p.end), "stop_after_ms": policy.stop_after_ms,
        "allowed_lag": policy.allowed_lag, "lookback_ms": lookback_ms, "lag_seconds": lag_seconds,
    }


def verdict_of(record: Mapping[str, Any]) -> PartitionEvaluation:
    """The stored verdict back; ValueError (naming what) when the record is not one."""
    try:
        return PartitionEvaluation(
            topic=str(record["topic"]), partition=int(record["partition"]), status=Status(record["status"]),
            reason=Reason(record["reason"]), complete=float(record["complete"]),
            current_lag=int(record["current_lag"]), start=_observation_of(record.get("start")),
            end=_observation_of(record.get("end")))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a lag verdict ({exc!r}): {dict(record)!r}"[:300]) from None


def aged_verdict(record: Mapping[str, Any], now_ms: int) -> PartitionEvaluation:
    p = verdict_of(record)
    return aged(p, now_ms, int(record.get("stop_after_ms") or 0), int(record.get("allowed_lag") or 0))


def _in_lookback(record: Mapping[str, Any], now_ms: int) -> bool:
    """Whether the partition's newest observation is still inside its lookback at `now_ms`: one that is
    not has no windows left to judge, and the evaluation from windows leaves it out."""
    end = record.get("end")
    return end is None or int(end[0]) >= now_ms - int(record.get("lookback_ms") or 0)


def _changes_at(record: Mapping[str, Any], p: PartitionEvaluation) -> list[int]:
    """When the verdict (aged to the summary's moment as `p`) can next change without a newer report: it
    turns STOP, its oldest observation leaves the lookback, its newest does (it drops out)."""
    lookback = int(record.get("lookback_ms") or 0)
    moments = [] if p.reason is Reason.STOP else [stop_at_ms(p, int(record.get("stop_after_ms") or 0),
                                                              int(record.get("allowed_lag") or 0))]
    moments += [o.ts_ms + lookback + 1 for o in (p.start, p.end) if o is not None]
    return [t for t in moments if t is not None]


def _seconds(record: Mapping[str, Any]) -> float | None:
    value = record.get("lag_seconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _judged(records: Iterable[Mapping[str, Any]], now_ms: int
            ) -> tuple[list[Mapping[str, Any]], list[PartitionEvaluation]]:
    """The verdicts still inside their lookback, in partition order, and each aged to `now_ms`."""
    kept = sorted((r for r in records if _in_lookback(r, now_ms)),
                  key=lambda r: (str(r["topic"]), int(r["partition"])))
    return kept, [aged_verdict(r, now_ms) for r in kept]


def summary_record(records: Iterable[Mapping[str, Any]], at_ms: int) -> dict[str, Any]:
    """A replication's summary of its partitions' verdicts at `at_ms` (`ts`): what a status answer shows
    when nothing is listed but the problems (status, reason, completeness, total lag, the most lagging
    partition, the partitions at WARN or worse), the worst lag in seconds, and `valid_until_ms`, the first
    moment a verdict can change without a newer report (a partition turning STOP or leaving its lookback)."""
    return combined_summary([summary_parts(records, at_ms)], at_ms)


def summary_parts(records: Iterable[Mapping[str, Any]], at_ms: int) -> dict[str, Any]:
    """What summary_record reads of some of a replication's verdicts (those judged in one place: the
    aggregator judges a replication's partitions in several tasks), so that the summary of all of them is
    combined_summary of each part's: the partitions in the lookback, the worst (topic, partition, status,
    reason, aged to `at_ms`), how many are complete, the total lag, the most lagging partition's record and
    the problems' (aged, in partition order), the worst lag in seconds and the first moment one can change."""
    kept, verdicts = _judged(records, at_ms)
    if not kept:
        return empty_parts(at_ms)
    aged_records = [{**r, "status": str(p.status), "reason": str(p.reason)}
                    for r, p in zip(kept, verdicts, strict=True)]
    worst = max(range(len(verdicts)), key=lambda k: _SEVERITY[verdicts[k].reason])
    most = max(range(len(verdicts)), key=lambda k: verdicts[k].current_lag)
    changes = [t for r, p in zip(kept, verdicts, strict=True) for t in _changes_at(r, p)]
    return {
        "ts": at_ms, "partitions": len(kept),
        "worst": [str(kept[worst]["topic"]), int(kept[worst]["partition"]), str(verdicts[worst].status),
                  str(verdicts[worst].reason)],
        "complete": sum(p.complete == 1.0 for p in verdicts),
        "total_lag": sum(p.current_lag for p in verdicts),
        "max_lag": aged_records[most],
        "problems": [r for r, p in zip(aged_records, verdicts, strict=True) if p.status is not Status.OK],
        "lag_seconds": max((s for r in kept if (s := _seconds(r)) is not None), default=None),
        "valid_until_ms": min(changes, default=None),
    }


def empty_parts(at_ms: int) -> dict[str, Any]:
    """summary_parts of no verdict in the lookback."""
    return {"ts": at_ms, "partitions": 0, "worst": None, "complete": 0, "total_lag": 0, "max_lag": None,
            "problems": [], "lag_seconds": None, "valid_until_ms": None}


def _partition_order(topic: Any, partition: Any) -> tuple[str, int]:
    return str(topic), int(partition)


def combined_summary(parts: Iterable[Mapping[str, Any]], at_ms: int) -> dict[str, Any]:
    """summary_record of the verdicts of every part (summary_parts of distinct partitions, each valid at
    `at_ms`: made at it, or earlier with `valid_until_ms` after it): the worst and the most lagging partition
    are the first in partition order among the parts' (as over all verdicts at once), the problems merged
    in that order."""
    parts = [p for p in parts if p["partitions"]]
    if not parts:
        evaluation = combine([])
        return {"ts": at_ms, "partitions": 0, "status": str(evaluation.status),
                "reason": str(evaluation.reason), "complete": evaluation.complete,
                "total_lag": evaluation.total_lag, "max_lag": None, "problems": [], "lag_seconds": None,
                "valid_until_ms": None}
    worst = min(parts, key=lambda p: (-_SEVERITY[Reason(p["worst"][3])], _partition_order(*p["worst"][:2])))
    most = min(parts, key=lambda p: (-int(p["max_lag"]["current_lag"]),
                                     _partition_order(p["max_lag"]["topic"], p["max_lag"]["partition"])))
    partitions = sum(int(p["partitions"]) for p in parts)
    return {
        "ts": at_ms, "partitions": partitions, "status": worst["worst"][2], "reason": worst["worst"][3],
        "complete": sum(int(p["complete"]) for p in parts) / partitions,
        "total_lag": sum(int(p["total_lag"]) for p in parts), "max_lag": most["max_lag"],
        "problems": list(heapq.merge(*(p["problems"] for p in parts),
                                     key=lambda r: _partition_order(r["topic"], r["partition"]))),
        "lag_seconds": max((s for p in parts if (s := p["lag_seconds"]) is not None), default=None),
        "valid_until_ms": min((t for p in parts if (t := p["valid_until_ms"]) is not None), default=None),
    }


def evaluation_of_summary(summary: Mapping[str, Any], now_ms: int) -> tuple[Evaluation, float | None] | None:
    """(the replication's evaluation listing its problems only, worst lag in seconds) from its summary, or
    None when the summary cannot answer at `now_ms` (a verdict may have changed since): then the verdicts
    are aged one by one (`evaluation_of_verdicts`). ValueError when it is not a summary."""
    until = summary.get("valid_until_ms")
    if until is not None and now_ms >= int(until):
        return None
    try:
        problems = tuple(verdict_of(r) for r in summary["problems"])
        worst = None if summary.get("max_lag") is None else verdict_of(summary["max_lag"])
        evaluation = Evaluation(
            status=Status(summary["status"]), partitions=problems, max_lag_partition=worst,
            total_lag=int(summary["total_lag"]), reason=Reason(summary["reason"]),
            complete=float(summary["complete"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a lag summary ({exc!r})") from None
    return evaluation, _seconds(summary)


def evaluation_of_verdicts(records: Iterable[Mapping[str, Any]],
                           now_ms: int) -> tuple[Evaluation, float | None]:
    """(the replication's evaluation with every partition, worst lag in seconds), each verdict aged to
    `now_ms`; those whose newest observation left the lookback left out."""
    kept, verdicts = _judged(records, now_ms)
    seconds = [s for r in kept if (s := _seconds(r)) is not None]
    return combine(verdicts), max(seconds, default=None)
