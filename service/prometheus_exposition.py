"""Prometheus text exposition of the served metrics (latest values) and of the service's own health.

Each scrape builds a fresh registry from Redis, so every gunicorn worker answers the same numbers;
only the request counters are per process (labelled with the worker's pid).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator

import redis
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contract import redis_layout as layout
from contract.records.raw_metrics import METRICS
from contract.status import ReplicationState
from service.health.lag_evaluation import Status
from service.health.replication_overview import replication_healths
from service.metric_summary import point_of
from service.metrics_reader import MetricsReader

LOG = logging.getLogger(__name__)

REQUESTS_REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "srm_service_requests",
    "HTTP requests answered by this worker",
    ["endpoint", "code", "pid"],
    registry=REQUESTS_REGISTRY,
)
LAG_STATUS_CODE = {Status.NOTFOUND: 0, Status.OK: 1, Status.WARN: 2, Status.ERR: 3}  # Burrow's order
TOPIC_METRICS = sorted(name for name, spec in METRICS.items() if spec.subject == "partition")
NEWEST_WINDOW = "1m"


def count_request(endpoint: str | None, code: int) -> None:
    REQUESTS.labels(endpoint or "unmatched", str(code), str(os.getpid())).inc()


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


class ServedMetrics(Collector):
    def __init__(self, reader: MetricsReader) -> None:
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        began = time.monotonic()
        redis_up = GaugeMetricFamily("srm_service_redis_up", "1 when Redis answered this scrape")
        try:
            yield from self._served()
            redis_up.add_metric([], 1)
        except redis.RedisError as exc:
            LOG.warning("Prometheus scrape without Redis: %s", exc)
            redis_up.add_metric([], 0)
        yield redis_up
        yield GaugeMetricFamily("srm_service_up", "1 while the service answers", value=1)
        yield GaugeMetricFamily(
            "srm_service_scrape_duration_seconds",
            "time to read this scrape from Redis",
            value=time.monotonic() - began,
        )

    def _served(self) -> Iterator[Metric]:
        replications = self.reader.replications()
        labels = ["source", "target"]
        state = GaugeMetricFamily(
            "srm_replication_state", "1 for the replication's current state", labels=[*labels, "state"]
        )
        lag_status = GaugeMetricFamily(
            "srm_replication_lag_status", "lag evaluation: 0 NOTFOUND, 1 OK, 2 WARN, 3 ERR", labels=labels
        )
        total_lag = GaugeMetricFamily(
            "srm_replication_records_lag", "records left to replicate", labels=labels
        )
        for health in replication_healths(self.reader, replications):
            for candidate in ReplicationState:
                state.add_metric([health.source, health.target, candidate], float(candidate is health.state))
            lag_status.add_metric([health.source, health.target], LAG_STATUS_CODE[health.lag.status])
            total_lag.add_metric([health.source, health.target], health.lag.total_lag)
        yield from (state, lag_status, total_lag)
        yield from self._partitions(replications)
        yield from self._topics(replications)

    def _partitions(self, replications: list) -> Iterator[Metric]:
        labels = ["source", "target", "topic", "partition"]
        lag = GaugeMetricFamily("srm_partition_records_lag", "latest records lag", labels=labels)
        seconds = GaugeMetricFamily(
            "srm_partition_lag_seconds", "latest lag in seconds (NaN: unknown)", labels=labels
        )
        for replication in replications:
            for (topic, partition), value in sorted(self.reader.partition_latest(replication).items()):
                key = [replication.source, replication.target, topic, str(partition)]
                lag.add_metric(key, _number(value.get("records_lag")))
                seconds.add_metric(key, _number(value.get("lag_seconds")))
        return iter((lag, seconds))

    def _topics(self, replications: list) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "srm_topic_metric",
            f"the metric over the newest {NEWEST_WINDOW} window",
            labels=["source", "target", "topic", "metric"],
        )
        keys = [
            (r, topic, metric) for r in replications for topic in sorted(r.topics) for metric in TOPIC_METRICS
        ]
        series = [
            layout.SeriesId(r.target, r.source, topic, layout.WHOLE_TOPIC, metric)
            for r, topic, metric in keys
        ]
        for (replication, topic, metric), window in zip(
            keys, self.reader.newest_windows(series, NEWEST_WINDOW), strict=True
        ):
            if window is not None:
                family.add_metric(
                    [replication.source, replication.target, topic, metric],
                    point_of(METRICS[metric].kind, window).value,
                )
        return iter((family,))


def exposition(reader: MetricsReader) -> bytes:
    registry = CollectorRegistry()
    registry.register(ServedMetrics(reader))
    return generate_latest(registry) + generate_latest(REQUESTS_REGISTRY)
