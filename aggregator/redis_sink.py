"""foreachBatch sink: one Spark micro-batch -> partial windows -> Redis, committed once.

The batch's Kafka records are parsed (raw_records) and aggregated (window_partials) by Spark's tasks, one
per Kafka partition, in the executors' Python workers (partition_partials); the driver receives their
partials and merges what several tasks share. Merging partials into stored windows is not idempotent, so
a batch's partial windows (staged, see window_writer), index updates, invalid-record counts and the sink
state (batch id and newest event ts) go in a single MULTI: Redis holds either all of them or none, and a
batch Spark replays after a crash is skipped when its id is not above the stored one. Spark replays a
batch with the offsets it logged, so a run killed mid-batch and restarted leaves Redis as an
uninterrupted run does. The staged windows are then merged into the windows of every size (window_writer;
for the streaming query by the sink's merge thread, merge_thread, while Spark runs the next batch), in
batch order, exactly once (a crash leaves them staged; they are merged on restart). Latest values are
idempotent and go first, in their own transactions: the values, then the lag verdicts.

The watermark is `newest event ts committed - delay`, read from the same state: valid records whose
10 s window ended at or before it are dropped as late. A replayed batch sees the watermark the original
saw, which Spark's own (stateless queries have none to enforce) would not give. The newest event ts is
stored no later than the wall clock at commit, and the watermark is never past the clock plus
MAX_FUTURE_SKEW_MS: one record stamped hours ahead must not make every on-time record late.

A batch after its checkpoint's first (batch id > 0) that finds no sink state means Redis lost it: the
sink writes nothing and flags `state_lost` (the supervisor rebuilds from Kafka, aggregator.rebuild); its
MULTI WATCHes the sink state, so a flush while the batch runs is caught too.

Partitions' and groups' latest values and the partitions' lag verdicts are judged and written by the tasks
(partition_partials, offset_records, task_writes: newest wins, decided by each task over its own record in
Redis), before the batch commits; the sink writes only those of subjects met for the first time, once its
subject cap has screened them. Each task keeps its partitions' verdicts and leaves each replication's summary
parts (task_verdicts); the sink combines them into every replication's summary at the batch's clock and keeps
no verdict. Replications' latest values need their recent record counts: window_history keeps what the
sink wrote, with the batch's own partials merged in before its views. One query writes one target, so
nothing else changes those keys in between.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import redis
from pyspark.sql import DataFrame

from aggregator import (
    latest_values,
    long_lived,
    offset_records,
    record_counts,
    task_verdicts,
    verdict_summaries,
    window_partials,
)
from aggregator.batch_plan import HISTORY_METRICS, BatchPlan
from aggregator.history_start import HistoryStart
from aggregator.jvm_errors import short_jvm_errors
from aggregator.latest_value_reads import HistoryRead, earliest_starts, history_reads, latest_value, uncovered
from aggregator.latest_writes import EXPIRY_RENEWAL_MS, LatestColumns, LatestWriter
from aggregator.merge_thread import MergeThread
from aggregator.partition_partials import SPARK_SCHEMA, PartitionPartials, collect
from aggregator.raw_records import MAX_FUTURE_SKEW_MS
from aggregator.subject_cap import SubjectBook
from aggregator.verdict_summaries import VerdictColumns
from aggregator.window_history import WindowHistory, load_stored
from aggregator.window_partials import BatchPartials
from aggregator.window_writer import WindowWriter, stage
from clients import redis_connection
from contract import lag_verdicts
from contract import redis_layout as layout
from contract.settings import DEFAULT_MAX_SUBJECTS

LOG = logging.getLogger(__name__)

LatestValue = tuple[str, str, dict[str, Any]]  # hash key, field, value
FINEST = layout.FINEST_WINDOW
BIND_TIMEOUT_S = 120.0
# The history metrics kept as window objects: replications' record counts. Partitions' offsets are the
# tasks' (offset_records).
LATEST_METRICS = HISTORY_METRICS
# History kept per series: the longest span a latest value reads, with room for late reports.
HISTORY_KEEP_MS = 2 * latest_values.HISTORY_SPAN_MS
_JUDGED_KINDS = pa.array(["partition", "group"])  # reports the tasks judge (offset_records)


@dataclass(frozen=True)
class SinkState:
    batch_id: int | None = None
    max_event_ts: int | None = None

    def watermark_ms(self, delay_ms: int, now_ms: int | None = None) -> int | None:
        """`newest event ts - delay`, clamped to the clock (`now_ms`, default now) plus the skew a record
        may have: a state stored before event times were judged by the clock heals this way."""
        if self.max_event_ts is None:
            return None
        now_ms = _now_ms() if now_ms is None else now_ms
        return min(self.max_event_ts, now_ms + MAX_FUTURE_SKEW_MS) - delay_ms


def _now_ms() -> int:
    return int(time.time() * 1000)


def query_scope(query_name: str, query_id: str | None) -> str:
    return f"{query_name}:{query_id}" if query_id else query_name


def windows_merged(client: redis.Redis, query_name: str, query_id: str | None) -> bool:
    """Whether every batch the query committed has its windows merged (window_writer) in Redis."""
    scope = query_scope(query_name, query_id)
    committed = cast(bytes | None, client.hget(layout.batch_key(scope), "batch_id"))
    applied = cast(bytes | None, client.get(layout.applied_batch_key(scope)))
    return committed is None or (applied is not None and int(applied) >= int(committed))


class RedisRollupSink:
    def __init__(self, redis_url: str, query_name: str, watermark_delay_ms: int = 30_000,
                 target: str | None = None, merge_in_background: bool = False,
                 max_subjects: int = DEFAULT_MAX_SUBJECTS) -> None:
        self.redis_url = redis_url
        self.target = target  # records naming another target are invalid (raw_records.flat_table)
        self.query_name = query_name
        self.watermark_delay_ms = watermark_delay_ms
        # Batch ids restart at 0 with a new checkpoint: the state is per checkpoint (Spark's query id,
        # kept in the checkpoint), or a fresh checkpoint would skip batches an old one had committed.
        self.batch_scope = query_name
        self._bound = threading.Event()
        self._client: redis.Redis | None = None
        self.merge_in_background = merge_in_background  # windows merged while Spark runs the next batch
        self._windows: WindowWriter | MergeThread | None = None
        self._in_batch = threading.Lock()  # held while a batch runs (close waits for it)
        self.history = WindowHistory(HISTORY_KEEP_MS)  # replications' record counts
        self.latest_writer = LatestWriter()  # what each latest field holds: newest wins, decided here
        self._batches_done = 0
        self.state_lost = False  # a batch found the sink state gone from Redis: nothing written since
        self.history_start = HistoryStart(target)  # a rebuild waiting for where its history starts
        self.subjects = SubjectBook(max_subjects, query_name)  # subjects per replication, capped
        # index set -> when (time.monotonic) this sink last renewed its lifetime, and the members it wrote
        self._index_written: dict[str, tuple[float, set[str]]] = {}
        self._index_pending: dict[str, tuple[float, set[str]]] = {}

    def bind(self, query_id: str | None) -> RedisRollupSink:
        """Scope the sink state to one checkpoint; batches wait for this (the id is known after start)."""
        self.batch_scope = query_scope(self.query_name, query_id)
        self._bound.set()
        return self

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis_connection.connect(self.redis_url)
        return self._client

    @property
    def windows(self) -> WindowWriter | MergeThread:
        """Merges the staged windows (window_writer), at once or in a thread (merge_thread); on first use,
        first those a crash left staged."""
        if self._windows is None:
            committed = self.state().batch_id
            if self.merge_in_background:
                self._windows = MergeThread(self.client, self.batch_scope, committed)
            else:
                self._windows = WindowWriter(self.client, self.batch_scope)
                self._windows.recover(committed)
        return self._windows

    def close(self, wait_s: float = 0.0) -> None:
        """Its query ended: waits up to `wait_s` in all for a batch still running (a query's stop may give
        up on its batch, whose Python goes on) and for the merge thread to merge what it was handed (it ends
        after that, waited for or not), then forgets what the sink keeps of Redis. An ended query's sink may
        stay referenced (by Spark's foreachBatch wrapper) until the JVM lets it go, and what it keeps of the
        latest fields and verdicts grows with the partitions; a later batch reads it again."""
        deadline = time.monotonic() + wait_s
        if wait_s > 0 and self._in_batch.acquire(timeout=wait_s):
            self._in_batch.release()
        if isinstance(self._windows, MergeThread):
            self._windows.close(max(0.0, deadline - time.monotonic()))
        self._windows = None
        self._forget()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if not self._bound.wait(BIND_TIMEOUT_S):
            raise RuntimeError(f"{self.query_name}: sink never bound to its query")
        with self._in_batch, short_jvm_errors(f"{self.query_name}: batch {batch_id}"):
            self._run(batch, batch_id)

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        self.windows.raise_failure()  # a batch whose windows failed to merge fails the query
        state = self.state()
        if batch_id > 0 and state.batch_id is None:
            self._lose_state(batch_id)
            return
        if self._already_committed(state, batch_id):
            return
        began = time.monotonic()
        # Parsed and aggregated where Spark reads each Kafka partition (partition_partials): only the
        # partials cross to the driver, in Arrow. One clock reading judges the whole batch.
        now_ms = _now_ms()
        parts = batch.mapInArrow(self.task_function(state, now_ms), SPARK_SCHEMA).toArrow()
        computed, computed_cpu = time.monotonic(), time.thread_time()
        collected = collect(parts)
        batch_partials = collected.partials
        LOG.debug("%s: batch %d: %d records -> %d partial windows, %d latest candidates, %d judged values "
                  "(%d bytes) in %d tasks in %.0f ms (%d partitions read from the stored windows, %d ms "
                  "waiting for the merge), merged in %.0f ms (%.0f ms of the sink thread's CPU)",
                  self.query_name, batch_id, collected.records,
                  batch_partials.windows.num_rows, collected.latest_candidates,
                  0 if batch_partials.values is None else batch_partials.values.num_rows, collected.bytes,
                  collected.tasks, (computed - began) * 1000, collected.stored_reads, collected.merge_wait_ms,
                  (time.monotonic() - computed) * 1000, (time.thread_time() - computed_cpu) * 1000)
        self.write(batch_partials, batch_id, state, require_state=batch_id > 0, now_ms=now_ms)
        self._batches_done += 1
        written, written_cpu = time.monotonic(), time.thread_time()
        long_lived.settle_after_batch(self._batches_done)
        LOG.debug("%s: batch %d: settled in %.0f ms (%.0f ms CPU); the sink's thread from the tasks' end "
                  "%.0f ms, %.0f ms of it on CPU", self.query_name, batch_id,
                  (time.monotonic() - written) * 1000, (time.thread_time() - written_cpu) * 1000,
                  (time.monotonic() - computed) * 1000,
                  (time.thread_time() - computed_cpu) * 1000)

    def task_function(self, state: SinkState, now_ms: int) -> PartitionPartials:
        """What each task of a batch runs (mapInArrow), planned from the sink's `state` at `now_ms`: the
        watermark and clock that judge its records, where it keeps its offset records, and the merge it
        waits for before reading stored windows (every batch committed before this one: MergeWait)."""
        return PartitionPartials(self.target, state.watermark_ms(self.watermark_delay_ms, now_ms), now_ms,
                                 self.redis_url, offset_records.MergeWait(self.batch_scope, state.batch_id))

    def state(self) -> SinkState:
        raw = cast(dict[bytes, bytes], self.client.hgetall(layout.batch_key(self.batch_scope)))
        batch_id, max_ts = raw.get(b"batch_id"), raw.get(b"max_event_ts")
        return SinkState(None if batch_id is None else int(batch_id), None if max_ts is None else int(max_ts))

    def last_batch_id(self) -> int | None:
        return self.state().batch_id

    def _already_committed(self, state: SinkState, batch_id: int) -> bool:
        """A batch Spark replays after a crash: its merges are in Redis already."""
        if state.batch_id is None or batch_id > state.batch_id:
            return False
        LOG.info("%s: batch %d already in Redis (last %d), skipped", self.query_name, batch_id,
                 state.batch_id)
        return True

    def _lose_state(self, batch_id: int) -> None:
        LOG.debug("%s: batch %d: no sink state in Redis, not written", self.query_name, batch_id)
        self.state_lost = True
        self._forget()

    def _forget(self) -> None:
        """Drops what the sink keeps of Redis: the next batch reads it again."""
        self.history.clear()
        self.subjects.clear()
        self.latest_writer.clear()
        self._index_written.clear()

    def write(self, batch: BatchPartials | Iterable[Any], batch_id: int,
              state: SinkState | None = None, require_state: bool = False, now_ms: int | None = None) -> None:
        """Commit one batch's partial windows, latest records and the judged values and verdicts the tasks
        left to it (partition_partials) to Redis, once: latest values and the lag summaries at `now_ms` (the
        clock the batch's tasks were given; default now), then its windows staged with the batch id, then
        merged. Rows of one metric each are taken too (window_partials.of_windows). With `require_state`
        (a batch after the checkpoint's first), a sink state gone from Redis before the commit leaves the
        batch unwritten and sets `state_lost`."""
        began, began_cpu = time.monotonic(), time.thread_time()
        if not isinstance(batch, BatchPartials):
            batch = window_partials.of_windows(batch)
        if batch.values is None and pc.any(pc.is_in(batch.latest["kind"], _JUDGED_KINDS)).as_py():
            raise ValueError("partition and group reports not judged: their tasks (partition_partials, "
                             "offset_records) derive their latest values and verdicts")
        windows = self.windows
        state = state or self.state()
        if self._already_committed(state, batch_id):
            return
        try:
            batch = self.subjects.screen(self.client, batch)  # new subjects past the cap left out
        except Exception:
            self.subjects.clear()
            raise
        plan = BatchPlan.of(batch)
        planned = time.monotonic()
        try:
            written = self._derive_latest(plan, batch, _now_ms() if now_ms is None else now_ms)
            derived = time.monotonic()
            if not self._commit(plan, batch, batch_id, state, require_state):
                return
        except Exception:
            # From _derive_latest on, the kept history has the batch merged: Redis may not.
            self._forget()
            raise
        self.subjects.committed()
        staged = time.monotonic()
        for series in plan.history:
            self.history.expire(series)
        windows.submit(batch_id, batch.windows)
        LOG.debug("%s: batch %d: %d latest values, windows committed in %.0f ms, %.0f ms of it on CPU (plan "
                  "%.0f, latest values %.0f, staged %.0f, merged or handed to the merge thread %.0f)",
                  self.query_name, batch_id, written, (time.monotonic() - began) * 1000,
                  (time.thread_time() - began_cpu) * 1000,
                  *((b - a) * 1000 for a, b in itertools.pairwise((began, planned, derived, staged,
                                                                    time.monotonic()))))

    def _derive_latest(self, plan: BatchPlan, batch: BatchPartials, now_ms: int) -> int:
        """Writes the batch's latest values the tasks left to it (of subjects first met) and the
        replications' (derived here), then every replication's lag summary at `now_ms`. Returns how many
        latest values it wrote."""
        began = time.monotonic()
        judged = batch.values if batch.values is not None else offset_records.VALUES_SCHEMA.empty_table()
        # The tasks wrote their fields (task_writes) but those of subjects first met, which the cap has just
        # screened: written here once, newest wins over what Redis holds, nothing kept of them.
        LatestWriter().write(self.client, LatestColumns(
            *(judged[c].to_pylist() for c in offset_records.VALUES_SCHEMA.names)))
        latest = LatestColumns()
        reads = history_reads({}, self._replication_records(plan))
        wanted = uncovered(reads, self.history.covers)
        if wanted:  # series not kept yet (or over too short a range)
            self.windows.wait_idle()  # Redis holds every staged batch's windows
            load_stored(self.history, self.client, wanted)
        latest.add_values(self._latest_values(plan, reads, earliest_starts(reads)))
        # A failure fails the query: its restart reads the summaries' parts anew. The values first, the
        # summaries of the verdicts after.
        self.latest_writer.write(self.client, latest)
        written = time.monotonic()
        summaries = self._write_summaries(
            batch.verdicts if batch.verdicts is not None else verdict_summaries.TABLE_SCHEMA.empty_table(),
            batch, now_ms)
        LOG.debug("%s: %d latest values (%d of subjects first met, from the tasks) written in %.0f ms, %d "
                  "lag summaries in %.0f ms", self.query_name, len(latest), judged.num_rows,
                  (written - began) * 1000, summaries, (time.monotonic() - written) * 1000)
        return len(latest) + judged.num_rows

    def _write_summaries(self, first_met: pa.Table, batch: BatchPartials, now_ms: int) -> int:
        """Every replication's lag summary at `now_ms`: its tasks' parts (task_verdicts) combined, with the
        part of the verdicts of subjects first met (`first_met`, verdict_summaries.TABLE_SCHEMA: not kept by
        a task yet). How many summaries."""
        parts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for target in self._targets(batch):
            for pair, stored in task_verdicts.stored_parts(self.client, target, now_ms).items():
                parts.setdefault(pair, []).extend(stored)
        for pair, columns in VerdictColumns.by_replication(first_met).items():
            parts.setdefault(pair, []).append(columns.parts(now_ms))
        values = LatestColumns()
        values.add_values((layout.replication_status_key(*pair), "lag",
                           lag_verdicts.combined_summary(replication_parts, now_ms))
                          for pair, replication_parts in sorted(parts.items()))
        self.latest_writer.write(self.client, values)
        return len(values)

    def _targets(self, batch: BatchPartials) -> list[str]:
        """The target whose tasks' summary parts the sink combines: its own, or (a sink not given one) those
        its batch names."""
        if self.target is not None:
            return [self.target]
        return sorted(set(pc.unique(batch.windows["target"]).to_pylist()) - {None}) \
            if batch.windows.num_rows else []

    def _commit(self, plan: BatchPlan, batch: BatchPartials, batch_id: int, state: SinkState,
                require_state: bool) -> bool:
        """Stages the batch's windows with its index, counts and sink state in one MULTI; False when the
        sink state is gone from Redis (nothing written)."""
        history_from = self.history_start.pending(self.client, batch.windows)
        try:
            pipe = self.client.pipeline(transaction=True)
            if require_state:
                pipe.watch(layout.batch_key(self.batch_scope))  # a flush from here on aborts the EXEC
                if not pipe.exists(layout.batch_key(self.batch_scope)):
                    pipe.reset()
                    self._lose_state(batch_id)
                    return False
                pipe.multi()
            stage(pipe, self.batch_scope, batch_id, batch.windows)
            self.history_start.queue(pipe, history_from)
            record_counts.queue_invalid(pipe, plan, self.query_name)
            record_counts.queue_late(pipe, batch.late, self.query_name,
                                     state.watermark_ms(self.watermark_delay_ms), self.watermark_delay_ms)
            self._write_index(pipe, plan)
            self.subjects.queue(pipe, batch_id)
            max_ts = max((t for t in (state.max_event_ts, plan.max_event_ts) if t is not None), default=None)
            if max_ts is not None:  # never past the clock, whatever a record claimed
                max_ts = min(max_ts, _now_ms())
            sink_state = {"batch_id": batch_id} | ({} if max_ts is None else {"max_event_ts": max_ts})
            pipe.hset(layout.batch_key(self.batch_scope), mapping=sink_state)
            pipe.pexpire(layout.batch_key(self.batch_scope), layout.INDEX_TTL_MS)
            pipe.execute()
        except redis.WatchError:
            self._lose_state(batch_id)
            return False
        self._index_written.update(self._index_pending)
        return True

    def _write_latest(self, latest: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Latest values go first, in their own transaction, so status and lag are readable before the
        batch's windows are merged. They are idempotent: derived only from the batch and the windows
        committed before it, and only replaced by a value of equal or newer ts (latest_writes), so a replay
        after a crash between the two transactions writes them again identically."""
        columns = LatestColumns()
        columns.add_values(latest)
        self.latest_writer.write(self.client, columns)

    # --- indexes ------------------------------------------------------------------------------------

    def _write_index(self, pipe: redis.client.Pipeline, plan: BatchPlan) -> None:
        # Once per key and batch: a batch touches the same few index keys from thousands of windows.
        for key, mapping in sorted(plan.index_hashes.items()):
            pipe.hset(key, mapping=mapping)
            pipe.pexpire(key, layout.INDEX_TTL_MS)
        # A set's members go again only when the batch names one this sink has not written, or when its
        # lifetime is due for renewal (EXPIRY_RENEWAL_MS, as latest hashes): at 100,000 partitions a batch
        # names ~10,000 topics' partition sets, the same every batch, and their SADD and PEXPIRE were 20,000
        # of the commit's commands.
        now = time.monotonic()
        renew_before = now - EXPIRY_RENEWAL_MS / 1000
        self._index_pending = {}
        for key, members in sorted(plan.index_sets.items()):
            since, known = self._index_written.get(key, (-math.inf, set()))
            renewed = since > renew_before
            if renewed and members <= known:
                continue
            pipe.sadd(key, *sorted(members))
            pipe.pexpire(key, layout.INDEX_TTL_MS)
            self._index_pending[key] = (since, members | known) if renewed else (now, members)

    # --- latest values --------------------------------------------------------------------------------

    def _latest_values(self, plan: BatchPlan, reads: list[HistoryRead], read_from: dict[str, int]
                       ) -> list[LatestValue]:
        """(hash key, field, value) of the replications' latest values the batch changes."""
        self._merge_history(plan, LATEST_METRICS, read_from)
        return [latest_value(read.kind, read.subject, read.record,
                             self.history.view(read.series, read.low_ms, read.high_ms)) for read in reads]

    def _merge_history(self, plan: BatchPlan, metrics: tuple[str, ...], read_from: dict[str, int]) -> None:
        """Merges the batch's partials of `metrics` into the kept history, for the views that follow."""
        for series in plan.add_history(metrics, read_from, self.history.longest_keeps):
            self.history.merge(series, plan.history[series])

    def _replication_records(self, plan: BatchPlan) -> dict[tuple[str, str], dict[str, Any]]:
        """Replications whose latest value the batch changes: a new report, or new record-count windows
        for the stored report (its partition records may come in a later batch than itself)."""
        records = dict(plan.replications)
        touched = sorted(plan.counted_replications)
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
