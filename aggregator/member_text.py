"""A window's Redis member written for many windows at once, on Arrow: `<start>;<metric>:<n>:<sum>:<min>:
<max>:<last>:<last ts>;...`, the text redis_layout.encode_member writes for one (the merge, stored_windows,
replaces each touched window's member with it)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.window_ids import METRICS, WindowIds
from aggregator.window_partials import one_array

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
    metrics = pc.take(_METRIC_TEXT, ordered["metric"])
    values = (number_text(ordered[c]) for c in VALUES)
    segments = pc.binary_join_element_wise(metrics, *values, pc.cast(ordered["last_ts"], pa.string()), ":")
    packed = metric_windows // METRICS
    firsts = np.flatnonzero(np.concatenate([[True], packed[1:] != packed[:-1]])) if len(packed) \
        else np.zeros(0, np.int64)
    runs = pa.ListArray.from_arrays(pa.array(np.append(firsts, len(packed)), pa.int32()),
                                    one_array(segments))
    heads = ordered.take(firsts)
    member = pc.binary_join_element_wise(pc.cast(heads["start"], pa.string()), pc.binary_join(runs, ";"), ";")
    return pa.table({"series": heads["series"], "start": heads["start"], "member": member})


_METRIC_TEXT = pa.array([str(i) for i in range(METRICS)])
# Arrow writes a float without exponent or fraction when it is whole and below 1e10 (not -0.0): as an
# integer it writes the same text, at a third of the cost (most values, counts and offsets, are whole).
_PLAIN_BELOW = 1e10


def number_text(column: pa.ChunkedArray) -> pa.Array:
    """The floats of `column` as Arrow's cast to string writes them."""
    if column.null_count:
        return one_array(pc.cast(column, pa.string()))
    values = one_array(column).to_numpy()
    whole = (np.abs(values) < _PLAIN_BELOW) & (np.trunc(values) == values) \
        & ~((values == 0) & np.signbit(values))
    text = pc.cast(pa.array(np.where(whole, values, 0).astype(np.int64)), pa.string())
    if whole.all():
        return text
    return pc.replace_with_mask(text, pa.array(~whole), pc.cast(pa.array(values[~whole]), pa.string()))
