"""The status vocabulary: what the driver reports for a replication, and what the service makes of it.

The driver publishes a ``DriverStatus`` in each replication raw-metrics record (Kafka Connect's
connector states); the service derives a ``ReplicationState`` from it and from the data flow
(``service.health.replication_status`` holds the rules).
"""

from __future__ import annotations

from enum import StrEnum


class DriverStatus(StrEnum):
    """What the driver reports for a replication (Kafka Connect's connector states)."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    FAILED = "FAILED"
    UNASSIGNED = "UNASSIGNED"


class ReplicationState(StrEnum):
    """What the API reports for a replication."""

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"  # disabled, not assigned, or enabled without data
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"  # nothing reported yet
