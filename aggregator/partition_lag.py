"""A batch's partition and group reports judged together: their latest values (lag in seconds) and the
partitions' lag verdicts, from the columnar offset history (offset_history), with the rules as array
operations (lag_arrays).

What comes out is what the pure functions a report at a time give (latest_values.partition_latest and
group_latest, partition_verdicts.partition_verdict) over the same windows: the history as Redis holds it
with the batch merged in. Reports the arrays cannot derive exactly (a read below what the history holds,
integers past 2^53) are derived by those pure functions over their windows read from Redis, with the
batch's partials merged in, as the sink did for every report before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator import lag_arrays, latest_values, partition_verdicts, verdict_summaries
from aggregator.batch_plan import Subject
from aggregator.lag_seconds import DEFAULT_TABLE_CAPACITY
from aggregator.lag_seconds_windows import LagSample, lag_seconds_columns
from aggregator.latest_value_reads import latest_value
from aggregator.latest_writes import LatestColumns, int_json, json_column, json_rows
from aggregator.offset_history import METRICS, WINDOW_MS, OffsetHistory, window_number
from aggregator.verdict_summaries import VerdictColumns
from aggregator.window_history import WindowHistory, load_stored, series_id
from aggregator.window_partials import one_array, records_of
from contract import redis_layout as layout

LatestValue = tuple[str, str, dict[str, Any]]
# A lag table's windows: the exporter's 60 points before the report's window, and its own (a group's
# table, without the report's end offset, reads it).
TABLE_WINDOWS = DEFAULT_TABLE_CAPACITY + 1
# A task's latest values of partitions and groups: hash key, field, the value's ts and its JSON.
LATEST_SCHEMA = pa.schema([("key", pa.string()), ("field", pa.string()), ("ts", pa.int64()),
                           ("json", pa.string())])


@dataclass
class Judged:
    latest: list[LatestValue] = field(default_factory=list)
    samples: list[LagSample] = field(default_factory=list)
    # The verdicts derived a report at a time per replication (their records and JSON as columns).
    verdicts: dict[tuple[str, str], list[VerdictColumns]] = field(default_factory=dict)
    fallback: int = 0  # reports derived a report at a time
    # What the arrays derive, as columns: the values already JSON (LATEST_SCHEMA), the lag-in-seconds
    # samples as partial windows.
    latest_tables: list[pa.Table] = field(default_factory=list)
    sample_tables: list[pa.Table] = field(default_factory=list)
    verdict_tables: list[pa.Table] = field(default_factory=list)  # verdict_summaries.TABLE_SCHEMA

    def verdict_rows(self) -> pa.Table:
        """Every verdict judged (verdict_summaries.TABLE_SCHEMA): the arrays', then those derived a report at
        a time."""
        alone = [part.table(target, source) for (target, source), parts in self.verdicts.items()
                 for part in parts]
        tables = [*self.verdict_tables, *alone]
        return pa.concat_tables(tables) if tables else verdict_summaries.TABLE_SCHEMA.empty_table()

    def latest_rows(self) -> pa.Table:
        """Every latest value judged (LATEST_SCHEMA): the arrays' then those derived a report at a time."""
        one = LatestColumns()
        one.add_values(self.latest)
        alone = pa.table([pa.array(one.keys, pa.string()), pa.array(one.names, pa.string()),
                          pa.array(one.ts, pa.int64()), pa.array(one.encoded, pa.string())],
                         schema=LATEST_SCHEMA)
        return pa.concat_tables([*self.latest_tables, alone])


def _number(value: Any) -> float:
    """A record's numeric field as float64; NaN for none (or a bool, which no rule takes as a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


_PLAIN = {int, float, type(None)}


def _numbers(values: list[Any]) -> np.ndarray:
    """_number of each value: one conversion for a column of ints, floats and nones (a bool, a string or
    an int past float64's range takes the value at a time)."""
    if set(map(type, values)) <= _PLAIN:
        try:
            return np.array(values, np.float64)
        except OverflowError:
            pass
    return np.array([_number(v) for v in values], np.float64)


def _periods(column: pa.ChunkedArray) -> np.ndarray:
    """partition_verdicts.period_of of each report's `period_ms`, as int64: one conversion where every
    period is a positive integer (a report's usual case), the rule a report at a time otherwise."""
    if pa.types.is_integer(column.type) and column.null_count == 0:
        periods = column.to_numpy().astype(np.int64)
        if (periods > 0).all():
            return periods
    return np.array([partition_verdicts.period_of({"period_ms": p}) for p in column.to_pylist()], np.int64)


class _Reports:
    """A batch's partition and group reports (batch_plan.offset_reports: window_partials.latest_schema's
    rows, a subject each) as the columns judging reads. A report becomes a dict only on the way to the
    pure functions (pairs): at 100,000 partitions, a dict a report and reading its fields back cost ~7 us a
    report of the sink's Python."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.is_partition = pc.equal(table["kind"], "partition").to_numpy(zero_copy_only=False)
        self.ts = pc.cast(table["ts"], pa.int64()).to_numpy()
        self.periods = _periods(table["period_ms"])
        self.partition = one_array(pc.cast(table["partition"], pa.int64()))
        # A subject's names; its group "" for a partition.
        self.names = {c: one_array(table[c] if c != "group" else pc.fill_null(table[c], ""))
                      for c in ("target", "source", "topic", "group")}

    def __len__(self) -> int:
        return self.table.num_rows

    def partition_keys(self) -> list[tuple[str, str, str, int]]:
        """(target, source, topic, partition) of each report (offset_history's keys)."""
        return list(zip(*(self.names[c].to_pylist() for c in ("target", "source", "topic")),
                        self.partition.to_pylist(), strict=True))

    def numbers(self, name: str) -> np.ndarray:
        """_number of each report's field `name`, as float64: NaN for none."""
        column = self.table[name]
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
            floats = pc.cast(column, pa.float64(), safe=False)
            return one_array(pc.fill_null(floats, math.nan)).to_numpy(zero_copy_only=False)
        return _numbers(column.to_pylist())

    def json(self, name: str, at: pa.Array) -> pa.Array:
        """The JSON of field `name` of the reports at `at`, as redis_layout.encode_latest renders it (null
        for none): integers cast by Arrow, anything else by json_column."""
        column = one_array(self.table[name]).take(at)
        if pa.types.is_integer(column.type):
            return pc.fill_null(pc.cast(column, pa.string()), "null")
        return _JSON_TEXT(json_column(column.to_pylist()))

    def pairs(self, at: np.ndarray) -> list[tuple[Subject, dict[str, Any]]]:
        """(subject, record as window_partials.records_of gives it) of the reports at `at`."""
        rows = self.table.take(pa.array(at, pa.int64()))
        return [((r["kind"], r["target"], r["source"], r["topic"], str(r["partition"]), r.get("group") or ""),
                 r) for r in records_of(rows)]


class _Policies:
    """The rules' bounds of each report's metrics period (partition_verdicts._policy), asked once a
    distinct period (a batch has one or a few): per report as arrays, and as their JSON."""

    def __init__(self, periods: np.ndarray) -> None:
        distinct, self._which = np.unique(periods, return_inverse=True)
        self._policies = [partition_verdicts._policy(int(p)) for p in distinct]
        self._lookback = [partition_verdicts._lookback(int(p)) for p in distinct]
        self.intervals = {p.intervals for p in self._policies}
        self.lookback = self._per_report(self._lookback)
        self.allowed_lag = self._per_report([p.allowed_lag for p in self._policies])
        self.stop_after_ms = self._per_report([p.stop_after_ms for p in self._policies])
        self.stall_after_ms = self._per_report([p.stall_after_ms for p in self._policies])

    def _per_report(self, values: list[int]) -> np.ndarray:
        return np.array(values, np.int64)[self._which.reshape(-1)]

    def json(self, name: str) -> pa.Array:
        """Each report's bound `name` (lookback, or a policy's field) as its JSON."""
        values = self._lookback if name == "lookback" else [getattr(p, name) for p in self._policies]
        return _JSON_TEXT(json_column(values)).take(pa.array(self._which.reshape(-1)))


def _ceil_window(ms: np.ndarray) -> np.ndarray:
    return -np.floor_divide(-ms, WINDOW_MS)


@dataclass
class NewestPass:
    """_lag_seconds' first pass, each report over its NEWEST_WINDOWS: its answer there (lag_arrays
    .lag_seconds' seconds, exact and local) and the least end offset those windows hold (inf: none)."""

    seconds: np.ndarray
    exact: np.ndarray
    local: np.ndarray
    least: np.ndarray

    @classmethod
    def of(cls, history: OffsetHistory, reports: _Reports, rows: np.ndarray, high: np.ndarray,
           low: np.ndarray) -> NewestPass:
        n = len(rows)
        out = cls(np.full(n, math.nan), np.zeros(n, bool), np.zeros(n, bool), np.full(n, math.inf))
        out._derive(history, reports, rows, high, low, np.arange(n))
        return out

    def _derive(self, history: OffsetHistory, reports: _Reports, rows: np.ndarray, high: np.ndarray,
                low: np.ndarray, which: np.ndarray) -> None:
        """Derives the reports at `which` again (their rows re-read since)."""
        end, lag, position = _positions(reports)
        ts = reports.ts
        for part in _chunks(len(which), NEWEST_WINDOWS + 1):
            at = which[part]
            offsets, times, valid = _end_offsets(history, rows[at], ts[at], high[at], low[at], end[at],
                                                 NEWEST_WINDOWS)
            got = lag_arrays.lag_seconds(offsets, times, valid, position[at], lag[at], ts[at])
            self.seconds[at], self.exact[at], self.local[at] = got.seconds, got.exact, got.local
            self.least[at] = np.where(valid & np.isfinite(offsets), offsets, math.inf).min(axis=1)


@dataclass
class Precheck:
    """What a task's precheck of its reports (offset_records) derived before judge_batch: the reports as
    columns, their rows, and their NewestPass; `stale`: the reports whose rows were read from Redis since
    (their NewestPass is derived again)."""

    reports: _Reports
    rows: np.ndarray
    newest: NewestPass
    stale: np.ndarray


def judge_batch(reports: pa.Table, history: OffsetHistory, partials: Mapping[str, pa.Table],
                client: redis.Redis, before_read: Callable[[], None], precheck: Precheck | None = None
                ) -> Judged:
    """Latest values of the partition and group `reports` (batch_plan.offset_reports: the newest record
    of each subject), and the partitions' verdicts (without summaries). `partials`: the batch's history
    rows of METRICS (batch_plan.offset_partials), merged into `history` here; `before_read` is called before
    any read of Redis (the task waits there for the merge of the batches before its own: MergeWait).
    `precheck`: what a precheck of the same `reports` over the same history already derived."""
    judged = Judged()
    if not reports.num_rows:
        history.merge_rows(partials)
        return judged
    given = precheck.reports if precheck is not None else _Reports(reports)
    is_partition, ts, periods = given.is_partition, given.ts, given.periods
    lookback = _Policies(periods).lookback
    high = window_number(ts)
    low_lag = _ceil_window(ts - latest_values.HISTORY_SPAN_MS)
    low_verdict = np.where(is_partition, _ceil_window(ts - lookback), low_lag)
    low = np.minimum(low_lag, low_verdict)
    rows = precheck.rows if precheck is not None else history.row_of(given.partition_keys())
    missing = ~history.covered(rows, low) & (low > high - history.slots)  # a read the ring can hold
    if missing.any():
        before_read()
        history.load(client, rows[missing], low[missing])
    history.merge_rows(partials)
    covered = history.covered(rows, low)
    newest = None
    if precheck is not None:
        newest = precheck.newest
        stale = precheck.stale | (np.isin(rows, rows[missing]) if missing.any() else False)
        newest._derive(history, given, rows, high, low_lag, np.flatnonzero(stale))

    seconds, exact, verdicts = _judged_arrays(history, given, periods, is_partition, rows, ts, high,
                                              low_lag, low_verdict, newest)
    exact &= verdicts.exact | ~is_partition
    fast = covered & exact
    _add_columns(judged, np.flatnonzero(fast & is_partition), given, periods, ts, seconds, verdicts)
    _add_columns(judged, np.flatnonzero(fast & ~is_partition), given, periods, ts, seconds, None)
    slow = np.flatnonzero(~fast)
    if len(slow):
        before_read()
        _one_at_a_time(judged, given.pairs(slow), partials, client)
        judged.fallback = len(slow)
    return judged


_EMPTY = pa.table({})
# Reports are judged as arrays of rows x windows, a chunk of rows at a time: each row's answer reads only
# its own row, so a batch's peak holds a chunk's arrays (CHUNK_ROWS full lag tables' size, whatever their
# width) rather than arrays over every report of the batch.
CHUNK_ROWS = 16_384
# Lag in seconds reads each report's newest windows first (its own and the 5 before: a minute): most
# partitions and groups are less than that behind, and their answer is there. Only the rows whose answer
# may lie further back read the whole table (_lag_seconds).
NEWEST_WINDOWS = 6


def _chunks(rows: int, width: int) -> Iterator[slice]:
    """Slices of `rows` rows, each as many cells (rows x `width`) as CHUNK_ROWS full lag tables."""
    step = max(1, CHUNK_ROWS * (TABLE_WINDOWS + 1) // max(width, 1))
    return (slice(lo, lo + step) for lo in range(0, rows, step))


def _judged_arrays(history: OffsetHistory, reports: _Reports, periods: np.ndarray,
                   is_partition: np.ndarray, rows: np.ndarray, ts: np.ndarray, high: np.ndarray,
                   low_lag: np.ndarray, low_verdict: np.ndarray, newest: NewestPass | None = None
                   ) -> tuple[np.ndarray, np.ndarray, lag_arrays.Verdicts]:
    """Lag in seconds (and whether exact) and verdicts of every report."""
    seconds, exact = _lag_seconds(history, reports, is_partition, rows, ts, high, low_lag, newest)
    width = int(min(max(int((high - low_verdict).max()) + 1, 1), history.slots))
    current = reports.numbers("records_lag")
    parts = [_verdicts(history, current[at], periods[at], rows[at], ts[at], high[at], low_verdict[at],
                       is_partition[at], width) for at in _chunks(len(rows), width)]
    if len(parts) == 1:
        return seconds, exact, parts[0]
    joined = lag_arrays.Verdicts(**{name: np.concatenate([getattr(v, name) for v in parts])
                                    for name in lag_arrays.Verdicts.__dataclass_fields__})
    return seconds, exact, joined


def _positions(reports: _Reports) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each report's end offset (NaN: a group's), lag, and the position its lag in seconds asks the table
    for (a partition's end offset less its lag, a group's upstream offset)."""
    is_partition = reports.is_partition
    end = np.where(is_partition, reports.numbers("source_end_offset"), math.nan)
    lag = np.where(is_partition, reports.numbers("records_lag"), reports.numbers("group_lag"))
    upstream = np.where(is_partition, math.nan, reports.numbers("group_upstream_offset"))
    return end, lag, np.trunc(np.where(is_partition, end - lag, upstream))


def _lag_seconds(history: OffsetHistory, reports: _Reports, is_partition: np.ndarray,
                 rows: np.ndarray, ts: np.ndarray, high: np.ndarray, low: np.ndarray,
                 newest: NewestPass | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lag in seconds of every report, as latest_values.partition_latest / group_latest derive it: over
    the NEWEST_WINDOWS first, and over the whole table (TABLE_WINDOWS) for the rows whose answer those
    do not settle. A row's answer over its newest windows is its answer over the table when it reads
    nothing older (lag_arrays.LagSeconds.local) and no older window's end offset is above the newest
    windows' least, nor past what float64 holds exactly: the table keeps then the same points from the
    newest windows on, and finds the same pair. `newest`: the first pass already derived (NewestPass)."""
    end, lag, position = _positions(reports)
    if newest is None:
        newest = NewestPass.of(history, reports, rows, high, low)
    seconds, exact = newest.seconds.copy(), newest.exact.copy()
    settled = np.zeros(len(rows), bool)
    local = np.flatnonzero(newest.local)
    for part in _chunks(len(local), TABLE_WINDOWS - NEWEST_WINDOWS):
        mine = local[part]
        highest, older_exact = _older_end_offsets(history, rows[mine], high[mine], low[mine])
        settled[mine] = (highest <= newest.least[mine]) & older_exact
    whole = np.flatnonzero(~settled)
    for part in _chunks(len(whole), TABLE_WINDOWS + 1):
        mine = whole[part]
        offsets, times, valid = _end_offsets(history, rows[mine], ts[mine], high[mine], low[mine], end[mine],
                                             TABLE_WINDOWS)
        got = lag_arrays.lag_seconds(offsets, times, valid, position[mine], lag[mine], ts[mine])
        seconds[mine], exact[mine] = got.seconds, got.exact
    return seconds, exact


def _end_offsets(history: OffsetHistory, rows: np.ndarray, ts: np.ndarray, high: np.ndarray, low: np.ndarray,
                 end: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points of each row's lag table over its newest `width` windows (offsets, times, valid): their
    end offsets at the windows' middles, and the report's own end offset last."""
    newest = ~np.isnan(end)
    number, last, present = history.gather("source_end_offset", rows, high, width)
    # The report's own end offset replaces its window's (end_offset_table); without one, the table reads
    # up to the report, a window's middle no later than it.
    present &= (number >= low[:, None]) & ((number < high[:, None]) | ~newest[:, None])
    times = np.minimum(number * WINDOW_MS + WINDOW_MS // 2, ts[:, None])
    return (np.concatenate([np.trunc(last), np.trunc(end)[:, None]], axis=1),
            np.concatenate([times, ts[:, None]], axis=1), np.concatenate([present, newest[:, None]], axis=1))


def _older_end_offsets(history: OffsetHistory, rows: np.ndarray, high: np.ndarray, low: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Over the table's windows before the NEWEST_WINDOWS: each row's highest end offset (-inf: none), and
    whether all are exact in float64. A row is read from the oldest window it may hold on (a row kept from
    a task's hot record holds a few of the table's 55 older windows), rows of a like reach together."""
    top = high - NEWEST_WINDOWS
    reach = np.maximum(np.maximum(low, history.lowest[rows]), top - (TABLE_WINDOWS - NEWEST_WINDOWS) + 1)
    need = top - reach + 1  # windows each row may hold there (<= 0: none)
    highest, exact = np.full(len(rows), -math.inf), np.ones(len(rows), bool)
    for part in (np.flatnonzero((need > 0) & (need <= NEWEST_WINDOWS + 2)),
                 np.flatnonzero(need > NEWEST_WINDOWS + 2)):
        if not len(part):
            continue
        number, last, present = history.gather("source_end_offset", rows[part], top[part],
                                               int(need[part].max()))
        present &= number >= low[part, None]
        offsets = np.trunc(last)
        highest[part] = np.where(present, offsets, -math.inf).max(axis=1, initial=-math.inf)
        exact[part] = np.all(~present | (np.abs(offsets) < lag_arrays.EXACT_BELOW), axis=1)
    return highest, exact


def _verdicts(history: OffsetHistory, current: np.ndarray, periods: np.ndarray, rows: np.ndarray,
              ts: np.ndarray, high: np.ndarray, low: np.ndarray, is_partition: np.ndarray, width: int
              ) -> lag_arrays.Verdicts:
    """Burrow's rules over each partition report's newest offset windows in its lookback (the newest
    `intervals` of them, within the newest `width`; one rule set a batch: the policy of each metrics period
    has the same intervals); `current`: each report's records_lag."""
    policies = _Policies(periods)
    intervals = policies.intervals
    if len(intervals) != 1:
        raise ValueError(f"policies of different intervals in one batch: {sorted(intervals)}")
    number, offsets, present = history.gather("upstream_offset", rows, high, width)
    _, lags, has_lag = history.gather("records_lag", rows, high, width)
    present &= (number >= low[:, None]) & is_partition[:, None]
    return lag_arrays.burrow(
        number * WINDOW_MS, np.trunc(offsets), np.where(has_lag, np.trunc(lags), 0.0), present,
        intervals.pop(), np.trunc(current), ts, policies.stop_after_ms, policies.stall_after_ms,
        policies.allowed_lag)


# A value's JSON as redis_layout.encode_latest renders it (keys sorted), put together from its fields' JSON
# (json_rows: each field a column, one concatenation for every row, no format call a report).
_PARTITION_VALUE = ('{{"lag_seconds":{lag_seconds},"records_lag":{records_lag},'
                    '"source_end_offset":{source_end_offset},"target_offset":{target_offset},"ts":{ts},'
                    '"upstream_offset":{upstream_offset}}}')
_GROUP_VALUE = ('{{"downstream_offset":{downstream_offset},"group_lag":{group_lag},'
                '"lag_seconds":{lag_seconds},"ts":{ts},"upstream_offset":{upstream_offset}}}')
_VERDICT = ('{{"allowed_lag":{allowed_lag},"complete":{complete},"current_lag":{current_lag},'
            '"end":[{end_ts},{end_offset},{end_lag}],"lag_seconds":{lag_seconds},"lookback_ms":{lookback},'
            '"partition":{partition},"reason":{reason},"start":[{start_ts},{start_offset},{start_lag}],'
            '"status":{status},"stop_after_ms":{stop_after_ms},"topic":{topic},"ts":{ts}}}')
_JSON_TEXT = partial(pa.array, type=pa.string())
_REASON = [str(r) for r in lag_arrays.REASONS]
_STATUS = [str(lag_arrays.STATUS_OF[r]) for r in lag_arrays.REASONS]
_REASON_JSON = _JSON_TEXT(json_column(_REASON))
_REASON_CODES = verdict_summaries.reason_codes(_REASON)  # lag_arrays' codes -> the kept columns'
_STATUS_CODES = verdict_summaries.status_codes(_STATUS)
_STATUS_JSON = _JSON_TEXT(json_column(_STATUS))


def _fields(topic: pa.Array, numbers: pa.Array) -> pa.Array:
    """A group's latest field, a partition's verdict field (the same text: redis_layout.group_latest_field,
    lag_verdicts.verdict_field) of each (topic, partition number)."""
    return pc.binary_join_element_wise(topic, pc.cast(numbers, pa.string()), "|")


def _repeated_json(values: pa.Array) -> pa.Array:
    """The JSON of values of which there are few distinct ones (topics): each rendered once."""
    encoded = pc.dictionary_encode(values)
    return _JSON_TEXT(json_column(encoded.dictionary.to_pylist())).take(encoded.indices)


def _named(name: Callable[..., str], *columns: pa.Array) -> pa.Array:
    """name(*row) of each row of string `columns` (a hash key of its target, source and topic or group),
    called once a distinct row: a batch's 50,000 partitions name a few thousand hashes."""
    n = len(columns[0])
    if any(c.null_count for c in columns):  # no report has one (raw_records' rules): named a row at a time
        rows = zip(*(c.to_pylist() for c in columns), strict=True)
        return pa.array([name(*row) for row in rows], pa.string())
    code = np.zeros(n, np.int64)
    for column in columns:
        encoded = pc.dictionary_encode(column)
        if len(encoded.dictionary) and int(code.max(initial=0)) >= (1 << 62) // len(encoded.dictionary):
            code = np.unique(code, return_inverse=True)[1].reshape(-1)  # ranks: the product fits again
        code = code * len(encoded.dictionary) + encoded.indices.to_numpy()
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    distinct = [c.take(pa.array(first)).to_pylist() for c in columns]
    return pa.array([name(*row) for row in zip(*distinct, strict=True)], pa.string()).take(
        pa.array(inverse.reshape(-1)))


def _add_columns(judged: Judged, at: np.ndarray, reports: _Reports, periods: np.ndarray, ts: np.ndarray,
                 seconds: np.ndarray, verdicts: lag_arrays.Verdicts | None) -> None:
    """The reports at `at` (all partitions, with their `verdicts`, or all groups) as columns: their latest
    values' JSON, their lag-in-seconds samples, and the partitions' verdicts (records and JSON)."""
    if not len(at):
        return
    taken = pa.array(at, pa.int64())
    target, source, topic, group = (reports.names[c].take(taken)
                                    for c in ("target", "source", "topic", "group"))
    numbers = reports.partition.take(taken)
    ts_at, secs = ts[at], seconds[at]
    secs_list: list[float | None] = [None if x != x else x for x in secs.tolist()]  # NaN: none
    columns = {"ts": int_json(ts_at), "lag_seconds": _JSON_TEXT(json_column(secs_list))}
    if verdicts is None:
        for name, column in (("downstream_offset", "group_downstream_offset"), ("group_lag", "group_lag"),
                             ("upstream_offset", "group_upstream_offset")):
            columns[name] = reports.json(column, taken)
        key, names = _named(layout.group_latest_key, target, source, group), _fields(topic, numbers)
        text = json_rows(_GROUP_VALUE, columns)
    else:
        for name in ("records_lag", "source_end_offset", "target_offset", "upstream_offset"):
            columns[name] = reports.json(name, taken)
        key = _named(layout.partition_latest_key, target, source, topic)
        names = pc.cast(numbers, pa.string())
        text = json_rows(_PARTITION_VALUE, columns)
    judged.latest_tables.append(pa.table([key, names, pa.array(ts_at, pa.int64()), text],
                                         schema=LATEST_SCHEMA))
    sampled = np.flatnonzero(~np.isnan(secs))
    if len(sampled):
        some = pa.array(sampled)
        judged.sample_tables.append(lag_seconds_columns(
            "partition" if verdicts is not None else "group", target.take(some), source.take(some),
            topic.take(some), numbers.take(some), group.take(some), ts_at[sampled], secs[sampled],
            one_a_subject=True))  # one a subject
    if verdicts is not None:
        _add_verdicts(judged, at, target, source, topic, numbers, periods, ts_at, secs, columns, verdicts)


def _add_verdicts(judged: Judged, at: np.ndarray, target: pa.Array, source: pa.Array, topic: pa.Array,
                  partition: pa.Array, periods: np.ndarray, ts: np.ndarray, seconds: np.ndarray,
                  value_json: Mapping[str, pa.Array], v: lag_arrays.Verdicts) -> None:
    """The partitions' verdicts (lag_verdicts.verdict_record, of those with an observation) as JSON and as
    the columns a summary reads, per replication: no record a verdict, no format call a verdict."""
    observed = v.observed[at]
    if not observed.any():
        return
    keep = np.flatnonzero(observed)
    at, taken = at[keep], pa.array(keep)
    topic, target, source = (c.take(taken) for c in (topic, target, source))
    numbers = partition.take(taken)
    policies = _Policies(periods[at])
    counts, count_of = np.unique(v.count[at], return_inverse=True)
    count_of = count_of.reshape(-1)
    intervals = next(iter(policies.intervals))  # one rule set a batch (_verdicts)
    current, start, end = (_integers(c[at]) for c in (v.current_lag, v.start, v.end))
    reason = v.reason[at]
    text = json_rows(_VERDICT, {
        "allowed_lag": policies.json("allowed_lag"),
        "complete": _JSON_TEXT(json_column((counts / intervals).tolist())).take(pa.array(count_of)),
        "current_lag": int_json(current), "lag_seconds": value_json["lag_seconds"].take(taken),
        **{f"{name}_{part}": int_json(c[:, k]) for name, c in (("start", start), ("end", end))
           for k, part in enumerate(("ts", "offset", "lag"))},
        "lookback": policies.json("lookback"), "partition": pc.cast(numbers, pa.string()),
        "reason": _REASON_JSON.take(pa.array(reason)), "status": _STATUS_JSON.take(pa.array(reason)),
        "stop_after_ms": policies.json("stop_after_ms"), "topic": _repeated_json(topic),
        "ts": value_json["ts"].take(taken)})
    ints = np.column_stack([ts[keep], current, start[:, 0], end[:, 0], policies.lookback,
                            policies.stop_after_ms, policies.allowed_lag]).astype(np.int64)
    judged.verdict_tables.append(pa.table({
        "target": target, "source": source, "field": _fields(topic, numbers), "text": text, "topic": topic,
        "partition": numbers,
        "ints": pa.FixedSizeListArray.from_arrays(pa.array(ints.reshape(-1), pa.int64()), 7),
        "status": pa.array(_STATUS_CODES[reason], pa.int8()),
        "reason": pa.array(_REASON_CODES[reason], pa.int8()),
        "complete": pa.array(counts[count_of] / intervals, pa.float64()),
        "seconds": pa.array(seconds[keep], pa.float64()),
        "inexact": pa.array(np.abs(ints[:, 1:]).max(axis=1) >= verdict_summaries.EXACT_BELOW, pa.bool_())},
        schema=verdict_summaries.TABLE_SCHEMA))


def _integers(column: np.ndarray) -> np.ndarray:
    """A column of integral floats as int64 (0 where it holds none: a row without a verdict)."""
    return np.where(np.isfinite(column), column, 0).astype(np.int64)


def _add(judged: Judged, subject: Subject, record: dict[str, Any], value: LatestValue) -> None:
    judged.latest.append(value)
    seconds = value[2].get("lag_seconds")
    if isinstance(seconds, int | float):
        kind, target, source, topic, partition, group = subject
        judged.samples.append(LagSample(kind, target, source, topic, int(partition), group, int(record["ts"]),
                                        float(seconds)))


def _one_at_a_time(judged: Judged, reports: list[tuple[Subject, dict[str, Any]]],
                   partials: Mapping[str, pa.Table], client: redis.Redis) -> None:
    """The reports the arrays leave, by the pure functions over their windows: Redis's, with the batch's."""
    history = WindowHistory(10**15)
    wanted: dict[layout.SeriesId, tuple[int, int]] = {}
    for subject, record in reports:
        _, target, source, topic, partition, _ = subject
        ts = int(record["ts"])
        low = min(ts - latest_values.HISTORY_SPAN_MS, ts - partition_verdicts.lookback_of(record))
        for metric in METRICS:
            series = series_id(target, source, topic, int(partition), metric)
            known = wanted.get(series, (low, 0))
            wanted[series] = (min(known[0], low), max(known[1], ts - low))
    load_stored(history, client, wanted)
    subjects = {(s.target, s.source, s.topic, s.partition) for s in wanted}
    for metric in METRICS:
        rows = partials.get(metric, _EMPTY)
        if rows.num_rows == 0:
            continue
        mine = [k in subjects for k in zip(*(rows[c].to_pylist() for c in ("target", "source", "topic",
                                                                           "partition")), strict=True)]
        for r in rows.filter(pa.array(mine)).to_pylist():
            series = series_id(r["target"], r["source"], r["topic"], r["partition"], metric)
            history.merge(series, [layout.WindowAggregate(
                r["window_start"], r[f"{metric}__n"], r[f"{metric}__sum"], r[f"{metric}__min"],
                r[f"{metric}__max"], r[f"{metric}__last"], r["last_ts"])])
    for subject, record in reports:
        kind, target, source, topic, partition, _ = subject
        ts = int(record["ts"])
        ends = history.view(series_id(target, source, topic, int(partition), "source_end_offset"),
                            ts - latest_values.HISTORY_SPAN_MS, ts)
        value = latest_value(kind, subject, record, ends)
        _add(judged, subject, record, value)
        if kind == "partition":
            for pair, fresh in partition_verdicts.batch_verdicts(
                    [(subject, record, value[2].get("lag_seconds"))], history.view).items():
                judged.verdicts.setdefault(pair, []).append(
                    VerdictColumns.of_records(list(fresh), list(fresh.values())))

