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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import redis

from aggregator import lag_arrays, latest_values, partition_verdicts, verdict_summaries
from aggregator.batch_plan import Subject
from aggregator.lag_seconds import DEFAULT_TABLE_CAPACITY
from aggregator.lag_seconds_windows import LagSample, lag_seconds_columns
from aggregator.latest_value_reads import latest_value
from aggregator.latest_writes import LatestColumns, json_column
from aggregator.offset_history import METRICS, WINDOW_MS, OffsetHistory, partition_keys, window_number
from aggregator.verdict_summaries import VerdictColumns
from aggregator.window_history import WindowHistory, load_stored, series_id
from contract import redis_layout as layout

LatestValue = tuple[str, str, dict[str, Any]]
# A lag table's windows: the exporter's 60 points before the report's window, and its own (a group's
# table, without the report's end offset, reads it).
TABLE_WINDOWS = DEFAULT_TABLE_CAPACITY + 1


@dataclass
class Judged:
    latest: list[LatestValue] = field(default_factory=list)
    samples: list[LagSample] = field(default_factory=list)
    # The partitions' verdicts per replication (their records and JSON as columns), one part a path.
    verdicts: dict[tuple[str, str], list[VerdictColumns]] = field(default_factory=dict)
    fallback: int = 0  # reports derived a report at a time
    # What the arrays derive, as columns: the values already JSON, the lag-in-seconds samples as partial
    # windows.
    latest_columns: LatestColumns = field(default_factory=LatestColumns)
    sample_tables: list[pa.Table] = field(default_factory=list)


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


def _ceil_window(ms: np.ndarray) -> np.ndarray:
    return -np.floor_divide(-ms, WINDOW_MS)


def judge_batch(reports: Sequence[tuple[Subject, dict[str, Any]]], history: OffsetHistory,
                partials: Mapping[str, pa.Table], client: redis.Redis,
                before_read: Callable[[], None]) -> Judged:
    """Latest values of the partition and group `reports` (subject, newest record), and the partitions'
    verdicts (without summaries). `partials`: the batch's history rows of METRICS (batch_plan), merged
    into `history` here; `before_read` is called before any read of Redis (the sink has every staged batch
    merged there first)."""
    judged = Judged()
    if not reports:
        for metric in METRICS:
            history.merge_rows(metric, partials.get(metric, _EMPTY))
        return judged
    subjects = [s for s, _ in reports]
    records = [r for _, r in reports]
    is_partition = np.array([s[0] == "partition" for s in subjects])
    ts = np.array([int(r["ts"]) for r in records], np.int64)
    periods = [partition_verdicts.period_of(r) for r in records]
    lookback = np.array([partition_verdicts._lookback(p) for p in periods], np.int64)
    high = window_number(ts)
    low_lag = _ceil_window(ts - latest_values.HISTORY_SPAN_MS)
    low_verdict = np.where(is_partition, _ceil_window(ts - lookback), low_lag)
    low = np.minimum(low_lag, low_verdict)
    rows = history.row_of(partition_keys(subjects))
    missing = ~history.covered(rows, low) & (low > high - history.slots)  # a read the ring can hold
    if missing.any():
        before_read()
        history.load(client, rows[missing], low[missing])
    for metric in METRICS:
        history.merge_rows(metric, partials.get(metric, _EMPTY))
    covered = history.covered(rows, low)

    seconds, exact, verdicts = _judged_arrays(history, records, periods, is_partition, rows, ts, high,
                                              low_lag, low_verdict)
    exact &= verdicts.exact | ~is_partition
    fast = covered & exact
    _add_columns(judged, np.flatnonzero(fast & is_partition), subjects, records, periods, ts, seconds,
                 verdicts)
    _add_columns(judged, np.flatnonzero(fast & ~is_partition), subjects, records, periods, ts, seconds, None)
    slow = np.flatnonzero(~fast).tolist()
    if slow:
        before_read()
        _one_at_a_time(judged, [reports[i] for i in slow], partials, client)
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


def _judged_arrays(history: OffsetHistory, records: list[dict[str, Any]], periods: list[int],
                   is_partition: np.ndarray, rows: np.ndarray, ts: np.ndarray, high: np.ndarray,
                   low_lag: np.ndarray, low_verdict: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, lag_arrays.Verdicts]:
    """Lag in seconds (and whether exact) and verdicts of every report."""
    seconds, exact = _lag_seconds(history, records, is_partition, rows, ts, high, low_lag)
    width = int(min(max(int((high - low_verdict).max()) + 1, 1), history.slots))
    parts = [_verdicts(history, records[at], periods[at], rows[at], ts[at], high[at], low_verdict[at],
                       is_partition[at], width) for at in _chunks(len(rows), width)]
    if len(parts) == 1:
        return seconds, exact, parts[0]
    joined = lag_arrays.Verdicts(**{name: np.concatenate([getattr(v, name) for v in parts])
                                    for name in lag_arrays.Verdicts.__dataclass_fields__})
    return seconds, exact, joined


def _lag_seconds(history: OffsetHistory, records: list[dict[str, Any]], is_partition: np.ndarray,
                 rows: np.ndarray, ts: np.ndarray, high: np.ndarray, low: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Lag in seconds of every report, as latest_values.partition_latest / group_latest derive it: over
    the NEWEST_WINDOWS first, and over the whole table (TABLE_WINDOWS) for the rows whose answer those
    do not settle. A row's answer over its newest windows is its answer over the table when it reads
    nothing older (lag_arrays.LagSeconds.local) and no older window's end offset is above the newest
    windows' least, nor past what float64 holds exactly: the table keeps then the same points from the
    newest windows on, and finds the same pair."""
    end = np.where(is_partition, _numbers([r.get("source_end_offset") for r in records]), math.nan)
    lag = np.where(is_partition, _numbers([r.get("records_lag") for r in records]),
                   _numbers([r.get("group_lag") for r in records]))
    upstream = np.where(is_partition, math.nan, _numbers([r.get("group_upstream_offset") for r in records]))
    position = np.trunc(np.where(is_partition, end - lag, upstream))
    seconds, exact = np.full(len(rows), math.nan), np.zeros(len(rows), bool)
    settled = np.zeros(len(rows), bool)
    for at in _chunks(len(rows), NEWEST_WINDOWS + 1):
        offsets, times, valid = _end_offsets(history, rows[at], ts[at], high[at], low[at], end[at],
                                             NEWEST_WINDOWS)
        got = lag_arrays.lag_seconds(offsets, times, valid, position[at], lag[at], ts[at])
        seconds[at], exact[at] = got.seconds, got.exact
        least = np.where(valid & np.isfinite(offsets), offsets, math.inf).min(axis=1)
        settled[at] = got.local
        local = np.flatnonzero(got.local)
        for part in _chunks(len(local), TABLE_WINDOWS - NEWEST_WINDOWS):
            mine = local[part] + at.start
            highest, older_exact = _older_end_offsets(history, rows[mine], high[mine], low[mine])
            settled[mine] = (highest <= least[local[part]]) & older_exact
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
    whether all are exact in float64."""
    number, last, present = history.gather("source_end_offset", rows, high - NEWEST_WINDOWS,
                                           TABLE_WINDOWS - NEWEST_WINDOWS)
    present &= number >= low[:, None]
    offsets = np.trunc(last)
    return (np.where(present, offsets, -math.inf).max(axis=1, initial=-math.inf),
            np.all(~present | (np.abs(offsets) < lag_arrays.EXACT_BELOW), axis=1))


def _verdicts(history: OffsetHistory, records: list[dict[str, Any]], periods: list[int], rows: np.ndarray,
              ts: np.ndarray, high: np.ndarray, low: np.ndarray, is_partition: np.ndarray, width: int
              ) -> lag_arrays.Verdicts:
    """Burrow's rules over each partition report's newest offset windows in its lookback (the newest
    `intervals` of them, within the newest `width`; one rule set a batch: the policy of each metrics period
    has the same intervals)."""
    policies = [partition_verdicts._policy(p) for p in periods]
    intervals = {p.intervals for p in policies}
    if len(intervals) != 1:
        raise ValueError(f"policies of different intervals in one batch: {sorted(intervals)}")
    number, offsets, present = history.gather("upstream_offset", rows, high, width)
    _, lags, has_lag = history.gather("records_lag", rows, high, width)
    present &= (number >= low[:, None]) & is_partition[:, None]
    current = _numbers([r.get("records_lag") for r in records])
    return lag_arrays.burrow(
        number * WINDOW_MS, np.trunc(offsets), np.where(has_lag, np.trunc(lags), 0.0), present,
        intervals.pop(), np.trunc(current), ts, np.array([p.stop_after_ms for p in policies]),
        np.array([p.stall_after_ms for p in policies]), np.array([p.allowed_lag for p in policies]))


# A value's JSON as redis_layout.encode_latest renders it (keys sorted), from its fields' JSON.
_PARTITION_VALUE = ('{{"lag_seconds":{},"records_lag":{},"source_end_offset":{},"target_offset":{},"ts":{},'
                    '"upstream_offset":{}}}')
_GROUP_VALUE = '{{"downstream_offset":{},"group_lag":{},"lag_seconds":{},"ts":{},"upstream_offset":{}}}'
_VERDICT = ('{{"allowed_lag":{},"complete":{},"current_lag":{},"end":[{},{},{}],"lag_seconds":{},'
            '"lookback_ms":{},"partition":{},"reason":{},"start":[{},{},{}],"status":{},"stop_after_ms":{},'
            '"topic":{},"ts":{}}}')
_VERDICT_KEYS = ("allowed_lag", "complete", "current_lag", "end", "lag_seconds", "lookback_ms", "partition",
                 "reason", "start", "status", "stop_after_ms", "topic", "ts")
_REASON = [str(r) for r in lag_arrays.REASONS]
_STATUS = [str(lag_arrays.STATUS_OF[r]) for r in lag_arrays.REASONS]
_REASON_JSON = json_column(_REASON)
_REASON_CODES = verdict_summaries.reason_codes(_REASON)  # lag_arrays' codes -> the kept columns'
_STATUS_CODES = verdict_summaries.status_codes(_STATUS)
_STATUS_JSON = json_column(_STATUS)
partition_key = lru_cache(maxsize=1 << 16)(layout.partition_latest_key)
group_key = lru_cache(maxsize=1 << 16)(layout.group_latest_key)


@lru_cache(maxsize=1 << 18)
def _field(topic: str, partition: str) -> str:
    """A group's latest field, a partition's verdict field (the same text: lag_verdicts.verdict_field)."""
    return layout.group_latest_field(topic, int(partition))


def _add_columns(judged: Judged, at: np.ndarray, subjects: Sequence[Subject],
                 records: Sequence[dict[str, Any]], periods: list[int], ts: np.ndarray, seconds: np.ndarray,
                 verdicts: lag_arrays.Verdicts | None) -> None:
    """The reports at `at` (all partitions, with their `verdicts`, or all groups) as columns: their latest
    values' JSON, their lag-in-seconds samples, and the partitions' verdicts (records and JSON)."""
    if not len(at):
        return
    rows = at.tolist()
    kind, target, source, topic, partition, group = (list(c) for c in zip(*map(subjects.__getitem__, rows),
                                                                             strict=True))
    mine = [records[i] for i in rows]
    ts_list = ts[at].tolist()
    secs = seconds[at]
    secs_list: list[float | None] = [None if x != x else x for x in secs.tolist()]  # NaN: none
    ts_json, secs_json = json_column(ts_list), json_column(secs_list)
    if verdicts is None:
        values = (json_column([r.get(f) for r in mine]) for f in ("group_downstream_offset", "group_lag"))
        text = map(_GROUP_VALUE.format, *values, secs_json, ts_json,
                   json_column([r.get("group_upstream_offset") for r in mine]))
        judged.latest_columns.add(map(group_key, target, source, group), map(_field, topic, partition),
                                  ts_list, text)
    else:
        values = (json_column([r.get(f) for r in mine]) for f in ("records_lag", "source_end_offset",
                                                                   "target_offset"))
        text = map(_PARTITION_VALUE.format, secs_json, *values, ts_json,
                   json_column([r.get("upstream_offset") for r in mine]))
        judged.latest_columns.add(map(partition_key, target, source, topic), partition, ts_list, text)
    sampled = np.flatnonzero(~np.isnan(secs)).tolist()
    if sampled:
        judged.sample_tables.append(lag_seconds_columns(
            kind[0], [target[k] for k in sampled], [source[k] for k in sampled], [topic[k] for k in sampled],
            [int(partition[k]) for k in sampled], [group[k] for k in sampled], [ts_list[k] for k in sampled],
            secs[sampled].tolist()))
    if verdicts is not None:
        _add_verdicts(judged, at, target, source, topic, partition, mine, periods, ts_list, secs_list,
                      verdicts)


def _add_verdicts(judged: Judged, at: np.ndarray, target: list[str], source: list[str], topic: list[str],
                  partition: list[str], records: list[dict[str, Any]], periods: list[int], ts: list[int],
                  seconds: list[float | None], v: lag_arrays.Verdicts) -> None:
    """The partitions' verdicts (lag_verdicts.verdict_record, of those with an observation) as JSON and as
    the columns a summary reads, per replication: no record a verdict."""
    observed = v.observed[at]
    if not observed.any():
        return
    at = at[observed]
    keep = np.flatnonzero(observed).tolist()
    target, source, topic, partition = ([c[k] for k in keep] for c in (target, source, topic, partition))
    records, ts, seconds = [records[k] for k in keep], [ts[k] for k in keep], [seconds[k] for k in keep]
    policies = [partition_verdicts._policy(periods[i]) for i in at.tolist()]
    lookback = [partition_verdicts._lookback(periods[i]) for i in at.tolist()]
    code = v.reason[at].tolist()
    complete = (v.count[at] / policies[0].intervals).tolist()  # one rule set a batch (_verdicts)
    current, start, end = (_integers(c[at]) for c in (v.current_lag, v.start, v.end))
    report_topic = [str(r["topic"]) for r in records]
    report_partition = [int(r["partition"]) for r in records]
    allowed = [p.allowed_lag for p in policies]
    stop_after = [p.stop_after_ms for p in policies]
    start_json, end_json = (json_column([x for o in c for x in o]) for c in (start, end))
    text = list(map(_VERDICT.format, json_column(allowed), json_column(complete), json_column(current),
                    *(end_json[k::3] for k in range(3)), json_column(seconds), json_column(lookback),
                    json_column(report_partition), [_REASON_JSON[c] for c in code],
                    *(start_json[k::3] for k in range(3)), [_STATUS_JSON[c] for c in code],
                    json_column(stop_after), json_column(report_topic), json_column(ts)))
    ints = np.ascontiguousarray(np.array(
        [ts, current, [o[0] for o in start], [o[0] for o in end], lookback, stop_after, allowed], np.int64).T)
    columns = VerdictColumns(
        list(map(_field, topic, partition)), text, report_topic, report_partition, ints,
        _STATUS_CODES[v.reason[at]], _REASON_CODES[v.reason[at]], np.array(complete, np.float64),
        np.array([math.nan if x is None else x for x in seconds], np.float64),
        np.abs(ints[:, 1:]).max(axis=1) >= verdict_summaries.EXACT_BELOW)
    pairs = list(zip(target, source, strict=True))
    one = len(set(pairs)) == 1
    for pair in dict.fromkeys(pairs):
        mine = columns if one else columns.taken([k for k, p in enumerate(pairs) if p == pair])
        judged.verdicts.setdefault(pair, []).append(mine)


def _integers(column: np.ndarray) -> list[Any]:
    """A column of integral floats as Python ints (0 where it holds none: a row without a verdict)."""
    return np.where(np.isfinite(column), column, 0).astype(np.int64).tolist()


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

