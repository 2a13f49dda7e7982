"""A window's Redis member written for many windows at once, on Arrow: `<start>;<metric>:<n>:<sum>:<min>:
<max>:<last>:<last ts>;...`, the text redis_layout.encode_member writes for one (the merge, stored_windows,
replaces each touched window's member with it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.window_ids import METRICS, WindowIds
from aggregator.window_partials import one_array
from contract import redis_layout as layout

VALUES = ("n", "sum", "min", "max", "last")  # a member's values, in its order


def member_column(windows: pa.Table, metric_windows: np.ndarray | None = None) -> pa.Table:
    """The member of each window (series, start, member) of `windows` (one metric a row, every metric of
    each window): `<start>;<metric>:<n>:<sum>:<min>:<max>:<last>:<last ts>;...` in metric order
    (redis_layout.encode_member's fields; numbers in Arrow's shortest round-trip form). `metric_windows`:
    the rows packed by WindowIds, when the caller has them."""
    if metric_windows is None:
        metric_windows = WindowIds([windows]).metric_windows(0, windows)
    # By series, start, metric: each window's segments in a run.
    if np.all(metric_windows[1:] > metric_windows[:-1]):
        ordered = windows
    else:
        order = np.argsort(metric_windows)
        ordered, metric_windows = windows.take(order), metric_windows[order]
    bounds = window_bounds(metric_windows)
    heads = ordered.select(["series", "start"]).take(bounds[:-1])
    return heads.append_column("member", member_text(ordered, bounds))


def window_bounds(metric_windows: np.ndarray) -> np.ndarray:
    """The first row of each window's run in rows packed by WindowIds (a window's rows together), and the
    row count last."""
    packed = metric_windows // METRICS
    firsts = np.flatnonzero(np.concatenate([[True], packed[1:] != packed[:-1]])) if len(packed) \
        else np.zeros(0, np.int64)
    return np.append(firsts, len(packed))


def member_text(windows: pa.Table, bounds: np.ndarray) -> pa.Array:
    """The member of each window of `windows` (one metric a row, a window's rows bounds[w]..bounds[w + 1],
    in metric order), in window order."""
    metrics = pc.take(_METRIC_TEXT, windows["metric"])
    values = (number_text(windows[c]) for c in VALUES)
    segments = pc.binary_join_element_wise(metrics, *values, pc.cast(windows["last_ts"], pa.string()), ":")
    runs = pa.ListArray.from_arrays(pa.array(bounds, pa.int32()), one_array(segments))
    starts = pc.cast(one_array(windows["start"]).take(pa.array(bounds[:-1])), pa.string())
    return pc.binary_join_element_wise(starts, pc.binary_join(runs, ";"), ";")


_METRIC_TEXT = pa.array([str(i) for i in range(METRICS)])
# Arrow writes a float without exponent or fraction when it is whole and below 1e10 (not -0.0): as an
# integer it writes the same text, at a third of the cost (most values, counts and offsets, are whole).
_PLAIN_BELOW = 1e10


def number_text(column: pa.ChunkedArray) -> pa.Array:
    """The floats of `column` as Arrow's cast to string writes them."""
    if column.null_count:
        return one_array(pc.cast(column, pa.string()))
    values = one_array(column).to_numpy()
    with np.errstate(invalid="ignore"):  # NaN, infinities: not whole, their integer never written
        ints = values.astype(np.int64)
    whole = (ints == values) & (np.abs(values) < _PLAIN_BELOW)
    zero = whole & (ints == 0)
    if zero.any():
        whole[zero] = ~np.signbit(values[zero])  # -0.0 is written "-0"
    text = pc.cast(pa.array(ints), pa.string())
    if whole.all():
        return text
    return pc.replace_with_mask(text, pa.array(~whole), pc.cast(pa.array(values[~whole]), pa.string()))


# The bytes of the numbers the columnar read parses itself: a number with any other byte (a letter of nan or
# inf, a space or an underscore float() takes, an `x` Arrow's integer parse takes as hex) is parsed by int()
# or float(), or its member goes through the contract's decoder.
_NUMBER_BYTES = b"0123456789.eE+-"
_ODD = np.ones(256, bool)
_ODD[np.frombuffer(_NUMBER_BYTES, np.uint8)] = False
_TAIL = 6  # a segment's fields after its metric index: n, sum, min, max, last, last ts


@dataclass
class MetricLasts:
    """One metric's windows in a run of members, column by column: the member each came from (its
    position), the window's start, the metric's last and the last's ts."""
    member: np.ndarray  # int64
    start: np.ndarray  # int64
    last: np.ndarray  # float64
    last_ts: np.ndarray  # int64


def member_lasts(members: Sequence[bytes | str], metrics: Sequence[str]
                 ) -> tuple[dict[str, MetricLasts], list[tuple[int, str]]]:
    """The last (and its ts) of each of `metrics` in each of `members` (stored window members,
    redis_layout's text), read on Arrow/numpy: what redis_layout.decode_member gives for them, without a
    Python object a member. Every member's segments are found, counted against its ':' (six a segment) and
    their metric indexes checked (one or two digits, in WINDOW_METRICS order); the start and the segments of
    `metrics` are cut out and every field of them parsed. A member the columnar read cannot vouch for (an
    index written otherwise, a segment read that is not six fields after its index, a count of no samples,
    a number Arrow does not parse as int() or float() would) goes through decode_member, so the answer is
    decode_member's. As in the service's fast path (service/window_decoding.py), the other metrics' fields
    are not read: a fault there that keeps the member's count of ':' (a number that is not one, a count of
    no samples) is not seen. Also the members decode_member refuses (position, why): left out whole, as
    decoded_members leaves them. Members all bytes or all str (a client's decode_responses)."""
    as_str = bool(members) and isinstance(members[0], str)
    text = pa.array([m.encode() for m in cast(Sequence[str], members)] if as_str else members,
                    pa.large_binary())
    count = len(text)
    offsets = np.frombuffer(text.buffers()[1], np.int64)[:count + 1]
    data = np.frombuffer(text.buffers()[2], np.uint8) if count and text.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    ends = offsets[1:]
    semis = np.flatnonzero(data == ord(";"))
    segments = np.diff(np.searchsorted(semis, offsets))
    colons = np.diff(np.searchsorted(np.flatnonzero(data == ord(":")), offsets))
    owner = np.repeat(np.arange(count), segments)
    last_of_member = np.ones(len(semis), bool)
    last_of_member[:-1] = owner[1:] != owner[:-1]
    stop = np.where(last_of_member, ends[owner], np.append(semis[1:], 0))  # each segment's end
    index, width = _metric_indexes(data, semis, stop)
    # A start and a segment or more, as many ':' as six a segment, their indexes in WINDOW_METRICS order,
    # each once: what encode_member and member_column write.
    unsure = (segments == 0) | (colons != _TAIL * segments)
    unsure[owner[index < 0]] = True
    unsure[owner[1:][~last_of_member[:-1] & (index[1:] <= index[:-1])]] = True
    firsts = np.flatnonzero(np.concatenate([[True], last_of_member[:-1]])[:len(semis)])
    heads = np.zeros(count, np.int64)
    heads[owner[firsts]] = semis[firsts]
    # The segments of `metrics`, all at once: their six fields after the index, each parsed.
    at = np.flatnonzero(np.isin(index, [layout.METRIC_INDEX[m] for m in metrics]))
    at = at[~unsure[owner[at]]]
    fields = pc.split_pattern(_slices(text, semis[at] + width[at] + 2, stop[at]), ":")
    six = pc.list_value_length(fields).to_numpy() == _TAIL
    if not six.all():
        unsure[owner[at[~six]]] = True
        at, fields = at[six], fields.filter(pa.array(six))
    parts = pc.list_flatten(fields)
    # Every field as decode_member parses it (its floats; the last ts also as an integer).
    values, bad = (a.reshape(-1, _TAIL) for a in _numbers(parts, pa.float64()))
    last_ts, bad_ts = _numbers(parts[_TAIL - 1::_TAIL], pa.int64())
    unsure[owner[at[bad.any(axis=1) | bad_ts | ~(values[:, 0] > 0)]]] = True
    sure = np.flatnonzero(~unsure)
    start = np.zeros(count, np.int64)
    start[sure], bad_start = _numbers(_slices(text, offsets[sure], heads[sure]), pa.int64())
    unsure[sure[bad_start]] = True
    member = owner[at]
    keep = ~unsure[member]
    out = {}
    for metric in metrics:
        mine = np.flatnonzero(keep & (index[at] == layout.METRIC_INDEX[metric]))
        out[metric] = MetricLasts(member[mine], start[member[mine]], values[mine, 4], last_ts[mine])
    refused = _decoded(members, np.flatnonzero(unsure), metrics, out)
    return out, refused


def _metric_indexes(data: np.ndarray, semis: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The metric index opening each segment (at `semis`, ending at `stop`) and its digits: one or two
    digits then ':', as encode_member writes it, within WINDOW_METRICS; -1 for any other."""
    def byte(k: int) -> np.ndarray:
        at = semis + k
        return np.where(at < stop, data.take(np.minimum(at, len(data) - 1)), 0).astype(np.int16) \
            if len(data) else np.zeros(len(semis), np.int16)

    d1, d2, d3 = byte(1) - 48, byte(2) - 48, byte(3)
    digit1, digit2 = (d1 >= 0) & (d1 <= 9), (d2 >= 0) & (d2 <= 9)
    one = digit1 & (d2 == ord(":") - 48)
    two = digit1 & (d1 > 0) & digit2 & (d3 == ord(":"))
    index = np.where(one, d1, np.where(two, 10 * d1 + d2, -1))
    index[index >= len(layout.WINDOW_METRICS)] = -1
    return index, np.where(two, 2, 1)


def _slices(text: pa.LargeBinaryArray, first: np.ndarray, last: np.ndarray) -> pa.Array:
    """The bytes [first, last) of `text`'s data (ascending, apart) as strings: cut from a string array
    over the same data whose every other string is a gap between two slices."""
    if not len(first):
        return pa.array([], pa.large_string())
    bounds = np.empty(2 * len(first) + 1, np.int64)
    bounds[0:-1:2], bounds[1::2], bounds[-1] = first, last, last[-1]
    both = pa.LargeStringArray.from_buffers(2 * len(first), pa.py_buffer(bounds), text.buffers()[2])
    return both.take(pa.array(np.arange(0, 2 * len(first), 2)))


def _numbers(text: pa.Array, kind: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    """`text` parsed as `kind` (int64 or float64), and which is not a number as int() or float() reads it.
    Arrow's parse where the text is of a number's bytes (where it gives what int() and float() give); a
    text it refuses is parsed by int() or float() (they take a few forms Arrow does not, such as an int with
    a sign); a text of other bytes is not a number here."""
    odd = _odd(text)
    try:
        values = pc.cast(text, kind).to_numpy(zero_copy_only=False)
        return values, odd
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parse = int if kind == pa.int64() else float
    values, bad = np.zeros(len(text), kind.to_pandas_dtype()), odd.copy()
    for i, raw in enumerate(text.to_pylist()):
        try:
            values[i] = parse(raw)
        except (ValueError, OverflowError):
            bad[i] = True
    return values, bad


def _odd(text: pa.Array) -> np.ndarray:
    """Which strings of `text` hold a byte no number here is written with."""
    offsets = np.frombuffer(text.buffers()[1], np.int64)[text.offset:text.offset + len(text) + 1]
    held = text.buffers()[2]
    if held is None or not len(text):
        return np.zeros(len(text), bool)
    data = np.frombuffer(held, np.uint8)[offsets[0]:offsets[-1]]
    if not data.tobytes().translate(None, _NUMBER_BYTES):  # mostly: no such byte at all
        return np.zeros(len(text), bool)
    at = np.flatnonzero(_ODD[data]) + offsets[0]
    return np.searchsorted(at, offsets[:-1]) < np.searchsorted(at, offsets[1:])


def _decoded(members: Sequence[bytes | str], unsure: np.ndarray, metrics: Sequence[str],
             out: dict[str, MetricLasts]) -> list[tuple[int, str]]:
    """The `unsure` members through redis_layout.decode_member, added to `out`; those it refuses."""
    if not len(unsure):
        return []
    found: dict[str, list[tuple[int, int, float, int]]] = {m: [] for m in metrics}
    refused = []
    for i in unsure.tolist():
        try:
            start, windows = layout.decode_member(members[i])
            held = [(m, windows[m]) for m in metrics if m in windows]
            rows = [(i, start, w.last, start if w.last_ts is None else w.last_ts) for m, w in held]
            np.array([r[1::2] for r in rows], np.int64)  # a start or ts past int64 is not a window either
        except (ValueError, OverflowError) as exc:
            refused.append((i, str(exc)))
            continue
        for (metric, _), row in zip(held, rows, strict=True):
            found[metric].append(row)
    for metric, rows in found.items():
        if rows:
            old, new = out[metric], [np.array(c) for c in zip(*rows, strict=True)]
            out[metric] = MetricLasts(*(np.concatenate([a, b.astype(a.dtype)]) for a, b in zip(
                (old.member, old.start, old.last, old.last_ts), new, strict=True)))
    return refused
