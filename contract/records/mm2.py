"""MirrorMaker 2 internal-topic records: Heartbeat, Checkpoint and OffsetSync, byte-exact.

MM2 compatible: fields use Kafka's protocol types, written back to back without tags: STRING is an
INT16 length followed by UTF-8 bytes, integers are big-endian. Heartbeat and Checkpoint values start
with an INT16 version header; OffsetSync has none. Readers ignore trailing bytes, as Java's
``Schema.read`` does, so a field appended by a later MM2 version does not break us.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Final

LOG = logging.getLogger(__name__)

RECORD_PARTITION: Final[int] = 0
"""Partition every Heartbeat, Checkpoint and OffsetSync record is written to and read from.

MM2 compatible: ``heartbeats``, ``<src>.checkpoints.internal`` and ``mm2-offset-syncs.<alias>.internal``
are single-partition compacted topics, and MM2's readers only look at partition 0.
"""

HEARTBEAT_VERSION: Final[int] = 0
CHECKPOINT_VERSION: Final[int] = 0

_STRING_MAX_BYTES: Final[int] = 0x7FFF
# Caps of what readers take from these topics (anyone with Produce rights may write to them): an offset
# sync holds a topic name and two offsets; a checkpoint a group id and a topic name (STRINGs, 32 KiB
# at most), and its metadata STRING.
OFFSET_SYNC_MAX_KEY_BYTES: Final[int] = 512
OFFSET_SYNC_MAX_VALUE_BYTES: Final[int] = 1024
CHECKPOINT_MAX_KEY_BYTES: Final[int] = 2 * (_STRING_MAX_BYTES + 2) + 4
CHECKPOINT_MAX_VALUE_BYTES: Final[int] = _STRING_MAX_BYTES + 2 + 18
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")


class WireFormatError(ValueError):
    """Bytes that are not a valid MM2 record, or a record that cannot be encoded."""


class _Reader:
    """Sequential reader over one key or value; every failure names the record part and the field."""

    def __init__(self, data: bytes | None, part: str) -> None:
        if data is None:
            raise WireFormatError(f"{part}: missing (null) bytes")
        self._data = memoryview(bytes(data))
        self._pos = 0
        self._part = part

    def _take(self, size: int, field: str) -> memoryview:
        left = len(self._data) - self._pos
        if size > left:
            raise WireFormatError(
                f"{self._part}: truncated at byte {self._pos} reading {field}"
                f" (need {size} bytes, {left} left)"
            )
        chunk = self._data[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def int16(self, field: str) -> int:
        return int(_INT16.unpack(self._take(_INT16.size, field))[0])

    def int32(self, field: str) -> int:
        return int(_INT32.unpack(self._take(_INT32.size, field))[0])

    def int64(self, field: str) -> int:
        return int(_INT64.unpack(self._take(_INT64.size, field))[0])

    def string(self, field: str) -> str:
        length = self.int16(f"{field} length")
        if length < 0:
            # MM2 compatible: STRING is not nullable, Java rejects a negative length too.
            raise WireFormatError(f"{self._part}: {field} has negative length {length}")
        raw = self._take(length, field)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise WireFormatError(f"{self._part}: {field} is not valid UTF-8 ({exc.reason})") from exc

    def version(self, expected: int) -> int:
        version = self.int16("version")
        if version < 0:
            raise WireFormatError(f"{self._part}: negative version {version}")
        if version != expected:
            # Newer MM2 versions may only append fields, which the v0 layout reads past; Java with its
            # (default) disabled assertions reads them the same way.
            LOG.debug("%s: version %d read with the v%d layout", self._part, version, expected)
        return version


def _pack(codec: struct.Struct, value: int, field: str) -> bytes:
    try:
        return codec.pack(value)
    except struct.error as exc:
        raise WireFormatError(f"{field}: {value!r} does not fit in {codec.size * 8} bits") from exc


def _string(value: str, field: str) -> bytes:
    try:
        raw = value.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as exc:
        raise WireFormatError(f"{field}: {value!r} cannot be encoded as UTF-8") from exc
    if len(raw) > _STRING_MAX_BYTES:
        raise WireFormatError(f"{field}: {len(raw)} UTF-8 bytes, more than the {_STRING_MAX_BYTES} allowed")
    return _INT16.pack(len(raw)) + raw


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat of the flow ``source -> target``, written to the target's ``heartbeats`` topic.

    The record timestamp equals ``timestamp`` (epoch ms).
    """

    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def encode_key(self) -> bytes:
        return _string(self.source_cluster_alias, "sourceClusterAlias") + _string(
            self.target_cluster_alias, "targetClusterAlias"
        )

    def encode_value(self) -> bytes:
        return _pack(_INT16, HEARTBEAT_VERSION, "version") + _pack(_INT64, self.timestamp, "timestamp")

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Heartbeat:
        key_reader = _Reader(key, "Heartbeat key")
        source = key_reader.string("sourceClusterAlias")
        target = key_reader.string("targetClusterAlias")
        value_reader = _Reader(value, "Heartbeat value")
        value_reader.version(HEARTBEAT_VERSION)
        return cls(source, target, value_reader.int64("timestamp"))


@dataclass(frozen=True)
class Checkpoint:
    """A consumer group's committed offset translated to the target, in ``<src>.checkpoints.internal``.

    ``topic`` is the downstream (remote) topic name, e.g. ``A.t``; ``metadata`` is the upstream commit
    metadata, ``""`` when there was none.
    """

    consumer_group_id: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def encode_key(self) -> bytes:
        return (
            _string(self.consumer_group_id, "group")
            + _string(self.topic, "topic")
            + _pack(_INT32, self.partition, "partition")
        )

    def encode_value(self) -> bytes:
        return (
            _pack(_INT16, CHECKPOINT_VERSION, "version")
            + _pack(_INT64, self.upstream_offset, "upstreamOffset")
            + _pack(_INT64, self.downstream_offset, "offset")
            + _string(self.metadata, "metadata")
        )

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Checkpoint:
        key_reader = _Reader(key, "Checkpoint key")
        group = key_reader.string("group")
        topic = key_reader.string("topic")
        partition = key_reader.int32("partition")
        value_reader = _Reader(value, "Checkpoint value")
        value_reader.version(CHECKPOINT_VERSION)
        upstream = value_reader.int64("upstreamOffset")
        downstream = value_reader.int64("offset")
        metadata = value_reader.string("metadata")
        return cls(group, topic, partition, upstream, downstream, metadata)


@dataclass(frozen=True)
class OffsetSync:
    """Upstream -> downstream offset mapping of a source partition, in ``mm2-offset-syncs.<alias>.internal``.

    ``topic`` is the upstream (source) topic name. The value has no version header (MM2 compatible).
    """

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def encode_key(self) -> bytes:
        return _string(self.topic, "topic") + _pack(_INT32, self.partition, "partition")

    def encode_value(self) -> bytes:
        return _pack(_INT64, self.upstream_offset, "upstreamOffset") + _pack(
            _INT64, self.downstream_offset, "offset"
        )

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> OffsetSync:
        key_reader = _Reader(key, "OffsetSync key")
        topic = key_reader.string("topic")
        partition = key_reader.int32("partition")
        value_reader = _Reader(value, "OffsetSync value")
        upstream = value_reader.int64("upstreamOffset")
        return cls(topic, partition, upstream, value_reader.int64("offset"))
