"""Replication status from what the driver last reported for a replication.

Rules, checked in this order (the first that holds decides):

1. nothing reported                                   -> UNKNOWN
2. replication disabled in the configuration          -> INACTIVE
   the aggregator finds the target cluster unreachable -> FAILED, with its error: while the target is
   down the driver's reports cannot reach us, so its own word on the outage comes only afterwards
3. the driver reports FAILED (its error text carried) -> FAILED, even when the report is old:
   the last word of a driver that then went quiet is its failure
4. report older than STALE_AFTER_PERIODS periods      -> UNKNOWN (stale)
5. a status the driver should never send              -> UNKNOWN
6. the driver reports PAUSED or UNASSIGNED            -> INACTIVE
7. no records in the last IDLE_AFTER_PERIODS periods  -> INACTIVE (enabled, no data); whether
   heartbeats are still fresh only changes the explanation
8. otherwise                                          -> ACTIVE
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from contract.status import DriverStatus, ReplicationState

__all__ = [
    "IDLE_AFTER_PERIODS",
    "STALE_AFTER_PERIODS",
    "ReplicationLatest",
    "replication_state",
]

# The driver reports once per metrics period. Up to two missing reports (a driver restart, a
# rebalance, an aggregator micro-batch running late) are normal; a third means we no longer know.
# The gateway applies the same three-interval rule to advertised services (sites.registry).
STALE_AFTER_PERIODS: Final = 3

# One period without records is routine for bursty producers, or when a period boundary falls
# between two fetches; two in a row (a minute at the default 30 s period) means no data flows.
IDLE_AFTER_PERIODS: Final = 2

_MS_PER_SECOND: Final = 1000


@dataclass(frozen=True, slots=True)
class ReplicationLatest:
    """The newest per-replication metrics the driver sent, as the aggregator keeps them.

    ``recent_record_counts`` holds the records replicated in each of the last metrics periods,
    oldest first; ``status`` is matched case-insensitively against ``DriverStatus``.
    """

    enabled: bool
    status: str
    report_ts_ms: int
    last_heartbeat_ts_ms: int | None = None
    recent_record_counts: tuple[int, ...] = ()
    error: str | None = None
    target_unreachable_since_ms: int | None = None  # the aggregator's probe finds the target down
    target_error: str | None = None


def replication_state(
    latest: ReplicationLatest | None, now_ms: int, metrics_period_ms: int
) -> tuple[ReplicationState, str]:
    """The replication's state and a one-line explanation for operators."""
    if metrics_period_ms <= 0:
        raise ValueError(f"metrics period must be positive, got {metrics_period_ms} ms")
    if latest is None:
        return ReplicationState.UNKNOWN, "no metrics from the driver for this replication"
    if not latest.enabled:
        return ReplicationState.INACTIVE, "replication is disabled in the configuration"
    if latest.target_unreachable_since_ms is not None:
        down_for = _seconds(max(0, now_ms - latest.target_unreachable_since_ms))
        detail = f": {latest.target_error}" if latest.target_error else ""
        return (ReplicationState.FAILED,
                f"target cluster unreachable for {down_for} (the aggregator's probe){detail}")
    stale_after_ms = STALE_AFTER_PERIODS * metrics_period_ms
    report_age_ms = now_ms - latest.report_ts_ms
    status = _driver_status(latest)
    if status is DriverStatus.FAILED:
        stale_note = f" (reported {_seconds(report_age_ms)} ago)" if report_age_ms > stale_after_ms else ""
        return ReplicationState.FAILED, _with_error("driver reports FAILED", latest) + stale_note
    if report_age_ms > stale_after_ms:
        age, limit = _seconds(report_age_ms), _seconds(stale_after_ms)
        return ReplicationState.UNKNOWN, f"last driver report {age} ago, stale after {limit}"
    if status is None:
        return ReplicationState.UNKNOWN, f"driver reports an unrecognised status {latest.status!r}"
    if status is not DriverStatus.RUNNING:
        return ReplicationState.INACTIVE, _with_error(f"driver reports {status}", latest)
    return _running_state(latest, now_ms, stale_after_ms)


def _running_state(
    latest: ReplicationLatest, now_ms: int, stale_after_ms: int
) -> tuple[ReplicationState, str]:
    records = sum(latest.recent_record_counts[-IDLE_AFTER_PERIODS:])
    periods = f"the last {IDLE_AFTER_PERIODS} metrics periods"
    if records > 0:
        return ReplicationState.ACTIVE, f"{records} records replicated in {periods}"
    heartbeat_ts = latest.last_heartbeat_ts_ms
    # A fresh heartbeat shows the driver still writes to the target, so the source topics are
    # merely idle; without one, nothing at all is getting written for this replication.
    if heartbeat_ts is not None and now_ms - heartbeat_ts <= stale_after_ms:
        return ReplicationState.INACTIVE, f"no records replicated in {periods}; heartbeats still flow"
    return ReplicationState.INACTIVE, f"no records replicated in {periods} and no recent heartbeat"


def _with_error(detail: str, latest: ReplicationLatest) -> str:
    return f"{detail}: {latest.error}" if latest.error else detail


def _driver_status(latest: ReplicationLatest) -> DriverStatus | None:
    try:
        return DriverStatus(latest.status.strip().upper())
    except ValueError:
        return None


def _seconds(ms: int) -> str:
    return f"{ms // _MS_PER_SECOND} s"
