"""Stored window members read as columns (member_text.member_lasts) give what the contract's decoder
(redis_layout.decode_member) gives for them, member by member: over members written by encode_member and
by the merge's Arrow writer (member_column), with metrics absent, last ts unknown, integers past 2^53,
fractions, -0.0, NaN and infinities; and over members damaged in their layout, their indexes or the
segments read, which the contract's decoder refuses or reads as it does (a fault in the fields of a metric
not read is not seen: as in the service's fast path)."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.member_text import member_column, member_lasts
from aggregator.stored_windows import SCHEMA
from contract import redis_layout as layout

READ = ("source_end_offset", "upstream_offset", "records_lag")
Rows = dict[str, list[tuple[int, int, str, int]]]


def decoded(members: list[bytes], metrics=READ) -> tuple[Rows, list[int]]:
    """What decode_member gives: each metric's (member, start, last as text, last ts); refused members."""
    rows: Rows = {m: [] for m in metrics}
    refused = []
    for i, member in enumerate(members):
        try:
            start, windows = layout.decode_member(member)
        except ValueError:
            refused.append(i)
            continue
        for metric in metrics:
            if metric in windows:
                w = windows[metric]
                rows[metric].append((i, start, repr(w.last), start if w.last_ts is None else w.last_ts))
    return rows, refused


def columns(members: list[bytes], metrics=READ) -> tuple[Rows, list[int]]:
    found, refused = member_lasts(members, metrics)
    rows: Rows = {m: sorted(zip(found[m].member.tolist(), found[m].start.tolist(),
                                map(repr, found[m].last.tolist()), found[m].last_ts.tolist(), strict=True))
                  for m in metrics}
    return rows, sorted(i for i, _ in refused)


numbers = st.one_of(
    st.integers(-(2**63), 2**63).map(float),
    st.integers(2**53 - 4, 2**53 + 4).map(float),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 1e10, 1e10 - 1, 9_999_999_999.5, 1e-7, 2.0**60]))
windows = st.dictionaries(
    st.sampled_from(layout.WINDOW_METRICS),
    st.tuples(st.floats(0.5, 1e6) | st.integers(1, 10**6).map(float), numbers, numbers,
              st.one_of(st.none(), st.integers(-(2**40), 2**40))),
    min_size=1, max_size=len(layout.WINDOW_METRICS))


def encoded(start: int, metrics: dict) -> bytes:
    return layout.encode_member(start, {
        metric: layout.WindowAggregate(start, n, value, value, value, last,
                                       None if ts is None else start + ts)
        for metric, (n, value, last, ts) in metrics.items()}).encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**45), 2**45), windows), max_size=40))
def test_members_written_by_encode_member_read_as_decode_member_reads_them(members):
    raw = [encoded(start, metrics) for start, metrics in members]
    assert columns(raw) == decoded(raw)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**40), windows), max_size=30))
def test_members_written_by_the_merge_read_as_decode_member_reads_them(members):
    rows = [{"series": s, "metric": layout.METRIC_INDEX[metric], "start": start * 10_000, "n": n,
             "sum": value, "min": value, "max": value, "last": last, "last_ts": start * 10_000 + (ts or 0)}
            for s, (start, metrics) in enumerate(members) for metric, (n, value, last, ts) in metrics.items()]
    raw = [m.encode() for m in member_column(pa.Table.from_pylist(rows, schema=SCHEMA))["member"].to_pylist()]
    assert len(raw) == len(members)
    assert columns(raw) == decoded(raw)
    others = ("record_count", "invalid_records")
    assert columns(raw, others) == decoded(raw, others)


def damaged(rng: random.Random, member: bytes) -> bytes:
    """The member with its layout or a read segment changed: a separator, an index, the start, a field."""
    text = member.decode()
    head, *segments = text.split(";")
    kind = rng.randrange(9)
    if kind == 0 and segments:  # a segment twice
        segments.insert(rng.randrange(len(segments) + 1), rng.choice(segments))
    elif kind == 1 and len(segments) > 1:  # out of order: decode_member takes it
        rng.shuffle(segments)
    elif kind == 2:  # the start
        head = rng.choice(["", "+" + head, " " + head, head + ".0", "0" + head, head + "x", "1e3"])
    elif kind == 3 and segments:  # an index
        at = rng.randrange(len(segments))
        index, rest = segments[at].split(":", 1)
        index = rng.choice(["0" + index, "+" + index, "99", "15", "", index + index, "-1"])
        segments[at] = index + ":" + rest
    elif kind == 4 and segments:  # a field of a segment
        at = rng.randrange(len(segments))
        fields = segments[at].split(":")
        f = rng.randrange(1, len(fields))
        fields[f] = rng.choice(["", "0", "-1", "+7", "1.2.3", "nan", "NaN", "inf", "1_0", " 5", "5 ", "1e5",
                                "-0", "0x10", "9" * 30, fields[f] + ".5", "e", "--1", ".5", "5."])
        segments[at] = ":".join(fields)
    elif kind == 5 and segments:  # a field too many or too few
        at = rng.randrange(len(segments))
        fields = segments[at].split(":")
        segments[at] = ":".join(fields[:-1] if rng.random() < 0.5 else fields + ["1"])
    elif kind == 6:  # a separator dropped or added
        seps = [i for i, c in enumerate(text) if c in ":;"]
        at = rng.choice(seps)
        changed = text[:at] + text[at + 1:] if rng.random() < 0.5 else text[:at] + text[at] + text[at:]
        return changed.encode()
    elif kind == 7:  # cut short
        return text[:rng.randrange(len(text) + 1)].encode()
    else:  # no segment
        segments = []
    return ";".join([head, *segments]).encode()


def read_only_faults(members: list[bytes]) -> list[bytes]:
    """Members but those whose only fault is in another metric's fields: the one thing the columnar read
    leaves unseen (tested apart below)."""
    read = {str(layout.METRIC_INDEX[m]) for m in READ}
    kept = []
    for member in members:
        head, *segments = member.decode().split(";")
        mended = [s if s.split(":")[0] in read else s.split(":")[0] + ":1:1:1:1:1:1" for s in segments]
        try:
            layout.decode_member(member)
        except ValueError:
            try:
                layout.decode_member(";".join([head, *mended]))
                continue
            except ValueError:
                pass
        kept.append(member)
    return kept


@pytest.mark.parametrize("seed", range(20))
def test_damaged_members_read_as_decode_member_reads_them(seed: int):
    rng = random.Random(seed)
    raw = []
    for k in range(200):
        start = rng.randrange(2**40) * 10_000
        metrics = {m: (float(rng.randint(1, 9)), float(rng.randint(0, 99)),
                       rng.choice([float(k), 2.0**53 + 2, 0.5]), rng.choice([None, rng.randrange(10_000)]))
                   for m in rng.sample(layout.WINDOW_METRICS, rng.randint(1, 8))}
        member = encoded(start, metrics)
        raw.append(damaged(rng, member) if rng.random() < 0.5 else member)
    raw = read_only_faults(raw)
    got, expected = columns(raw), decoded(raw)
    assert got == expected
    assert expected[1] and any(expected[0].values())  # both kinds are there


@pytest.mark.parametrize(("other", "seen"), [(b"0:1:1.2.3:1:1:1:10001", False), (b"0:0:1:1:1:1:10001", False),
                                             (b"0:1:1:1:10001", True), (b"0:1:1:1:1::1:10001", True)])
def test_a_fault_in_the_fields_of_a_metric_not_read_is_seen_by_its_count_of_fields(other: bytes, seen: bool):
    member = b"10000;" + other + b";5:1:7:7:7:7:10002"
    with pytest.raises(ValueError):
        layout.decode_member(member)
    found, refused = member_lasts([member], READ)
    assert bool(refused) == seen
    assert found["source_end_offset"].last.tolist() == ([] if seen else [7.0])


def test_str_members_and_none():
    member = encoded(20_000, {"records_lag": (1.0, 3.0, 3.0, 5)})
    found, refused = member_lasts([member.decode()], READ)
    lag = found["records_lag"]
    assert lag.start.tolist() == [20_000] and lag.last_ts.tolist() == [20_005]
    found, refused = member_lasts([], READ)
    assert all(not len(f.member) for f in found.values()) and not refused
    assert math.isnan(member_lasts([b"0;4:1:1:1:1:nan:0"], READ)[0]["records_lag"].last[0])
    assert np.array_equal(member_lasts([b"0;4:1:1:1:1:nan:0", b";"], READ)[0]["records_lag"].member, [0])
