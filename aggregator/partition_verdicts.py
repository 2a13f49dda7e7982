"""Lag verdicts of partitions, evaluated as their reports come in, and each replication's summary of them.

The stored forms are contract.lag_verdicts'; this is how the sink makes them. A partition's verdict is
Burrow's rules (contract.lag_evaluation) over its upstream_offset and records_lag 10 s windows in the
lookback before its report, as the batch leaves them (the sink's window history, with the batch merged),
evaluated at the report's `ts`: pure, so a replayed batch gives the same verdict.

The summary of a replication needs every partition's verdict, while a batch holds a few partitions' reports:
each task keeps its own partitions' verdicts as columns and leaves its part of the summary
(aggregator.task_verdicts), which the sink combines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from aggregator.window_history import series_id
from contract import lag_verdicts
from contract import redis_layout as layout
from contract.lag_evaluation import EvaluationPolicy, evaluate_windows, lookback_ms
from contract.settings import DEFAULT_METRICS_PERIOD_MS

# The two series a partition's verdict reads.
OFFSET_METRICS = ("upstream_offset", "records_lag")
Pair = tuple[str, str]  # (target, source)


def period_of(record: Mapping[str, Any]) -> int:
    """The report's metrics period; the default one when it names none (as the service assumes)."""
    period = record.get("period_ms")
    if type(period) is int and period > 0:  # the usual case first: asked twice a partition a batch
        return period
    if not isinstance(period, int | float) or isinstance(period, bool) or period <= 0:
        return DEFAULT_METRICS_PERIOD_MS
    return int(period)


def lookback_of(record: Mapping[str, Any]) -> int:
    """How far before the report its windows are read."""
    return _lookback(period_of(record))


# Asked three times for every partition of every batch, and a batch's reports share one or a few periods.
@lru_cache(maxsize=1024)
def _policy(period_ms: int) -> EvaluationPolicy:
    """The rules' bounds for a metrics period (STOP and STALL after three periods)."""
    return EvaluationPolicy.for_metrics_period(period_ms)


@lru_cache(maxsize=1024)
def _lookback(period_ms: int) -> int:
    return lookback_ms(_policy(period_ms), period_ms)


@lru_cache(maxsize=65_536)  # asked for every partition of every batch: the same few thousand subjects
def offset_series(subject: tuple[str, ...]) -> tuple[layout.SeriesId, ...]:
    """The series a partition report's verdict reads; subject: (kind, target, source, topic, partition, _)."""
    _, target, source, topic, partition, _ = subject
    return tuple(series_id(target, source, topic, int(partition), m) for m in OFFSET_METRICS)


def partition_verdict(record: Mapping[str, Any], offsets: Sequence[layout.WindowAggregate],
                      lags: Sequence[layout.WindowAggregate], lag_seconds: Any) -> dict[str, Any] | None:
    """The verdict record of one partition report; None without offset windows (nothing to judge; the
    service's evaluation from windows leaves such a partition out too)."""
    return _verdict(record, period_of(record), offsets, lags, lag_seconds)


def _verdict(record: Mapping[str, Any], period_ms: int, offsets: Sequence[layout.WindowAggregate],
             lags: Sequence[layout.WindowAggregate], lag_seconds: Any) -> dict[str, Any] | None:
    if not offsets:
        return None
    ts, policy = int(record["ts"]), _policy(period_ms)
    lag = record.get("records_lag")
    current = int(lag) if isinstance(lag, int | float) and not isinstance(lag, bool) else None
    key = (str(record["topic"]), int(record["partition"]))
    verdict = evaluate_windows(offsets, lags, ts, policy=policy, current_lag=current, key=key)
    return lag_verdicts.verdict_record(verdict, ts, policy, _lookback(period_ms), lag_seconds)


VerdictUpdates = dict[Pair, dict[str, dict[str, Any]]]  # (target, source) -> verdict field -> verdict
# series, low, high, newest: a series' windows in [low, high], only the newest that many unless None
WindowView = Callable[[layout.SeriesId, int, int, int | None], list[layout.WindowAggregate]]


def batch_verdicts(reports: Iterable[tuple[Sequence[str], Mapping[str, Any], Any]],
                   view: WindowView) -> VerdictUpdates:
    """Verdicts of partition reports (subject, record, lag in seconds), per replication; `view` gives a
    series' windows in a range as the batch leaves them."""
    updates: VerdictUpdates = {}
    for subject, record, seconds in reports:
        _, target, source, topic, partition, _ = subject
        high, period = int(record["ts"]), period_of(record)
        low = high - _lookback(period)
        offset_windows, lag_windows = offset_series(tuple(subject))
        # The rules read the newest `intervals` observations (evaluate_partition), one an offset window,
        # and the lag windows of the same starts: not the ~60 windows of the whole lookback.
        offsets = view(offset_windows, low, high, _policy(period).intervals)
        lags = view(lag_windows, offsets[0].start_ms, high, None) if offsets else []
        verdict = _verdict(record, period, offsets, lags, seconds)
        if verdict is not None:
            field_name = lag_verdicts.verdict_field(topic, int(partition))
            updates.setdefault((target, source), {})[field_name] = verdict
    return updates
