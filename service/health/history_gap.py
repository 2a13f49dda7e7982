"""The gap in a target's history left by a rebuild of its rollups from Kafka (aggregator.rebuild).

The aggregator rebuilds a target's rollups when it finds them gone from Redis: what the raw-metrics
topics still held is rolled up again, what Kafka's retention had dropped is lost. The replications into
that target say so in their status, rather than answer an empty past as if nothing had happened.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from contract import redis_layout as layout

LOG = logging.getLogger(__name__)


def history_gaps(client: redis.Redis, targets: Sequence[str]) -> dict[str, dict | None]:
    """Per target, its last rebuild (`history_answer`), or None when it was never rebuilt."""
    unique = sorted(set(targets))
    pipe = client.pipeline(transaction=False)
    for target in unique:
        pipe.hgetall(layout.rebuild_key(target))
    return {target: history_answer(record) for target, record in zip(unique, pipe.execute(), strict=True)}


def history_answer(record: dict[bytes, bytes]) -> dict | None:
    """{lost_before, rebuilt_at, explanation} of a rebuild record; None without one (or a broken one)."""
    fields = {k.decode(): v.decode() for k, v in record.items()}
    try:
        rebuilt_at = int(fields["detected_ts"])
        lost_before = int(fields["history_from_ts"]) if "history_from_ts" in fields else None
    except (KeyError, ValueError):
        if fields:
            LOG.warning("skipping a rebuild record that does not parse: %r", fields)
        return None
    if lost_before is None:
        explanation = (f"Redis state lost and rebuilt from Kafka retention at {_utc(rebuilt_at)}; history "
                       "older than the raw-metrics topics' retention is lost (rebuild not through its first "
                       "batch yet)")
    else:
        explanation = (f"history before {_utc(lost_before)} lost: Redis state rebuilt from Kafka retention "
                       f"at {_utc(rebuilt_at)}")
    return {"lost_before": lost_before, "rebuilt_at": rebuilt_at, "explanation": explanation}


def _utc(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
