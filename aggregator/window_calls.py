"""A merge's Redis commands (an HSET a key, and redis_scripts.REPLACE_WINDOWS_LUA for the keys trimmed, a
call per hash tag), laid out a part at a time and packed into Redis's wire format by Arrow.

A merge at 100,000 series writes ~330k keys, ~1.7M arguments. Handed to redis-py as Python
strings, they cost the merge thread, holding the GIL the sink's thread needs, a Python object an argument
(Arrow's strings turned into Python ones) and redis-py's packing of each. Here a part's arguments stay one
Arrow string array, and its calls become the RESP bytes Redis reads (`PartCalls.packed`) by Arrow's kernels,
which run without the GIL; the window writer sends them in the part's MULTI as they are.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.resp_commands import bulk, packed
from aggregator.stored_windows import SeriesKeys, WindowUpdates
from aggregator.window_ids import int64
from contract import redis_layout as layout

HEAD = 1  # ARGV entries of a key's head in REPLACE_WINDOWS_LUA: its number of fields
NEWEST_ROW = np.iinfo(np.int64).max  # the start of a key's newest-window field in _changed_rows

Call = tuple[list[str], list[str]]  # KEYS, ARGV of one REPLACE_WINDOWS_LUA call


@dataclass
class PartCalls:
    """The writes of one part of a merge: an HSET a key not trimmed (its fields and values), then the
    REPLACE_WINDOWS_LUA calls of the keys trimmed (one a hash tag: its KEYS then its ARGV), each kind command
    after command in one Arrow string array."""

    args: pa.Array  # the script calls' KEYS and ARGV
    key_counts: np.ndarray  # a call's KEYS
    arg_counts: np.ndarray  # a call's ARGV
    writes: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))  # the HSETs, HSET first
    write_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # an HSET's arguments

    def __len__(self) -> int:
        return len(self.write_counts) + len(self.key_counts)

    def calls(self) -> list[Call]:
        """The script calls as Python lists (KEYS, ARGV)."""
        args = self.args.to_pylist()
        ends = np.cumsum(self.key_counts + self.arg_counts).tolist()
        counts = zip(ends, self.key_counts.tolist(), self.arg_counts.tolist(), strict=True)
        return [(args[end - keys - argv:end - argv], args[end - argv:end]) for end, keys, argv in counts]

    def commands(self, sha: str) -> list[list[str]]:
        """Every command as a Python list, in the order they are sent: the HSETs, then the EVALSHAs."""
        writes, counts = self.writes.to_pylist(), self.write_counts.tolist()
        ends = np.cumsum(counts).tolist()
        return [writes[end - count:end] for end, count in zip(ends, counts, strict=True)] \
            + [["EVALSHA", sha, str(len(names)), *names, *argv] for names, argv in self.calls()]

    def packed(self, sha: str) -> list[pa.Buffer]:
        """The commands in RESP, the HSETs then the script calls as EVALSHA commands of script `sha`: a
        command's head (`*<arguments>`; EVALSHA, the script's digest and the number of keys) then each
        argument as a bulk string (`$<bytes>`, the argument)."""
        per_call = self.key_counts + self.arg_counts
        command = f"\r\n$7\r\nEVALSHA\r\n${len(sha)}\r\n{sha}\r\n"
        heads = pc.binary_join_element_wise("*", pc.cast(pa.array(3 + per_call), pa.string()), command,
                                            bulk(pc.cast(pa.array(self.key_counts), pa.string())), "")
        return [packed(self.writes, self.write_counts), packed(self.args, per_call, heads)]


def calls_by_part(updates: list[WindowUpdates], keys: SeriesKeys, parts: int = 1,
                  skip: Sequence[int] = ()) -> Iterator[tuple[int, PartCalls]]:
    """(part, its writes) for each part of a merge cut in `parts` (merge_part of the keys' hash tag), in
    part order, leaving out the parts in `skip` (done already): an HSET a key not trimmed (its windows' start
    and member, and the key's newest start, redis_layout.NEWEST_FIELD, when the batch moves it), and one
    REPLACE_WINDOWS_LUA call per hash tag (a topic's series, so this also works on Redis Cluster) for the
    keys trimmed, which deletes their old fields. The script's ARGV: the number of keys trimmed; per key (a
    series at one size) its number of fields, then start and member of each window, and the key's newest
    start (redis_layout.NEWEST_FIELD) when the batch moves it; then per key trimmed its position in KEYS,
    the trim's first start ("*": the hash's own fields), the cut-off, the window's size and the key's
    lifetime. Laid out by Arrow and numpy, a part at a time, and the part's members made then
    (WindowUpdates.members): a merge writes ~330k keys at 100,000 series, and its arguments as Python
    strings all at once were ~0.5 GB of the driver's peak, its members on Arrow ~165 MB and as much again
    for each copy made of them in order; a Python loop over the keys was a third of the merge's own time."""
    changed = _changed_rows(updates, keys, parts)
    if changed is None:
        return
    part_of = changed["part"].to_numpy()
    trims = _trim_rows(updates)
    for part in range(parts):
        lo, hi = np.searchsorted(part_of, [part, part + 1])
        if part not in skip and hi > lo:
            yield part, _part_calls(_with_members(changed.slice(lo, hi - lo), updates), keys, trims)


def _changed_rows(updates: list[WindowUpdates], keys: SeriesKeys, parts: int) -> pa.Table | None:
    """Every field a merge writes, without its member: series, start (NEWEST_ROW for a key's newest start),
    size, `row` (the window's row in its size's updates; -1 for a key's newest start, which is `newest`),
    with its hash tag's number and its part, ordered by part, tag, series, size and start."""
    sizes = {w: i for i, w in enumerate(layout.WINDOWS)}
    series, starts, size, row, newest = [], [], [], [], []
    for u in updates:
        count = u.changed.num_rows
        series.append(int64(u.changed["series"]))
        starts.append(int64(u.changed["start"]))
        size.append(np.full(count, sizes[u.window], np.int64))
        row.append(np.arange(count, dtype=np.int64))
        newest.append(np.zeros(count, np.int64))
        # The key's newest start, as one more field of its HSET: sorted after its windows.
        series.append(np.fromiter(u.newest, np.int64, len(u.newest)))
        starts.append(np.full(len(u.newest), NEWEST_ROW, np.int64))
        size.append(np.full(len(u.newest), sizes[u.window], np.int64))
        row.append(np.full(len(u.newest), -1, np.int64))
        newest.append(np.fromiter(u.newest.values(), np.int64, len(u.newest)))
    if not series or not sum(len(s) for s in series):
        return None
    columns = {"series": np.concatenate(series), "start": np.concatenate(starts),
               "size": np.concatenate(size), "row": np.concatenate(row), "newest": np.concatenate(newest)}
    tags = np.asarray(keys.tags, np.int64)[columns["series"]]
    part = (np.asarray(keys.tag_crcs, np.int64) % parts)[tags]
    order = np.lexsort((columns["start"], columns["size"], columns["series"], tags, part))
    return pa.table({**{name: column[order] for name, column in columns.items()}, "tag": tags[order],
                     "part": part[order]})


def _with_members(changed: pa.Table, updates: list[WindowUpdates]) -> pa.Table:
    """`changed` (_changed_rows of a part) with each field's value: a window's member (made now, those of
    each size at once) or a key's newest start."""
    size, row = int64(changed["size"]), int64(changed["row"])
    sizes = {w: i for i, w in enumerate(layout.WINDOWS)}
    pieces: list[pa.Array] = []
    at = np.empty(len(row), np.int64)
    made = 0
    for u in updates:
        mine = np.flatnonzero((size == sizes[u.window]) & (row >= 0))
        if len(mine):
            pieces.append(u.members(row[mine]))
            at[mine] = made + np.arange(len(mine))
            made += len(mine)
    newest = np.flatnonzero(row < 0)
    pieces.append(pc.cast(pa.array(int64(changed["newest"])[newest]), pa.string()))
    at[newest] = made + np.arange(len(newest))
    members = pa.concat_arrays([p.cast(pa.string()) for p in pieces if len(p)]) if len(at) \
        else pa.array([], pa.string())
    in_order = bool(np.all(at == np.arange(len(at))))
    return changed.append_column("member", members if in_order else members.take(pa.array(at)))


def _part_calls(changed: pa.Table, keys: SeriesKeys, trims: tuple[np.ndarray, list[tuple[str, str, str, str]]]
                ) -> PartCalls:
    """The writes of `changed` (_changed_rows of whole hash tags): an HSET a key, and the keys trimmed (few in
    most merges: a key's first window of a trim period) through the script, which deletes their old fields.
    A key's windows are one HSET either way, but the script costs Redis twice what the HSET does (each
    argument made a Lua string, then a Redis one again for its call: at 100,000 series 0.84-1.03 CPU s
    against 0.47-0.65 for a merge's 110,000 keys, the QUEUED answers ~0.04 s more of the thread)."""
    key_ids = int64(changed["series"]) * len(layout.WINDOWS) + int64(changed["size"])
    trimmed = np.isin(key_ids, trims[0]) if len(trims[0]) else np.zeros(len(key_ids), bool)
    scripts = _calls(changed.filter(pa.array(trimmed)), keys, trims) if trimmed.any() \
        else PartCalls(pa.array([], pa.string()), np.zeros(0, np.int64), np.zeros(0, np.int64))
    scripts.writes, scripts.write_counts = _writes(changed, key_ids, np.flatnonzero(~trimmed), keys)
    return scripts


def _writes(changed: pa.Table, key_ids: np.ndarray, rows: np.ndarray, keys: SeriesKeys
            ) -> tuple[pa.Array, np.ndarray]:
    """The HSETs writing `rows` of `changed` (runs of keys): each key's name, then field and value of each of
    its rows; as one array, command after command (HSET first), and each command's number of arguments."""
    if not len(rows):
        return pa.array([], pa.string()), np.zeros(0, np.int64)
    run_of = key_ids[rows]
    firsts = np.flatnonzero(np.concatenate([[True], run_of[1:] != run_of[:-1]]))
    counts = np.diff(np.append(firsts, len(rows)))
    arguments = 2 + 2 * counts
    command_at = np.concatenate([[0], np.cumsum(arguments)[:-1]])
    runs = len(firsts)
    # The source: HSET, the keys' names, every row's field, every row's value.
    fields = pc.if_else(pc.equal(changed["start"], NEWEST_ROW), layout.NEWEST_FIELD,
                        pc.cast(changed["start"], pa.string())).combine_chunks()
    source = pa.concat_arrays([pa.array(["HSET"]), keys.names().take(pa.array(run_of[firsts])), fields,
                               changed["member"].combine_chunks()])
    order = np.zeros(int(arguments.sum()), np.int64)
    order[command_at + 1] = 1 + np.arange(runs)
    run = np.repeat(np.arange(runs), counts)
    pair_at = command_at[run] + 2 + 2 * (np.arange(len(rows)) - firsts[run])
    order[pair_at] = 1 + runs + rows
    order[pair_at + 1] = 1 + runs + changed.num_rows + rows
    return pc.take(source, pa.array(order)), arguments


def _calls(changed: pa.Table, keys: SeriesKeys, trims: tuple[np.ndarray, list[tuple[str, str, str, str]]]
           ) -> PartCalls:
    """The calls writing `changed` (_changed_rows of whole hash tags); `trims`: _trim_rows."""
    sizes = len(layout.WINDOWS)
    key_ids = pc.add(pc.multiply(changed["series"], sizes), changed["size"]).combine_chunks()
    runs = pc.run_end_encode(key_ids)
    run_keys = runs.values.to_numpy()
    ends = runs.run_ends.to_numpy().astype(np.int64)
    begins = np.concatenate([[0], ends[:-1]])
    counts = ends - begins
    # Where each key's part of ARGV starts (and, last, where the last one ends).
    offsets = np.concatenate([[0], np.cumsum(HEAD + 2 * counts)])
    fields = pc.if_else(pc.equal(changed["start"], NEWEST_ROW), layout.NEWEST_FIELD,
                        pc.cast(changed["start"], pa.string())).combine_chunks()
    # Each key's count, then its fields and values, in ARGV order: taken with the rest in _laid_out, so the
    # members (most of a merge's bytes) are copied once there.
    argv = [pc.cast(pa.array(counts), pa.string()), fields, changed["member"].combine_chunks()]
    argv_order = _argv_order(begins, counts, offsets)
    names = keys.names().take(pa.array(run_keys))
    run_tags = int64(changed["tag"]).take(begins)
    # A call per hash tag: its runs (keys) bounds[c]..bounds[c + 1].
    bounds = np.append(np.flatnonzero(np.concatenate([[True], run_tags[1:] != run_tags[:-1]])), len(run_keys))
    # The trimmed keys among the runs, by run: few in most batches (a key's first window of a trim period).
    trim_keys, trim_args = trims
    at = np.minimum(np.searchsorted(trim_keys, run_keys), max(len(trim_keys) - 1, 0))
    trimmed = np.flatnonzero(trim_keys[at] == run_keys) if len(trim_keys) else np.zeros(0, np.int64)
    trim_at = at[trimmed].tolist()
    first_trims = np.searchsorted(trimmed, bounds)
    trim_runs, call_bounds, firsts = trimmed.tolist(), bounds.tolist(), first_trims.tolist()
    tail = [arg for call, (a, _) in enumerate(itertools.pairwise(call_bounds))
            for t in range(firsts[call], firsts[call + 1])
            for arg in (str(trim_runs[t] - a + 1), *trim_args[trim_at[t]])]
    trim_counts = np.diff(first_trims)
    return _laid_out(names, pc.cast(pa.array(trim_counts), pa.string()), argv, argv_order,
                     pa.array(tail, pa.string()), bounds, offsets[bounds], 5 * trim_counts)


def _laid_out(names: pa.Array, heads: pa.Array, argv: list[pa.Array], argv_order: np.ndarray, tail: pa.Array,
              bounds: np.ndarray, argv_bounds: np.ndarray, tail_counts: np.ndarray) -> PartCalls:
    """Each call's KEYS (`names`, a run a key: bounds[c]..bounds[c + 1]), then its ARGV: its head (`heads`,
    the number of keys trimmed), its keys' entries (`argv`, arrays one after the other, in `argv_order`:
    their argv_order[argv_bounds[c]:argv_bounds[c + 1]]), then its trims' (`tail`, tail_counts[c] a call),
    as one array, call after call."""
    key_counts = np.diff(bounds)
    argv_counts = np.diff(argv_bounds)
    entries = len(argv_order)
    arg_counts = 1 + argv_counts + tail_counts
    call_starts = np.concatenate([[0], np.cumsum(key_counts + arg_counts)])[:-1]
    calls = np.arange(len(key_counts))
    # Where each source entry goes: names, heads, argv's arrays, tail (concatenated in that order).
    order = np.empty(int((key_counts + arg_counts).sum()), np.int64)
    call_of = np.repeat(calls, key_counts)
    order[call_starts[call_of] + np.arange(len(names)) - bounds[:-1][call_of]] = np.arange(len(names))
    order[call_starts + key_counts] = len(names) + calls
    call_of = np.repeat(calls, argv_counts)
    base = len(names) + len(heads)
    at_call = call_starts[call_of] + key_counts[call_of] + 1
    order[at_call + np.arange(entries) - argv_bounds[:-1][call_of]] = base + argv_order
    call_of = np.repeat(calls, tail_counts)
    tail_starts = np.concatenate([[0], np.cumsum(tail_counts)])[:-1]
    order[call_starts[call_of] + key_counts[call_of] + 1 + argv_counts[call_of] + np.arange(len(tail))
          - tail_starts[call_of]] = base + entries + np.arange(len(tail))
    args = pc.take(pa.concat_arrays([names, heads, *argv, tail]), pa.array(order))
    return PartCalls(args, key_counts, arg_counts)


def _trim_rows(updates: list[WindowUpdates]) -> tuple[np.ndarray, list[tuple[str, str, str, str]]]:
    """The keys trimmed (series * sizes + size, sorted) and each one's trim ARGV: first start ("*": the
    hash's own fields), cut-off, window size, lifetime."""
    sizes = len(layout.WINDOWS)
    rows = sorted(((series * sizes + i, window, trim) for i, window in enumerate(layout.WINDOWS)
                   for u in updates if u.window == window for series, trim in u.trims.items()),
                  key=lambda row: row[0])
    args = [("*" if trim[0] is None else str(trim[0]), str(trim[1]), str(layout.WINDOWS[window].size_ms),
             str(layout.key_ttl_ms(window))) for _, window, trim in rows]
    return np.array([key for key, _, _ in rows], np.int64), args


def _argv_order(begins: np.ndarray, counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Indices into [counts (a row a key), fields, values (a row each)] in ARGV order; `offsets`: where each
    key's part starts."""
    keys, rows = len(begins), int(counts.sum())
    order = np.empty(int(offsets[-1]), np.int64)
    order[offsets[:-1]] = np.arange(keys)
    row = np.arange(rows)
    run = np.repeat(np.arange(keys), counts)
    pair_at = offsets[run] + HEAD + 2 * (row - begins[run])
    order[pair_at] = keys + row
    order[pair_at + 1] = keys + rows + row
    return order
