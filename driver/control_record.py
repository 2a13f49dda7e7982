"""srm-control allow/deny lists: the record format of `srm-control.internal` and its live reader.

Topic: ``srm-control.internal`` (``contract.replication_policy.CONTROL_TOPIC``) in each target
cluster, compacted, one partition, every record on partition 0; replication factor
``control.topic.replication.factor`` (default 3; -1, or a cluster with fewer brokers, gets the
broker's default).

One record per list entry, so two operators editing different entries at the same time never overwrite
each other, and compaction keeps exactly the latest state of every entry:

- key: UTF-8 JSON array without spaces, ``[1,"<source>","<target>","<kind>","<list>","<entry>"]``,
  e.g. ``[1,"east","west","topics","allow","orders"]``. ``1`` is the format version, kind is
  ``topics`` or ``groups``, list is ``allow`` or ``deny``, the entry is a topic or group name or a
  regex matching whole names. Compaction compares key bytes, so only this canonical form (as
  ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` writes it) is accepted when read:
  a key spelled differently could never be removed by a tombstone of the canonical key.
- value: UTF-8 JSON object ``{"v":1,"ts":<epoch ms of the edit>}``: the entry is on the list.
  Readers accept any object whose ``v`` is an integer >= 1, for later additions.
- tombstone (null value): the entry is off the list.

Readers apply the records in offset order, the last record of a key wins. A record that does not
decode is logged with its topic, partition and offset and skipped (``driver.control_lists``): a bad
record must not stop the replications that read the lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from contract.untrusted import Rejected, parse_json

FORMAT_VERSION: Final = 1
KINDS: Final = ("topics", "groups")
LISTS: Final = ("allow", "deny")
PARTITION: Final = 0
TOPIC_CONFIGS: Final = {"cleanup.policy": "compact"}
# Caps of what a reader takes from the topic, far above any real record: a key holds six short
# strings, a value {"v":1,"ts":...}. Anyone who may produce to the topic could send more.
MAX_KEY_BYTES: Final = 4096
MAX_VALUE_BYTES: Final = 256
MAX_NAME_CHARS: Final = 1024  # an entry is a topic/group name or a pattern; neither needs more


class ControlFormatError(ValueError):
    """A control record (or a would-be record) that does not follow the format."""


@dataclass(frozen=True, order=True)
class ControlEntry:
    """One entry of one list of one replication: the identity of a control record (its key)."""

    source: str
    target: str
    kind: str
    list_name: str
    name: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ControlFormatError(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.list_name not in LISTS:
            raise ControlFormatError(f"list {self.list_name!r} is not one of {', '.join(LISTS)}")
        for field, value in (("source", self.source), ("target", self.target), ("entry", self.name)):
            if not isinstance(value, str) or not value.strip() or value != value.strip():
                raise ControlFormatError(f"{field} {value!r} must be a non-empty string without "
                                         f"surrounding blanks")
            if len(value) > MAX_NAME_CHARS:
                raise ControlFormatError(f"{field} of {len(value)} characters is longer than "
                                         f"{MAX_NAME_CHARS}")

    def encode_key(self) -> bytes:
        fields = [FORMAT_VERSION, self.source, self.target, self.kind, self.list_name, self.name]
        return _canonical_json(fields)

    @classmethod
    def decode_key(cls, key: bytes | None) -> ControlEntry:
        fields = _json(key, "key")
        if not (isinstance(fields, list) and len(fields) == 6 and fields[0] == FORMAT_VERSION
                and all(isinstance(f, str) for f in fields[1:])):  # fmt: skip
            raise ControlFormatError(f"key is not [{FORMAT_VERSION},source,target,kind,list,entry]: "
                                     f"{shown(key)}")
        entry = cls(*fields[1:])
        if entry.encode_key() != key:
            raise ControlFormatError(f"key is not in the canonical form: {shown(key)}")
        return entry


@dataclass(frozen=True)
class ControlChange:
    """An entry put on (``present``) or taken off its list; ``ts_ms`` is when the edit was made."""

    entry: ControlEntry
    present: bool
    ts_ms: int = 0

    def encode_value(self) -> bytes | None:
        return _canonical_json({"v": FORMAT_VERSION, "ts": self.ts_ms}) if self.present else None


def decode_change(key: bytes | None, value: bytes | None) -> ControlChange:
    """The change a control record makes; raises ControlFormatError naming what is wrong."""
    entry = ControlEntry.decode_key(key)
    if value is None:
        return ControlChange(entry, present=False)
    body = _json(value, "value")
    version = body.get("v") if isinstance(body, dict) else None
    if not (isinstance(version, int) and not isinstance(version, bool) and version >= FORMAT_VERSION):
        raise ControlFormatError(f'value is not {{"v":{FORMAT_VERSION},"ts":...}}: {shown(value)}')
    ts = body.get("ts")
    in_range = isinstance(ts, int) and not isinstance(ts, bool) and 0 <= ts < 2**63
    return ControlChange(entry, present=True, ts_ms=ts if in_range else 0)


def _canonical_json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json(raw: bytes | None, part: str) -> Any:
    if raw is None:
        raise ControlFormatError(f"{part} is missing (null)")
    try:
        return parse_json(raw, part)  # orjson: deep nesting is an error here, not a RecursionError
    except Rejected as exc:
        raise ControlFormatError(f"{part} is not UTF-8 JSON ({exc}): {shown(raw)}") from None


def shown(raw: bytes | None, limit: int = 120) -> str:
    return "null" if raw is None else repr(raw[:limit]) + ("..." if len(raw) > limit else "")
