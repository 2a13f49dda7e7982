"""Random and adversarial bytes into every decoder of a record we read from Kafka (hypothesis).

The property: a decoder returns a value or raises its format's ValueError, nothing else (no
RecursionError, TypeError, OverflowError...), and through RecordGuard.read nothing escapes at all:
every record is accepted or counted as rejected. The aggregator's Arrow reader gives one row per
record, valid or `invalid`, with finite numbers only.
"""

from __future__ import annotations

import math
import os

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.raw_records import flat_table
from clients.record_guard import RecordGuard
from contract.records import advertisement, raw_metrics
from contract.records.mm2 import Checkpoint, Heartbeat, OffsetSync
from driver import control_record, progress_record

EXAMPLES = int(os.environ.get("SRM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_SAMPLES = [
    raw_metrics.encode(raw_metrics.PartitionMetrics(1, 5000, "east", "west", "east.t", "t", 0, 1, 2))[1],
    control_record.ControlEntry("east", "west", "topics", "allow", "orders").encode_key(),
    b'{"v":1,"ts":5}',
    progress_record.encode_key(progress_record.SourcePartition("east", "orders", 3)),
    progress_record.encode_value(41),
    Checkpoint("g", "east.t", 0, 10, 9, "meta").encode_key(),
    Checkpoint("g", "east.t", 0, 10, 9, "meta").encode_value(),
    OffsetSync("t", 0, 10, 9).encode_key(),
    OffsetSync("t", 0, 10, 9).encode_value(),
    *advertisement.encode(advertisement.Advertisement("http", "srm.example.com", 6670, "", "west", "east",
                                                      "1", 1_700_000_000_000, 10.0))[:2],
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid encoding with bytes flipped, cut or appended."""
    data = bytearray(draw(st.sampled_from(_SAMPLES)))
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["flip", "cut", "append"]))
        if action == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif action == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


_ADVERSARIAL = st.one_of(
    st.integers(1, 5000).map(lambda n: b"[" * n),
    st.integers(1, 3000).map(lambda n: b'{"a":' * n),
    st.just(b"9" * 5000), st.just(b"NaN"), st.just(b"-Infinity"), st.just(b"1e999"),
    st.just(b'{"v":1,"offset":1e999}'), st.just(b'{"offset":' + b"9" * 40 + b"}"),
    st.just(b"\xff\xfe\xfd"), st.just(b'"\\ud800"'),
    st.integers(1, 3000).map(lambda n: _SAMPLES[-1][:10] + b"[" * n),  # an advertisement value's JSON
    st.sampled_from(["*", "t" * 300, "..", ""]).map(lambda name: progress_record.encode_key(
        progress_record.SourcePartition("e", name, 0))),
)
RECORD_BYTES = st.one_of(st.binary(max_size=4096), mutated(), _ADVERSARIAL)
MAYBE = st.one_of(st.none(), RECORD_BYTES)


def _raw_metrics(key: bytes | None, value: bytes | None) -> object:
    return raw_metrics.decode(value if value is not None else b"")


DECODERS = {
    "raw metrics": (_raw_metrics, raw_metrics.RawMetricsError),
    "control": (control_record.decode_change, control_record.ControlFormatError),
    "progress key": (lambda key, value: progress_record.decode_key(key), ValueError),
    "progress value": (lambda key, value: progress_record.decode_value(value), ValueError),
    "heartbeat": (Heartbeat.decode, ValueError),
    "checkpoint": (Checkpoint.decode, ValueError),
    "offset sync": (OffsetSync.decode, ValueError),
    "advertisement": (advertisement.decode, advertisement.AdvertisementError),
}


class Record:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return "fuzz"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0


@FUZZ
@given(key=st.one_of(MAYBE, st.just(_SAMPLES[-2])), value=MAYBE)
def test_decoders_raise_only_their_format_error(key: bytes | None, value: bytes | None) -> None:
    for name, (decode, error) in DECODERS.items():
        try:
            decode(key, value)
        except error:
            pass
        except Exception as exc:  # the failure this test looks for
            raise AssertionError(f"{name} decoder raised {type(exc).__name__}: {exc}") from exc


@FUZZ
@given(records=st.lists(st.tuples(MAYBE, MAYBE), max_size=8))
def test_nothing_escapes_the_guard(records: list[tuple[bytes | None, bytes | None]]) -> None:
    for name, (decode, _) in DECODERS.items():
        guard = RecordGuard(name, max_key_bytes=2048, max_value_bytes=4096)
        for key, value in records:
            guard.read(Record(key, value), decode)
        assert guard.accepted + guard.rejected == len(records)


@FUZZ
@given(values=st.lists(st.one_of(st.none(), RECORD_BYTES, st.sampled_from(_SAMPLES[:1])), max_size=12))
def test_flat_table_gives_one_row_per_record_valid_or_invalid(values: list[bytes | None]) -> None:
    kafka = pa.table({"topic": ["srm-metrics.east.internal"] * len(values),
                      "partition": pa.array([0] * len(values), pa.int32()),
                      "offset": pa.array(range(len(values)), pa.int64()),
                      "kafka_ts": pa.array([1] * len(values), pa.int64()),
                      "value": pa.array(values, pa.binary())})
    table = flat_table(kafka, now_ms=1_000)
    assert table.num_rows == len(values)
    assert set(table["kind"].to_pylist()) <= {"partition", "group", "replication", "invalid"}
    for column in table.column_names:
        if pa.types.is_floating(table[column].type):
            finite = pc.fill_null(pc.is_finite(table[column]), True)
            assert all(finite.to_pylist()), column
    assert all(math.isfinite(ts) for ts in table["ts"].to_pylist() if ts is not None)
