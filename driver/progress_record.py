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

from contract.kafka_names import check_alias, check_topic
from contract.untrusted import long, parse_json

CONNECTOR_NAME: Final = "MirrorSourceConnector"
# Kafka Connect's default offset.storage.partitions; the producer hashes keys with murmur2 like Java's.
PROGRESS_TOPIC_PARTITIONS: Final = 25
PROGRESS_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact"}
# Caps of what a reader takes from the topic, far above a real record (a 249-character topic name makes
# a key of ~330 bytes). Other connectors' keys share the topic, so the key cap is generous.
MAX_KEY_BYTES: Final = 1024
MAX_VALUE_BYTES: Final = 256


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
    """The source partition of a MirrorSourceConnector key; None for other connectors' keys.

    Raises ValueError (``contract.untrusted.Rejected`` among them) naming what is wrong."""
    if key is None:
        raise ValueError("progress record without a key")
    decoded = parse_json(key, "progress key")
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], dict)):
        raise ValueError(f"progress key is not [connector, partition]: {key[:200]!r}")
    connector, partition_map = decoded
    if connector != CONNECTOR_NAME or "cluster" not in partition_map:
        return None
    cluster, topic, partition = (partition_map.get(f) for f in ("cluster", "topic", "partition"))
    if not (isinstance(cluster, str) and isinstance(topic, str) and isinstance(partition, int)):
        raise ValueError(f"progress key lacks cluster/topic/partition: {key[:200]!r}")
    return SourcePartition(check_alias(cluster, "progress key cluster"),
                           check_topic(topic, "progress key topic"),
                           long(partition, "progress key partition", 0, 2**31 - 1))


def decode_value(value: bytes | None) -> int | None:
    """The last replicated offset, None for a tombstone (progress forgotten)."""
    if value is None:
        return None
    decoded = parse_json(value, "progress value")
    offset = decoded.get("offset") if isinstance(decoded, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise ValueError(f"progress value has no integer offset: {value[:200]!r}")
    # A seek to offset + 1 must fit Kafka's INT64; -1 is what Connect writes for "nothing yet".
    return long(offset, "progress value offset", -1, 2**63 - 2)


def resume_offset(last_replicated: int | None) -> int | None:
    """Where to start a partition: stored offset + 1; None (auto.offset.reset) when missing or < 0."""
    if last_replicated is None or last_replicated < 0:
        return None
    return last_replicated + 1
