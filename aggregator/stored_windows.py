"""The merge's copy of every series' recent windows at every size, on Arrow, so Redis only stores values.

Merging a batch's partial windows inside Redis (a Lua read-modify-write of each window at each size)
cost 15–20 us a window, the sink's slowest stage by far. One query is the only writer of its target's
series, so the sink keeps the windows it wrote and computes each touched window's absolute value here,
on Arrow; Redis then only replaces fields (an HSET, or redis_scripts.REPLACE_WINDOWS_LUA for a key trimmed).

Subjects (the hash of a partition, topic, replication or group at one window size, holding all their
metrics: redis_layout) are numbered once per process (SeriesKeys), so joins and sorts run on
integers (window_ids packs a window into one: numpy sorts and searches, not Acero joins), and key names
are made once per subject, not per window; in the tables `series` is a subject's
number and `metric` a metric's index in redis_layout.WINDOW_METRICS. Per window size a table holds each
metric's windows (series, metric, start, value columns) and another the windows Redis holds (series,
start): a window is a field of its key's hash, replaced by one HSET, and the held starts say which windows
a batch creates (what decides a trim, `_trims`). The windows are kept by start, series and metric, the held
starts by series and start, so a batch's windows are found in them by binary search and merged into place:
a merge sorts and hashes what it touches, and of the kept windows copies only those from the batch's oldest
start on (the older ones stay slices of the same buffers). A subject is *covered
from* a start when every stored window from that start on is in the
tables: what is not covered is read from Redis before the batch merges (`uncovered` / `load`), so a
restarted process or a late record for an old window reads Redis once. Only committed batches change
the tables, and a failed write clears them, so over their covered range they always equal Redis.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.member_text import VALUES, member_text, window_bounds
from aggregator.window_ids import (
    METRICS,
    WindowIds,
    ascending,
    distinct,
    find,
    int64,
    ranges,
    run_lasts,
    take_or_null,
)
from aggregator.window_partials import one_array, window_starts
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

SCHEMA = pa.schema([pa.field("series", pa.int64()), pa.field("metric", pa.int64()),
                    pa.field("start", pa.int64()), *(pa.field(v, pa.float64()) for v in VALUES),
                    pa.field("last_ts", pa.int64())])
STARTS = pa.schema([pa.field("series", pa.int64()), pa.field("start", pa.int64())])
WINDOW_KEY = ["series", "metric", "start"]
NOT_COVERED = np.iinfo(np.int64).max  # covered_from of a subject none of whose windows are here
# How far behind a series' newest window its windows stay here: the window before the newest, and at
# least the usual lateness (older windows are read from Redis when a late record needs them). Every kept
# window is joined with each batch, so keeping more costs more than the rare read: at 60 s a live target's
# 100,000 partitions (a report every 5 s) kept seven 10 s windows a subject, and a merge's CPU grew with
# them to twice that of one window (bench/RESULTS.md, s29, "what the merge keeps"). A series' reports come
# in order (keyed: one Kafka partition), so what a batch touches is its newest window or two.
MIN_KEEP_MS = 20_000


def keep_ms(window: str) -> int:
    return max(layout.WINDOWS[window].size_ms, MIN_KEEP_MS)


SubjectColumns = tuple[str, str, str, int, str]  # target, source, topic, partition, group ("" for none)


@dataclass
class SeriesKeys:
    """Subject numbers of this process, with each subject's key at every window size and its hash tag."""

    ids: dict[SubjectColumns, int] = field(default_factory=dict)
    keys: list[tuple[str, ...]] = field(default_factory=list)  # by subject: key per size (WINDOWS order)
    tags: list[int] = field(default_factory=list)  # by subject: its hash tag's number
    tag_ids: dict[tuple[str, str, str], int] = field(default_factory=dict)
    tag_crcs: list[int] = field(default_factory=list)  # by hash tag number: CRC-32 of its text (merge_part)
    _names: pa.Array = field(default_factory=lambda: pa.array([], pa.string()), compare=False, repr=False)
    # Each subject numbered through number_columns, as subject_text writes it, and its number: a merge's
    # ~110k subjects at 100,000 series looked up by Arrow (index_in, without the GIL), not a Python tuple
    # and dict lookup each.
    _texts: pa.Array = field(default_factory=lambda: pa.array([], pa.string()), compare=False, repr=False)
    _text_numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False,
                                      repr=False)

    def number_columns(self, subjects: pa.Table) -> np.ndarray:
        """The numbers of `subjects`' rows (columns target, source, topic, partition, group), as `number`
        gives them: the subjects not met before are numbered by it, in row order."""
        text = subject_text(subjects)
        at = pc.fill_null(pc.index_in(text, value_set=self._texts), -1).to_numpy(zero_copy_only=False)
        numbers = np.empty(len(at), np.int64)
        found = at >= 0
        numbers[found] = self._text_numbers[at[found]]
        missing = np.flatnonzero(~found)
        if len(missing):
            rows = subjects.select(["target", "source", "topic", "partition", "group"]).take(missing)
            numbers[missing] = self.number(zip(*rows.to_pydict().values(), strict=True))
            self._texts = pa.concat_arrays([self._texts, text.take(pa.array(missing))])
            self._text_numbers = np.concatenate([self._text_numbers, numbers[missing]])
        return numbers

    def number(self, subjects: Iterable[SubjectColumns]) -> list[int]:
        out = []
        for s in subjects:
            known = self.ids.get(s)
            if known is None:
                known = self.ids[s] = len(self.keys)
                target, source, topic, partition, group = s
                named = layout.SeriesId(target, source, topic, partition, "", group or None)
                self.keys.append(tuple(layout.series_key(named, w) for w in layout.WINDOWS))
                tag = self.tag_ids.setdefault((target, source, topic), len(self.tag_ids))
                if tag == len(self.tag_crcs):
                    self.tag_crcs.append(zlib.crc32(hash_tag(self.keys[-1][0]).encode()))
                self.tags.append(tag)
            out.append(known)
        return out

    def names(self) -> pa.Array:
        """Every key's name, at series * len(WINDOWS) + the size's index: a merge part takes its keys' names
        with Arrow, not a Python lookup a key."""
        named = len(self._names) // len(layout.WINDOWS)
        if named < len(self.keys):
            added = pa.array([key for keys in self.keys[named:] for key in keys], pa.string())
            self._names = pa.concat_arrays([self._names, added]) if len(self._names) else added
        return self._names


def subject_text(subjects: pa.Table) -> pa.Array:
    """A text a row naming its subject (target, source, topic, partition, group) unambiguously: each column's
    length then its value, a null as "N" (a null group and an empty one are distinct subjects to `number`)."""
    fields = []
    for column in ("target", "source", "topic", "partition", "group"):
        values = one_array(subjects[column])
        text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
        sized = pc.binary_join_element_wise(pc.cast(pc.binary_length(text), pa.string()), text, ":")
        fields.append(pc.fill_null(sized, "N"))
    return pc.binary_join_element_wise(*fields, "|")


def hash_tag(key: str) -> str:
    """A key's hash tag, braces included: the keys a call may touch together on Redis Cluster."""
    return key[key.index("{"):key.index("}") + 1]


def merge_part(tag: str, parts: int) -> int:
    """The transaction of a merge cut in `parts` that writes the keys of hash tag `tag` (braces included):
    a function of the tag's text alone, so a restarted process cuts a merge the same way."""
    return zlib.crc32(tag.encode()) % parts


def in_window_order(numbered: pa.Table) -> pa.Table:
    """Numbered partials (series, metric, start, values, last_ts) in the order size_partials merges them at
    every size (partials_order): themselves when they are in it already, or have null values (which
    size_partials merges by Arrow's group_by). A merge at the finest size only keeps its batches' rows in
    this order for the next merge at every size, which then only merges their runs."""
    if any(numbered[c].null_count for c in VALUES):
        return numbered
    keys = WindowIds([numbered]).series_metrics(0, numbered)
    if _in_order(keys, int64(numbered["last_ts"]), one_array(numbered["last"]).to_numpy()):
        return numbered
    return numbered.take(partials_order(numbered, keys))


def size_partials(finest: pa.Table, window: str) -> pa.Table:
    """Partial finest windows (series, metric, start, values, last_ts) merged per window of `window` size,
    series and metric: n and sum add up, min/max, `last` the one of greatest (last ts, value)."""
    size = layout.WINDOWS[window].size_ms
    table = pa.table({"series": finest["series"], "metric": finest["metric"],
                      "start": window_starts(finest["start"], size),
                      **{c: finest[c] for c in (*VALUES, "last_ts")}})
    if any(table[c].null_count for c in VALUES):
        return _grouped(table)
    keys = WindowIds([table]).series_metrics(0, table)
    last_ts, last = int64(table["last_ts"]), one_array(table["last"]).to_numpy()
    if not _in_order(keys, last_ts, last):
        order = partials_order(table, keys)
        table, keys = table.take(order), keys[order]
    firsts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) \
        else np.zeros(0, np.int64)
    if size == layout.FINEST_WINDOW.size_ms and len(firsts) == len(keys):
        return table  # one partial a window already, as window_partials gives them
    lengths = np.diff(np.append(firsts, len(keys)))
    out = table.select(["series", "metric", "start", "last", "last_ts"]).take(firsts + lengths - 1)
    values = {c: one_array(table[c]).to_numpy() for c in ("n", "sum", "min", "max")}
    return pa.table({**{c: out[c] for c in ("series", "metric", "start")},
                     "n": _sums(values["n"], firsts, lengths), "sum": _sums(values["sum"], firsts, lengths),
                     # fmin/fmax: NaN loses and ties keep the first, as Arrow's grouped min and max.
                     "min": np.fmin.reduceat(values["min"], firsts) if len(firsts) else values["min"],
                     "max": np.fmax.reduceat(values["max"], firsts) if len(firsts) else values["max"],
                     "last": out["last"], "last_ts": out["last_ts"]})


def partials_order(table: pa.Table, keys: np.ndarray | None = None) -> np.ndarray:
    """The order of partials (series, metric, start, last, last_ts: a batch's or several batches') by
    series, metric and start, then last ts and last, as np.lexsort of those gives it (stable); `keys`: the
    rows packed by WindowIds.series_metrics, when the caller has them. A batch's rows come by series, metric
    and start, and a window's last ts lies in it: one stable sort of (series, metric, last ts) packed into an
    int64 puts the rows (several batches' runs) together in a pass, where the lexsort sorted them three
    times over (~4.3M rows for the coarser sizes of a merge at every size at 100,000 series), and only rows
    of equal last ts are then put in order by their last. Where the windows do not follow their last ts
    (checked), or the key does not fit an int64: the lexsort."""
    if keys is None:
        keys = WindowIds([table]).series_metrics(0, table)
    last_ts, last = int64(table["last_ts"]), one_array(table["last"]).to_numpy()
    order = _by_last_ts(table, keys, last_ts, last) if len(keys) else None
    return np.lexsort((last, last_ts, keys)) if order is None else order


def _by_last_ts(table: pa.Table, keys: np.ndarray, last_ts: np.ndarray, last: np.ndarray
                ) -> np.ndarray | None:
    """partials_order by (series, metric, last ts) packed, then last; None where that is not its order."""
    group = int64(table["series"]) * METRICS + int64(table["metric"])
    ts = last_ts - last_ts.min()
    span = int(ts.max()) + 1
    if group.min() < 0 or int(group.max()) >= (1 << 62) // span:
        return None
    packed = group * span + ts
    order = np.argsort(packed, kind="stable")
    if not np.all(np.diff(keys[order]) >= 0):  # a window's rows out of its last ts' order
        return None
    ordered = packed[order]
    ties = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(ties):
        rows = np.unique(np.concatenate([ties, ties + 1]))
        order[rows] = order[rows][np.lexsort((last[order[rows]], ordered[rows]))]
    return order


def _in_order(keys: np.ndarray, last_ts: np.ndarray, last: np.ndarray) -> bool:
    """Whether rows are ordered by key, then last ts and last (as numbered_partials gives them)."""
    step, ts_step = np.diff(keys), np.diff(last_ts)
    later = (ts_step > 0) | ((ts_step == 0) & (last[1:] >= last[:-1]))
    return bool(np.all((step > 0) | ((step == 0) & later)))


def _sums(values: np.ndarray, firsts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of runs added one value after the other from 0, as Arrow's grouped sum adds them (numpy's
    pairwise sums round differently)."""
    sums = np.zeros(len(firsts))
    longest = int(lengths.max(initial=0))
    # The first offsets, where nearly every run ends, over all runs at once: 0.0 added past a run's end
    # leaves its sum as it is (a sum begun at 0.0 is never -0.0). Then the few longer runs alone.
    last = len(values) - 1
    for offset in range(min(longest, _ALL_RUNS)):
        sums += np.where(offset < lengths, values[np.minimum(firsts + offset, last)], 0.0)
    live = np.flatnonzero(lengths > _ALL_RUNS)
    for offset in range(_ALL_RUNS, longest):
        live = live[lengths[live] > offset]
        sums[live] += values[firsts[live] + offset]
    return sums


_ALL_RUNS = 8  # offsets _sums adds over every run


def _grouped(table: pa.Table) -> pa.Table:
    """size_partials by Arrow's group_by, which skips null values as numpy does not."""
    ordered = table.sort_by([(c, "ascending") for c in (*WINDOW_KEY, "last_ts", "last")])
    aggregates = [("n", "sum"), ("sum", "sum"), ("min", "min"), ("max", "max"), ("last", "last"),
                  ("last_ts", "last")]
    out = ordered.group_by(WINDOW_KEY, use_threads=False).aggregate(aggregates)
    names = {f"{column}_{function}": column for column, function in aggregates}
    return out.rename_columns([names.get(c, c) for c in out.column_names])


@dataclass
class WindowUpdates:
    """One window size's changed windows: whether each replaces a stored one (false when the window is new),
    its member, and per key the trim when the batch created a window there in a new trim period.

    The members are made when asked for (`members`), from the merged values (`values`, every metric of each
    changed window, a window's rows bounds[w]..bounds[w + 1]): a merge asks for them a part at a time, just
    before it sends the part, so a merge at every size at 100,000 series does not hold ~330k members (~165
    MB) and their copies at once. Made with `changed` holding a member column instead, the members are
    those."""

    window: str
    changed: pa.Table  # series, start, replaces (a row a window); member, when made with it
    # series -> (first start of the grid to delete, None: the key's own fields; drop windows before this)
    trims: dict[int, tuple[int | None, int]]
    newest: dict[int, int]  # series -> the key's newest window start, where the batch moves it on
    values: pa.Table | None = None  # SCHEMA: every metric of the changed windows, window after window
    bounds: np.ndarray | None = None  # each changed window's first row in `values`, and their count last

    def members(self, rows: np.ndarray | None = None) -> pa.Array:
        """The members of the changed windows `rows` (all of them by default), in that order."""
        if self.values is None or self.bounds is None:
            members = one_array(self.changed["member"])
            return members if rows is None else members.take(pa.array(rows, pa.int64()))
        if rows is None:
            return member_text(self.values, self.bounds)
        lows, highs = self.bounds[rows], self.bounds[rows + 1]
        return member_text(self.values.take(pa.array(ranges(lows, highs))),
                           np.concatenate([[0], np.cumsum(highs - lows)]))

    def with_members(self) -> pa.Table:
        """`changed` with each window's member."""
        if "member" in self.changed.column_names:
            return self.changed
        return self.changed.append_column("member", self.members())


@dataclass
class StoredWindows:
    tables: dict[str, pa.Table] = field(default_factory=dict)  # window size -> windows, a metric a row
    starts: dict[str, pa.Table] = field(default_factory=dict)  # window size -> windows Redis holds
    # window size -> by series, the start from which its windows are all here (NOT_COVERED: none): numpy,
    # as a merge looks up and moves every subject it touches (a dict was ~10 % of a merge's Python).
    covered_from: dict[str, np.ndarray] = field(default_factory=dict)
    # window size -> series -> the newest window start Redis held when the series was loaded (None: none),
    # until the batch that loaded it is applied: what bounds a trim when no window is kept here.
    loaded_newest: dict[str, dict[int, int | None]] = field(default_factory=dict)

    def uncovered(self, partials: pa.Table, window: str) -> dict[int, int]:
        """Subjects whose stored windows the batch may touch but are not all here -> from which start Redis
        must be read."""
        series, first = _first_starts(int64(partials["series"]), int64(partials["start"]))
        wanted = first < self._covered(window, series)[series]
        return dict(zip(series[wanted].tolist(), first[wanted].tolist(), strict=True))

    def load(self, window: str, stored: Mapping[int, tuple[int, Iterable[bytes | str]]],
             newest: Mapping[int, int | None] | None = None) -> None:
        """What Redis holds of some subjects at one window size: series -> (from start, its members there);
        `newest`: series -> its key's newest window start (redis_layout.NEWEST_FIELD; None: it holds none)."""
        if newest is not None:
            self.loaded_newest.setdefault(window, {}).update(newest)
        rows: list[dict] = []
        starts: list[dict] = []
        for series, (_, raw_members) in stored.items():
            for raw in raw_members:
                member = raw.decode() if isinstance(raw, bytes) else raw
                try:
                    start, windows = layout.decode_member(member)
                except ValueError as exc:
                    # Kept as a window to replace, with no value: the batch's partials become the window.
                    LOG.warning("replacing %s in %s", exc, series)
                    starts.append({"series": series, "start": _member_start(member)})
                    continue
                starts.append({"series": series, "start": start})
                rows.extend({"series": series, "metric": layout.METRIC_INDEX[metric], "start": start,
                             "n": w.count, "sum": w.sum, "min": w.min, "max": w.max, "last": w.last,
                             "last_ts": w.last_ts} for metric, w in windows.items())
        lows = pa.table({"series": pa.array(list(stored), pa.int64()),
                         "low": pa.array([low for low, _ in stored.values()], pa.int64())})
        # Windows of these subjects from their low on come from Redis now; older ones stay as kept.
        self.tables[window] = _start_ordered(pa.concat_tables([
            _split(self.tables.get(window, SCHEMA.empty_table()), lows, SCHEMA, before=True),
            pa.Table.from_pylist(rows, schema=SCHEMA)]))
        self.starts[window] = _ordered(pa.concat_tables([
            _split(self.starts.get(window, STARTS.empty_table()), lows, STARTS, before=True),
            pa.Table.from_pylist(starts, schema=STARTS)]), metric=False)
        loaded = np.fromiter(stored, np.int64, len(stored))
        np.minimum.at(self._covered(window, loaded), loaded,
                      np.fromiter((low for low, _ in stored.values()), np.int64, len(stored)))

    def apply(self, partials: pa.Table, window: str) -> WindowUpdates:
        """Merges one size's partials (size_partials) into the stored windows; what to write to Redis.

        The kept windows are ordered by start, then series and metric, so those from the batch's oldest start
        on are the table's last rows: the batch is merged into them alone (its windows found by binary
        search, their rows replaced and new ones put in place), and the older windows stay as they were,
        slices of the same Arrow buffers, neither searched nor copied. Kept by series first, every kept
        window was copied at every merge (at 100,000 series ~4.3M rows at 10 s)."""
        kept = self.tables.get(window, SCHEMA.empty_table())
        stored = self.starts.get(window, STARTS.empty_table())
        kept_starts = int64(kept["start"])
        partial_starts = int64(partials["start"])
        low = int(np.searchsorted(kept_starts, partial_starts.min())) if len(partial_starts) \
            else kept.num_rows
        older, region = kept.slice(0, low), kept.slice(low)
        ids = WindowIds([partials, region, stored])
        region_keys, stored_windows = ids.start_metrics(1, region), ids.windows[2]
        if not (np.all(kept_starts[1:] >= kept_starts[:-1]) and ascending(region_keys)
                and ascending(stored_windows)):  # apply and load keep them so
            LOG.warning("the kept %s windows were out of order: ordered again", window)
            self.tables[window], self.starts[window] = _start_ordered(kept), _ordered(stored, metric=False)
            return self.apply(partials, window)
        partial_keys, partial_windows = ids.start_metrics(0, partials), ids.windows[0]
        order = _start_order(partial_keys, partial_starts)
        if order is not None:
            partials, partial_keys, partial_windows = partials.take(order), partial_keys[order], \
                partial_windows[order]
            partial_starts = partial_starts[order]
        olds = find(region_keys, partial_keys)
        # A batch that touches every kept window from its oldest start on, and no other (a live target's
        # batch within its windows: all its series report each metric), finds them row for row: no copy.
        same = len(olds) == region.num_rows and bool(np.all(olds == np.arange(len(olds))))
        merged = _merged(partials, region if same else take_or_null(region, olds)).cast(SCHEMA)
        rows, keys = _interleaved(region_keys, olds, partial_keys)
        # Every metric of a touched window is here (its subject is covered): its member is made whole (when
        # asked for: WindowUpdates.members).
        if len(rows) == merged.num_rows:  # every kept row from the batch's oldest start on was merged into
            merged_region = touched_values = merged
            touched_keys = partial_keys
        else:
            merged_region = pa.concat_tables([region.select(SCHEMA.names).cast(SCHEMA), merged]).take(rows)
            fresh_windows = distinct(partial_keys // METRICS)
            windows = keys // METRICS
            touched = ranges(np.searchsorted(windows, fresh_windows, "left"),
                             np.searchsorted(windows, fresh_windows, "right"))
            if len(touched) == merged.num_rows:  # the windows touched hold no metric kept alone
                touched_values, touched_keys = merged, partial_keys
            else:
                touched_values, touched_keys = merged_region.take(touched), keys[touched]
        bounds = window_bounds(touched_keys)
        fresh = touched_values.select(["series", "start"]).take(pa.array(bounds[:-1]))
        # Each touched window as the held ones are packed (series, start), in the order of `fresh`.
        packed = partial_keys // METRICS
        fresh_held = partial_windows[np.flatnonzero(np.concatenate([[True], packed[1:] != packed[:-1]]))] \
            if len(packed) else partial_windows
        # A partial adds a sample or more, so every touched window changes: each is written.
        replaces = find(stored_windows, fresh_held) >= 0
        updates = fresh.append_column("replaces", pa.array(replaces))
        starts_keys = np.concatenate([stored_windows, fresh_held[~replaces]])
        starts_order = np.argsort(starts_keys, kind="stable")
        starts = pa.concat_tables([stored.select(STARTS.names).cast(STARTS),
                                   fresh.filter(pa.array(~replaces)).select(STARTS.names).cast(STARTS)])
        newest = _newest_of(int64(partials["series"]), partial_starts)
        floor_of = self._cover(newest, window)
        highest = int(newest["start_max"].to_numpy().max()) - keep_ms(window) if newest.num_rows else None
        self.tables[window] = _from_floors([(older, kept_starts[:low]), (merged_region, None)], floor_of,
                                           highest)
        self.starts[window] = _from_floor(starts.take(starts_order), floor_of)
        loaded = self.loaded_newest.pop(window, {})
        return WindowUpdates(window, updates, *_key_changes(updates, stored, newest, window, loaded),
                             touched_values, bounds)

    def _cover(self, newest: pa.Table, window: str) -> np.ndarray:
        """Each merged subject (`newest`: series, start_max) covered from its newest window less keep_ms on;
        the floor below which its windows leave, by series (the lowest int64: no floor)."""
        series, floor = int64(newest["series"]), int64(newest["start_max"]) - keep_ms(window)
        covered = self._covered(window, series)
        known = covered[series]
        covered[series] = np.where(known == NOT_COVERED, floor, np.maximum(known, floor))
        floor_of = np.full(len(covered), np.iinfo(np.int64).min)
        floor_of[series] = floor
        return floor_of

    def _covered(self, window: str, series: np.ndarray) -> np.ndarray:
        """covered_from[window], grown to hold every subject of `series`."""
        covered = self.covered_from.get(window, np.zeros(0, np.int64))
        size = int(series.max()) + 1 if len(series) else 0
        if size > len(covered):
            grown = np.full(max(size, 2 * len(covered)) - len(covered), NOT_COVERED)
            covered = self.covered_from[window] = np.concatenate([covered, grown])
        return covered

    def clear(self) -> None:
        self.loaded_newest.clear()
        self.tables.clear()
        self.starts.clear()
        self.covered_from.clear()


def _first_starts(series: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each subject of rows ordered by series (as size_partials gives them) and its oldest start."""
    if not len(series):
        return series, starts
    if not np.all(series[1:] >= series[:-1]):
        order = np.argsort(series, kind="stable")
        series, starts = series[order], starts[order]
    firsts = np.flatnonzero(np.concatenate([[True], series[1:] != series[:-1]]))
    return series[firsts], np.minimum.reduceat(starts, firsts)


def _split(table: pa.Table, bounds: pa.Table, schema: pa.Schema, before: bool) -> pa.Table:
    """Rows of `table` before (or from) their subject's bound (series, bound; a row a subject); all rows of
    subjects without one."""
    bound = bounds.column(1).take(pc.index_in(table["series"], value_set=bounds.column(0)))
    side = pc.less if before else pc.greater_equal
    return table.filter(pc.fill_null(side(table["start"], bound), True)).select(schema.names).cast(schema)


def _interleaved(kept_keys: np.ndarray, olds: np.ndarray, partial_keys: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(rows, keys) of the merged table in key order, rows indexing the kept rows then the merged ones
    (partial_keys' rows, ordered): the kept rows the batch did not touch (`olds`: the kept row of each
    partial, -1 for none) and the merged ones, two ordered runs which a stable sort (timsort) merges in one
    pass."""
    rest = np.ones(len(kept_keys), bool)
    rest[olds[olds >= 0]] = False
    rest_rows = np.flatnonzero(rest)
    keys = np.concatenate([kept_keys[rest_rows], partial_keys])
    order = np.argsort(keys, kind="stable")
    return np.concatenate([rest_rows, len(kept_keys) + np.arange(len(partial_keys))])[order], keys[order]


def _ordered(table: pa.Table, metric: bool) -> pa.Table:
    """`table` (series, start[, metric]) in window order (as the merge keeps the held starts), each window
    once (the last row of it: read from Redis after the kept ones); a stable sort, which runs already in
    order (the kept rows, then those read) make a merge of runs."""
    ids = WindowIds([table])
    keys = ids.metric_windows(0, table) if metric else ids.windows[0]
    if ascending(keys):
        return table.combine_chunks()
    order = np.argsort(keys, kind="stable")
    return table.take(order[run_lasts(keys[order])])


def _start_ordered(table: pa.Table) -> pa.Table:
    """Kept windows in the order the merge keeps them (start, series, metric), each window's metric once (the
    last row of it: read from Redis after the kept ones)."""
    keys = WindowIds([table]).start_metrics(0, table)
    if ascending(keys):
        return table.combine_chunks()
    order = np.argsort(keys, kind="stable")
    return table.take(order[run_lasts(keys[order])])


_FEW_STARTS = 8  # distinct starts a batch's partials are put in start order by, one at a time


def _start_order(keys: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
    """The order of partials (packed by start, series, metric) in which `keys` ascend; None when they do. A
    batch's partials come by series, metric, start (size_partials) and span a start or two: their rows of
    each start, in turn, are that order (a pass a start, no sort of ~1.4M keys)."""
    if ascending(keys):
        return None
    pieces: list[np.ndarray] = []
    remaining = starts
    while len(remaining) and len(pieces) < _FEW_STARTS:
        start = remaining.min()
        pieces.append(np.flatnonzero(starts == start))
        remaining = remaining[remaining > start]
    if not len(remaining):
        order = np.concatenate(pieces)
        if ascending(keys[order]):
            return order
    return np.argsort(keys, kind="stable")


def _newest_of(series: np.ndarray, starts: np.ndarray) -> pa.Table:
    """Each subject's newest window (series, start_max)."""
    if not len(series):
        return pa.table({"series": pa.array(series), "start_max": pa.array(starts)})
    order = np.argsort(series, kind="stable")
    series, starts = series[order], starts[order]
    firsts = np.flatnonzero(np.concatenate([[True], series[1:] != series[:-1]]))
    return pa.table({"series": pa.array(series[firsts]),
                     "start_max": pa.array(np.maximum.reduceat(starts, firsts))})


_MAX_CHUNKS = 16  # a kept table's chunks (slices kept from earlier merges) before they are made one


def _from_floors(parts: list[tuple[pa.Table, np.ndarray | None]], floor_of: np.ndarray, highest: int | None
                 ) -> pa.Table:
    """The rows of `parts` (each ordered by start; its starts, when known) from their subject's floor on
    (StoredWindows._cover; `highest` the highest floor): only rows below the highest floor are looked at,
    the rest are kept as they are (slices, not copies)."""
    out = []
    for table, starts in parts:
        if starts is None:
            starts = int64(table["start"])
        cut = int(np.searchsorted(starts, highest)) if highest is not None else 0
        if cut:
            low = table.slice(0, cut)
            above = starts[:cut] >= _floors(floor_of, int64(low["series"]))
            if above.any():
                out.append(low.filter(pa.array(above)))
        if cut < table.num_rows:
            out.append(table.slice(cut))
    kept = pa.concat_tables(out) if out else SCHEMA.empty_table()
    return kept.combine_chunks() if kept.column(0).num_chunks > _MAX_CHUNKS else kept


def _floors(floor_of: np.ndarray, series: np.ndarray) -> np.ndarray:
    """The floor (StoredWindows._cover) of each row's subject; the lowest int64 for a subject without one."""
    inside = series < len(floor_of)
    return np.where(inside, floor_of[np.where(inside, series, 0)], np.iinfo(np.int64).min) if len(floor_of) \
        else np.full(len(series), np.iinfo(np.int64).min)


def _from_floor(table: pa.Table, floor_of: np.ndarray) -> pa.Table:
    """The rows of `table` (series, start) from their subject's floor on."""
    return table.filter(pa.array(int64(table["start"]) >= _floors(floor_of, int64(table["series"]))))


def _merged(new: pa.Table, old: pa.Table) -> pa.Table:
    """Partials merged with their stored windows (`old`, row for row: all nulls for a new window)."""
    def add(name: str) -> pa.ChunkedArray:
        return pc.add(new[name], pc.fill_null(old[name], 0.0))

    old_newer = pc.fill_null(pc.or_(
        pc.greater(old["last_ts"], new["last_ts"]),
        pc.and_(pc.equal(old["last_ts"], new["last_ts"]), pc.greater(old["last"], new["last"]))), False)
    return pa.table({
        "series": new["series"], "metric": new["metric"], "start": new["start"], "n": add("n"),
        "sum": add("sum"),
        "min": pc.min_element_wise(new["min"], old["min"]),
        "max": pc.max_element_wise(new["max"], old["max"]),
        "last": pc.if_else(old_newer, old["last"], new["last"]),
        "last_ts": pc.if_else(old_newer, old["last_ts"], new["last_ts"]),
    })


def _key_changes(updates: pa.Table, held: pa.Table, newest: pa.Table, window: str,
                 loaded: Mapping[int, int | None] | None = None
                 ) -> tuple[dict[int, tuple[int | None, int]], dict[int, int]]:
    """(trims, newest). Trims: series whose key is trimmed and given its lifetime again -> (the first start
    of the grid to delete, or None when what the key holds before the cut-off is not known here; the
    retention cut-off from the newest window the batch wrote there: a replay of the same input trims the
    same windows, whatever the clock says). Newest: series whose key's newest window the batch moves on
    (redis_layout.NEWEST_FIELD) -> its new newest start. `loaded`: series -> the newest window start its
    key held when read from Redis (None: no window), for a key with no window kept here.

    A key is trimmed when the batch creates a window in a trim period (redis_layout.trim_period_ms) newer
    than that of the newest window Redis held there (`held`: series, start of the windows it holds), or
    held none: a new window every 10 s was a trim and a PEXPIRE each, ~a quarter of a merge's Redis calls.
    Every trim cut at the newest window then less retention, and the key's newest window's period was
    trimmed when it began: so the key holds nothing before that period's start less retention, and the
    fields from there to the new cut-off are all it can hold to delete (~a trim period's windows)."""
    if updates.num_rows == 0:
        return {}, {}
    series = int64(updates["series"])
    replaces = updates["replaces"].to_numpy(zero_copy_only=False)
    held_series, held_starts = int64(held["series"]), int64(held["start"])
    series_step, start_step = np.diff(held_series), np.diff(held_starts)
    if not np.all((series_step > 0) | ((series_step == 0) & (start_step >= 0))):  # the merge keeps them so
        order = np.lexsort((held_starts, held_series))
        held_series, held_starts = held_series[order], held_starts[order]
    lasts = run_lasts(held_series)
    held_keys = held_series[lasts]
    touched, position = np.unique(series, return_inverse=True)
    at = np.minimum(np.searchsorted(held_keys, touched), max(len(held_keys) - 1, 0))
    found = (held_keys[at] == touched) if len(held_keys) else np.zeros(len(touched), bool)
    held_newest = np.where(found, held_starts[lasts][at] if len(held_keys) else 0, 0)
    batch_newest = np.full(len(touched), np.iinfo(np.int64).min)
    np.maximum.at(batch_newest, position, int64(updates["start"]))
    period = layout.trim_period_ms(window)
    retention = layout.WINDOWS[window].retention_ms
    created = np.zeros(len(touched), bool)
    created[position[~replaces]] = True
    new_period = created & (~found | (batch_newest // period != held_newest // period))
    newer = ~found | (batch_newest > held_newest)
    raised = dict(zip(touched[newer].tolist(), batch_newest[newer].tolist(), strict=True))
    if not new_period.any():
        return {}, raised
    # The cut-off from the newest window the batch merged there (newest: series, start_max).
    cuts = dict(zip(newest["series"].to_pylist(), newest["start_max"].to_pylist(), strict=True))
    froms = held_newest - held_newest % period - retention
    trims = {}
    for k, known, low in zip(touched[new_period].tolist(), found[new_period].tolist(),
                             froms[new_period].tolist(), strict=True):
        cut = cuts[k] - retention
        if not known and loaded and k in loaded:
            last = loaded[k]  # None: the key held no window, nothing to delete
            low = cut if last is None else last - last % period - retention
            known = True
        trims[k] = (int(low) if known else None, cut)
    return trims, raised


def _member_start(member: str) -> int:
    head = member.split(";", 1)[0]
    try:
        return int(float(head))
    except ValueError:
        return 0
