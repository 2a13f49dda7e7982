"""One micro-batch's partial windows and latest records (window_partials) sorted by what the sink does.

Pure: no Redis, no Spark. Columnar where it counts: a batch has ~10^5 (series, window) partials, so they
stay one Arrow table, one metric a row, each series by its number (numbered_partials;
stored_windows.SeriesKeys names its keys once per process, not per window); stored_windows merges them.
Window objects are built only for the series latest values read (end offsets of partitions, record counts
of replications), and of those only for the windows a view reads or the kept history keeps (add_history,
once the sink knows both).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.offset_history import METRICS as OFFSET_METRICS
from aggregator.raw_records import INVALID_KIND
from aggregator.stored_windows import SeriesKeys
from aggregator.window_history import series_id
from aggregator.window_partials import (
    ALL_METRICS,
    BatchPartials,
    newest_of_subjects,
    records_of,
)
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

Subject = tuple[str, str, str, str, str, str]  # kind, target, source, topic, partition, group
SUBJECT_COLUMNS = ["target", "source", "topic", "partition", "group"]
MEMBER_PARTS = ("n", "sum", "min", "max", "last")
# Metrics whose windows the sink's latest values read: record counts of replications. (Partitions' offset
# windows are read where the reports are judged, in the tasks: offset_partials, offset_records.)
HISTORY_METRICS = ("record_count",)
PYTHON_ROWS_AT_ONCE = 16_384
_SUBJECT, _WINDOW = itemgetter(0), itemgetter(1)


@dataclass
class InvalidWindow:
    series: layout.SeriesId
    window: layout.WindowAggregate
    excerpt: str


@dataclass
class BatchPlan:
    # partial windows of the series latest values are derived from, those add_history found to matter
    history: dict[layout.SeriesId, list[layout.WindowAggregate]] = field(default_factory=dict)
    # the same partials, a table a metric, until add_history makes windows of them
    history_rows: dict[str, pa.Table] = field(default_factory=dict, repr=False)
    counted_replications: set[tuple[str, str]] = field(default_factory=set)  # with record-count windows
    invalid: list[InvalidWindow] = field(default_factory=list)
    replications: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # newest report each
    index_hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    index_sets: dict[str, set[str]] = field(default_factory=dict)
    max_event_ts: int | None = None

    @classmethod
    def of(cls, batch: BatchPartials) -> BatchPlan:
        plan = cls()
        windows = batch.windows
        if windows.num_rows:
            for metric in HISTORY_METRICS:
                present = _metric_rows(windows, metric)
                plan.history_rows[metric] = _history_rows(present, metric)
            counted = plan.history_rows["record_count"].select(["target", "source"])
            plan.counted_replications = set(zip(*counted.group_by(["target", "source"], use_threads=False)
                                                .aggregate([]).to_pydict().values(), strict=True))
            plan._add_invalid(_metric_rows(windows, layout.INVALID_RECORDS_METRIC), batch.excerpts)
            plan._add_index(windows)
            valid_ts = windows["max_ts"].filter(pc.not_equal(windows["kind"], INVALID_KIND))
            top = pc.max(valid_ts).as_py() if len(valid_ts) else None
            plan.max_event_ts = None if top is None else int(top)
        plan._add_latest(batch.latest)
        return plan

    def _add_latest(self, latest: pa.Table) -> None:
        """The newest replication report in the batch (window_partials.latest_table rows); partition and
        group reports are the tasks' (offset_reports)."""
        latest = newest_of_subjects(latest)
        replications = latest.filter(pc.equal(latest["kind"], "replication"))
        if replications.num_rows:
            self.replications = {(r["target"], r["source"]): r for r in records_of(replications)}

    def add_history(self, metrics: Iterable[str], read_from: Mapping[str, int],
                    keeps: Callable[[], Mapping[str, int]]) -> list[layout.SeriesId]:
        """Makes windows of the history partials of `metrics` a view or the kept history can hold:
        `read_from`, per metric, the earliest window start the batch's views read; `keeps()`, per metric,
        the longest any kept series is kept behind its newest window (window_history). Older partials are
        left out: no view reads them and the commit would drop them (a backlog batch holds hundreds of
        windows a series, of which the history keeps tens; making them objects was most of the sink's
        time). Returns the series given windows. A metric at a time, so that the sink makes the windows
        latest values read before it writes them, and the verdicts' after."""
        longest: list[Mapping[str, int]] = []  # keeps(), asked once and only when a batch may reach back

        def keep_of(metric: str) -> int | None:
            if not longest:
                longest.append(keeps())
            return longest[0].get(metric)

        added: list[layout.SeriesId] = []
        for metric in metrics:
            rows = self.history_rows.pop(metric, None)
            oldest = None if rows is None else _oldest_wanted(rows, read_from.get(metric),
                                                             partial(keep_of, metric))
            if oldest is not None:
                wanted = rows.filter(pc.greater_equal(rows["window_start"], oldest))
                added += self._add_history(wanted, metric)
        return added

    def _add_history(self, rows: pa.Table, metric: str) -> list[layout.SeriesId]:
        added = []
        # In slices: a batch's columns as Python objects at once were ~10^6 numbers, the driver's peak.
        for chunk in rows.to_batches(max_chunksize=PYTHON_ROWS_AT_ONCE):
            columns = list(chunk.to_pydict().values())
            # Made and grouped by C loops (map, zip, groupby), not a Python loop per window: a
            # 200k-record batch has ~7 * 10^4 windows (bench/RESULTS.md, "history windows").
            windows = map(layout.WindowAggregate, *columns[5:])
            # A series' windows come in a run: one SeriesId (a Python-level hash) per run, not per window.
            for (target, source, topic, partition, group), run in groupby(
                    zip(zip(*columns[:5], strict=True), windows, strict=True), key=_SUBJECT):
                series = series_id(target, source, topic, partition, metric, group or None)
                if series not in self.history:
                    added.append(series)
                self.history.setdefault(series, []).extend(map(_WINDOW, run))
        return added

    def _add_invalid(self, windows: pa.Table, excerpts: Mapping[tuple[str, str, int, int], str]) -> None:
        invalid = windows.filter(pc.equal(windows["kind"], INVALID_KIND))
        name = layout.INVALID_RECORDS_METRIC
        for r in invalid.to_pylist():
            series = layout.SeriesId(r["target"], r["source"], r["topic"], r["partition"], name)
            start = r["window_start"]
            window = layout.WindowAggregate(start, r[f"{name}__n"], r[f"{name}__sum"], r[f"{name}__min"],
                                            r[f"{name}__max"], r[f"{name}__last"])
            excerpt = excerpts.get((r["target"], r["source"], r["partition"], start), "")
            self.invalid.append(InvalidWindow(series, window, excerpt))

    def _add_index(self, windows: pa.Table) -> None:
        """The index entries naming the batch's subjects: a group_by a kind of entry, then a Python step a
        key (a topic's partitions at once), not a call a subject (100,000 of them at a real target's
        cardinality)."""
        columns = ["target", "source", "topic", "partition", "group", "upstream_topic"]
        windows = windows.select(columns).group_by(columns, use_threads=False).aggregate([])
        sets = self.index_sets
        for target in _distinct(windows, ["target"])["target"]:
            sets.setdefault(layout.targets_key(), set()).add(target)
        pairs = _distinct(windows, ["target", "source"])
        for target, source in zip(pairs["target"], pairs["source"], strict=True):
            sets.setdefault(layout.sources_key(target), set()).add(source)
        grouped = windows.filter(pc.fill_null(pc.not_equal(windows["group"], ""), False))
        groups = _distinct(grouped, ["target", "source", "group"])
        for target, source, group in zip(groups["target"], groups["source"], groups["group"], strict=True):
            sets.setdefault(layout.groups_key(target, source), set()).add(group)
        # Null compares as Python's None did: unequal to either.
        topics = windows.filter(pc.fill_null(pc.not_equal(windows["topic"], layout.ALL_TOPICS), True))
        named = topics.filter(pc.fill_null(pc.not_equal(topics["upstream_topic"], ""), False))
        # Of two upstream names for a topic, the one of the subject that comes last.
        named = named.append_column("at", pa.array(np.arange(named.num_rows)))
        upstream = named.group_by(["target", "source", "topic", "upstream_topic"], use_threads=False) \
            .aggregate([("at", "max")]).sort_by("at_max").to_pydict()
        for target, source, topic, name, _ in zip(*upstream.values(), strict=True):
            self.index_hashes.setdefault(layout.topics_key(target, source), {})[topic] = name
        parts = topics.filter(pc.fill_null(pc.not_equal(topics["partition"], layout.WHOLE_TOPIC), True))
        by_topic = parts.group_by(["target", "source", "topic"], use_threads=False).aggregate(
            [("partition", "distinct", pc.CountOptions(mode="all"))]).to_pydict()
        for target, source, topic, partitions in zip(*by_topic.values(), strict=True):
            sets.setdefault(layout.partitions_key(target, source, topic), set()).update(map(str, partitions))


def offset_reports(latest: pa.Table) -> pa.Table:
    """The newest partition and group report of each subject among `latest` (window_partials.latest_table
    rows, one Kafka partition's: a subject's reports all come to one), latest_schema's rows: what a task
    judges (offset_records), as columns, not a dict a report."""
    latest = newest_of_subjects(latest)
    return latest.filter(pc.is_in(latest["kind"], pa.array(["partition", "group"])))


def offset_partials(windows: pa.Table) -> dict[str, pa.Table]:
    """The partitions' partial windows of each of offset_history.METRICS among `windows`, a table a metric
    (the columns offset_history.merge_rows reads): what a task merges into its offset records."""
    if not windows.num_rows:
        return {}
    return {m: _history_rows(_metric_rows(windows, m), m) for m in OFFSET_METRICS}


def _distinct(table: pa.Table, columns: list[str]) -> dict[str, list[Any]]:
    """The distinct rows of `columns`, in the order they first come, as Python lists a column."""
    return table.select(columns).group_by(columns, use_threads=False).aggregate([]).to_pydict()


def _history_rows(present: pa.Table, metric: str) -> pa.Table:
    """The partials of a history metric latest values read: partitions' series for lag in seconds and
    verdicts; recent record counts a replication's."""
    wanted = (pc.equal(present["topic"], layout.ALL_TOPICS) if metric == "record_count"
              else pc.greater_equal(present["partition"], 0))
    return present.append_column("last_ts", _last_ts(present, metric)).filter(wanted).select(
        ["target", "source", "topic", "partition", "group", "window_start",
         *(f"{metric}__{p}" for p in MEMBER_PARTS), "last_ts"])


def _oldest_wanted(rows: pa.Table, read_from: int | None, keep: Callable[[], int | None]) -> int | None:
    """The earliest window start among `rows` (one metric's) that can matter, or None when none can: not
    read by a view (all start at or after `read_from`) nor kept once committed (a series keeps at most
    `keep()` behind its newest window, and each series in `rows` has its newest among them: the least of
    those newest minus the keep is a floor under every series' commit). None for either: unread, unkept."""
    if rows.num_rows == 0:
        return None
    bounds = pc.min_max(rows["window_start"])
    first, last = bounds["min"].as_py(), bounds["max"].as_py()
    if read_from is not None and first >= read_from:
        return first  # everything may be read: the usual live batch, a few windows a series
    longest = keep()
    if longest is not None and first >= last - longest:
        return first
    oldest = read_from
    if longest is not None:
        newest = rows.group_by(SUBJECT_COLUMNS, use_threads=False).aggregate([("window_start", "max")])
        floor = pc.min(newest["window_start_max"]).as_py() - longest
        oldest = floor if oldest is None else min(oldest, floor)
    return oldest


_ROW_COLUMNS = ("kind", "target", "source", "topic", "partition", "group", "window_start")


def _metric_rows(windows: pa.Table, metric: str) -> pa.Table:
    """The partials holding `metric`, with only its columns and the series': a batch's partials have
    ~100 columns, and filtering them whole once per metric copied the table eight times."""
    columns = [*_ROW_COLUMNS, *(f"{metric}__{p}" for p in (*MEMBER_PARTS, "last_ts"))]
    return windows.select(columns).filter(pc.is_valid(windows[f"{metric}__n"]))


def _last_ts(present: pa.Table, metric: str) -> pa.ChunkedArray:
    # A partial without last ts counts as of its window start (as redis_layout.merge_windows does).
    return pc.coalesce(present[f"{metric}__last_ts"], present["window_start"])


def numbered_partials(windows: pa.Table, keys: SeriesKeys) -> tuple[pa.Table | None, int]:
    """A batch's partial windows (window_partials) one metric a row, each subject by its number and each
    metric by its index in redis_layout.WINDOW_METRICS: series, metric, start, n, sum, min, max, last,
    last_ts (stored_windows merges them into every size), ordered by series, metric and start; and how
    many subjects there are. None when the batch has no metric windows (e.g. only replication reports)."""
    present = [(m, pc.is_valid(windows[f"{m}__n"])) for m in sorted(ALL_METRICS, key=_metric_order)]
    present = [(m, rows) for m, rows in present if pc.any(rows).as_py()]
    if not present:
        return None, 0
    # Subjects numbered once on the wide rows (a row a subject and window), not on the ~8 times as many
    # narrow ones, and without a join on their five text columns.
    subject, firsts = _subjects(windows)
    subjects = windows.select(SUBJECT_COLUMNS).take(firsts)
    numbers = keys.number_columns(subjects)
    series = pa.array(numbers[subject])
    table = pa.concat_tables([_metric_partials(windows, m, rows, series) for m, rows in present])
    # Metric blocks each in the wide rows' order: by series (stable) gives series, metric, start when the
    # wide rows come by subject and start, as window_partials gives them.
    return table.take(np.argsort(table["series"].to_numpy(), kind="stable")), len(firsts)


def _subjects(windows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each row's subject as a code, and the first row of each code (its columns' values, nulls a value)."""
    code = np.zeros(windows.num_rows, np.int64)
    for column in SUBJECT_COLUMNS:
        encoded = pc.dictionary_encode(windows[column], null_encoding="encode").combine_chunks()
        code = code * len(encoded.dictionary) + encoded.indices.to_numpy().astype(np.int64)
        _, first, code = np.unique(code, return_index=True, return_inverse=True)
    return code.reshape(-1), first


def _metric_partials(windows: pa.Table, metric: str, rows: pa.ChunkedArray, series: pa.Array) -> pa.Table:
    present = windows.select(["window_start", *(f"{metric}__{p}" for p in (*MEMBER_PARTS, "last_ts"))]) \
        .append_column("series", pa.chunked_array([series])).filter(rows)
    return pa.table({
        "series": present["series"],
        "metric": pa.repeat(pa.scalar(layout.METRIC_INDEX[metric], pa.int64()), present.num_rows),
        "start": present["window_start"],
        **{p: pc.cast(present[f"{metric}__{p}"], pa.float64()) for p in MEMBER_PARTS},
        "last_ts": _last_ts(present, metric),
    })


def _metric_order(metric: str) -> int:
    return layout.METRIC_INDEX.get(metric, len(layout.METRIC_INDEX))
