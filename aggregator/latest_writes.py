"""How the sink writes latest values and lag verdicts: newest wins, decided here, in bulk HSETs.

A latest-value field (a partition's, a group's, a replication's, a partition's verdict) is replaced only by
a value of equal or newer `ts`, so a replayed or late report cannot roll a dashboard back; equal replaces,
so a value derived again from more windows gets through. One query is the only writer of its target's
latest keys, so what this writer wrote is what Redis holds: it keeps, per field, the `ts` and a digest of
the value it wrote, and reads a field from Redis once, the first time it writes it in this process (after
a start, a restart, or a failed write, which forgets everything). A field whose value is the one it
holds already (a replayed batch) is not sent again.

At 100,000 partitions a batch writes ~200,000 fields (values and verdicts). A Lua upsert that read each
field, decoded its JSON for the `ts` and wrote it back cost ~7 s of a batch, most of it waiting on Redis;
here a hash's fields go in one HSET inside one MULTI. A hash's lifetime (LATEST_TTL_MS, a week) is set
by a PEXPIRE the first time this writer writes it, then renewed at most every EXPIRY_RENEWAL_MS: a
PEXPIRE at every write was half the commands of a batch (a partition hash is a topic's ~10 fields), and
the client's time goes per command, so a hash now lives from its last write one renewal period less at
worst.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from string import Formatter
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.resp_commands import execute_in_multi, packed
from contract.redis_layout import LATEST_TTL_MS, decode_latest, encode_latest

# Fields per HSET at most: a replication's verdicts are one hash of one field a partition.
FIELDS_PER_HSET = 10_000
NOTHING = np.iinfo(np.int64).min  # the ts of a field Redis does not hold
# Fields known at most (~100 bytes each): past it the writer starts over, reading each field again once.
# Subjects a replication may keep are capped (subject_cap), fields that stopped coming are not.
CAPACITY = 1 << 21
EXPIRY_RENEWAL_MS = 3_600_000
Field = tuple[str, str]  # hash key, field


class LatestWriter:
    """What this writer knows each latest field holds in Redis: its value's ts and digest."""

    def __init__(self) -> None:
        self.slot: dict[Field, int] = {}
        self.ts = np.empty(0, np.int64)
        self.digest = np.empty(0, np.int64)
        self.expiry_set: dict[str, float] = {}  # hash key -> when (time.monotonic) its lifetime was set

    def clear(self) -> None:
        """Forgets every field (a write that may or may not have happened, Redis state lost): each is read
        again before it is written, and each hash's lifetime set again."""
        self.slot.clear()
        self.ts = np.empty(0, np.int64)
        self.digest = np.empty(0, np.int64)
        self.expiry_set.clear()

    def __len__(self) -> int:
        return len(self.slot)

    def write(self, client: redis.Redis, columns: LatestColumns) -> int:
        """Writes each field (keys[i], names[i]) its value `encoded[i]` of `ts[i]` where Redis holds none
        newer, nor this very value; a field given twice takes its newest (of equal ts, the later). One
        transaction. Returns how many fields were written."""
        keys, names, ts, encoded = columns.keys, columns.names, columns.ts, columns.encoded
        if not len(keys):
            return 0
        fields = list(zip(keys, names, strict=True))
        ts_a = np.asarray(ts, np.int64)
        # The newest value of each field: a dict built in ts order keeps the last position of each.
        order = np.lexsort((np.arange(len(fields)), ts_a)).tolist()
        chosen = np.fromiter(dict(zip([fields[i] for i in order], order, strict=True)).values(), np.int64)
        try:
            slots = self._slots(client, [fields[i] for i in chosen.tolist()])
            digest = np.fromiter(map(hash, [encoded[i] for i in chosen.tolist()]), np.int64, len(chosen))
            held_ts, held_digest = self.ts[slots], self.digest[slots]
            new_ts = ts_a[chosen]
            wanted = (new_ts >= held_ts) & ~((new_ts == held_ts) & (digest == held_digest))
            written = chosen[wanted]
            if len(written):
                self._send(client, written, keys, names, encoded)
        except BaseException:
            self.clear()
            raise
        self.ts[slots[wanted]] = new_ts[wanted]
        self.digest[slots[wanted]] = digest[wanted]
        return len(written)

    def _slots(self, client: redis.Redis, fields: list[Field]) -> np.ndarray:
        """Each field's slot; fields not known yet are read from Redis first (HMGET a hash)."""
        known = self.slot
        slots = np.fromiter((known.get(f, -1) for f in fields), np.int64, len(fields))
        unknown = np.flatnonzero(slots < 0)
        if len(unknown) and len(known) + len(unknown) > CAPACITY:
            self.clear()
            unknown = np.arange(len(fields))
        if len(unknown):
            self._read([fields[i] for i in unknown.tolist()], client)
            slots[unknown] = [known[fields[i]] for i in unknown.tolist()]
        return slots

    def _read(self, fields: list[Field], client: redis.Redis) -> None:
        by_key: dict[str, list[str]] = {}
        for key, name in fields:
            by_key.setdefault(key, []).append(name)
        pipe = client.pipeline(transaction=False)
        for key, names in by_key.items():
            for at in range(0, len(names), FIELDS_PER_HSET):
                pipe.hmget(key, names[at:at + FIELDS_PER_HSET])
        stored = iter(pipe.execute())
        first = len(self.slot)
        ts: list[int] = []
        digest: list[int] = []
        for key, names in by_key.items():
            values = [v for at in range(0, len(names), FIELDS_PER_HSET) for v in next(stored)]
            for name, raw in zip(names, values, strict=True):
                self.slot[(key, name)] = first + len(ts)
                held_ts, held_digest = stored_stamp(raw)
                ts.append(held_ts)
                digest.append(held_digest)
        self.ts = np.concatenate([self.ts, np.array(ts, np.int64)])
        self.digest = np.concatenate([self.digest, np.array(digest, np.int64)])

    def _send(self, client: redis.Redis, rows: np.ndarray, keys: Sequence[str], names: Sequence[str],
              encoded: Sequence[str]) -> None:
        """HSETs of the fields at `rows`, a hash's in one (FIELDS_PER_HSET at most), hashes in the order they
        first come, and the PEXPIREs due, in one MULTI, packed by Arrow (resp_commands)."""
        taken = pa.array(rows, pa.int64())
        key, name, value = (pa.array(c, pa.string()).take(taken) for c in (keys, names, encoded))
        args, counts, hashes = hset_commands(key, name, value)
        now = time.monotonic()
        renew_before = now - EXPIRY_RENEWAL_MS / 1000
        expiring = [k for k in hashes.to_pylist() if self.expiry_set.get(k, -math.inf) <= renew_before]
        if expiring:
            expiry_args, expiry_counts = pexpire_commands(pa.array(expiring, pa.string()))
            args, counts = pa.concat_arrays([args, expiry_args]), np.concatenate([counts, expiry_counts])
        execute_in_multi(client, packed(args, counts), len(counts))
        self.expiry_set.update(dict.fromkeys(expiring, now))


def hset_commands(key: pa.Array | pa.ChunkedArray, name: pa.Array | pa.ChunkedArray,
                  value: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray, pa.Array]:
    """HSETs of fields (`key[i]`, `name[i]`) to `value[i]` (string arrays; a field once): a hash's fields in
    one command (FIELDS_PER_HSET at most), hashes in the order they first come. Returns the commands'
    arguments and each one's count (resp_commands.packed), and the distinct hash keys."""
    key, name, value = (c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                        for c in (key, name, value))
    by_key = pc.dictionary_encode(key)
    code = by_key.indices.to_numpy()
    order = np.argsort(code, kind="stable")  # a hash's fields together, hashes by first appearance
    code = code[order]
    run_start = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
    position = np.arange(len(code)) - np.repeat(run_start, np.diff(np.append(run_start, len(code))))
    first = (position % FIELDS_PER_HSET) == 0  # a command's first field
    command = np.cumsum(first) - 1
    firsts = np.flatnonzero(first)
    commands, fields = len(firsts), len(code)
    # HSET <key> <field> <value> ...: the source entries are "HSET", each command's key, names, values.
    place = np.empty(2 * commands + 2 * fields, np.int64)
    starts = 2 * np.arange(commands) + 2 * firsts
    place[starts] = 0
    place[starts + 1] = 1 + np.arange(commands)
    at = 2 * np.arange(fields) + 2 * command + 2
    place[at] = 1 + commands + np.arange(fields)
    place[at + 1] = 1 + commands + fields + np.arange(fields)
    sorted_at = pa.array(order)
    source = pa.concat_arrays([pa.array(["HSET"]), by_key.dictionary.take(pa.array(code[firsts])),
                               name.take(sorted_at), value.take(sorted_at)])
    return pc.take(source, pa.array(place)), np.diff(np.append(starts, len(place))), by_key.dictionary


def pexpire_commands(keys: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A PEXPIRE of LATEST_TTL_MS for each of `keys`, as hset_commands lays commands out."""
    n = len(keys)
    parts = pa.concat_arrays([pa.array(["PEXPIRE", str(LATEST_TTL_MS)], pa.string()), keys.cast(pa.string())])
    place = np.empty(3 * n, np.int64)
    place[0::3], place[1::3], place[2::3] = 0, 2 + np.arange(n), 1
    return pc.take(parts, pa.array(place)), np.full(n, 3, np.int64)


def stored_stamp(raw: bytes | None) -> tuple[int, int]:
    """(ts, digest) of a stored value; one that does not decode, or has no integer ts, is replaced by any
    value (as one Redis does not hold)."""
    if raw is None:
        return NOTHING, 0
    text = raw.decode(errors="replace")
    try:
        ts = decode_latest(text)["ts"]
        return (int(ts), hash(text)) if isinstance(ts, int | float) and not isinstance(ts, bool) \
            else (NOTHING, 0)
    except (ValueError, OverflowError):
        return NOTHING, 0


@dataclass
class LatestColumns:
    """Latest-value fields to write, a column each: hash key, field, the value's ts and its JSON."""

    keys: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    encoded: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: Iterable[str], names: Iterable[str], ts: Iterable[int],
            encoded: Iterable[str]) -> None:
        self.keys.extend(keys)
        self.names.extend(names)
        self.ts.extend(ts)
        self.encoded.extend(encoded)

    def add_values(self, values: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        """(hash key, field, value) triples; each value carries an integer `ts`."""
        for key, name, value in values:
            self.keys.append(key)
            self.names.append(name)
            self.ts.append(int(value["ts"]))
            self.encoded.append(encode_latest(value))


def json_column(values: Sequence[Any]) -> list[str]:
    """Each value as redis_layout.encode_latest renders it inside a record: one orjson call for the column
    (a list of numbers and nulls renders with a comma between elements and none inside them), each value
    alone where the column does not split back into as many (a comma inside a value) or orjson refuses one."""
    if not values:
        return []
    try:
        parts = orjson.dumps(list(values), option=orjson.OPT_SORT_KEYS).decode()[1:-1].split(",")
    except TypeError:
        parts = []
    return parts if len(parts) == len(values) else [encode_latest(v) for v in values]


def int_json(values: np.ndarray) -> pa.Array:
    """Integers as their JSON (decimal, as orjson renders an int), a column at once."""
    return pc.cast(pa.array(np.asarray(values, np.int64)), pa.string())


def json_rows(template: str, columns: Mapping[str, pa.Array]) -> pa.Array:
    """Rows of JSON text from a format `template` whose every `{name}` is a column of its values' JSON
    (string arrays of one length, no nulls: a missing value is the text `null`): one Arrow concatenation
    for every row. At 100,000 reports a batch, a str.format call a row of a dozen fields cost ~2-3 us."""
    parts: list[pa.Array | pa.Scalar] = []
    for literal, name in _template(template):
        if literal:
            parts.append(pa.scalar(literal, pa.string()))
        if name is not None:
            parts.append(columns[name])
    return pc.binary_join_element_wise(*parts, pa.scalar("", pa.string()))


@lru_cache(maxsize=64)
def _template(template: str) -> list[tuple[str, str | None]]:
    """(literal text, then a field name or None) of a format string; `{{` and `}}` are literal braces."""
    return [(literal, name) for literal, name, _, _ in Formatter().parse(template)]
