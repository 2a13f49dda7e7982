"""foreachBatch sink: one Spark micro-batch of rollups -> one Redis transaction.

A batch's windows, its discovery-index updates, latest values, invalid-record counts and the batch id
go in a single MULTI, so Redis holds either all of a batch or none of it. A replayed batch (Spark
re-runs the last batch after a crash) is skipped when its id is not above the stored one; and since
windows carry absolute values, latest values only move forward in `ts` and counters only add the
change of a window, even a replay that got through would leave Redis as it was.

Latest values need history (lag in seconds, recent record counts): it is read before the MULTI from
the windows already stored, overlaid with the batch's own windows. One query writes one target, so
nothing else changes those keys in between.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from pyspark.sql import DataFrame, Row

from aggregator import latest_values
from aggregator import redis_layout as layout
from driver.policy import metrics_topic

LOG = logging.getLogger(__name__)
FINEST = layout.FINEST_WINDOW
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on the thread running a micro-batch


@dataclass
class BatchPlan:
    """A batch's rows sorted by what the sink does with them."""

    windows: list[tuple[layout.SeriesId, layout.WindowAggregate, str | None]] = field(default_factory=list)
    invalid: list[tuple[layout.SeriesId, layout.WindowAggregate, str]] = field(default_factory=list)
    # subject -> newest record (decoded payload) in the batch
    latest: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    # finest windows of the batch, for history reads: series -> start -> aggregate
    fresh: dict[layout.SeriesId, dict[int, layout.WindowAggregate]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[Row | dict[str, Any]]) -> BatchPlan:
        plan = cls()
        for row in rows:
            plan.add(row)
        return plan

    def add(self, row: Row | dict[str, Any]) -> None:
        series = layout.SeriesId(row["target"], row["source"], row["topic"], int(row["partition"]),
                                 row["metric"], row["group"] or None)
        agg = layout.WindowAggregate(int(row["window_start"]), row["count"], row["sum"], row["min"],
                                     row["max"], row["last"])
        if series.metric == layout.LATEST_METRIC:
            self._add_latest(series, row["payload"])
        elif series.metric == layout.INVALID_RECORDS_METRIC:
            self.invalid.append((series, agg, row["payload"] or ""))
        else:
            self.windows.append((series, agg, row["upstream_topic"]))
            self.fresh.setdefault(series, {})[agg.start_ms] = agg

    def _add_latest(self, series: layout.SeriesId, payload: str | None) -> None:
        if payload is None:
            return
        record = json.loads(payload)
        kind = record.get("kind", "")
        subject = (kind, series.target, series.source, series.topic, str(series.partition),
                   series.group or "")
        known = self.latest.get(subject)
        if known is None or known["ts"] < record["ts"]:
            self.latest[subject] = record


@dataclass
class BatchIndex:
    """Discovery-index entries of one batch, deduplicated."""

    hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    sets: dict[str, set[str]] = field(default_factory=dict)


class RedisRollupSink:
    def __init__(self, redis_url: str, query_name: str) -> None:
        self.redis_url = redis_url
        self.query_name = query_name
        # Batch ids restart at 0 with a new checkpoint: the guard is per checkpoint (Spark's query id,
        # kept in the checkpoint), or a fresh checkpoint would skip batches an old one had committed.
        self.batch_scope = query_name
        self._client: redis.Redis | None = None
        self._scripts: dict[str, Any] = {}

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url)
            self._scripts = {
                "window": self._client.register_script(layout.UPSERT_WINDOW_LUA),
                "latest": self._client.register_script(layout.UPSERT_LATEST_LUA),
                "delta": self._client.register_script(layout.COUNT_DELTA_LUA),
            }
        return self._client

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        query_id = batch.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        self.batch_scope = f"{self.query_name}:{query_id}" if query_id else self.query_name
        began = time.monotonic()
        # Arrow hands the rows over in columnar batches: several times faster than pickled Rows.
        rows = batch.toArrow().to_pylist()
        LOG.debug("%s: batch %d: %d rows computed and collected in %.0f ms", self.query_name, batch_id,
                  len(rows), (time.monotonic() - began) * 1000)
        self.write(rows, batch_id)

    def last_batch_id(self) -> int | None:
        value = self.client.get(layout.batch_key(self.batch_scope))
        return None if value is None else int(value)

    def write(self, rows: Iterable[Row | dict[str, Any]], batch_id: int) -> None:
        began = time.monotonic()
        last = self.last_batch_id()
        if last is not None and batch_id <= last:
            LOG.info("%s: batch %d already in Redis (last %d), skipped", self.query_name, batch_id, last)
            return
        plan = BatchPlan.of(rows)
        latest = self._latest_values(plan)
        pipe = self.client.pipeline(transaction=True)
        index = BatchIndex()
        for series, agg, excerpt in plan.invalid:
            self._write_invalid(pipe, series, agg, excerpt)
            self._index_entries(index, series, None)
        for series, agg, upstream_topic in plan.windows:
            self._upsert_window(pipe, series, agg)
            self._index_entries(index, series, upstream_topic)
        self._write_index(pipe, index)
        for key, hash_field, value in latest:
            keys, argv = layout.latest_args(key, hash_field, value)
            self._scripts["latest"](keys=keys, args=argv, client=pipe)
        pipe.set(layout.batch_key(self.batch_scope), batch_id, px=layout.INDEX_TTL_MS)
        pipe.execute()
        LOG.debug("%s: batch %d wrote %d windows, %d latest values in %.0f ms", self.query_name, batch_id,
                  len(plan.windows), len(latest), (time.monotonic() - began) * 1000)

    # --- windows, indexes, invalid records ----------------------------------------------------------

    def _upsert_window(self, pipe: redis.client.Pipeline, series: layout.SeriesId,
                       agg: layout.WindowAggregate) -> None:
        keys, argv = layout.upsert_args(series, agg)
        self._scripts["window"](keys=keys, args=argv, client=pipe)

    def _write_invalid(self, pipe: redis.client.Pipeline, series: layout.SeriesId,
                       agg: layout.WindowAggregate, excerpt: str) -> None:
        LOG.warning("%s: %d raw record(s) that do not parse in %s partition %d at offsets %d..%d "
                    "(window %d, counted so far); last: %r", self.query_name, int(agg.count),
                    metrics_topic(series.source), series.partition, int(agg.min), int(agg.max),
                    agg.start_ms, excerpt)
        total = layout.invalid_records_key(series.target, series.source)
        delta_keys = [layout.series_key(series, FINEST.name), total]
        self._scripts["delta"](keys=delta_keys, args=[agg.start_ms, int(agg.count), layout.INDEX_TTL_MS],
                               client=pipe)
        self._upsert_window(pipe, series, agg)

    @staticmethod
    def _index_entries(index: BatchIndex, series: layout.SeriesId, upstream_topic: str | None) -> None:
        if upstream_topic:
            index.hashes.setdefault(layout.topics_key(series.target, series.source), {})[series.topic] = \
                upstream_topic
        entries = [
            (layout.targets_key(), series.target),
            (layout.sources_key(series.target), series.source),
        ]
        if series.group is not None:
            entries.append((layout.groups_key(series.target, series.source), series.group))
        if series.partition != layout.WHOLE_TOPIC and series.topic != layout.ALL_TOPICS:
            entries.append((layout.partitions_key(series.target, series.source, series.topic),
                            str(series.partition)))
        for key, member in entries:
            index.sets.setdefault(key, set()).add(member)

    @staticmethod
    def _write_index(pipe: redis.client.Pipeline, index: BatchIndex) -> None:
        # Once per key and batch: a batch touches the same few index keys from thousands of windows.
        for key, mapping in sorted(index.hashes.items()):
            pipe.hset(key, mapping=mapping)
            pipe.pexpire(key, layout.INDEX_TTL_MS)
        for key, members in sorted(index.sets.items()):
            pipe.sadd(key, *sorted(members))
            pipe.pexpire(key, layout.INDEX_TTL_MS)

    # --- latest values --------------------------------------------------------------------------------

    def _latest_values(self, plan: BatchPlan) -> list[tuple[str, str, dict[str, Any]]]:
        """(hash key, field, value) of every latest value the batch changes."""
        replications = self._replication_records(plan)
        reads = self.client.pipeline(transaction=False)
        wanted: list[tuple[str, tuple[str, ...], dict[str, Any], layout.SeriesId, int, int]] = []
        for subject, record in plan.latest.items():
            kind, target, source, topic, partition, _ = subject
            if kind in ("partition", "group"):
                series = layout.SeriesId(target, source, topic, int(partition), "source_end_offset")
                ts = int(record["ts"])
                wanted.append((kind, subject, record, series, ts - latest_values.HISTORY_SPAN_MS, ts))
        for (target, source), record in replications.items():
            series = layout.SeriesId(target, source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "record_count")
            ts, period = int(record["ts"]), latest_values.effective_period_ms(record.get("period_ms"))
            subject = ("replication", target, source)
            wanted.append(("replication", subject, record, series,
                           ts - latest_values.recent_span_ms(period) + 1, ts))
        for _, _, _, series, low, high in wanted:
            reads.zrangebyscore(layout.series_key(series, FINEST.name), low, high)
        stored = reads.execute() if wanted else []
        return [self._latest_value(kind, subject, record, self._history(plan, series, members, low, high))
                for (kind, subject, record, series, low, high), members in zip(wanted, stored, strict=True)]

    def _replication_records(self, plan: BatchPlan) -> dict[tuple[str, str], dict[str, Any]]:
        """Replications whose latest value the batch changes: a new report, or new record-count windows
        for the stored report (its partition records may come in a later batch than itself)."""
        records = {(s[1], s[2]): r for s, r in plan.latest.items() if s[0] == "replication"}
        touched = sorted({(s.target, s.source) for s in plan.fresh
                          if s.topic == layout.ALL_TOPICS and s.metric == "record_count"})
        if not touched:
            return records
        reads = self.client.pipeline(transaction=False)
        for target, source in touched:
            reads.hget(layout.replication_status_key(target, source), "replication")
        for subject, raw in zip(touched, reads.execute(), strict=True):
            if raw is None:
                continue
            stored = layout.decode_latest(raw)
            if subject not in records or records[subject]["ts"] < stored["ts"]:
                records[subject] = stored
        return records

    @staticmethod
    def _history(plan: BatchPlan, series: layout.SeriesId, members: list[bytes], low: int,
                 high: int) -> list[layout.WindowAggregate]:
        windows = {w.start_ms: w for w in map(layout.decode_member, members)}
        windows.update({start: w for start, w in plan.fresh.get(series, {}).items() if low <= start <= high})
        return [windows[start] for start in sorted(windows)]

    @staticmethod
    def _latest_value(kind: str, subject: tuple[str, ...], record: dict[str, Any],
                      history: list[layout.WindowAggregate]) -> tuple[str, str, dict[str, Any]]:
        if kind == "replication":
            _, target, source = subject
            return (layout.replication_status_key(target, source), "replication",
                    latest_values.replication_latest(record, history))
        _, target, source, topic, partition, group = subject
        if kind == "partition":
            return (layout.partition_latest_key(target, source, topic), partition,
                    latest_values.partition_latest(record, history))
        return (layout.group_latest_key(target, source, group),
                layout.group_latest_field(topic, int(partition)), latest_values.group_latest(record, history))
