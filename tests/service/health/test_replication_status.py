"""Replication status from the driver's latest report: rule order, thresholds and explanations."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from contract.status import ReplicationState
from service.health.replication_status import (
    IDLE_AFTER_PERIODS,
    STALE_AFTER_PERIODS,
    ReplicationLatest,
    replication_state,
)

PERIOD_MS = 30_000
NOW_MS = 10_000_000
STALE_MS = STALE_AFTER_PERIODS * PERIOD_MS

# A healthy replication: enabled, RUNNING, reported and heartbeating just now, records flowing.
HEALTHY = ReplicationLatest(
    enabled=True,
    status="RUNNING",
    report_ts_ms=NOW_MS - 1_000,
    last_heartbeat_ts_ms=NOW_MS - 1_000,
    recent_record_counts=(40, 50, 60),
)


def latest(**changes: Any) -> ReplicationLatest:
    return dataclasses.replace(HEALTHY, **changes)


CASES = [
    pytest.param(None, ReplicationState.UNKNOWN, "no metrics from the driver", id="no driver data"),
    pytest.param(HEALTHY, ReplicationState.ACTIVE, "110 records replicated", id="records flowing"),
    pytest.param(
        latest(recent_record_counts=(0, 7)), ReplicationState.ACTIVE, "7 records", id="records last period"
    ),
    pytest.param(
        latest(recent_record_counts=(7, 0)), ReplicationState.ACTIVE, "7 records", id="one quiet period"
    ),
    pytest.param(
        latest(status="FAILED", error="TimeoutException: broker down"),
        ReplicationState.FAILED,
        "driver reports FAILED: TimeoutException: broker down",
        id="failed carries error text",
    ),
    pytest.param(
        latest(status="FAILED", error=None),
        ReplicationState.FAILED,
        "driver reports FAILED",
        id="failed without error text",
    ),
    pytest.param(
        latest(status="FAILED", error="boom", report_ts_ms=NOW_MS - 600_000),
        ReplicationState.FAILED,
        "driver reports FAILED: boom (reported 600 s ago)",
        id="stale failure is still failed",
    ),
    pytest.param(
        latest(status="failed", error="boom"), ReplicationState.FAILED, "FAILED: boom", id="status case"
    ),
    pytest.param(
        latest(report_ts_ms=NOW_MS - 95_000),
        ReplicationState.UNKNOWN,
        "last driver report 95 s ago, stale after 90 s",
        id="stale report",
    ),
    pytest.param(
        latest(report_ts_ms=NOW_MS - STALE_MS - 1),
        ReplicationState.UNKNOWN,
        "stale after 90 s",
        id="report just over three periods old is stale",
    ),
    pytest.param(
        latest(report_ts_ms=NOW_MS - STALE_MS),
        ReplicationState.ACTIVE,
        "records replicated",
        id="report exactly three periods old is fresh",
    ),
    pytest.param(
        latest(status="PAUSED", report_ts_ms=NOW_MS - STALE_MS - 1),
        ReplicationState.UNKNOWN,
        "stale",
        id="stale pause is unknown",
    ),
    pytest.param(latest(status="PAUSED"), ReplicationState.INACTIVE, "driver reports PAUSED", id="paused"),
    pytest.param(
        latest(status="UNASSIGNED", error="no worker owns task 0"),
        ReplicationState.INACTIVE,
        "driver reports UNASSIGNED: no worker owns task 0",
        id="unassigned with reason",
    ),
    pytest.param(
        latest(status="RESTARTING"),
        ReplicationState.UNKNOWN,
        "unrecognised status 'RESTARTING'",
        id="unknown driver status",
    ),
    pytest.param(
        latest(recent_record_counts=(50, 0, 0)),
        ReplicationState.INACTIVE,
        "no records replicated in the last 2 metrics periods; heartbeats still flow",
        id="idle while heartbeats flow",
    ),
    pytest.param(
        latest(recent_record_counts=(0, 0), last_heartbeat_ts_ms=NOW_MS - STALE_MS - 1),
        ReplicationState.INACTIVE,
        "and no recent heartbeat",
        id="idle with stale heartbeat",
    ),
    pytest.param(
        latest(recent_record_counts=(0, 0), last_heartbeat_ts_ms=None),
        ReplicationState.INACTIVE,
        "and no recent heartbeat",
        id="idle with heartbeats off",
    ),
    pytest.param(
        latest(recent_record_counts=()),
        ReplicationState.INACTIVE,
        "no records replicated",
        id="no period counted yet",
    ),
    pytest.param(
        latest(recent_record_counts=(5,), last_heartbeat_ts_ms=None),
        ReplicationState.ACTIVE,
        "5 records",
        id="records flow without heartbeats",
    ),
    pytest.param(
        latest(enabled=False, status="FAILED", error="boom"),
        ReplicationState.INACTIVE,
        "disabled",
        id="disabled wins over an old failure",
    ),
    pytest.param(
        latest(enabled=False, report_ts_ms=0),
        ReplicationState.INACTIVE,
        "disabled",
        id="disabled and no longer reported",
    ),
    pytest.param(
        latest(report_ts_ms=NOW_MS + 5_000),
        ReplicationState.ACTIVE,
        "records replicated",
        id="driver clock ahead counts as fresh",
    ),
    pytest.param(
        latest(target_unreachable_since_ms=NOW_MS - 25_000, target_error="Broker transport failure"),
        ReplicationState.FAILED,
        "target cluster unreachable for 25 s (the aggregator's probe): Broker transport failure",
        id="target down while its last report is still fresh",
    ),
    pytest.param(
        latest(enabled=False, target_unreachable_since_ms=NOW_MS - 25_000),
        ReplicationState.INACTIVE,
        "disabled",
        id="a disabled replication stays INACTIVE with its target down",
    ),
]


@pytest.mark.parametrize(("report", "state", "detail"), CASES)
def test_replication_state(report: ReplicationLatest | None, state: ReplicationState, detail: str) -> None:
    got_state, got_detail = replication_state(report, NOW_MS, PERIOD_MS)

    assert got_state is state
    assert detail in got_detail


def test_idle_window_follows_constant() -> None:
    quiet = (0,) * IDLE_AFTER_PERIODS

    assert replication_state(latest(recent_record_counts=(9, *quiet)), NOW_MS, PERIOD_MS)[0] is (
        ReplicationState.INACTIVE
    )
    assert replication_state(latest(recent_record_counts=(9, *quiet[1:])), NOW_MS, PERIOD_MS)[0] is (
        ReplicationState.ACTIVE
    )


def test_staleness_scales_with_metrics_period() -> None:
    report = latest(report_ts_ms=NOW_MS - 20_000)

    assert replication_state(report, NOW_MS, 5_000)[0] is ReplicationState.UNKNOWN
    assert replication_state(report, NOW_MS, 30_000)[0] is ReplicationState.ACTIVE


def test_states_are_plain_strings() -> None:
    assert [str(s) for s in ReplicationState] == ["ACTIVE", "INACTIVE", "FAILED", "UNKNOWN"]


@pytest.mark.parametrize("period_ms", [0, -30_000])
def test_rejects_non_positive_period(period_ms: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        replication_state(HEALTHY, NOW_MS, period_ms)
