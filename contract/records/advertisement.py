"""The service advertisement record in a cluster's ``heartbeats`` topic: the one owner of its format.

A service tells gateways at other sites where its REST API is (SRM convention: protocol, host, port,
root path) by writing this record to the ``heartbeats`` topic of each cluster it targets.

Layout, chosen so MM2's own readers of ``heartbeats`` never break on it:

- header ``srm.record.type = service-advertisement``: what our readers look at first; a record
  without it is an MM2 heartbeat and is not ours;
- key: MM2 Heartbeat key shape, two Kafka protocol STRINGs ``("srm-service:<instance id>",
  <target cluster>)``. The topic is compacted, so the stable instance id keeps the latest
  advertisement of every instance;
- value: the 10-byte MM2 Heartbeat v0 value (INT16 version 0, INT64 timestamp) followed by the
  advertisement as UTF-8 JSON ``{v, protocol, host, port, root_path, target_cluster, site, version,
  ts, interval_s}``.

Why not a bare JSON value with the header as the only marker: Apache's ``MirrorClient`` and
``RemoteClusterUtils`` only list topic names with ``heartbeats`` in them and never read their records,
and MirrorSourceTask copies them as opaque bytes (headers included), but
``Heartbeat.deserializeRecord`` is public API and tools written against MM2 decode every record of the
topic with it, headers unseen. A JSON key (``{"`` read as a 31522-byte STRING length) would throw
there. With the layout above such a reader decodes a well-formed heartbeat (Java's ``Schema.read``
ignores trailing bytes) whose source alias ``srm-service:…`` cannot be a cluster alias, so nothing
crashes and nothing is mistaken for a configured cluster. Replicated copies (``west.heartbeats`` on
another cluster) are not read: gateways read each watched cluster's own ``heartbeats`` only.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from contract.kafka_names import check_alias, check_site
from contract.records.mm2 import Heartbeat, WireFormatError
from contract.untrusted import Rejected, parse_json

LOG = logging.getLogger(__name__)

RECORD_TYPE_HEADER: Final[str] = "srm.record.type"
RECORD_TYPE: Final[bytes] = b"service-advertisement"
FORMAT_VERSION: Final[int] = 1
KEY_PREFIX: Final[str] = "srm-service:"
PROTOCOLS: Final = ("http", "https")

_PREFIX_BYTES: Final[int] = 10  # MM2 Heartbeat v0 value: INT16 version + INT64 timestamp
# Caps of what a reader takes from ``heartbeats`` (anyone who may produce there can write to it): a real
# advertisement is a few hundred bytes.
MAX_KEY_BYTES: Final[int] = 2048
MAX_VALUE_BYTES: Final[int] = 4096
MIN_INTERVAL_S: Final[float] = 0.1
MAX_INTERVAL_S: Final[float] = 3600.0
MAX_VERSION_CHARS: Final[int] = 64
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
_ROOT_PATH = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*")

Headers = Sequence[tuple[str, bytes | str | None]]


class AdvertisementError(ValueError):
    """An advertisement that cannot be built or a record that is not a valid advertisement."""


@dataclass(frozen=True)
class Advertisement:
    """Where one service instance serves its REST API, and for which site and target cluster."""

    protocol: str
    host: str
    port: int
    root_path: str
    target_cluster: str
    site: str
    version: str
    ts: int
    interval_s: float

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise AdvertisementError(problem)

    @property
    def instance_id(self) -> str:
        """Stable per advertised endpoint and site: replicas behind one proxy share it."""
        return f"{self.site}@{self.base_url}"

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}{self.root_path}"


def normalize_root_path(path: str) -> str:
    """``""``, ``"/"`` and ``"srm/"`` become ``""``, ``""`` and ``"/srm"``: joined with ``/v2/...``."""
    stripped = path.strip().strip("/")
    return f"/{stripped}" if stripped else ""


def is_advertisement(headers: Headers | None) -> bool:
    for name, value in headers or ():
        if name == RECORD_TYPE_HEADER:
            raw = value.encode() if isinstance(value, str) else value
            return raw == RECORD_TYPE
    return False


def encode(ad: Advertisement) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Key, value and headers of the record that advertises ``ad``."""
    envelope = Heartbeat(KEY_PREFIX + ad.instance_id, ad.target_cluster, ad.ts)
    body = json.dumps({"v": FORMAT_VERSION, **asdict(ad)}, separators=(",", ":")).encode()
    try:
        key = envelope.encode_key()
    except WireFormatError as exc:
        raise AdvertisementError(f"advertisement key: {exc}") from exc
    return key, envelope.encode_value() + body, [(RECORD_TYPE_HEADER, RECORD_TYPE)]


def decode(key: bytes | None, value: bytes | None) -> Advertisement:
    """The advertisement of a record already known (by its header) to be one."""
    try:
        envelope = Heartbeat.decode(key, value)
    except WireFormatError as exc:
        raise AdvertisementError(f"not an advertisement: {exc}") from exc
    if not envelope.source_cluster_alias.startswith(KEY_PREFIX):
        raise AdvertisementError(f"key does not start with {KEY_PREFIX!r}")
    try:
        # orjson: deep nesting is an error here, not a RecursionError that ends the reader.
        fields = parse_json(bytes(value or b"")[_PREFIX_BYTES:], "advertisement value")
    except Rejected as exc:
        raise AdvertisementError(f"advertisement value is not UTF-8 JSON: {exc}") from None
    ad = _from_fields(fields)
    if envelope.source_cluster_alias != KEY_PREFIX + ad.instance_id:
        raise AdvertisementError(
            f"key names {envelope.source_cluster_alias!r} but the value advertises {ad.instance_id!r}")
    return ad


def read_record(key: bytes | None, value: bytes | None, headers: Headers | None,
                where: str = "heartbeats") -> Advertisement | None:
    """The advertisement in a ``heartbeats`` record; None for MM2 heartbeats and broken records.

    A broken advertisement is logged with the reason and skipped, never fatal: one bad writer must
    not blind a gateway to every other site.
    """
    if not is_advertisement(headers):
        return None
    try:
        return decode(key, value)
    except AdvertisementError as exc:
        LOG.warning("%s: skipped an undecodable service advertisement: %s", where, exc)
        return None


def _from_fields(fields: Any) -> Advertisement:
    if not isinstance(fields, dict):
        raise AdvertisementError("advertisement value is not a JSON object")
    if fields.get("v") != FORMAT_VERSION:
        raise AdvertisementError(f"unsupported advertisement format v={fields.get('v')!r}")
    expected: dict[str, type | tuple[type, ...]] = {
        "protocol": str, "host": str, "port": int, "root_path": str, "target_cluster": str, "site": str,
        "version": str, "ts": int, "interval_s": (int, float)}
    for name, kind in expected.items():
        if name not in fields:
            raise AdvertisementError(f"advertisement lacks {name!r}")
        if not isinstance(fields[name], kind) or isinstance(fields[name], bool):
            raise AdvertisementError(f"advertisement field {name!r} has the wrong type: {fields[name]!r}")
    return Advertisement(**{name: fields[name] for name in expected})


def _problem(ad: Advertisement) -> str | None:
    if ad.protocol not in PROTOCOLS:
        return f"protocol must be one of {', '.join(PROTOCOLS)}, not {ad.protocol!r}"
    if not valid_host(ad.host):
        return f"host {ad.host!r} is neither a DNS name nor an IP address"
    if not 0 < ad.port < 65536:
        return f"port {ad.port!r} is not between 1 and 65535"
    if ad.root_path != normalize_root_path(ad.root_path) or not _ROOT_PATH.fullmatch(ad.root_path):
        return f"root path {ad.root_path!r} must be empty or like '/srm/api' (no '?', '#' or '..')"
    if ".." in ad.root_path.split("/"):
        return f"root path {ad.root_path!r} must not contain '..'"
    if not ad.site or not ad.target_cluster:
        return "site and target cluster must not be empty"
    try:
        check_site(ad.site, "advertised site")
        check_alias(ad.target_cluster, "advertised target cluster")
    except Rejected as exc:
        return str(exc)
    if len(ad.version) > MAX_VERSION_CHARS:
        return f"version of {len(ad.version)} characters is longer than {MAX_VERSION_CHARS}"
    if not 0 <= ad.ts < 2**63:
        return f"ts {ad.ts!r} is not an epoch time in milliseconds"
    if not (math.isfinite(ad.interval_s) and MIN_INTERVAL_S <= ad.interval_s <= MAX_INTERVAL_S):
        return f"interval {ad.interval_s!r} s must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g}"
    return None


def valid_host(host: str) -> bool:
    """A DNS name or an IP literal; anything else could smuggle a different URL authority."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))
