"""A replication's partition verdicts as columns, and its summary of them (contract.lag_verdicts.
summary_record) as array operations over those columns.

A replication's partitions are judged in several tasks (one a Kafka partition of the raw-metrics topic): each
keeps its own partitions' verdicts (aggregator.task_verdicts) and makes their summary parts
(lag_verdicts.summary_parts) at every batch, which the sink combines (lag_verdicts.combined_summary). Over
100,000 partitions, verdicts kept as records (a dict of 13 fields a partition, merged into a dict a
replication, summarised a record at a time) cost ~2.5 s of the driver's Python a batch and ~1 KB a partition.
Here a replication's verdicts are columns, a row a verdict field (`<topic>|<partition>`), beside each
verdict's JSON as written (or None where it is not held: then read when the parts list the verdict); the
parts' aging (STOP once a silence passes its bound), worst partition, most lagging one, total lag and first
moment a verdict can change are numpy; only the problems (the partitions at WARN or worse, which the
summary lists whole) and the most lagging partition become records again, parsed from their JSON. A
replication holding an integer past 2^53 (exact only in Python) is summarised by lag_verdicts.summary_parts
over its records. tests/aggregator/test_verdict_summaries.py checks both agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contract import lag_verdicts
from contract import redis_layout as layout
from contract.lag_evaluation import _SEVERITY, Reason, Status

EXACT_BELOW = 2**53
_NONE = -(2**62)  # an absent observation's ts (never compared: masked)
_NEVER = np.iinfo(np.int64).max
REASONS = tuple(str(r) for r in Reason)  # a verdict's reason and status as codes into these
STATUSES = tuple(str(s) for s in Status)
_REASON_CODE = {r: code for code, r in enumerate(REASONS)}
_STATUS_CODE = {s: code for code, s in enumerate(STATUSES)}
_SEVERITY_OF_CODE = np.array([_SEVERITY[Reason(r)] for r in REASONS])
_STOP, _ERR, _OK = _REASON_CODE[str(Reason.STOP)], _STATUS_CODE[str(Status.ERR)], _STATUS_CODE[str(Status.OK)]
# The integer columns (`ints`): the verdict's ts, current lag, its oldest and newest observation's ts
# (_NONE without), its lookback, STOP bound and allowed lag.
TS, CURRENT, START, END, LOOKBACK, STOP_AFTER, ALLOWED = range(7)
_ARRAYS = ("ints", "status", "reason", "complete", "seconds", "inexact")  # VerdictColumns' arrays, in order


def _ts(observation: Any) -> int:
    return _NONE if observation is None else int(observation[0])


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


def reason_codes(reasons: Sequence[str]) -> np.ndarray:
    return np.array([_REASON_CODE[r] for r in reasons], np.int8)


def status_codes(statuses: Sequence[str]) -> np.ndarray:
    return np.array([_STATUS_CODE[s] for s in statuses], np.int8)


# VerdictColumns as Arrow rows, a replication's beside another's (VerdictColumns.table).
TABLE_SCHEMA = pa.schema([
    ("target", pa.string()), ("source", pa.string()), ("field", pa.string()), ("text", pa.string()),
    ("topic", pa.string()), ("partition", pa.int64()), ("ints", pa.list_(pa.int64(), 7)),
    ("status", pa.int8()), ("reason", pa.int8()), ("complete", pa.float64()), ("seconds", pa.float64()),
    ("inexact", pa.bool_())])


@dataclass
class VerdictColumns:
    """Verdicts of one replication, a row each: its field, its JSON as written, and the columns the
    summary reads. `inexact`: a row holding an integer past 2^53 (its int columns are then not used)."""

    fields: list[str]
    text: list[str]
    topic: list[str]
    partition: list[int]
    ints: np.ndarray  # (n, 7) int64: TS .. ALLOWED
    status: np.ndarray  # int8 codes into STATUSES
    reason: np.ndarray  # int8 codes into REASONS
    complete: np.ndarray  # float64
    seconds: np.ndarray  # float64 lag in seconds, NaN for none
    inexact: np.ndarray  # bool
    _order: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.fields)

    @classmethod
    def empty(cls) -> VerdictColumns:
        return cls([], [], [], [], np.empty((0, 7), np.int64), np.empty(0, np.int8), np.empty(0, np.int8),
                   np.empty(0), np.empty(0), np.empty(0, bool))

    @classmethod
    def of_records(cls, fields: Sequence[str], records: Sequence[Mapping[str, Any]],
                   texts: Sequence[str] | None = None) -> VerdictColumns:
        """Verdict records (lag_verdicts.verdict_record, or as read back: verdict_of accepts them) with their
        JSON as written (`texts`; encoded here when not given)."""
        rows = [(int(r["ts"]), int(r["current_lag"]), _ts(r.get("start")), _ts(r.get("end")),
                 int(r.get("lookback_ms") or 0), int(r.get("stop_after_ms") or 0),
                 int(r.get("allowed_lag") or 0)) for r in records]
        inexact = [max(abs(x) for x in row if x != _NONE) >= EXACT_BELOW for row in rows]
        ints = np.array([(min(max(row[TS], -_NEVER), _NEVER),) + (0,) * 6 if bad else row
                         for row, bad in zip(rows, inexact, strict=True)], np.int64).reshape(-1, 7)
        text = list(texts) if texts is not None else [layout.encode_latest(dict(r)) for r in records]
        return cls(
            list(fields), text, [str(r["topic"]) for r in records], [int(r["partition"]) for r in records],
            ints,
            status_codes([str(r["status"]) for r in records]),
            reason_codes([str(r["reason"]) for r in records]),
            np.array([float(r["complete"]) for r in records], np.float64),
            np.array([_seconds(r.get("lag_seconds")) for r in records], np.float64), np.array(inexact, bool))

    def record(self, row: int) -> dict[str, Any]:
        try:
            record = orjson.loads(self.text[row])
        except orjson.JSONDecodeError:  # what orjson refused to write went through json (encode_latest)
            return layout.decode_latest(self.text[row])
        return record if isinstance(record, dict) else layout.decode_latest(self.text[row])

    def records(self) -> dict[str, dict[str, Any]]:
        """field -> verdict record, as Redis holds them."""
        return {name: self.record(row) for row, name in enumerate(self.fields)}

    def taken(self, rows: Sequence[int]) -> VerdictColumns:
        """The verdicts at `rows`, in that order."""
        at = np.asarray(rows, np.int64)
        return VerdictColumns(
            [self.fields[k] for k in rows], [self.text[k] for k in rows], [self.topic[k] for k in rows],
            [self.partition[k] for k in rows], self.ints[at], self.status[at], self.reason[at],
            self.complete[at], self.seconds[at], self.inexact[at])

    def table(self, target: str, source: str) -> pa.Table:
        """These verdicts (replication `target`, `source`) as Arrow rows (TABLE_SCHEMA): how a task sends
        the verdicts it derived to the driver."""
        n = len(self)
        return pa.table({
            "target": pa.array([target] * n, pa.string()), "source": pa.array([source] * n, pa.string()),
            "field": pa.array(self.fields, pa.string()), "text": pa.array(self.text, pa.string()),
            "topic": pa.array(self.topic, pa.string()), "partition": pa.array(self.partition, pa.int64()),
            "ints": pa.FixedSizeListArray.from_arrays(pa.array(self.ints.reshape(-1), pa.int64()), 7),
            "status": pa.array(self.status, pa.int8()), "reason": pa.array(self.reason, pa.int8()),
            "complete": pa.array(self.complete, pa.float64()),
            "seconds": pa.array(self.seconds, pa.float64()),
            "inexact": pa.array(self.inexact, pa.bool_())}, schema=TABLE_SCHEMA)

    @classmethod
    def by_replication(cls, table: pa.Table) -> dict[tuple[str, str], VerdictColumns]:
        """Arrow rows (TABLE_SCHEMA, several replications) -> the verdicts of each replication."""
        out: dict[tuple[str, str], VerdictColumns] = {}
        if not table.num_rows:
            return out
        pairs = pc.binary_join_element_wise(table["target"], table["source"], "\x00")
        codes = pc.dictionary_encode(pairs).combine_chunks()
        for code, pair in enumerate(codes.dictionary.to_pylist()):
            mine = table.filter(pc.equal(codes.indices, code)) if len(codes.dictionary) > 1 else table
            target, source = pair.split("\x00", 1)
            ints = mine["ints"].combine_chunks()
            out[(target, source)] = cls(
                mine["field"].to_pylist(), mine["text"].to_pylist(), mine["topic"].to_pylist(),
                mine["partition"].to_pylist(),
                ints.values.to_numpy(zero_copy_only=False).reshape(-1, 7).astype(np.int64),
                mine["status"].to_numpy().astype(np.int8), mine["reason"].to_numpy().astype(np.int8),
                mine["complete"].to_numpy().astype(np.float64), mine["seconds"].to_numpy().astype(np.float64),
                mine["inexact"].to_numpy().astype(bool))
        return out

    def order(self) -> np.ndarray:
        """Every row in partition order (topic, then partition), as the evaluation lists them: one stable
        lexsort (numpy compares str by code point, as Python does, but drops trailing NULs), or Python's
        sort where a topic holds a NUL or a partition number does not fit int64. Kept until rows change."""
        if self._order is None:
            try:
                if any("\x00" in t for t in self.topic):
                    raise OverflowError
                self._order = np.lexsort((np.array(self.partition, np.int64), np.array(self.topic, str)))
            except OverflowError:
                key = list(zip(self.topic, self.partition, strict=True))
                self._order = np.array(sorted(range(len(key)), key=key.__getitem__), np.int64)
        return self._order

    def summary(self, at_ms: int) -> dict[str, Any]:
        """lag_verdicts.summary_record of these verdicts at `at_ms`."""
        return lag_verdicts.combined_summary([self.parts(at_ms)], at_ms)

    def parts(self, at_ms: int, texts: Callable[[list[int]], list[str]] | None = None) -> dict[str, Any]:
        """lag_verdicts.summary_parts of these verdicts at `at_ms`. A row whose `text` is None (a task's kept
        verdicts: only their columns are kept) gets it from `texts` (its rows -> their JSON, as Redis holds
        them) when the parts list its record."""
        if not len(self) or self.inexact.any():
            self._fill(texts, range(len(self)))
            return lag_verdicts.summary_parts(list(self.records().values()), at_ms)
        ints = self.ints
        start, end, lookback = ints[:, START], ints[:, END], ints[:, LOOKBACK]
        within = (end == _NONE) | (end >= at_ms - lookback)
        order = self.order()
        rows = order[within[order]]
        if not len(rows):
            return lag_verdicts.empty_parts(at_ms)
        start, end, lookback, current = start[rows], end[rows], lookback[rows], ints[rows, CURRENT]
        observed = (start != _NONE) & (end != _NONE)
        stop_at = end + np.maximum(end - start, ints[rows, STOP_AFTER]) + 1
        may_stop = observed & (current > ints[rows, ALLOWED])
        stopped = may_stop & (at_ms >= stop_at)
        status = np.where(stopped, _ERR, self.status[rows])
        reason = np.where(stopped, _STOP, self.reason[rows])
        worst = int(np.argmax(_SEVERITY_OF_CODE[reason]))
        most = int(np.argmax(current))
        changes = np.minimum(np.where(observed, start + lookback + 1, _NEVER),
                             np.where(end != _NONE, end + lookback + 1, _NEVER))
        changes = np.where(may_stop & (reason != _STOP), np.minimum(changes, stop_at), changes)
        seconds = self.seconds[rows]
        exact_sum = int(np.abs(current).max()) * len(rows) < _NEVER  # else int64 could overflow
        total = int(current.sum()) if exact_sum else sum(current.tolist())
        problems = np.flatnonzero(status != _OK).tolist()
        self._fill(texts, [int(rows[k]) for k in (most, *problems)])

        def aged(k: int) -> dict[str, Any]:
            return {**self.record(int(rows[k])), "status": STATUSES[status[k]], "reason": REASONS[reason[k]]}

        until = int(changes.min())
        row = int(rows[worst])
        return {
            "ts": at_ms, "partitions": len(rows),
            "worst": [self.topic[row], self.partition[row], STATUSES[status[worst]], REASONS[reason[worst]]],
            "complete": int(np.count_nonzero(self.complete[rows] == 1.0)), "total_lag": total,
            "max_lag": aged(most), "problems": [aged(k) for k in problems],
            "lag_seconds": None if np.isnan(seconds).all() else float(np.nanmax(seconds)),
            "valid_until_ms": None if until == _NEVER else until,
        }

    def _fill(self, texts: Callable[[list[int]], list[str]] | None, rows: Iterable[int]) -> None:
        """The JSON of `rows` whose text is not held, from `texts`."""
        missing = [row for row in dict.fromkeys(rows) if self.text[row] is None]
        if not missing:
            return
        if texts is None:
            raise ValueError(f"{len(missing)} verdicts without their JSON")
        for row, text in zip(missing, texts(missing), strict=True):
            self.text[row] = text


def summary_record(records: Sequence[Mapping[str, Any]], at_ms: int) -> dict[str, Any]:
    """lag_verdicts.summary_record(records, at_ms), through the columns (one verdict a partition)."""
    fields = [lag_verdicts.verdict_field(str(r["topic"]), int(r["partition"])) for r in records]
    return VerdictColumns.of_records(fields, records).summary(at_ms)

