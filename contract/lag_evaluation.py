"""Burrow-style lag evaluation of a window of offset observations per partition.

Each partition's window (the newest ``intervals`` observations of its committed or replicated
offset and the lag at that moment) gets a Burrow partition status, kept here as ``reason``;
``status`` is the level Burrow reports for a group. Rules, checked in this order; the first
that holds gives the reason and, after the arrow, the status:

1. no observations, or current lag <= allowed lag                 OK     -> OK
2. now - newest ts > newest ts - oldest ts, and > stop_after_ms   STOP   -> ERR
3. an offset fell below the one before it and never got back      REWIND -> ERR
4. lag <= allowed lag at some observation in the window           OK     -> OK
5. one offset throughout a window spanning >= stall_after_ms      STALL  -> ERR
6. lag never decreased from one observation to the next           WARN   -> WARN
7. otherwise                                                      OK     -> OK

A group or replication with no partitions at all is NOTFOUND (reason and status).
A group's status is its worst partition's, Burrow's order being
NOTFOUND < OK < WARN < STOP < STALL < REWIND, and its ``reason`` is that partition's reason.

Deliberate differences from Burrow, because our observations are the driver's periodic metrics
samples rather than a consumer's commits:
- ``EvaluationPolicy.stop_after_ms`` and ``stall_after_ms`` put a floor under STOP and STALL,
  so a window of one or two samples cannot raise an error within seconds (Burrow's idle-topic
  false positives);
- Burrow's "recent lag zero" exemption from STOP is not implemented: it protects consumers that
  stop committing while idle, but the driver samples idle partitions every period, so a silent
  partition really has stopped being reported;
- ``minimum-complete`` is not implemented: the floors above already make thin windows harmless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from operator import attrgetter
from typing import Final

from contract.redis_layout import WindowAggregate
from contract.settings import DEFAULT_METRICS_PERIOD_MS

__all__ = [
    "DEFAULT_ALLOWED_LAG",
    "aged",
    "DEFAULT_INTERVALS",
    "DEFAULT_POLICY",
    "DEFAULT_STALL_AFTER_MS",
    "DEFAULT_STOP_AFTER_MS",
    "Evaluation",
    "EvaluationPolicy",
    "OffsetObservation",
    "PartitionEvaluation",
    "PartitionKey",
    "Reason",
    "Status",
    "combine",
    "evaluate",
    "evaluate_partition",
    "evaluate_windows",
    "lookback_ms",
    "observations",
    "stop_at_ms",
]

# Burrow's default window (storage "intervals"): ten observations, five minutes at our default
# 30 s metrics period, long enough to tell a trend from a single slow fetch.
DEFAULT_INTERVALS: Final = 10

# Burrow's default (PR #591): any lag at all counts, so a caught-up partition is the only OK one
# at the start of the rules.
DEFAULT_ALLOWED_LAG: Final = 0

# The default metrics period (contract.settings); the floors below are counted in it.
_DEFAULT_METRICS_PERIOD_MS: Final = DEFAULT_METRICS_PERIOD_MS

# STOP: the driver samples every period, so one late or lost metrics record leaves a one-period
# gap; silence is only an error when it outlasts three periods, the staleness rule used for
# replication status and advertised services alike.
# STALL: two equal samples a few seconds apart are a quiet moment between fetches, not a stall;
# the offset must stay put for three periods of lag before it is reported as an error.
_FLOOR_PERIODS: Final = 3
DEFAULT_STOP_AFTER_MS: Final = _FLOOR_PERIODS * _DEFAULT_METRICS_PERIOD_MS
DEFAULT_STALL_AFTER_MS: Final = _FLOOR_PERIODS * _DEFAULT_METRICS_PERIOD_MS


class Status(StrEnum):
    """Group-level status, as Burrow reports it."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"


class Reason(StrEnum):
    """Burrow's partition status, kept as the reason behind a ``Status``."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"


# Burrow's StatusConstant order, which decides the worst partition.
_SEVERITY: Final = {
    Reason.NOTFOUND: 0,
    Reason.OK: 1,
    Reason.WARN: 2,
    Reason.STOP: 4,
    Reason.STALL: 5,
    Reason.REWIND: 6,
}

_STATUS_OF: Final = {
    Reason.NOTFOUND: Status.NOTFOUND,
    Reason.OK: Status.OK,
    Reason.WARN: Status.WARN,
    Reason.STOP: Status.ERR,
    Reason.STALL: Status.ERR,
    Reason.REWIND: Status.ERR,
}

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class EvaluationPolicy:
    """Thresholds of the rules; the defaults are Burrow's plus our floors for periodic samples."""

    intervals: int = DEFAULT_INTERVALS
    allowed_lag: int = DEFAULT_ALLOWED_LAG
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS
    stop_after_ms: int = DEFAULT_STOP_AFTER_MS

    def __post_init__(self) -> None:
        if self.intervals < 1:
            raise ValueError(f"intervals must be at least 1, got {self.intervals}")
        if self.allowed_lag < 0:
            raise ValueError(f"allowed_lag must not be negative, got {self.allowed_lag}")

    @classmethod
    def for_metrics_period(
        cls, metrics_period_ms: int, intervals: int = DEFAULT_INTERVALS
    ) -> EvaluationPolicy:
        """Policy whose STOP and STALL floors follow the configured ``metrics.period``."""
        if metrics_period_ms <= 0:
            raise ValueError(f"metrics period must be positive, got {metrics_period_ms} ms")
        floor_ms = _FLOOR_PERIODS * metrics_period_ms
        return cls(intervals=intervals, stall_after_ms=floor_ms, stop_after_ms=floor_ms)


DEFAULT_POLICY: Final = EvaluationPolicy()


# Values, never changed once made, but not frozen: a frozen dataclass sets each field through
# object.__setattr__, and the aggregator makes a few of these and one evaluation per partition of every
# batch (the same choice as redis_layout.WindowAggregate).
@dataclass(slots=True, unsafe_hash=True)
class OffsetObservation:
    """A committed or replicated offset seen at ``ts_ms``, and its lag behind the end offset."""

    ts_ms: int
    offset: int
    lag: int


@dataclass(slots=True, unsafe_hash=True)
class PartitionEvaluation:
    """Verdict on one partition; ``start``/``end`` are the window's oldest and newest entries."""

    topic: str
    partition: int
    status: Status
    reason: Reason
    complete: float
    current_lag: int
    start: OffsetObservation | None = None
    end: OffsetObservation | None = None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Verdict on a group or replication: the worst partition wins."""

    status: Status
    partitions: tuple[PartitionEvaluation, ...]
    max_lag_partition: PartitionEvaluation | None
    total_lag: int
    reason: Reason
    complete: float = 0.0

    @property
    def problems(self) -> tuple[PartitionEvaluation, ...]:
        """Partitions at WARN or worse, what Burrow's ``/status`` lists."""
        return tuple(p for p in self.partitions if p.status is not Status.OK)


_NOT_FOUND: Final = Evaluation(Status.NOTFOUND, (), None, 0, Reason.NOTFOUND)


_TS_OF: Final = attrgetter("ts_ms")


def evaluate_partition(
    observations: Sequence[OffsetObservation],
    now_ms: int,
    *,
    policy: EvaluationPolicy = DEFAULT_POLICY,
    current_lag: int | None = None,
    key: PartitionKey = ("", -1),
) -> PartitionEvaluation:
    """Apply Burrow's rules to the newest ``policy.intervals`` observations of one partition.

    ``current_lag`` is the lag now, when the caller knows a fresher end offset than the newest
    observation's (Burrow's fix for stopped consumers showing the lag of their last commit).
    """
    window = sorted(observations, key=_TS_OF)[-policy.intervals :]
    return _evaluation([o.ts_ms for o in window], [o.offset for o in window], [o.lag for o in window],
                       now_ms, policy, current_lag, key)


def evaluate_windows(
    offsets: Sequence[WindowAggregate],
    lags: Sequence[WindowAggregate],
    now_ms: int,
    *,
    policy: EvaluationPolicy = DEFAULT_POLICY,
    current_lag: int | None = None,
    key: PartitionKey = ("", -1),
) -> PartitionEvaluation:
    """``evaluate_partition`` of ``observations(offsets, lags)``, for ``offsets`` in start order (as a
    series' windows are read): no object an observation, because the aggregator judges every partition
    of every batch."""
    newest = offsets[-policy.intervals :]
    lag_at = {w.start_ms: w.last for w in lags}
    starts = [w.start_ms for w in newest]
    return _evaluation(starts, [int(w.last) for w in newest], [int(lag_at.get(s, 0)) for s in starts],
                       now_ms, policy, current_lag, key)


def _evaluation(ts: list[int], offsets: list[int], lags: list[int], now_ms: int, policy: EvaluationPolicy,
                current_lag: int | None, key: PartitionKey) -> PartitionEvaluation:
    """The rules over a window given as its observations' ts, offsets and lags (oldest first)."""
    if current_lag is None:
        current_lag = lags[-1] if lags else 0
    # Offsets and end offsets are not read atomically, so a lag can come out negative; it means
    # caught up.
    current_lag = max(0, current_lag)
    reason = _reason(ts, offsets, lags, current_lag, now_ms, policy)
    return PartitionEvaluation(
        topic=key[0],
        partition=key[1],
        status=_STATUS_OF[reason],
        reason=reason,
        complete=len(ts) / policy.intervals,
        current_lag=current_lag,
        start=OffsetObservation(ts[0], offsets[0], lags[0]) if ts else None,
        end=OffsetObservation(ts[-1], offsets[-1], lags[-1]) if ts else None,
    )


def evaluate(
    partitions: Mapping[PartitionKey, Sequence[OffsetObservation]],
    now_ms: int,
    *,
    policy: EvaluationPolicy = DEFAULT_POLICY,
    current_lags: Mapping[PartitionKey, int] | None = None,
) -> Evaluation:
    """Evaluate every partition of a group or replication; NOTFOUND when there are none."""
    lags = current_lags or {}
    return combine([
        evaluate_partition(observations, now_ms, policy=policy, current_lag=lags.get(key), key=key)
        for key, observations in sorted(partitions.items())
    ])


def combine(partitions: Sequence[PartitionEvaluation]) -> Evaluation:
    """A group's or replication's verdict from its partitions' (in partition order); NOTFOUND without any."""
    if not partitions:
        return _NOT_FOUND
    evaluations = tuple(partitions)
    worst = max(evaluations, key=lambda e: _SEVERITY[e.reason])
    return Evaluation(
        status=worst.status,
        partitions=evaluations,
        max_lag_partition=max(evaluations, key=lambda e: e.current_lag),
        total_lag=sum(e.current_lag for e in evaluations),
        reason=worst.reason,
        complete=sum(e.complete == 1.0 for e in evaluations) / len(evaluations),
    )


def _reason(ts: list[int], offsets: list[int], lags: list[int], current_lag: int, now_ms: int,
            policy: EvaluationPolicy) -> Reason:
    if not ts:
        return Reason.OK
    allowed = policy.allowed_lag
    # Burrow's rule order: later rules only run when no earlier one applies, which is why the
    # "lag was fine at some point" escape sits after STOP and REWIND but before STALL and WARN.
    # Plain tests, not a table of closures: the aggregator judges every partition of every batch.
    if current_lag <= allowed:
        return Reason.OK
    if _stopped(ts, now_ms, policy.stop_after_ms):
        return Reason.STOP
    if _rewound(offsets):
        return Reason.REWIND
    if min(lags) <= allowed:
        return Reason.OK
    if _stalled(ts, offsets, policy.stall_after_ms):
        return Reason.STALL
    if _lag_never_decreased(lags):
        return Reason.WARN
    return Reason.OK


def _stopped(ts: list[int], now_ms: int, stop_after_ms: int) -> bool:
    # The window's own span is the yardstick: silence longer than the time the whole window
    # took to fill means the observations have stopped, whatever their usual spacing.
    silence = now_ms - ts[-1]
    return silence > ts[-1] - ts[0] and silence > stop_after_ms


def _rewound(offsets: list[int]) -> bool:
    # A rewind the partition later recovers from (a rebalance re-committing an older offset) is
    # forgiven; only one that it never climbs back out of within the window counts: an offset above
    # every offset after it. The last of the highest offsets before the newest is such an offset
    # whenever the newest is below it, so that is the test.
    return max(offsets) > offsets[-1]


def _stalled(ts: list[int], offsets: list[int], stall_after_ms: int) -> bool:
    return min(offsets) == max(offsets) and ts[-1] - ts[0] >= stall_after_ms


def _lag_never_decreased(lags: list[int]) -> bool:
    return lags == sorted(lags)  # each lag >= the one before it


def stop_at_ms(p: PartitionEvaluation, stop_after_ms: int,
               allowed_lag: int = DEFAULT_ALLOWED_LAG) -> int | None:
    """The first moment rule 2 (STOP) holds for a partition evaluated earlier and not observed since;
    None when it never can (caught up, or nothing observed). The only rule that depends on the clock."""
    if p.start is None or p.end is None or p.current_lag <= allowed_lag:
        return None
    return p.end.ts_ms + max(p.end.ts_ms - p.start.ts_ms, stop_after_ms) + 1


def aged(p: PartitionEvaluation, now_ms: int, stop_after_ms: int,
         allowed_lag: int = DEFAULT_ALLOWED_LAG) -> PartitionEvaluation:
    """A partition's verdict as `evaluate_partition` would give it at `now_ms` with no newer observation:
    STOP once the silence passes the rule's bound, as it was otherwise (STOP comes before every rule but
    the first, which a lagging partition fails)."""
    at = stop_at_ms(p, stop_after_ms, allowed_lag)
    if at is None or now_ms < at:
        return p
    return replace(p, status=_STATUS_OF[Reason.STOP], reason=Reason.STOP)


def observations(offsets: Sequence[WindowAggregate],
                 lags: Sequence[WindowAggregate]) -> list[OffsetObservation]:
    """One observation per stored window that holds an offset (its last) and the lag then (the same
    window's last lag); how both the aggregator and the service read a partition's offset windows."""
    lag_at = {w.start_ms: w.last for w in lags}
    return [OffsetObservation(w.start_ms, int(w.last), int(lag_at.get(w.start_ms, 0))) for w in offsets]


def lookback_ms(policy: EvaluationPolicy, period_ms: int) -> int:
    """How far back the offset history must reach for ``policy.intervals`` observations and STOP."""
    return 2 * policy.intervals * period_ms
