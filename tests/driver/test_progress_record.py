"""The MM2 Connect offset-store format of replication progress (pure codec, no broker)."""

from __future__ import annotations

import re

import pytest

from driver.progress_record import (
    SourcePartition,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    resume_offset,
)


def test_key_has_mm2_bytes_and_field_order() -> None:
    key = encode_key(SourcePartition("east", "orders", 3))
    assert key == b'["MirrorSourceConnector",{"cluster":"east","partition":3,"topic":"orders"}]'


def test_value_is_the_last_replicated_offset() -> None:
    assert encode_value(41) == b'{"offset":41}'


def test_round_trip() -> None:
    source = SourcePartition("us-west.1", "a.b_c-d", 0)
    assert decode_key(encode_key(source)) == source
    assert decode_value(encode_value(0)) == 0


def test_reads_what_kafka_connect_wrote_with_other_spacing() -> None:
    # JSON equality, not bytes, decides reading: any writer's spacing is accepted.
    key = b'["MirrorSourceConnector", {"topic": "t", "partition": 1, "cluster": "A"}]'
    assert decode_key(key) == SourcePartition("A", "t", 1)
    assert decode_value(b'{"offset": 7}') == 7


def test_other_connectors_keys_are_not_source_progress() -> None:
    checkpoint_key = b'["MirrorCheckpointConnector",{"partition":0,"topic":"t","group":"g"}]'
    heartbeat_key = b'["MirrorHeartbeatConnector",{"sourceClusterAlias":"a","targetClusterAlias":"b"}]'
    assert decode_key(checkpoint_key) is None
    assert decode_key(heartbeat_key) is None


def test_tombstone_forgets_progress() -> None:
    assert decode_value(None) is None


@pytest.mark.parametrize("key, problem", [
    (None, "without a key"),
    (b"not json", "not JSON"),
    (b'{"cluster":"a"}', re.escape("not [connector, partition]")),
    (b'["MirrorSourceConnector",{"cluster":"a","topic":"t","partition":"0"}]', "lacks cluster"),
    (b"\xff\xfe", "not JSON"),
])
def test_bad_keys_are_named(key: bytes | None, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_key(key)


@pytest.mark.parametrize("value", [b"[]", b'{"offset":"12"}', b'{"offset":true}', b'{"position":1}', b"{"])
def test_bad_values_are_named(value: bytes) -> None:
    with pytest.raises(ValueError, match="progress value"):
        decode_value(value)


@pytest.mark.parametrize("stored, start", [(None, None), (-1, None), (0, 1), (99, 100)])
def test_resume_after_the_last_replicated_record(stored: int | None, start: int | None) -> None:
    assert resume_offset(stored) == start
