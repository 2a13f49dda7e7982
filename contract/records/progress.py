"""The Kafka Connect progress record of `mm2-offsets.<source>.internal` (MirrorSourceConnector's).

The key is the JSON array `["MirrorSourceConnector",{"cluster":"<src>","partition":p,"topic":"t"}]` and
the value `{"offset":N}`, N being the offset of the last replicated record; a restart seeks to N + 1.
Connect looks offsets up by the raw key bytes, so the field order and the compact separators are part
of the format. Other connectors' keys (checkpoints, heartbeats) may share the topic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

CONNECTOR_NAME: Final = "MirrorSourceConnector"
# Kafka Connect's default offset.storage.partitions; the producer hashes keys with murmur2 like Java's.
PROGRESS_TOPIC_PARTITIONS: Final = 25
PROGRESS_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class SourcePartition:
    """A Connect source partition of MirrorSourceConnector: one topic-partition of the source cluster."""

    cluster: str
    topic: str
    partition: int


def encode_key(source: SourcePartition) -> bytes:
    # Field order of Java's HashMap for these three keys (what MM2 writes): cluster, partition, topic.
    partition_map = {"cluster": source.cluster, "partition": source.partition, "topic": source.topic}
    return json.dumps([CONNECTOR_NAME, partition_map], separators=(",", ":"), ensure_ascii=False).encode()


def encode_value(last_replicated_offset: int) -> bytes:
    return json.dumps({"offset": last_replicated_offset}, separators=(",", ":")).encode()


def decode_key(key: bytes | None) -> SourcePartition | None:
    """The source partition of a MirrorSourceConnector key; None for other connectors' keys."""
    if key is None:
        raise ValueError("progress record without a key")
    try:
        decoded = json.loads(key)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"progress key is not JSON: {exc}") from None
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], dict)):
        raise ValueError(f"progress key is not [connector, partition]: {key[:200]!r}")
    connector, partition_map = decoded
    if connector != CONNECTOR_NAME or "cluster" not in partition_map:
        return None
    cluster, topic, partition = (partition_map.get(f) for f in ("cluster", "topic", "partition"))
    if not (isinstance(cluster, str) and isinstance(topic, str) and isinstance(partition, int)):
        raise ValueError(f"progress key lacks cluster/topic/partition: {key[:200]!r}")
    return SourcePartition(cluster, topic, partition)


def decode_value(value: bytes | None) -> int | None:
    """The last replicated offset, None for a tombstone (progress forgotten)."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"progress value is not JSON: {exc}") from None
    offset = decoded.get("offset") if isinstance(decoded, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise ValueError(f"progress value has no integer offset: {value[:200]!r}")
    return offset


def resume_offset(last_replicated: int | None) -> int | None:
    """Where to start a partition: stored offset + 1; None (auto.offset.reset) when missing or < 0."""
    if last_replicated is None or last_replicated < 0:
        return None
    return last_replicated + 1
