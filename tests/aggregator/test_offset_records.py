"""Each Kafka partition's task judging its own reports over its offset records in Redis (offset_records)
derives every latest value and verdict the same judging derives over one history of the whole batch
(partition_lag.judge_batch over an offset_history.OffsetHistory holding every partition): at a live
cadence for long enough that windows leave the hot record, with partitions and groups more than a minute
behind (kept deep), partitions first met part-way, a task run twice (a replayed batch) and the records lost
(read back from the stored windows). A group keyed by its group (its partition another task's) is judged
over its partition's stored windows; a task reading the stored windows waits for the merge; a rebuild's
patterns take the records."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any, cast

import pyarrow as pa
import pytest
import redis

from aggregator import offset_records, partition_lag
from aggregator.batch_plan import offset_partials, offset_reports
from aggregator.offset_history import OffsetHistory
from aggregator.partition_lag import Judged
from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.redis_sink import RedisRollupSink
from aggregator.verdict_summaries import VerdictColumns
from aggregator.window_partials import BatchPartials
from contract import redis_layout as layout
from contract.records import raw_metrics
from contract.records.raw_metrics import GroupMetrics, PartitionMetrics, RawMetrics
from contract.replication_policy import metrics_topic
from tests.aggregator.streaming_input import snapshot

pytestmark = pytest.mark.integration

PERIOD = 5_000
RATE = 100  # records a period each partition's end offset moves


def reports(source: str, partitions: range, seq: int, ts: int, group_partition: int | None = None
            ) -> list[tuple[int, RawMetrics]]:
    """(Kafka partition, report) of each partition and its group at `ts` (report `seq` of the run): every
    5th partition 150 s behind, every 3rd group 200 s behind. A group goes to its partition's Kafka partition
    (keyed by its topic partition), or to `group_partition`."""
    out: list[tuple[int, RawMetrics]] = []
    for p in partitions:
        topic, number = f"{source}.t{p // 10}", p % 10
        end = seq * RATE + p
        lag = RATE * 150_000 // PERIOD if p % 5 == 0 else (seq + p) % 7
        kafka = p % 2
        out.append((kafka, PartitionMetrics(
            ts=ts, period_ms=PERIOD, source=source, target="west", topic=topic, upstream_topic=f"t{p // 10}",
            partition=number, record_count=1, byte_count=10, records_lag=lag, source_end_offset=end,
            upstream_offset=end - lag, target_offset=end - lag)))
        group_lag = RATE * 200_000 // PERIOD if p % 3 == 0 else (2 * seq + p) % 11
        out.append((kafka if group_partition is None else group_partition, GroupMetrics(
            ts=ts, period_ms=PERIOD, source=source, target="west", group=f"g{p % 4}", topic=topic,
            upstream_topic=f"t{p // 10}", partition=number, group_upstream_offset=end - group_lag,
            group_downstream_offset=end - group_lag, group_lag=group_lag)))
    return out


def kafka_parts(source: str, records: list[tuple[int, RawMetrics]], offsets: dict[int, int]
                ) -> list[pa.Table]:
    parts = []
    for k in (0, 1):
        values = [raw_metrics.encode(r)[1] for q, r in records if q == k]
        parts.append(pa.table({
            "topic": [metrics_topic(source)] * len(values),
            "partition": pa.array([k] * len(values), pa.int32()),
            "offset": pa.array(range(offsets[k], offsets[k] + len(values)), pa.int64()),
            "kafka_ts": pa.array([0] * len(values), pa.int64()), "value": pa.array(values, pa.binary())}))
        offsets[k] += len(values)
    return parts


def answers(sink: RedisRollupSink, parts: list[pa.Table], now: int) -> list[pa.RecordBatch]:
    mapper = sink.task_function(sink.state(), now)
    return [a for part in parts for a in mapper(iter(part.to_batches(max_chunksize=50)))]


def derived(values: pa.Table, verdicts: pa.Table) -> dict[tuple[str, str], str]:
    """(hash key, field) -> JSON of latest values (offset_records.VALUES_SCHEMA) and verdicts."""
    out = {(k, f): text for k, f, _, text in zip(*(values[c].to_pylist() for c in values.column_names),
                                                 strict=True)}
    for (target, source), columns in VerdictColumns.by_replication(verdicts).items():
        for name, text in zip(columns.fields, columns.text, strict=True):
            out[(layout.lag_verdicts_key(target, source), name)] = text
    return out


def judged_whole(judged: Judged) -> dict[tuple[str, str], str]:
    values, verdicts, _ = offset_records.judged_rows(judged)
    return derived(values, verdicts)


def written(client: redis.Redis, batch: BatchPartials, wanted: Iterable[tuple[str, str]]
            ) -> dict[tuple[str, str], str | None]:
    """What the tasks of `batch` wrote to each (hash key, field) of `wanted`, or left to the driver (a subject
    met first: the batch's values and verdicts)."""
    left = derived(batch.values, batch.verdicts)
    pipe = client.pipeline(transaction=False)
    wanted = sorted(wanted)
    for key, name in wanted:
        pipe.hget(key, name)
    return {k: left.get(k, None if v is None else v.decode()) for k, v in zip(wanted, pipe.execute(),
                                                                              strict=True)}


def sink_of(redis_url: str, merge_in_background: bool = False) -> RedisRollupSink:
    return RedisRollupSink(redis_url, f"records_{uuid.uuid4().hex[:8]}", 600_000, "west",
                           merge_in_background).bind("q")


def records_of(client: redis.Redis, source: str) -> list[bytes]:
    return list(client.scan_iter(f"srm:offrec:{{west|{metrics_topic(source)}}}:*"))


def test_tasks_judge_what_one_history_of_the_whole_batch_judges(redis_url: str, monkeypatch):
    client = redis.Redis.from_url(redis_url)
    source = f"e{uuid.uuid4().hex[:6]}"
    sink = sink_of(redis_url, merge_in_background=True)  # tasks reading stored windows wait for its merges
    whole = OffsetHistory()
    offsets = {0: 0, 1: 0}
    base = (int(time.time() * 1000) // 10_000 - 40) * 10_000  # the run's windows end before the clock
    seq, deep_counts = 0, []
    for batch_id in range(14):
        partitions = range(40) if batch_id >= 2 else range(36)  # 4 partitions first met at batch 2
        records = []
        for _ in range(4):  # 20 s a batch: windows leave the hot record from batch 6 on
            seq += 1
            records += reports(source, partitions, seq, base + seq * PERIOD)
        now = base + seq * PERIOD + 1_000
        if batch_id == 9:  # the records lost: every partition read back from the stored windows
            client.delete(*records_of(client, source))
        parts = kafka_parts(source, records, offsets)
        tasks = answers(sink, parts, now)
        if batch_id == 4:  # Spark runs the batch's tasks again (a replay): the same answers, the same Redis
            latest = snapshot(client, f"srm:latest:{{west|{source}|*")
            again = answers(sink, parts, now)
            assert snapshot(client, f"srm:latest:{{west|{source}|*") == latest
            first, second = (collect(pa.Table.from_batches(a, schema=PARTS_SCHEMA)).partials
                             for a in (tasks, again))
            assert derived(first.values, first.verdicts) == derived(second.values, second.verdicts)
        batch = collect(pa.Table.from_batches(tasks, schema=PARTS_SCHEMA)).partials
        theirs = judged_whole(partition_lag.judge_batch(
            offset_reports(batch.latest), whole, offset_partials(batch.windows), client, lambda: None))
        mine = written(client, batch, theirs)
        assert len(theirs) >= 2 * len(partitions)
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        assert not differ, f"batch {batch_id}: {len(differ)} differ, e.g. {differ[0]}: " \
                           f"{mine.get(differ[0])} != {theirs.get(differ[0])}"
        sink.write(batch, batch_id, require_state=batch_id > 0)
        deep = [offset_records.OffsetRecord.decode(cast(bytes | None, client.get(keys[1])),
                                                   offset_records.TASK_SLOTS - 2)
                for keys in (layout.offset_record_keys("west", metrics_topic(source), k) for k in (0, 1))]
        deep_counts.append(sum(len(r.newest) for r in deep))
    sink.close(30)
    assert max(deep_counts) >= 8, deep_counts  # the lagging partitions were kept deep
    # Hot or deep is decided after a read of the stored windows: the first batch and the one after the
    # records were lost keep deep only what the batches between keep deep, not every partition they read.
    assert deep_counts[0] < 36 and deep_counts[9] <= max(deep_counts[:9]) < 40, deep_counts


def test_a_group_keyed_by_its_group_is_judged_over_its_partitions_stored_windows(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    source = f"e{uuid.uuid4().hex[:6]}"
    sink = sink_of(redis_url)
    base = (int(time.time() * 1000) // 10_000 - 20) * 10_000
    offsets = {0: 0, 1: 0}
    partition = range(2, 3)  # Kafka partition 0; its group's reports go to Kafka partition 1
    for batch_id in range(3):
        seq = 4 * batch_id
        records = [r for s in range(seq + 1, seq + 5)
                   for r in reports(source, partition, s, base + s * PERIOD, group_partition=1)]
        now = base + (seq + 4) * PERIOD + 1_000
        unjudged = PartitionPartials("west", None, now)  # no Redis: the reports as the task reads them
        read = [a for part in kafka_parts(source, records, dict(offsets))
                for a in unjudged(iter(part.to_batches()))]
        latest = collect(pa.Table.from_batches(read, schema=PARTS_SCHEMA)).partials.latest
        group_reports = offset_reports(latest)
        stored = judged_whole(partition_lag.judge_batch(
            group_reports.filter(pa.compute.equal(group_reports["kind"], "group")), OffsetHistory(), {},
            client, lambda: None))
        batch = collect(pa.Table.from_batches(answers(sink, kafka_parts(source, records, offsets), now),
                                              schema=PARTS_SCHEMA)).partials
        group_key, field = layout.group_latest_key("west", source, "g2"), f"{source}.t0|2"
        mine = written(client, batch, [(group_key, field)])
        assert mine[(group_key, field)] == stored[(group_key, field)]
        if batch_id:
            assert cast(dict[str, Any], layout.decode_latest(stored[(group_key, field)]))[
                "lag_seconds"] is not None
        sink.write(batch, batch_id, require_state=batch_id > 0)
    keys = layout.offset_record_keys("west", metrics_topic(source), 1)
    hot, deep = cast(list[bytes | None], client.mget(keys))
    held = offset_records.OffsetRecord.decode(hot, offset_records.HOT_WINDOWS).keys.num_rows + \
        offset_records.OffsetRecord.decode(deep, offset_records.TASK_SLOTS - 2).keys.num_rows
    assert held == 0  # the group's task keeps no row of a partition whose windows it is not given


def test_a_task_reads_the_stored_windows_once_the_merge_has_written_the_batches_before_its_own(
        redis_url: str):
    client = redis.Redis.from_url(redis_url)
    scope = f"wait_{uuid.uuid4().hex[:8]}"
    client.set(layout.applied_batch_key(scope), 3)
    offset_records.MergeWait(scope, 3)(client)  # merged already
    offset_records.MergeWait(scope, None)(client)  # no batch committed
    offset_records.MergeWait(f"gone_{scope}", 7)(client)  # no merge recorded: Redis lost, nothing to wait for
    threading.Timer(0.4, client.set, (layout.finest_applied_batch_key(scope), 5)).start()
    began = time.monotonic()
    offset_records.MergeWait(scope, 5)(client)
    assert time.monotonic() - began >= 0.3
    with pytest.raises(TimeoutError, match="batch 6's windows not merged"):
        offset_records.MergeWait(scope, 6, timeout_s=0.2)(client)


def test_a_rebuild_clears_the_targets_offset_records(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    target = f"t{uuid.uuid4().hex[:6]}"
    keys = [*layout.offset_record_keys(target, metrics_topic("east"), 3),
            *layout.offset_record_keys(f"{target}x", metrics_topic("east"), 3)]
    for key in keys:
        client.set(key, b"record")
    matched = {k for pattern in layout.target_rollup_patterns(target, "q") for k in client.scan_iter(pattern)}
    assert matched == {k.encode() for k in keys[:2]}
    client.delete(*keys)
