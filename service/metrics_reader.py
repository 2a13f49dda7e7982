"""Reads rollups and latest values from Redis through the aggregator's layout: the only Redis reader.

Views never touch Redis; they ask this module for typed answers. Several keys are always fetched in one
pipeline (one round trip), so a bulk status over every replication costs a handful of round trips.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import redis
from redis.client import Pipeline

from contract import redis_layout as layout
from contract.records.raw_metrics import SERVED_METRICS as METRICS
from contract.replication_policy import DefaultReplicationPolicy
from service import point_budget
from service.metric_summary import MetricSeries, merge_subjects, summarize, summarize_columns
from service.window_decoding import metric_windows, window_columns

LOG = logging.getLogger(__name__)
# The names the default policy gives are tried first; other policies are found through the topic index.
DEFAULT_POLICY = DefaultReplicationPolicy()

__all__ = ["MetricsReader", "NotFound", "MetricSeries", "Replication", "PartitionKey", "Windows",
           "window_columns"]

Windows = list[layout.WindowAggregate]
PartitionKey = tuple[str, int]  # (remote topic, partition)
PARTITION = re.compile(r"[0-9]{1,9}")
# redis-py types each command of its sync client as `Awaitable[T] | T` (one signature for both clients).
Members = set[bytes | str]
Fields = dict[bytes | str, bytes | str]
# How many window starts back from a subject's newest window newest_windows looks through for a metric: a
# window holds only the metrics with samples in it (no latency without records); further would read a quiet
# metric's retention.
NEWEST_LOOKBACK = 10


def _fields(window: str, from_ms: int, to_ms: int) -> list[str]:
    """The hash fields of the windows starting in [from, to] (HMGET takes one at least: a start no window
    has stands in for none)."""
    return layout.window_fields(window, from_ms, to_ms) or ["-1"]


def _lookback(newest: bytes | None, size: int) -> list[str]:
    """The fields of a hash's NEWEST_LOOKBACK newest window starts, from its newest (its NEWEST_FIELD)."""
    try:
        last = int(newest) if newest is not None else None
    except ValueError:
        last = None
    if last is None:
        return ["-1"]
    return [str(last - i * size) for i in range(NEWEST_LOOKBACK)][::-1]


class NotFound(LookupError):
    """An unknown cluster, topic, group or metric; the message names which."""


@dataclass(frozen=True)
class Replication:
    source: str
    target: str
    topics: dict[str, str]  # remote topic -> upstream topic


def _string(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode_latest(raw: bytes | str | None) -> dict | None:
    if raw is None:
        return None
    try:
        return layout.decode_latest(raw)
    except ValueError as exc:
        LOG.warning("skipping %s", exc)
        return None


class MetricsReader:
    def __init__(self, client: redis.Redis, max_points: int = point_budget.DEFAULT_MAX_POINTS) -> None:
        self.client = client
        self.max_points = max_points  # per request (service.point_budget)

    def ping(self) -> bool:
        return bool(self.client.ping())

    # --- discovery ------------------------------------------------------------------------------

    def targets(self) -> list[str]:
        return sorted(_string(v) for v in cast(Members, self.client.smembers(layout.targets_key())))

    def sources(self, target: str) -> list[str]:
        return sorted(_string(v) for v in cast(Members, self.client.smembers(layout.sources_key(target))))

    def topics(self, target: str, source: str) -> dict[str, str]:
        """Remote topic -> upstream topic for one replication."""
        raw = cast(Fields, self.client.hgetall(layout.topics_key(target, source)))
        return {_string(k): _string(v) for k, v in raw.items()}

    def replication_pairs(self) -> list[tuple[str, str]]:
        """Every (source, target) the rollups know, in one round trip per level."""
        targets = self.targets()
        pipe = self.client.pipeline(transaction=False)
        for target in targets:
            pipe.smembers(layout.sources_key(target))
        answers = pipe.execute()
        return sorted((_string(s), t) for t, sources in zip(targets, answers, strict=True) for s in sources)

    def replications(self, pairs: Sequence[tuple[str, str]] | None = None) -> list[Replication]:
        pairs = self.replication_pairs() if pairs is None else pairs
        pipe = self.client.pipeline(transaction=False)
        for source, target in pairs:
            pipe.hgetall(layout.topics_key(target, source))
        answers = pipe.execute()
        return [
            Replication(source, target, {_string(k): _string(v) for k, v in topics.items()})
            for (source, target), topics in zip(pairs, answers, strict=True)
        ]

    def replication(self, source: str, target: str) -> Replication:
        self.require_replication(source, target)
        return Replication(source, target, self.topics(target, source))

    def partitions(self, target: str, source: str, topics: Sequence[str]) -> dict[str, list[int]]:
        pipe = self.client.pipeline(transaction=False)
        for topic in topics:
            pipe.smembers(layout.partitions_key(target, source, topic))
        answers = pipe.execute()
        return {
            topic: sorted(int(p) for p in members) for topic, members in zip(topics, answers, strict=True)
        }

    def groups(self, target: str, source: str) -> list[str]:
        members = cast(Members, self.client.smembers(layout.groups_key(target, source)))
        return sorted(_string(v) for v in members)

    def require_target(self, target: str) -> None:
        if not self.client.sismember(layout.targets_key(), target):
            raise NotFound(f"no metrics for target cluster {target!r}")

    def require_replication(self, source: str, target: str) -> None:
        self.require_target(target)
        if not self.client.sismember(layout.sources_key(target), source):
            raise NotFound(f"no replication from {source!r} to {target!r}")

    def require_group(self, source: str, target: str, group: str) -> None:
        self.require_replication(source, target)
        if not self.client.sismember(layout.groups_key(target, source), group):
            raise NotFound(
                f"no checkpointed group {group!r} in the replication from {source!r} to {target!r}"
            )

    def remote_topic(self, source: str, target: str, upstream_topic: str) -> str:
        # Hot path: one round trip checks the replication and the names the default (`source.topic`) and
        # identity policies give; only another policy or separator reads the whole topic index.
        guesses = [DEFAULT_POLICY.format_remote_topic(source, upstream_topic), upstream_topic]
        pipe = self.client.pipeline(transaction=False)
        pipe.sismember(layout.targets_key(), target)
        pipe.sismember(layout.sources_key(target), source)
        pipe.hmget(layout.topics_key(target, source), guesses)
        known_target, known_source, upstreams = pipe.execute()
        if not (known_target and known_source):
            self.require_replication(source, target)
        for remote, upstream in zip(guesses, upstreams, strict=True):
            if upstream is not None and _string(upstream) == upstream_topic:
                return remote
        for remote, upstream in self.topics(target, source).items():
            if upstream == upstream_topic:
                return remote
        raise NotFound(f"no topic {upstream_topic!r} is replicated from {source!r} to {target!r}")

    def downstream_topic(self, target: str, remote_topic: str) -> tuple[str, str]:
        """(source, upstream topic) of a remote topic in ``target``."""
        self.require_target(target)
        sources = self.sources(target)
        pipe = self.client.pipeline(transaction=False)
        for source in sources:
            pipe.hget(layout.topics_key(target, source), remote_topic)
        for source, upstream in zip(sources, pipe.execute(), strict=True):
            if upstream is not None:
                return source, _string(upstream)
        raise NotFound(f"no remote topic {remote_topic!r} in target cluster {target!r}")

    @staticmethod
    def require_metric(metric: str, subject: str = "partition") -> None:
        spec = METRICS.get(metric)
        if spec is None or spec.subject != subject:
            known = sorted(name for name, s in METRICS.items() if s.subject == subject)
            raise NotFound(f"unknown metric {metric!r}; known metrics: {', '.join(known)}")

    # --- series ---------------------------------------------------------------------------------

    def resolve_window(self, from_ms: int, to_ms: int, granularity: str, series: int = 1) -> str:
        """`auto`: the finest window that fits the request's point budget for `series` series."""
        if granularity != "auto":
            return granularity
        return point_budget.auto_window(point_budget.current(self.max_points), series, from_ms, to_ms)

    def charge(self, series: int, window: str, from_ms: int, to_ms: int) -> None:
        """Counts a read against the request's point budget; OverBudget (a 400) past it."""
        point_budget.charge(point_budget.current(self.max_points), series, window, from_ms, to_ms)

    def windows(
        self, series: Sequence[layout.SeriesId], window: str, from_ms: int, to_ms: int, charged: bool = True
    ) -> list[Windows]:
        if charged:
            self.charge(len(series), window, from_ms, to_ms)
        keys = [layout.series_key(one, window) for one in series]
        found = self._windows_of(keys, window, from_ms, to_ms)
        return [metric_windows(found[key], one.metric) for one, key in zip(series, keys, strict=True)]

    def _windows_of(self, keys: Sequence[str], window: str, from_ms: int, to_ms: int) -> dict[str, list]:
        """Key -> the members of its windows starting in [from, to], oldest first, in one pipeline."""
        fields = _fields(window, from_ms, to_ms)
        found = self._per_key(keys, lambda pipe, key: pipe.hmget(key, fields))
        return {key: layout.held(values) for key, values in found.items()}

    def _per_key(self, keys: Sequence[str], read: Callable[[Pipeline, str], object]) -> dict[str, list]:
        """Key -> its reply, in one pipeline: a subject's metrics share a key, read once."""
        unique = list(dict.fromkeys(keys))
        pipe = self.client.pipeline(transaction=False)
        for key in unique:
            read(pipe, key)
        return dict(zip(unique, pipe.execute(), strict=True))

    def metric(
        self, series: Sequence[layout.SeriesId], metric: str, from_ms: int, to_ms: int, granularity: str
    ) -> MetricSeries:
        """One metric over the range, several subjects merged per window."""
        window = self.resolve_window(from_ms, to_ms, granularity, len(series))
        if len(series) == 1:
            self.charge(1, window, from_ms, to_ms)
            key = layout.series_key(series[0], window)
            values = cast(list[bytes | None], self.client.hmget(key, _fields(window, from_ms, to_ms)))
            return summarize_columns(metric, window, window_columns(layout.held(values), metric))
        return summarize(metric, window, merge_subjects(self.windows(series, window, from_ms, to_ms)))

    def topic_metric(self, source: str, target: str, topic: str, metric: str, from_ms: int, to_ms: int,
                     granularity: str, partition: int = layout.WHOLE_TOPIC) -> MetricSeries:
        self.require_metric(metric)
        series = layout.SeriesId(target, source, topic, partition, metric)
        return self.metric([series], metric, from_ms, to_ms, granularity)

    def upstream_topic_metric(self, source: str, target: str, upstream_topic: str, metric: str, from_ms: int,
                              to_ms: int, granularity: str) -> tuple[str, MetricSeries]:
        """(remote topic, metric) of a topic named upstream: the API's hot path, in one round trip when the
        remote topic has the default policy's name (checked against the index, never assumed).

        A topic found in the replication's topic index implies its target and source are known: the
        aggregator writes the three indexes in one batch with one TTL, and the target and source sets
        are refreshed by every topic of theirs. So the target and source are only checked (and named in
        the 404) when the guess misses.
        """
        self.require_metric(metric)
        window = self.resolve_window(from_ms, to_ms, granularity)
        self.charge(1, window, from_ms, to_ms)
        guess = DEFAULT_POLICY.format_remote_topic(source, upstream_topic)
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(layout.topics_key(target, source), guess)
        series = layout.SeriesId(target, source, guess, layout.WHOLE_TOPIC, metric)
        pipe.hmget(layout.series_key(series, window), _fields(window, from_ms, to_ms))
        upstream, values = pipe.execute()
        if upstream is not None and _string(upstream) == upstream_topic:
            return guess, summarize_columns(metric, window, window_columns(layout.held(values), metric))
        remote = self.remote_topic(source, target, upstream_topic)
        return remote, self.topic_metric(source, target, remote, metric, from_ms, to_ms, granularity)

    def replication_metric(
        self, replication: Replication, metric: str, from_ms: int, to_ms: int, granularity: str
    ) -> MetricSeries:
        return self.replications_metric([replication], metric, from_ms, to_ms, granularity)

    def replications_metric(
        self, replications: Sequence[Replication], metric: str, from_ms: int, to_ms: int, granularity: str
    ) -> MetricSeries:
        """One metric over whole replications (all topics), merged per window (a cluster's total)."""
        self.require_metric(metric)
        window = self.resolve_window(from_ms, to_ms, granularity, len(replications))
        found = [self._replication_windows(r, metric, window, from_ms, to_ms) for r in replications]
        return summarize(metric, window, found[0] if len(found) == 1 else merge_subjects(found))

    def replication_level_members(
        self, replications: Sequence[Replication], metrics: Sequence[str], window: str, from_ms: int,
        to_ms: int,
    ) -> dict[tuple[str, str, str], list[bytes]]:
        """(source, target, metric) -> the replication-level members, undecoded (one pipeline, one sorted
        set per replication, whatever its topics): the caller picks the metric by column (window_columns)
        unless it merges several (metric_windows)."""
        series = [layout.SeriesId(r.target, r.source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, m)
                  for r in replications for m in metrics]
        self.charge(len(series), window, from_ms, to_ms)
        keys = [layout.series_key(one, window) for one in series]
        found = self._windows_of(keys, window, from_ms, to_ms)
        return {(s.source, s.target, s.metric): found[key] for s, key in zip(series, keys, strict=True)}

    def _replication_windows(
        self, replication: Replication, metric: str, window: str, from_ms: int, to_ms: int
    ) -> Windows:
        """The replication-level series when the aggregator writes one, else its topics merged."""
        whole = layout.SeriesId(
            replication.target, replication.source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, metric
        )
        windows = self.windows([whole], window, from_ms, to_ms)[0]
        if windows or not replication.topics:
            return windows
        per_topic = [
            layout.SeriesId(replication.target, replication.source, topic, layout.WHOLE_TOPIC, metric)
            for topic in sorted(replication.topics)
        ]
        return merge_subjects(self.windows(per_topic, window, from_ms, to_ms))

    def group_metric(self, replication: Replication, group: str, metric: str, from_ms: int, to_ms: int,
                     granularity: str, topic: str | None = None) -> MetricSeries:
        """A checkpointed group's metric over one remote topic, or over all of the replication's topics."""
        self.require_metric(metric, "group")
        topics = [topic] if topic is not None else sorted(replication.topics)
        series = [
            layout.SeriesId(replication.target, replication.source, t, layout.WHOLE_TOPIC, metric, group)
            for t in topics
        ]
        if not series:
            window = self.resolve_window(from_ms, to_ms, granularity)
            return summarize(metric, window, [])
        return self.metric(series, metric, from_ms, to_ms, granularity)

    # --- latest values and offset history (status, lag evaluation, Prometheus) -----------------------

    def replication_latest(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict | None]:
        """The driver's last report per pair; with the aggregator's probe of the target cluster under
        `target_cluster` when it has one (cluster_reachability_key)."""
        pipe = self.client.pipeline(transaction=False)
        for source, target in pairs:
            pipe.hget(layout.replication_status_key(target, source), "replication")
        targets = sorted({target for _, target in pairs})
        for target in targets:
            pipe.get(layout.cluster_reachability_key(target))
        replies = pipe.execute()
        probes = dict(zip(targets, (_decode_latest(raw) for raw in replies[len(pairs):]), strict=True))
        latest: dict[tuple[str, str], dict | None] = {}
        for pair, raw in zip(pairs, replies[: len(pairs)], strict=True):
            report, probe = _decode_latest(raw), probes.get(pair[1])
            latest[pair] = {**report, "target_cluster": probe} if report and probe else report
        return latest

    def lag_summaries(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict | None]:
        """The aggregator's summary of each (source, target)'s lag verdicts (contract.lag_verdicts); None
        where it wrote none."""
        pipe = self.client.pipeline(transaction=False)
        for source, target in pairs:
            pipe.hget(layout.replication_status_key(target, source), "lag")
        return {pair: _decode_latest(raw) for pair, raw in zip(pairs, pipe.execute(), strict=True)}

    def lag_verdicts(self, replication: Replication) -> list[dict]:
        """Every partition's lag verdict in a replication, as the aggregator stored them (one hash)."""
        key = layout.lag_verdicts_key(replication.target, replication.source)
        raw = cast(Fields, self.client.hgetall(key))
        return [v for v in map(_decode_latest, raw.values()) if v is not None]

    def record_totals(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """(invalid, late) raw-metrics records of each (source, target) so far."""
        pipe = self.client.pipeline(transaction=False)
        for source, target in pairs:
            pipe.get(layout.invalid_records_key(target, source))
            pipe.get(layout.late_records_key(target, source))
        raw = [int(v) if v is not None and _string(v).isdigit() else 0 for v in pipe.execute()]
        return {pair: (raw[2 * i], raw[2 * i + 1]) for i, pair in enumerate(pairs)}

    def subject_totals(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """(subjects kept, new subjects refused so far) of each (source, target): aggregator.subject_cap."""
        pipe = self.client.pipeline(transaction=False)
        for source, target in pairs:
            pipe.zcard(layout.subjects_key(target, source))
            pipe.get(layout.refused_subjects_key(target, source))
        raw = pipe.execute()
        refused = [int(v) if v is not None and _string(v).isdigit() else 0 for v in raw[1::2]]
        return {pair: (int(raw[2 * i]), refused[i]) for i, pair in enumerate(pairs)}

    def partition_latest(self, replication: Replication) -> dict[PartitionKey, dict]:
        topics = sorted(replication.topics)
        pipe = self.client.pipeline(transaction=False)
        for topic in topics:
            pipe.hgetall(layout.partition_latest_key(replication.target, replication.source, topic))
        latest: dict[PartitionKey, dict] = {}
        for topic, fields in zip(topics, pipe.execute(), strict=True):
            for field, raw in fields.items():
                value = _decode_latest(raw)
                if value is not None and PARTITION.fullmatch(_string(field)):
                    latest[(topic, int(_string(field)))] = value
        return latest

    def group_latest(self, replication: Replication, group: str) -> dict[PartitionKey, dict]:
        key = layout.group_latest_key(replication.target, replication.source, group)
        raw = cast(Fields, self.client.hgetall(key))
        latest: dict[PartitionKey, dict] = {}
        for field, value in raw.items():
            topic, _, partition = _string(field).rpartition("|")
            decoded = _decode_latest(value)
            if decoded is not None and topic and PARTITION.fullmatch(partition):
                latest[(topic, int(partition))] = decoded
        return latest

    def offset_windows(self, replication: Replication, metrics: tuple[str, str], since_ms: int, until_ms: int,
                       group: str | None = None) -> dict[PartitionKey, tuple[Windows, Windows]]:
        """Finest windows of an (offset, lag) metric pair per topic-partition, for the lag evaluation."""
        topics = sorted(replication.topics)
        keys = [
            (t, p)
            for t, parts in self.partitions(replication.target, replication.source, topics).items()
            for p in parts
        ]
        series = [
            layout.SeriesId(replication.target, replication.source, topic, partition, metric, group)
            for topic, partition in keys
            for metric in metrics
        ]
        # The health rules' own lookback (a few metrics periods), not a range the caller chose: uncharged.
        found = self.windows(series, layout.FINEST_WINDOW.name, since_ms, until_ms, charged=False)
        pairs = {key: (found[2 * i], found[2 * i + 1]) for i, key in enumerate(keys)}
        return {key: pair for key, pair in pairs.items() if pair[0]}

    def newest_windows(
        self, series: Sequence[layout.SeriesId], window: str
    ) -> list[layout.WindowAggregate | None]:
        """Each series' newest window among its subject's NEWEST_LOOKBACK newest, None without one (latest
        values for the Prometheus exposition): the subject's newest window may hold other metrics only."""
        keys = [layout.series_key(one, window) for one in series]
        newest = cast(dict[str, bytes | None],
                      self._per_key(keys, lambda pipe, key: pipe.hget(key, layout.NEWEST_FIELD)))
        size = layout.WINDOWS[window].size_ms
        found = self._per_key(keys, lambda pipe, key: pipe.hmget(key, _lookback(newest[key], size)))
        return [next(iter(metric_windows(layout.held(found[key])[::-1], one.metric)), None)
                for one, key in zip(series, keys, strict=True)]
