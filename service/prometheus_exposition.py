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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contract import redis_layout as layout
from contract.lag_evaluation import Status
from contract.records.raw_metrics import SERVED_METRICS as METRICS
from contract.status import ReplicationState
from service.health.replication_health import worst_lag_seconds
from service.health.replication_overview import replication_healths
from service.metric_summary import point_of
from service.metrics_reader import NEWEST_LOOKBACK, MetricsReader
from service.sites.advertiser import advertiser_restarts

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
        seconds = GaugeMetricFamily(
            "srm_replication_lag_seconds", "worst partition's latest lag in seconds (NaN: unknown)",
            labels=labels,
        )
        report_age = GaugeMetricFamily(
            "srm_replication_report_age_seconds", "age of the driver's last report (NaN: none yet)",
            labels=labels,
        )
        period = GaugeMetricFamily(
            "srm_replication_metrics_period_seconds", "the driver's metrics.period", labels=labels
        )
        reader_labels = [*labels, "reader"]
        rejected = CounterMetricFamily(
            "srm_driver_records_rejected", "records the driver's reader of an internal topic refused (too "
            "large, undecodable, out of range), since the reporting driver process started",
            labels=reader_labels,
        )
        reading = GaugeMetricFamily(
            "srm_driver_reader_up", "1 while the driver's reader of an internal topic reads, per its last "
            "report", labels=reader_labels,
        )
        now = time.time()
        for health in replication_healths(self.reader, replications):
            key = [health.source, health.target]
            for candidate in ReplicationState:
                state.add_metric([*key, candidate], float(candidate is health.state))
            lag_status.add_metric(key, LAG_STATUS_CODE[health.lag.status])
            total_lag.add_metric(key, health.lag.total_lag)
            seconds.add_metric(key, _number(health.lag_seconds))
            age = now - health.report_ts / 1000 if health.report_ts is not None else math.nan
            report_age.add_metric(key, age)
            period.add_metric(key, health.metrics_period_ms / 1000)
            for reader in health.readers:
                rejected.add_metric([*key, reader.reader], reader.rejected)
                reading.add_metric([*key, reader.reader], float(reader.alive))
        yield from (state, lag_status, total_lag, seconds, report_age, period, rejected, reading)
        yield from self._record_totals(replications)
        yield from self._partitions(replications)
        yield from self._groups(replications, now)
        yield from self._topics(replications)
        yield from self._aggregator_restarts()

    def _record_totals(self, replications: list) -> Iterator[Metric]:
        labels = ["source", "target"]
        invalid = CounterMetricFamily(
            "srm_raw_records_invalid", "raw-metrics records that did not parse", labels=labels
        )
        late = CounterMetricFamily(
            "srm_raw_records_late", "raw-metrics records that came after their window closed", labels=labels
        )
        totals = self.reader.record_totals([(r.source, r.target) for r in replications])
        for (source, target), (bad, too_late) in totals.items():
            invalid.add_metric([source, target], bad)
            late.add_metric([source, target], too_late)
        return iter((invalid, late, *self._subject_totals(replications)))

    def _subject_totals(self, replications: list) -> tuple[Metric, Metric]:
        labels = ["source", "target"]
        kept = GaugeMetricFamily("srm_replication_subjects",
                                 "topic, partition and group subjects the aggregator keeps series of "
                                 "(at most aggregator.max.subjects.per.replication)", labels=labels)
        refused = CounterMetricFamily("srm_subjects_refused",
                                      "new subjects refused because the replication had the most the "
                                      "aggregator keeps (once per subject and batch)", labels=labels)
        totals = self.reader.subject_totals([(r.source, r.target) for r in replications])
        for (source, target), (count, refusals) in totals.items():
            kept.add_metric([source, target], count)
            refused.add_metric([source, target], refusals)
        return kept, refused

    def _groups(self, replications: list, now: float) -> Iterator[Metric]:
        labels = ["source", "target", "group"]
        seconds = GaugeMetricFamily(
            "srm_group_lag_seconds", "worst partition's latest group lag in seconds (NaN: unknown)",
            labels=labels,
        )
        records = GaugeMetricFamily("srm_group_records_lag", "latest group lag in records", labels=labels)
        age = GaugeMetricFamily(
            "srm_group_checkpoint_age_seconds", "age of the group's newest checkpoint report", labels=labels
        )
        for replication in replications:
            for group in self.reader.groups(replication.target, replication.source):
                latest = self.reader.group_latest(replication, group)
                key = [replication.source, replication.target, group]
                seconds.add_metric(key, _number(worst_lag_seconds(latest)))
                lags = [v["group_lag"] for v in latest.values()
                        if isinstance(v.get("group_lag"), int | float)]
                records.add_metric(key, float(sum(lags)) if lags else math.nan)
                newest = max((v["ts"] for v in latest.values() if isinstance(v.get("ts"), int)), default=None)
                age.add_metric(key, now - newest / 1000 if newest is not None else math.nan)
        return iter((seconds, records, age))

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

    def _aggregator_restarts(self) -> Iterator[Metric]:
        """The aggregator's restarts per target cluster, counted by its supervisor in Redis."""
        queries = CounterMetricFamily(
            "srm_aggregator_query_restarts", "rollup query restarts (after it failed or stalled)",
            labels=["target"],
        )
        targets = self.reader.targets()
        pipe = self.reader.client.pipeline(transaction=False)
        for target in targets:
            pipe.hget(layout.aggregator_restarts_key(target), "query")
        for target, query in zip(targets, pipe.execute(), strict=True):
            queries.add_metric([target], int(query or 0))
        return iter((queries,))

    def _topics(self, replications: list) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "srm_topic_metric",
            f"the metric over its newest {NEWEST_WINDOW} window among the {NEWEST_LOOKBACK} window starts "
            "up to the topic's newest (none: no samples in them)",
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


class GatewayMetrics(Collector):
    """A gateway worker's own counts: how its calls to each site ended (``site_outcomes``), the
    advertisements its discovery refused, and whether discovery reads. Per process, like the request
    counters (``pid`` label); Prometheus sums them."""

    def __init__(self, gateway: object | None, registry: object | None) -> None:
        self.gateway, self.registry = gateway, registry

    def collect(self) -> Iterator[Metric]:
        pid = str(os.getpid())
        outcomes = getattr(self.gateway, "outcomes", None)
        if outcomes is not None:
            answers = CounterMetricFamily(
                "srm_gateway_site_answers", "how the gateway's calls to each site ended: ok, timeout, "
                "malformed (an answer it could not use), not_called (circuit breaker, not allowed), expired, "
                "error", labels=["site", "outcome", "pid"],
            )
            for (site, outcome), count in sorted(outcomes.totals().items()):
                answers.add_metric([site, outcome, pid], count)
            dropped = CounterMetricFamily(
                "srm_gateway_site_frames_dropped", "Grafana frames of a site's answer left out as malformed",
                labels=["site", "pid"],
            )
            for site, count in sorted(outcomes.dropped_totals().items()):
                dropped.add_metric([site, pid], count)
            yield from (answers, dropped)
        if self.registry is not None and hasattr(self.registry, "is_alive"):
            refused = CounterMetricFamily(
                "srm_gateway_advertisements_rejected", "service advertisements refused (too large, broken, "
                "forged, beyond the caps)", labels=["pid"])
            refused.add_metric([pid], int(getattr(self.registry, "skipped_records", 0)))
            yield refused
            up = GaugeMetricFamily("srm_gateway_discovery_up", "1 while the discovery of other sites reads",
                                   labels=["pid"])
            up.add_metric([pid], float(bool(self.registry.is_alive())))
            yield up


def exposition(reader: MetricsReader, gateway: object | None = None, registry: object | None = None) -> bytes:
    """The text of one scrape; ``gateway`` and ``registry``: this worker's, when it is a gateway."""
    collectors = CollectorRegistry()
    collectors.register(ServedMetrics(reader))
    collectors.register(GatewayMetrics(gateway, registry))
    collectors.register(AdvertiserMetrics())
    return generate_latest(collectors) + generate_latest(REQUESTS_REGISTRY)


class AdvertiserMetrics(Collector):
    """The restarts of the advertiser process the gunicorn master supervises (one count per deployment,
    shared by the workers: no ``pid`` label)."""

    def collect(self) -> Iterator[Metric]:
        restarts = advertiser_restarts()
        if restarts is not None:
            yield CounterMetricFamily("srm_service_advertiser_restarts", "times the advertiser process died "
                                      "and was started again", value=restarts)
