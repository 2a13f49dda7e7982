"""Raw-metrics Kafka values -> typed Arrow rows, by Arrow's JSON reader (raw_records judges them).

Arrow's reader pays for every field of its schema on every row, present or not: the ~30 fields of the
three kinds cost twice the ~15 of one. So a batch is read a kind at a time, each with its own fields
(contract KIND_FIELDS): a record goes by the first `"kind":"<kind>"` in its text (drivers write no
spaces), and one that names none, or whose parsed kind is another (the text stood elsewhere in it), is
read with every field, as all were before. A field a record's kind does not carry is unexpected there,
and ignored like an unknown one. Values that are not one JSON object a line take a slower path that
isolates what fails.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from contract.records.raw_metrics import (
    FIELD_TYPES,
    KIND_FIELDS,
    READER_FIELD_TYPES,
    READER_KINDS,
    SUMMARY_FIELD_TYPES,
)

_TYPES = {"int": pa.int32(), "long": pa.int64(), "double": pa.float64(), "string": pa.string(),
          "boolean": pa.bool_()}
_READER_TYPE = pa.struct([(f, _TYPES[t]) for f, t in READER_FIELD_TYPES.items()])
_NESTED = {"summary": pa.struct([(f, _TYPES[t]) for f, t in SUMMARY_FIELD_TYPES.items()]),
           "readers": pa.struct([(kind, _READER_TYPE) for kind in READER_KINDS])}
RECORD_SCHEMA = pa.schema([pa.field(name, _NESTED.get(kind) or _TYPES[kind])
                           for name, kind in FIELD_TYPES.items()])
_PARSE = pj.ParseOptions(explicit_schema=RECORD_SCHEMA, unexpected_field_behavior="ignore")


def _object(fields: dict[str, str]) -> str:
    """A regex of a compact JSON object of some of `fields` (name -> regex of its value), in any order.

    The names of one value regex share one copy of it (`"(?:ts|period_ms)":<long>`, not a copy per
    name): the same text matches, but RE2's automaton has one set of states for the digits of every
    long, not one per field, and the screen of a batch ran ~40 % faster (its states fit the cache)."""
    names: dict[str, list[str]] = {}
    for name, value in fields.items():
        names.setdefault(value, []).append(name)
    member = "|".join(f'"(?:{"|".join(same)})":(?:{value})' for value, same in names.items())
    return rf"\{{(?:(?:{member})(?:,(?:{member}))*)?\}}"


# What SCREEN takes of each type: numbers the reader converts without fail (an int32 of at most 9 digits,
# an int64 of at most 18, a double under 10^117), strings without \u escapes (a lone surrogate fails).
_SCREENED = {"int": r"-?(?:0|[1-9]\d{0,8})", "long": r"-?(?:0|[1-9]\d{0,17})",
             "double": r"-?(?:0|[1-9]\d{0,17})(?:\.\d{1,20})?(?:[eE][-+]?\d{1,2})?",
             "string": r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"', "boolean": "true|false"}
_SCREENED["summary"] = _object({f: _SCREENED[t] for f, t in SUMMARY_FIELD_TYPES.items()})
_SCREENED["readers"] = _object({k: _object({f: _SCREENED[t] for f, t in READER_FIELD_TYPES.items()})
                                for k in READER_KINDS})
SCREEN = "^" + _object({name: _SCREENED[kind] for name, kind in FIELD_TYPES.items()}) + "$"
"""A value the JSON reader surely takes as one row of RECORD_SCHEMA: every known field of its type, no
other field, compact (as the driver writes them)."""
# Per kind: the text that names it, and the reader's options for its fields.
_KINDS = {kind: (f'"kind":"{kind}"', pj.ParseOptions(explicit_schema=pa.schema(
    [RECORD_SCHEMA.field(name) for name in names]), unexpected_field_behavior="ignore"))
    for kind, names in KIND_FIELDS.items()}


def parse_values(values: pa.Array) -> tuple[pa.Table, pa.BooleanArray]:
    """Kafka values -> one RECORD_SCHEMA row each (all null where the value is no JSON object of those
    types) and whether it parsed."""
    if _all_one_line(values) and _utf8(values):
        table = _read_by_kind(values)
        if table is not None:  # the common case: a read of each kind's records
            return table, pa.repeat(True, len(values))
    # Some value is no JSON object of these types on one line. Those that do not match the grammar of
    # what the driver writes (SCREEN: every known field typed, compact, no escape Arrow might refuse) are
    # judged alone in Python, and what passes is rewritten as SCREEN would take it: then the lines left
    # read at once, and a bad record costs about what a good one does (splitting into halves and reading
    # again until each bad line stood alone made a few bad records cost a batch many times its read:
    # bench/RESULTS.md, "bad records").
    lines, rows = _screened(values)
    placed = np.full(len(values), len(rows), np.int64)  # each value's line; a value of none: the null row
    placed[rows] = np.arange(len(rows))
    table = _read_by_kind(lines) if len(lines) else RECORD_SCHEMA.empty_table()
    if table is not None:
        return pa.concat_tables([table, _null_rows(1)]).take(pa.array(placed)), pa.array(placed < len(rows))
    lines = pa.concat_arrays([lines, pa.nulls(1, pa.binary())]).take(pa.array(placed))
    # What SCREEN should never let through: found by reading halves until it stands alone.
    pieces = _read_lines(lines)
    if not pieces:
        return RECORD_SCHEMA.empty_table(), pa.array([], pa.bool_())
    parsed = pa.concat_arrays([pa.repeat(ok, piece.num_rows) for piece, ok in pieces])
    return pa.concat_tables([piece for piece, _ in pieces]), parsed


def _screened(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The lines the JSON reader takes whole and the value each came from: the values SCREEN takes, as they
    are, then the others rewritten (see _canonical), but those that are no record."""
    clean = pc.fill_null(pc.match_substring_regex(values, SCREEN), False)
    if not _utf8(values):  # JSON is UTF-8: what is not goes to orjson, which refuses it
        clean = pc.and_(clean, pa.array([v is None or _is_utf8(v) for v in values.to_pylist()]))
    suspects = pc.indices_nonzero(pc.invert(clean))
    as_is = pc.indices_nonzero(clean).to_numpy()
    if len(suspects) == 0:
        return values.cast(pa.binary()), as_is
    rewritten = [_canonical(v) for v in values.take(suspects).to_pylist()]
    kept = [i for i, line in enumerate(rewritten) if line is not None]
    # Not put back among the others: a copy of the batch's bytes fewer.
    lines = pa.concat_arrays([values.filter(clean).cast(pa.binary()),
                              pa.array([rewritten[i] for i in kept], pa.binary())])
    return lines, np.concatenate([as_is, suspects.to_numpy()[kept]])


def _utf8(values: pa.Array) -> bool:
    """Whether every value is UTF-8 (one pass over the bytes where they lie): the JSON reader copies the
    bytes of a string as they are, and a string that is not UTF-8 fails wherever it is read as text."""
    try:
        values.view(pa.string()).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _all_one_line(values: pa.Array) -> bool:
    """Whether every value is one line starting with `{`, told by a scan of the values' bytes where they
    lie (a regex per value costs ~0.5 us each; a copy of the bytes into Python, ~0.2)."""
    if not bool(pc.all(pc.fill_null(pc.starts_with(values, "{"), False)).as_py()):
        return False
    data, offsets = values.buffers()[2], values.buffers()[1]
    if data is None or len(values) == 0:
        return True
    wide = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    bounds = np.frombuffer(offsets, wide)[[values.offset, values.offset + len(values)]]
    text = np.frombuffer(data, np.uint8)[bounds[0]:bounds[1]]
    # JSON records hold no raw control characters but in whitespace: the exact test is rarely needed.
    # A minimum is one pass without a temporary (a mask of every byte is a batch-sized temporary, paid
    # for in page faults).
    return len(text) == 0 or int(text.min()) >= 14 or not ((text == 10) | (text == 13)).any()


def _canonical(value: bytes | None) -> bytes | None:
    """A JSON object as compact JSON holding only the known fields of its kind (every field's if it names
    no known kind; `kind` first, so a search of its text finds it), each of its type (see _typed); None
    for anything else. orjson: nesting deeper than 1024 is a JSONDecodeError, not json's RecursionError,
    and NaN, Infinity and text that is not UTF-8 are refused. Any other surprise is still this one
    record's problem."""
    if value is None or value.lstrip()[:1] != b"{":  # no JSON object, without a parse
        return None
    try:
        body = orjson.loads(value)
        if not isinstance(body, dict):
            return None
        kind = body.get("kind")
        names = KIND_FIELDS.get(kind, FIELD_TYPES) if isinstance(kind, str) else FIELD_TYPES
        kept = {"kind": kind} if kind is not None else {}
        kept |= {name: body[name] for name in names if body.get(name) is not None}
        typed = _typed(kept, FIELD_TYPES)
        return None if typed is None else orjson.dumps(typed)
    except Exception:
        return None


_LIMITS = {"int": 2**31, "long": 2**63}


def _typed(body: dict, types: dict[str, str]) -> dict | None:
    """`body`'s fields of `types` (null ones left out) if each is of its type as the JSON reader takes it
    (a nested object with only its known fields), else None."""
    kept: dict = {}
    for name, kind in types.items():
        value = body.get(name)
        if value is None:
            continue
        if kind == "summary":
            value = _typed(value, SUMMARY_FIELD_TYPES) if isinstance(value, dict) else None
        elif kind == "readers":
            value = _typed_readers(value) if isinstance(value, dict) else None
        elif kind in _LIMITS:
            value = value if type(value) is int and -_LIMITS[kind] <= value < _LIMITS[kind] else None
        elif kind == "double":
            value = value if type(value) in (int, float) and math.isfinite(value) else None
        elif not isinstance(value, {"string": str, "boolean": bool}[kind]):
            value = None
        if value is None:
            return None
        kept[name] = value
    return kept


def _typed_readers(readers: dict) -> dict | None:
    kept = {}
    for kind in READER_KINDS:
        health = readers.get(kind)
        if health is None:
            continue
        kept[kind] = _typed(health, READER_FIELD_TYPES) if isinstance(health, dict) else None
        if kept[kind] is None:
            return None
    return kept


def _read_lines(lines: pa.Array) -> list[tuple[pa.Table, bool]]:
    """Aligned pieces of parsed rows; a line that fails (or reads as other than one row) comes back as
    a null row. One bad line costs a few re-reads of halves, not a Python parse of the batch."""
    if len(lines) == 0:
        return []
    if lines.null_count == len(lines):  # garbage only (no JSON object): no need to split it further
        return [(_null_rows(len(lines)), False)]
    table = _read(lines)
    if table is not None:
        return [(table, True)]
    if len(lines) == 1:
        return [(_null_rows(1), False)]
    middle = len(lines) // 2
    return _read_lines(lines.slice(0, middle)) + _read_lines(lines.slice(middle))


def _read_by_kind(values: pa.Array) -> pa.Table | None:
    """Each kind's values read with its fields (see the module's doc), the rest with every field; rows in
    the values' order. None if a read fails."""
    left = np.ones(len(values), dtype=bool)
    pieces: list[tuple[np.ndarray, pa.Table]] = []
    for kind, (text, options) in _KINDS.items():
        # Only the rows left are searched: a value that does not hold the text is scanned whole.
        candidates = np.flatnonzero(left)
        if len(candidates) == 0:
            break
        holds = pc.match_substring(_rows_of(values, candidates), text)
        rows = candidates[holds.to_numpy(zero_copy_only=False)]
        if len(rows) == 0:
            continue
        table = _read(_rows_of(values, rows), options)
        if table is None:
            return None
        named = pc.fill_null(pc.equal(table["kind"], kind), False).to_numpy(zero_copy_only=False)
        pieces.append((rows[named], table.filter(named) if not named.all() else table))
        left[rows[named]] = False
    if left.any():
        rows = np.flatnonzero(left)
        table = _read(_rows_of(values, rows), _PARSE)
        if table is None:
            return None
        pieces.append((rows, table))
    if len(pieces) == 1 and len(pieces[0][0]) == len(values):
        return _with_every_field(pieces[0][1])
    order = np.argsort(np.concatenate([rows for rows, _ in pieces]), kind="stable")
    return pa.concat_tables([_with_every_field(table) for _, table in pieces]).take(order)


def _rows_of(values: pa.Array, rows: np.ndarray) -> pa.Array:
    """The values at `rows` (ascending, distinct): no copy when that is all of them."""
    return values if len(rows) == len(values) else values.take(rows)


def _with_every_field(table: pa.Table) -> pa.Table:
    return pa.table([table[f.name] if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                     for f in RECORD_SCHEMA], schema=RECORD_SCHEMA)


def _read(lines: pa.Array, options: pj.ParseOptions = _PARSE) -> pa.Table | None:
    if lines.null_count:
        return None
    # Each line + "\n" in one contiguous buffer: no Python object per record.
    joined = pc.binary_join_element_wise(lines, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    data = joined.buffers()[2][:pc.sum(pc.binary_length(joined)).as_py()]  # a new array: offsets from 0
    try:
        table = pj.read_json(pa.BufferReader(data), parse_options=options)
    except pa.ArrowInvalid:
        return None
    names = options.explicit_schema.names
    return table.select(names) if table.num_rows == len(lines) else None


def _null_rows(count: int) -> pa.Table:
    return pa.table([pa.nulls(count, field.type) for field in RECORD_SCHEMA], schema=RECORD_SCHEMA)
