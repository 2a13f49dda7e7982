"""foreachBatch sink: one Spark micro-batch of rollups -> one Redis transaction.

A batch's windows, its discovery-index updates and the batch id go in a single MULTI, so Redis holds
either all of a batch or none of it. A replayed batch (Spark re-runs the last batch after a crash) is
skipped when its id is not above the stored one; and since windows carry absolute values, even a
replay that got through would rewrite identical members.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis
from pyspark.sql import DataFrame, Row

from aggregator import redis_layout as layout

LOG = logging.getLogger(__name__)


class RedisRollupSink:
    def __init__(self, redis_url: str, query_name: str) -> None:
        self.redis_url = redis_url
        self.query_name = query_name
        self._client: redis.Redis | None = None
        self._upsert = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url)
            self._upsert = self._client.register_script(layout.UPSERT_WINDOW_LUA)
        return self._client

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()
        self.write(rows, batch_id)

    def last_batch_id(self) -> int | None:
        value = self.client.get(layout.batch_key(self.query_name))
        return None if value is None else int(value)

    def write(self, rows: Iterable[Row], batch_id: int) -> None:
        began = time.monotonic()
        last = self.last_batch_id()
        if last is not None and batch_id <= last:
            LOG.info("%s: batch %d already in Redis (last %d), skipped", self.query_name, batch_id, last)
            return
        pipe = self.client.pipeline(transaction=True)
        count = 0
        for row in rows:
            self._write_row(pipe, row)
            count += 1
        pipe.set(layout.batch_key(self.query_name), batch_id)
        pipe.execute()
        LOG.debug("%s: batch %d wrote %d windows in %.0f ms", self.query_name, batch_id, count,
                  (time.monotonic() - began) * 1000)

    def _write_row(self, pipe: redis.client.Pipeline, row: Row) -> None:
        series = layout.SeriesId(row["target"], row["source"], row["topic"], int(row["partition"]),
                                 row["metric"], row["group"] or None)
        agg = layout.WindowAggregate(int(row["window_start"]), row["count"], row["sum"], row["min"],
                                     row["max"], row["last"])
        keys, argv = layout.upsert_args(series, agg)
        self._upsert(keys=keys, args=argv, client=pipe)  # type: ignore[misc]
        self._index(pipe, series, row["upstream_topic"])

    @staticmethod
    def _index(pipe: redis.client.Pipeline, series: layout.SeriesId, upstream_topic: str | None) -> None:
        ttl = layout.INDEX_TTL_MS
        if upstream_topic:
            topics = layout.topics_key(series.target, series.source)
            pipe.hset(topics, series.topic, upstream_topic)
            pipe.pexpire(topics, ttl)
        entries = [
            (layout.targets_key(), series.target),
            (layout.sources_key(series.target), series.source),
        ]
        if series.group is not None:
            entries.append((layout.groups_key(series.target, series.source), series.group))
        if series.partition != layout.WHOLE_TOPIC:
            entries.append((layout.partitions_key(series.target, series.source, series.topic),
                            str(series.partition)))
        for key, member in entries:
            pipe.sadd(key, member)
            pipe.pexpire(key, ttl)
