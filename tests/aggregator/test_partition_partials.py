"""A batch aggregated per Kafka partition (what each Spark task computes) and merged on the driver gives
exactly the partials of the batch aggregated whole. Pure Arrow: the function mapInArrow runs, fed
Kafka-shaped record batches."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from aggregator import partition_partials, window_partials
from aggregator.batch_plan import BatchPlan, offset_reports
from aggregator.raw_records import flat_table, late_counts, on_time
from contract.records import raw_metrics
from contract.records.raw_metrics import (
    GroupMetrics,
    LatencySummary,
    PartitionMetrics,
    RawMetrics,
    ReplicationMetrics,
)

T0 = 1_700_000_000_000
NOW = T0 + 60_000  # the driver's clock for the batch


def reports(periods: int = 30, step_ms: int = 1_500) -> list[tuple[int, RawMetrics | bytes]]:
    """(Kafka partition, record): partition and group reports placed as the driver keys them (a group's
    beside its topic partition's), a topic's partitions spread over both Kafka partitions, replication
    reports, garbage."""
    out: list[tuple[int, RawMetrics | bytes]] = []
    for k in range(periods):
        ts = T0 + k * step_ms
        for p in range(4):
            count = (k * (p + 3)) % 11
            out.append((p % 2, PartitionMetrics(
                ts=ts, period_ms=1500, source="east", target="west", topic="east.orders",
                upstream_topic="orders", partition=p, record_count=count, byte_count=count * 10,
                replication_latency_ms=LatencySummary(1, 9, 4, 2, count) if count else None,
                records_lag=(k + p) % 5, source_end_offset=k * 20 + p)))
        out.append((1, GroupMetrics(ts=ts, period_ms=1500, source="east", target="west", group="billing",
                                    topic="east.orders", upstream_topic="orders", partition=1,
                                    group_upstream_offset=k, group_downstream_offset=k, group_lag=k % 3)))
        out.append((k % 2, ReplicationMetrics(ts=ts, period_ms=1500, source="east", target="west",
                                              status="RUNNING", tasks=2)))
        if k % 9 == 4:
            out.append((k % 2, b"{not json"))
    return out


def kafka_rows(records: list[tuple[int, RawMetrics | bytes]]) -> pa.Table:
    values = [r if isinstance(r, bytes) else raw_metrics.encode(r)[1] for _, r in records]
    partitions = [p for p, _ in records]
    offsets, seen = [], {0: 0, 1: 0}
    for p in partitions:
        offsets.append(seen[p])
        seen[p] += 1
    return pa.table({"topic": ["srm-metrics.east.internal"] * len(values),
                     "partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64()),
                     "kafka_ts": pa.array([T0 + 20_000] * len(values), pa.int64()),
                     "value": pa.array(values, pa.binary())})


def task_answers(kafka: pa.Table, watermark_ms: int | None, batch_rows: int = 7) -> pa.Table:
    """What the tasks of the batch send the driver: one per Kafka partition, fed in small Arrow batches."""
    mapper = partition_partials.PartitionPartials("west", watermark_ms, NOW)
    answers = []
    for p in (0, 1):
        part = kafka.filter(pa.compute.equal(kafka["partition"], p))
        answers += list(mapper(iter(part.to_batches(max_chunksize=batch_rows))))
    return pa.Table.from_batches(answers, schema=partition_partials.PARTS_SCHEMA)


def newest(partials: window_partials.BatchPartials) -> dict[tuple, dict]:
    """The newest record of each subject a batch's partials give (the tasks' reports, offset_reports, and
    the sink's replications, BatchPlan), by subject."""
    plan = BatchPlan.of(partials)
    reports = window_partials.records_of(offset_reports(partials.latest))
    assert len(reports) == len({tuple(r[k] for k in window_partials.SUBJECT_COLUMNS) for r in reports})
    return {tuple(r[k] for k in window_partials.SUBJECT_COLUMNS): r
            for r in [*reports, *plan.replications.values()]}


def canonical(windows: pa.Table) -> list[dict]:
    keys = [*window_partials.KEY_COLUMNS, "window_start"]
    return sorted(windows.to_pylist(), key=lambda r: tuple(str(r[k]) for k in keys))


@pytest.mark.parametrize("watermark_ms", [None, T0 + 21_000])
def test_partials_of_the_partitions_merged_equal_the_partials_of_the_whole_batch(watermark_ms):
    kafka = kafka_rows(reports())
    whole = flat_table(kafka, "west", NOW)
    expected_late = late_counts(whole, watermark_ms)
    expected = window_partials.partials(on_time(whole, watermark_ms))

    collected = partition_partials.collect(task_answers(kafka, watermark_ms))

    assert collected.records == kafka.num_rows and collected.tasks == 2
    assert collected.worker_pids == {os.getpid()}  # here the "executor" is this process
    got = collected.partials
    assert canonical(got.windows) == canonical(expected.windows)
    assert got.windows.schema == window_partials.partials_schema()
    # One candidate per subject and task; the driver keeps the newest (the replication's reports are
    # in both partitions here).
    assert newest(got) == newest(expected)
    assert collected.latest_candidates == expected.latest.num_rows + 1
    assert got.excerpts == expected.excerpts and len(got.excerpts) == 2
    assert got.late == expected_late
    if watermark_ms is not None:
        assert got.late == {("west", "east"): 4 * 14 + 14 + 14}  # every report before T0 + 20 s


def test_a_group_keyed_by_itself_as_an_older_driver_did_is_aggregated_the_same():
    """An older driver keyed a group's reports by the group, so they sat in another Kafka partition than
    their topic partition's: across an upgrade one batch reads the group's reports from two tasks. The
    subject is read from the value, so the batch's partials and newest records are the same."""
    placed = [(p, r) for p, r in reports() if not isinstance(r, bytes)]
    groups = [i for i, (_, r) in enumerate(placed) if isinstance(r, GroupMetrics)]
    assert {placed[i][0] for i in groups} == {1}
    upgraded = [(0 if i in groups[:len(groups) // 2] else p, r) for i, (p, r) in enumerate(placed)]
    expected = window_partials.partials(flat_table(kafka_rows(placed), "west", NOW))
    for records in (placed, upgraded):
        got = partition_partials.collect(task_answers(kafka_rows(records), None)).partials
        assert canonical(got.windows) == canonical(expected.windows)
        assert newest(got) == newest(expected)


def test_whole_topic_rows_of_several_partitions_are_rolled_up_not_repeated():
    collected = partition_partials.collect(task_answers(kafka_rows(reports()), None))
    windows = collected.partials.windows.to_pylist()
    topic = [r for r in windows if r["level"] == "t" and r["kind"] == "partition" and r["window_start"] == T0]
    assert len(topic) == 1
    # Reports at T0, T0+1.5 s ... T0+9 s (k = 0..6) of partitions 0..3: every record counted once.
    assert topic[0]["record_count__n"] == 7 * 4
    assert topic[0]["record_count__sum"] == sum((k * (p + 3)) % 11 for k in range(7) for p in range(4))


def test_a_batch_whose_records_are_all_late_sends_only_the_count():
    kafka = kafka_rows([(0, r) for _, r in reports() if not isinstance(r, bytes)])
    collected = partition_partials.collect(task_answers(kafka, T0 + 3_600_000))
    assert collected.partials.windows.num_rows == 0 and collected.partials.latest.num_rows == 0
    assert collected.partials.late == {("west", "east"): kafka.num_rows}


def test_a_task_with_no_records_sends_nothing_and_no_answers_make_an_empty_batch():
    mapper = partition_partials.PartitionPartials("west", None)
    assert list(mapper(iter([]))) == []
    empty = partition_partials.collect(partition_partials.PARTS_SCHEMA.empty_table())
    assert empty.partials.windows.num_rows == 0 and empty.records == 0 and empty.partials.latest.num_rows == 0


def test_partials_reach_the_driver_in_fewer_bytes_than_the_raw_records():
    kafka = kafka_rows(reports(periods=600, step_ms=100))  # 100 reports per series and 10 s window
    collected = partition_partials.collect(task_answers(kafka, None, batch_rows=10_000))
    assert 0 < collected.bytes < kafka["value"].nbytes / 10


def test_answers_of_one_report_a_series_are_compressed_below_the_partials_they_carry():
    """The cardinality shape (every series once in the batch): partials are as many rows as records, and
    cross the JVM compressed."""
    records = [(p % 2, PartitionMetrics(
        ts=T0 + 1_000, period_ms=5_000, source="east", target="west", topic=f"east.t{p // 10}",
        upstream_topic=f"t{p // 10}", partition=p % 10, record_count=p % 7, byte_count=p,
        records_lag=p % 3, source_end_offset=p * 50)) for p in range(2_000)]
    collected = partition_partials.collect(task_answers(kafka_rows(records), None, batch_rows=500))
    assert 0 < collected.bytes < collected.partials.windows.nbytes / 4


def test_a_worker_returns_what_its_task_freed_once_the_answer_is_sent(monkeypatch):
    returned = []
    monkeypatch.setattr(partition_partials.long_lived, "return_freed_memory", lambda: returned.append(1))
    answers = partition_partials.PartitionPartials("west", None, NOW)(
        iter(kafka_rows(reports(periods=3)).to_batches()))
    assert next(answers).num_rows == 1 and returned == []  # not while Spark still reads the answer
    assert list(answers) == [] and returned == [1]


def test_records_out_of_order_or_at_one_ts_give_the_partials_of_records_in_order():
    """A task groups a subject's records where they lie when they come in ts order; any other order, and
    several reports at one ts, must give what the ordered batch gives (valid records: an invalid one's
    window reports its Kafka offset, which the order changes)."""
    ordered = [(p, r) for p, r in reports() if not isinstance(r, bytes)]
    in_order = partition_partials.collect(task_answers(kafka_rows(ordered), None)).partials
    for shuffled in (ordered[::-1], ordered[1::2] + ordered[::2], ordered + ordered[:12]):
        got = partition_partials.collect(task_answers(kafka_rows(shuffled), None)).partials
        expected = in_order if len(shuffled) == len(ordered) else \
            window_partials.partials(flat_table(kafka_rows(shuffled), "west", NOW))
        assert canonical(got.windows) == canonical(expected.windows)
        assert newest(got) == newest(expected)


def test_a_subject_two_tasks_report_keeps_its_newest_record_and_of_equal_ts_the_first():
    """A writer that keys a subject's records otherwise puts them in two Kafka partitions: each task sends
    its newest, and the sink keeps one a subject, in the order the subjects first come."""
    def row(partition: int, ts: int, lag: int) -> dict:
        return {"kind": "partition", "target": "west", "source": "east", "topic": "east.t",
                "partition": partition, "ts": ts, "records_lag": lag}

    tasks = window_partials.latest_of([row(2, T0, 1), row(0, T0 + 5, 2), row(1, T0, 3), row(0, T0 + 9, 4),
                                       row(2, T0, 5), row(1, T0 - 1, 6)])
    kept = window_partials.newest_of_subjects(tasks)
    assert [(r["partition"], r["records_lag"]) for r in window_partials.records_of(kept)] == [(2, 1), (0, 4),
                                                                                             (1, 3)]
    alone = window_partials.latest_of([row(0, T0, 1), row(1, T0, 2)])
    assert window_partials.newest_of_subjects(alone) is alone  # one row a subject already: no copy
