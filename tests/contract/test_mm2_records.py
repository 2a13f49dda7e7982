"""MM2 internal-topic records: golden bytes from the worked examples, round trips, malformed input."""

from __future__ import annotations

import pytest

from contract.records.mm2 import RECORD_PARTITION, Checkpoint, Heartbeat, OffsetSync, WireFormatError

HEARTBEAT = Heartbeat("A", "B", 1_700_000_000_000)
HEARTBEAT_KEY = bytes.fromhex("0001 41 0001 42")
HEARTBEAT_VALUE = bytes.fromhex("0000 000001 8bcf e568 00")

CHECKPOINT = Checkpoint("g", "A.t", 0, 1000, 990, "")
CHECKPOINT_KEY = bytes.fromhex("0001 67 0003 412e74 00000000")
CHECKPOINT_VALUE = bytes.fromhex("0000 00000000000003e8 00000000000003de 0000")

OFFSET_SYNC = OffsetSync("t", 3, 1000, 990)
OFFSET_SYNC_KEY = bytes.fromhex("0001 74 00000003")
OFFSET_SYNC_VALUE = bytes.fromhex("00000000000003e8 00000000000003de")

GOLDEN = [
    (HEARTBEAT, HEARTBEAT_KEY, HEARTBEAT_VALUE),
    (CHECKPOINT, CHECKPOINT_KEY, CHECKPOINT_VALUE),
    (OFFSET_SYNC, OFFSET_SYNC_KEY, OFFSET_SYNC_VALUE),
]
GOLDEN_IDS = ["heartbeat", "checkpoint", "offset-sync"]


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN, ids=GOLDEN_IDS)
def test_encodes_the_worked_examples_byte_for_byte(record, key, value):
    assert record.encode_key() == key
    assert record.encode_value() == value


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN, ids=GOLDEN_IDS)
def test_decodes_the_worked_examples(record, key, value):
    assert type(record).decode(key, value) == record


def test_value_sizes_match_mm2():
    assert len(HEARTBEAT_VALUE) == 10
    assert len(CHECKPOINT_VALUE) == 20
    assert len(OFFSET_SYNC_VALUE) == 16


def test_records_go_to_partition_zero():
    assert RECORD_PARTITION == 0


@pytest.mark.parametrize(
    "record",
    [
        Heartbeat("us-west", "us-east", 0),
        Heartbeat("", "é-ü-日本", -1),
        Checkpoint("group-ü", "us-west.orders", 2**31 - 1, 2**63 - 1, -(2**63), "meta data ✓"),
        Checkpoint("g", "B.A.t", 0, -1, 0),
        OffsetSync("orders", 0, 0, 0),
        OffsetSync("t" * 249, -(2**31), 123_456_789_012, 98_765),
    ],
)
def test_round_trip(record):
    assert type(record).decode(record.encode_key(), record.encode_value()) == record


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN, ids=GOLDEN_IDS)
def test_trailing_bytes_are_ignored_like_java_schema_read(record, key, value):
    assert type(record).decode(key + b"\x00\x07extra", value + b"\xff\xff") == record


@pytest.mark.parametrize(
    ("record_type", "value"),
    [(Heartbeat, HEARTBEAT_VALUE), (Checkpoint, CHECKPOINT_VALUE)],
    ids=["heartbeat", "checkpoint"],
)
def test_a_newer_version_is_read_with_the_v0_layout(record_type, value):
    key = HEARTBEAT_KEY if record_type is Heartbeat else CHECKPOINT_KEY
    newer = b"\x00\x01" + value[2:] + b"\x00\x00\x00\x2a"
    assert record_type.decode(key, newer) == record_type.decode(key, value)


@pytest.mark.parametrize(
    ("record_type", "key", "value"),
    [(Heartbeat, HEARTBEAT_KEY, HEARTBEAT_VALUE), (Checkpoint, CHECKPOINT_KEY, CHECKPOINT_VALUE)],
    ids=["heartbeat", "checkpoint"],
)
def test_negative_version_is_rejected(record_type, key, value):
    with pytest.raises(WireFormatError, match="negative version -1"):
        record_type.decode(key, b"\xff\xff" + value[2:])


def _truncations(data: bytes) -> list[bytes]:
    return [data[:size] for size in range(len(data))]


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN, ids=GOLDEN_IDS)
def test_every_truncated_key_raises_wire_format_error(record, key, value):
    for truncated in _truncations(key):
        with pytest.raises(WireFormatError, match="key: truncated"):
            type(record).decode(truncated, value)


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN, ids=GOLDEN_IDS)
def test_every_truncated_value_raises_wire_format_error(record, key, value):
    for truncated in _truncations(value):
        with pytest.raises(WireFormatError, match="value: truncated"):
            type(record).decode(key, truncated)


def test_truncation_message_names_record_field_and_position():
    with pytest.raises(WireFormatError) as caught:
        Checkpoint.decode(CHECKPOINT_KEY[:-2], CHECKPOINT_VALUE)
    assert str(caught.value) == "Checkpoint key: truncated at byte 8 reading partition (need 4 bytes, 2 left)"


def test_wire_format_error_is_a_value_error():
    with pytest.raises(ValueError):
        OffsetSync.decode(b"", b"")


@pytest.mark.parametrize("record_type", [Heartbeat, Checkpoint, OffsetSync])
def test_null_key_or_value_is_a_wire_format_error(record_type):
    with pytest.raises(WireFormatError, match="key: missing"):
        record_type.decode(None, b"\x00" * 32)
    key = {Heartbeat: HEARTBEAT_KEY, Checkpoint: CHECKPOINT_KEY, OffsetSync: OFFSET_SYNC_KEY}[record_type]
    with pytest.raises(WireFormatError, match="value: missing"):
        record_type.decode(key, None)


def test_negative_string_length_is_rejected():
    with pytest.raises(WireFormatError, match="topic has negative length -2"):
        OffsetSync.decode(b"\xff\xfe", OFFSET_SYNC_VALUE)


def test_invalid_utf8_is_rejected():
    with pytest.raises(WireFormatError, match="group is not valid UTF-8"):
        Checkpoint.decode(b"\x00\x01\xff" + CHECKPOINT_KEY[3:], CHECKPOINT_VALUE)


def test_decode_accepts_bytearray_and_memoryview():
    assert Heartbeat.decode(bytearray(HEARTBEAT_KEY), memoryview(HEARTBEAT_VALUE)) == HEARTBEAT


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (OffsetSync("t", 2**31, 0, 0), "partition"),
        (OffsetSync("t", 0, 2**63, 0), "upstreamOffset"),
        (Checkpoint("g", "t", 0, 0, -(2**63) - 1), "offset"),
        (Heartbeat("A", "B", 2**64), "timestamp"),
    ],
)
def test_out_of_range_integers_raise_wire_format_error(record, field):
    with pytest.raises(WireFormatError, match=field):
        record.encode_key() + record.encode_value()


def test_string_longer_than_int16_is_rejected_on_write():
    assert len(OffsetSync("t" * 32767, 0, 0, 0).encode_key()) == 2 + 32767 + 4
    with pytest.raises(WireFormatError, match="32768 UTF-8 bytes"):
        OffsetSync("t" * 32768, 0, 0, 0).encode_key()


def test_multibyte_characters_count_in_utf8_bytes():
    encoded = Heartbeat("ü", "B", 0).encode_key()
    assert encoded[:4] == b"\x00\x02\xc3\xbc"


def test_unencodable_string_raises_wire_format_error():
    with pytest.raises(WireFormatError, match="sourceClusterAlias"):
        Heartbeat("\udc80", "B", 0).encode_key()
