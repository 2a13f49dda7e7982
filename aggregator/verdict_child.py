"""A batch's lag verdicts, judged beside its latest values: in the sink's process, or for a streaming query
in a child process of its own while the sink derives the latest values.

A live batch names every reporting partition, and judging their verdicts (partition_verdicts: the offset
windows merged into a kept history, Burrow's rules, each replication's summary) took about as long as
deriving their latest values. Both are Python: in one process they ran one after the other, in two they
run on both cores, and the batch is committed once both are written, as before.

The sink drives either kind the same way, one batch at a time: `begin` (the batch plan and its partition
reports), `wants_stored` (whether history must be read from Redis: the sink first has every staged batch
merged, as for its own reads), `go`, `finish` (each report's lag in seconds, once the latest values are
written), `wait` (the verdicts are in Redis), or `abort` from any point (the kept history and verdicts
are dropped, and the next batch reads Redis again). So Redis gets the values first, then their verdicts,
then the batch's windows, whichever kind judged them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

import pyarrow as pa
import redis

from aggregator import long_lived, partition_verdicts, sink_children
from aggregator.batch_plan import BatchPlan, Subject
from aggregator.latest_value_reads import earliest_starts, offset_reads, uncovered
from aggregator.redis_scripts import UPSERT_LATEST_LUA, WrittenLatest, latest_calls, latest_hashes
from aggregator.window_history import WindowHistory, load_stored
from clients import redis_connection
from contract import lag_verdicts
from contract import redis_layout as layout
from contract.redis_layout import SeriesId

LOG = logging.getLogger(__name__)
CHILD_PREFIX = "srm-verdicts-"
# A child answers within a batch's verdicts (well under a second) or, when Redis hangs, once its
# socket timeout fails the write: one silent for longer is stuck, and the batch fails.
ANSWER_TIMEOUT_S = 90.0
# What a verdict reads of a partition report (partition_verdicts): the rest stays in the sink's process.
REPORT_FIELDS = ("ts", "period_ms", "records_lag", "topic", "partition")
Report = tuple[Subject, dict[str, Any]]
LatestValue = tuple[str, str, dict[str, Any]]


class VerdictJudge:
    """Judges one batch at a time over `history` (the offset series) and `verdicts` (every replication's),
    and writes the verdicts as latest values."""

    def __init__(self, client: redis.Redis, history: WindowHistory,
                 verdicts: partition_verdicts.ReplicationVerdicts, written: WrittenLatest) -> None:
        self.client = client
        self.history = history
        self.verdicts = verdicts
        self.written = written
        self._script = client.register_script(UPSERT_LATEST_LUA)
        self._reports: list[Report] = []
        self._read_from: dict[str, int] = {}
        self._updates: partition_verdicts.VerdictUpdates = {}

    def prepare(self, reports: list[Report]) -> dict[SeriesId, tuple[int, int]]:
        """Takes the batch's partition reports; returns the offset series to read from Redis first."""
        reads = offset_reads(reports)
        self._reports, self._read_from = reports, earliest_starts(reads)
        return uncovered(reads, self.history.covers)

    def load(self, wanted: Mapping[SeriesId, tuple[int, int]]) -> None:
        if wanted:
            load_stored(self.history, self.client, wanted)

    def merge(self, plan: BatchPlan) -> None:
        """The batch's offset partials into the kept history, before its verdicts read it."""
        for series in plan.add_history(partition_verdicts.OFFSET_METRICS, self._read_from,
                                       self.history.longest_keeps):
            self.history.merge(series, plan.history[series])

    def evaluate(self) -> None:
        """Burrow's rules over the prepared reports (merged first): all a verdict needs but the report's
        lag in seconds, which its latest value gives."""
        self._updates = partition_verdicts.batch_verdicts(
            [(subject, record, None) for subject, record in self._reports], self.history.view)
        for problem in self.verdicts.load_missing(self.client, self._updates):
            LOG.warning("skipping a stored lag verdict: %s", problem)

    def judge(self, lag_seconds: Mapping[Subject, Any], now_ms: int) -> int:
        """Writes the evaluated verdicts, each with its report's lag in seconds, and their replications'
        summaries at `now_ms`; returns how many values it wrote."""
        updates = self._updates
        for subject, _ in self._reports:
            _, target, source, topic, partition, _ = subject
            verdict = updates.get((target, source), {}).get(lag_verdicts.verdict_field(topic, int(partition)))
            if verdict is not None:
                verdict["lag_seconds"] = lag_seconds.get(subject)
        values = verdict_values(self.verdicts, updates, now_ms)
        if values:
            pipe = self.client.pipeline(transaction=True)
            for keys, argv in latest_calls(latest_hashes(values), self.written):
                self._script(keys=keys, args=argv, client=pipe)
            pipe.execute()
        self.verdicts.commit(updates)
        self._reports, self._updates = [], {}
        return len(values)

    def clear(self) -> None:
        self.history.clear()
        self.verdicts.clear()
        self._reports, self._updates = [], {}


def verdict_values(verdicts: partition_verdicts.ReplicationVerdicts,
                   updates: partition_verdicts.VerdictUpdates, now_ms: int) -> list[LatestValue]:
    """The lag verdicts of a batch's partitions and their replications' summaries, as latest values."""
    summaries = verdicts.summaries(updates, now_ms)
    out = [(layout.lag_verdicts_key(t, s), name, v) for (t, s), fresh in updates.items()
           for name, v in fresh.items()]
    return out + [(layout.replication_status_key(t, s), "lag", v) for (t, s), v in summaries.items()]


class InlineVerdicts:
    """Verdicts judged in the sink's own process, over its own kept history (which the sink expires and
    clears with the rest): what a sink writing batches by itself uses (tests, a rebuild)."""

    def __init__(self, judge: VerdictJudge) -> None:
        self.judge = judge
        self._plan: BatchPlan | None = None
        self._wanted: dict[SeriesId, tuple[int, int]] = {}

    def begin(self, plan: BatchPlan, reports: list[Report]) -> None:
        self._plan, self._wanted = plan, self.judge.prepare(reports)

    def wants_stored(self) -> bool:
        return bool(self._wanted)

    def go(self) -> None:
        self.judge.load(self._wanted)

    def finish(self, lag_seconds: Mapping[Subject, Any], now_ms: int) -> None:
        # Merged here, not in go(): in one process the latest values go first.
        assert self._plan is not None
        self.judge.merge(self._plan)
        self.judge.evaluate()
        self.judge.judge(lag_seconds, now_ms)

    def wait(self) -> None:
        self._plan = None

    def abort(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._plan = None
        self.judge.clear()

    def close(self) -> None:
        pass


class BackgroundVerdicts:
    """Verdicts judged in a child process with a history of its own; the sink's side of it."""

    def __init__(self, redis_url: str, scope: str, keep_ms: int,
                 answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.scope = scope
        self.answer_timeout_s = answer_timeout_s
        self._conn, self._process = sink_children.spawn(self, _serve, (redis_url, keep_ms),
                                                        f"{CHILD_PREFIX}{scope}")
        self._stage = "idle"  # then begun (an answer due), asked, going, finished (an answer due)

    def begin(self, plan: BatchPlan, reports: list[Report]) -> None:
        """Hands the child the batch's offset partials (taken from `plan`) and its partition reports."""
        rows = {m: plan.history_rows.pop(m) for m in partition_verdicts.OFFSET_METRICS
                if m in plan.history_rows}
        trimmed = [(subject, {k: record[k] for k in REPORT_FIELDS if k in record})
                   for subject, record in reports]
        self._conn.send(("begin", rows, trimmed))
        self._stage = "begun"

    def wants_stored(self) -> bool:
        """Whether the child waits (go) to read series from Redis; one that does not goes on at once."""
        wants = bool(self._answer())
        self._stage = "asked" if wants else "going"
        return wants

    def go(self) -> None:
        self._conn.send(("go",))
        self._stage = "going"

    def finish(self, lag_seconds: Mapping[Subject, Any], now_ms: int) -> None:
        self._conn.send(("finish", dict(lag_seconds), now_ms))
        self._stage = "finished"

    def wait(self) -> None:
        """Until the batch's verdicts are in Redis; raises what failed in the child."""
        failure = self._answer()
        self._stage = "idle"
        if failure is not None:
            raise RuntimeError(f"{self.scope}: judging lag verdicts failed ({failure})")

    def abort(self) -> None:
        """Ends the batch in hand, whatever its stage, and clears what the child keeps. A child that does
        not answer is killed: `usable` turns False."""
        try:
            if self._stage == "begun":
                self._answer()
                self._stage = "asked"
            if self._stage in ("asked", "going"):
                self._conn.send(("abort",))
                self._stage = "finished"
            if self._stage == "finished":
                self._answer()
            self._stage = "idle"
            self.clear()
        except (OSError, EOFError, TimeoutError) as exc:
            LOG.warning("%s: the verdict child is gone or stuck (%s); a new one judges the next batch",
                        self.scope, exc)
            self.close()

    def clear(self) -> None:
        self._conn.send(("clear",))
        self._answer()

    @property
    def usable(self) -> bool:
        return not self._conn.closed and self._process.is_alive()

    def close(self) -> None:
        """Ends the child (it holds nothing Redis lacks)."""
        self._conn.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)

    def _answer(self) -> Any:
        if not self._conn.poll(self.answer_timeout_s):
            raise TimeoutError(f"no answer in {self.answer_timeout_s:.0f} s")
        return self._conn.recv()


def _serve(redis_url: str, keep_ms: int, conn: Connection, level: int) -> None:
    """The child: one batch at a time, each answered with None or what failed; the pipe closing ends it."""
    sink_children.in_child(level)
    judge = VerdictJudge(redis_connection.connect(redis_url), WindowHistory(keep_ms),
                         partition_verdicts.ReplicationVerdicts(), WrittenLatest())
    batches = 0
    try:
        while True:
            message = conn.recv()
            if message[0] == "begin":
                conn.send(_batch(judge, conn, message[1], message[2]))
                batches += 1
                long_lived.settle_after_batch(batches)  # the history it keeps, out of the collector's passes
            elif message[0] == "clear":
                judge.clear()
                conn.send(None)
    except (EOFError, OSError):  # the parent closed its end or died
        return


def _batch(judge: VerdictJudge, conn: Connection, rows: dict[str, pa.Table],
           reports: list[Report]) -> str | None:
    """One batch in the child: None once its verdicts are written or it was aborted, else what failed (the
    kept history and verdicts are dropped then). The exchange with the sink goes on whatever fails, so
    that its answers stay in step."""
    began, failure, wanted = time.monotonic(), None, {}
    plan = BatchPlan(history_rows=rows)
    try:
        wanted = judge.prepare(reports)
    except Exception as exc:
        failure = _failed(exc)
    conn.send(bool(wanted))
    if wanted and conn.recv()[0] != "go":  # without reads from Redis, it goes on at once
        judge.clear()
        return None
    if failure is None:
        try:
            judge.load(wanted)
            judge.merge(plan)
            judge.evaluate()
        except Exception as exc:
            failure = _failed(exc)
    message = conn.recv()
    if message[0] != "finish":
        judge.clear()
        return None
    if failure is None:
        try:
            written = judge.judge(message[1], message[2])
            for series in plan.history:
                judge.history.expire(series)
            LOG.debug("%d lag verdicts written for %d reports in %.0f ms", written, len(reports),
                      (time.monotonic() - began) * 1000)
            return None
        except Exception as exc:
            failure = _failed(exc)
    judge.clear()
    return failure


def _failed(exc: Exception) -> str:
    LOG.exception("judging lag verdicts failed")
    return f"{type(exc).__name__}: {exc}"
