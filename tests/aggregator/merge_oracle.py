"""The merge as it was before it ran on numpy (Acero joins and group_bys): the oracle
test_merge_oracle compares the merge's Redis contents with. Kept verbatim but for names and layout."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from aggregator import stored_windows
from aggregator.batch_plan import MEMBER_PARTS, SUBJECT_COLUMNS, _last_ts, _metric_rows
from aggregator.stored_windows import SCHEMA, STARTS, VALUES, WINDOW_KEY, SeriesKeys, WindowUpdates
from aggregator.window_partials import ALL_METRICS, window_starts
from aggregator.window_writer import WindowWriter
from contract import redis_layout as layout


def numbered_partials(windows: pa.Table, keys: SeriesKeys) -> tuple[pa.Table | None, int]:
    """A batch's partial windows (window_partials) one metric a row, each subject by its number and each
    metric by its index in redis_layout.WINDOW_METRICS: series, metric, start, n, sum, min, max, last,
    last_ts (stored_windows merges them into every size); and how many subjects there are. None when the
    batch has no metric windows (e.g. only replication reports)."""
    narrow = [t for m in ALL_METRICS if (t := _metric_partials(windows, m)) is not None]
    if not narrow:
        return None, 0
    table = pa.concat_tables(narrow)
    subjects = table.select(SUBJECT_COLUMNS).group_by(SUBJECT_COLUMNS, use_threads=False).aggregate([])
    numbered = subjects.append_column("series", pa.array(
        keys.number(zip(*subjects.to_pydict().values(), strict=True)), pa.int64()))
    joined = table.join(numbered, SUBJECT_COLUMNS, use_threads=False)
    return joined.drop_columns(SUBJECT_COLUMNS), subjects.num_rows



def _metric_partials(windows: pa.Table, metric: str) -> pa.Table | None:
    present = _metric_rows(windows, metric)
    if present.num_rows == 0:
        return None
    return pa.table({
        "target": present["target"], "source": present["source"], "topic": present["topic"],
        "partition": pc.cast(present["partition"], pa.int64()), "group": present["group"],
        "metric": pa.repeat(pa.scalar(layout.METRIC_INDEX[metric], pa.int64()), present.num_rows),
        "start": present["window_start"],
        **{p: pc.cast(present[f"{metric}__{p}"], pa.float64()) for p in MEMBER_PARTS},
        "last_ts": _last_ts(present, metric),
    })

def size_partials(finest: pa.Table, window: str) -> pa.Table:
    """Partial finest windows (series, metric, start, values, last_ts) merged per window of `window` size,
    series and metric: n and sum add up, min/max, `last` the one of greatest (last ts, value)."""
    size = layout.WINDOWS[window].size_ms
    table = pa.table({"series": finest["series"], "metric": finest["metric"],
                      "start": window_starts(finest["start"], size),
                      **{c: finest[c] for c in (*VALUES, "last_ts")}})
    if size == layout.FINEST_WINDOW.size_ms and \
            table.group_by(WINDOW_KEY, use_threads=False).aggregate([]).num_rows == table.num_rows:
        return table  # one partial a window already, as window_partials gives them
    return stored_windows._grouped(table)  # the old merge, kept there for partials with nulls


def member_column(windows: pa.Table) -> pa.Table:
    """The member of each window (series, start, member) of `windows` (one metric a row, every metric of
    each window): `<start>;<metric>:<n>:<sum>:<min>:<max>:<last>:<last ts>;...` in metric order
    (redis_layout.encode_member's fields; numbers in Arrow's shortest round-trip form)."""
    ordered = windows.sort_by([(c, "ascending") for c in WINDOW_KEY])
    parts = [ordered[c] for c in ("metric", *VALUES, "last_ts")]
    segments = pc.binary_join_element_wise(*(pc.cast(p, pa.string()) for p in parts), ":")
    # One thread keeps each window's segments in the sorted (metric) order.
    grouped = pa.table({"series": ordered["series"], "start": ordered["start"], "segment": segments}) \
        .group_by(["series", "start"], use_threads=False).aggregate([("segment", "list")])
    member = pc.binary_join_element_wise(pc.cast(grouped["start"], pa.string()),
                                         pc.binary_join(grouped["segment_list"], ";"), ";")
    return pa.table({"series": grouped["series"], "start": grouped["start"], "member": member})



class StoredWindows(stored_windows.StoredWindows):
    """The kept windows of the old merge: what they hold and how Redis fills them are unchanged (inherited);
    the merge of a batch into them is the old one."""

    def apply(self, partials: pa.Table, window: str) -> WindowUpdates:
        """Merges one size's partials (size_partials) into the stored windows; what to write to Redis."""
        kept = self.tables.get(window, SCHEMA.empty_table())
        old = kept.rename_columns([c if c in WINDOW_KEY else f"old_{c}" for c in kept.column_names])
        merged = _merged(partials.join(old, WINDOW_KEY, join_type="left outer", use_threads=False))
        rest = kept.join(merged.select(WINDOW_KEY), WINDOW_KEY, join_type="left anti", use_threads=False)
        table = pa.concat_tables([rest.select(SCHEMA.names).cast(SCHEMA), merged.cast(SCHEMA)])
        # Every metric of a touched window is here (its subject is covered): its member is made whole.
        touched = merged.group_by(["series", "start"], use_threads=False).aggregate([])
        fresh = member_column(table.join(touched, ["series", "start"], join_type="left semi",
                                         use_threads=False))
        # Which windows Redis holds is all the merge keeps of them now: a replaced member is removed by
        # its start.
        stored = self.starts.get(window, STARTS.empty_table())
        held = stored.group_by(["series", "start"], use_threads=False).aggregate([])
        held = held.append_column("held", pa.array([True] * held.num_rows, pa.bool_()))
        joined = fresh.join(held, ["series", "start"], join_type="left outer", use_threads=False)
        replaces = pc.fill_null(joined["held"], False)
        updates = joined.drop_columns(["held"]).append_column("replaces", replaces)
        unchanged = stored.join(touched, ["series", "start"], join_type="left anti", use_threads=False)
        starts = pa.concat_tables([unchanged, fresh.select(STARTS.names).cast(STARTS)])
        self._keep(table, starts, _newest(merged), window)
        updates = updates.select(["series", "start", "member", "replaces"])
        changes = stored_windows._key_changes(updates, stored, _newest(merged), window,
                                              self.loaded_newest.pop(window, {}))
        return WindowUpdates(window, updates, *changes)


    def _keep(self, table: pa.Table, starts: pa.Table, newest: pa.Table, window: str) -> None:
        """Keeps the windows of each merged subject (`newest`: series, start_max) from its newest one less
        keep_ms on, as the merge keeps them: in window order (inherited `load` and `uncovered` need it)."""
        floor_of = self._cover(newest, window)
        self.tables[window] = stored_windows._ordered(
            stored_windows._from_floor(table, floor_of).select(SCHEMA.names).cast(SCHEMA), True)
        self.starts[window] = stored_windows._ordered(
            stored_windows._from_floor(starts, floor_of).select(STARTS.names).cast(STARTS), False)


def _merged(joined: pa.Table) -> pa.Table:
    """Partials merged with their stored windows (old_* columns, null for a new window): the rule itself
    did not change, only its inputs' shape."""
    columns = ["series", "metric", "start", *VALUES, "last_ts"]
    old = joined.select([f"old_{c}" if f"old_{c}" in joined.column_names else c for c in columns])
    return stored_windows._merged(joined.select(columns), old.rename_columns(columns))


def _newest(merged: pa.Table) -> pa.Table:
    return merged.group_by("series", use_threads=False).aggregate([("start", "max")])


class OracleWriter(WindowWriter):
    """A WindowWriter merging as before."""

    number = staticmethod(numbered_partials)
    size = staticmethod(size_partials)

    def __init__(self, client, scope: str) -> None:
        super().__init__(client, scope)
        self.stored = StoredWindows()
