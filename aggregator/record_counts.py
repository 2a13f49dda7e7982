"""The raw records a batch drops, counted per target and source in the batch's MULTI and logged with
where they came from: records that do not parse (invalid) and records whose 10 s window had closed
(late). The totals are what the API and /metrics show as invalid and late."""

from __future__ import annotations

import logging

import redis

from aggregator.batch_plan import BatchPlan
from contract import redis_layout as layout
from contract.replication_policy import metrics_topic

LOG = logging.getLogger(__name__)


def queue_late(pipe: redis.client.Pipeline, late: dict[tuple[str, str], int], query_name: str,
               watermark_ms: int | None, delay_ms: int) -> None:
    for (target, source), count in sorted(late.items()):
        LOG.warning("%s: %d raw record(s) from %s dropped as late: their 10 s window had closed "
                    "(watermark %s, %d ms behind the newest event ts)", query_name, count,
                    metrics_topic(source), watermark_ms, delay_ms)
        _add(pipe, layout.late_records_key(target, source), count)


def queue_invalid(pipe: redis.client.Pipeline, plan: BatchPlan, query_name: str) -> None:
    for invalid in plan.invalid:
        series, window = invalid.series, invalid.window
        LOG.warning("%s: %d raw record(s) that do not parse in %s partition %d at offsets %d..%d "
                    "(window %d); last: %r", query_name, int(window.count),
                    metrics_topic(series.source), series.partition, int(window.min), int(window.max),
                    window.start_ms, invalid.excerpt)
        _add(pipe, layout.invalid_records_key(series.target, series.source), int(window.count))


def _add(pipe: redis.client.Pipeline, total: str, count: int) -> None:
    pipe.incrby(total, count)
    pipe.pexpire(total, layout.INDEX_TTL_MS)
