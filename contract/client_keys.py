"""Which keys of the properties file set which Kafka client property, and which keys hold secrets.

Every part reads its clients' properties out of the same file with the same layering (SRM's client
prefixes, MM2's common client configs); how those properties are then rendered for librdkafka or a Java
client is ``clients.client_renderings``'s business. Values are never put into messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_CONNECTION_PREFIXES: Final = tuple("security. sasl. ssl. socket. reconnect.backoff. retry.backoff.".split())
_CONNECTION_NAMES: Final = frozenset(
    """
    bootstrap.servers client.id client.rack client.dns.lookup connections.max.idle.ms metadata.max.age.ms
    request.timeout.ms receive.buffer.bytes send.buffer.bytes enable.ssl.certificate.verification
    broker.address.family https.ca.location https.ca.pem debug
    """.split()
)
_SECRET_MARKERS: Final = tuple("password secret jaas private.key key.pem keystore.key credential".split())
_TOKEN_SETTINGS: Final = (".url", ".ms", ".seconds", ".enabled", ".method")  # about a token, not one

ROLES: Final = ("admin", "consumer", "producer")
SourcedProperties = dict[str, tuple[str, str]]
"""Client property -> (value, raw key of the properties file it came from)."""

# MM2 settings that look like role-prefixed client properties but are not.
_MM2_CLIENT_LOOKALIKES: Final = frozenset({"consumer.poll.timeout.ms"})


def is_connection_property(key: str) -> bool:
    """True for settings that apply to every client of a cluster (MM2's common client configs)."""
    return key in _CONNECTION_NAMES or key.startswith(_CONNECTION_PREFIXES)


def is_secret(key: str) -> bool:
    """True for keys whose values must never be logged or shown: passwords, keys, JAAS entries and
    tokens (``service.auth.token``, ``service.remote.<site>.token``), but not the settings that only
    name where or how long a token is (``sasl.oauthbearer.token.endpoint.url``)."""
    lowered = key.lower()
    if any(marker in lowered for marker in _SECRET_MARKERS):
        return True
    return "token" in lowered and not lowered.endswith(_TOKEN_SETTINGS)


def layered_client_properties(
    entries: Mapping[str, str],
    alias: str,
    role: str,
    source: str | None = None,
    target: str | None = None,
) -> SourcedProperties:
    """Java client properties of a ``role`` client of cluster ``alias`` from raw file ``entries``.

    Layers, weakest first: connection properties (global ``x`` < ``<alias>.x``); then, inside the
    replication ``source -> target``, ``<side>.cluster.x``; then ``<role>.x``; then ``<side>.<role>.x``,
    where side is ``source`` or ``target`` (SRM client prefixes: the role wins over the cluster side,
    the side-and-role prefix over both). Each prefixed layer is read at the levels global <
    ``workers.`` < ``connectors.`` < ``<alias>.`` < ``<source>-><target>.``.
    """
    if role not in ROLES:
        raise ValueError(f"unknown client role {role!r}; expected one of {', '.join(ROLES)}")
    side = client_side(alias, source, target)
    scopes = ["", "workers.", "connectors.", f"{alias}."]
    if source and target:
        scopes.append(f"{source}->{target}.")
    merged = connection_properties(entries, alias)
    for prefix in [f"{side}.cluster.", f"{role}.", f"{side}.{role}."] if side else [f"{role}."]:
        merged.update(_prefixed(entries, prefix, scopes))
    return merged


def client_side(alias: str, source: str | None, target: str | None) -> str | None:
    """``source`` or ``target``: which end of the replication cluster ``alias`` is (None outside one)."""
    if source is None and target is None:
        return None
    if alias == source:
        return "source"
    if alias == target:
        return "target"
    raise ValueError(f"cluster {alias!r} is neither the source {source!r} nor the target {target!r}")


def connection_properties(entries: Mapping[str, str], alias: str) -> SourcedProperties:
    """Settings for every client of cluster ``alias``: global ones, overridden by ``<alias>.`` ones."""
    merged = {key: (value, key) for key, value in entries.items() if is_connection_property(key)}
    prefix = f"{alias}."
    for raw_key, value in entries.items():
        if raw_key.startswith(prefix) and is_connection_property(raw_key[len(prefix) :]):
            merged[raw_key[len(prefix) :]] = (value, raw_key)
    merged.pop("bootstrap.servers", None)
    return merged


def _prefixed(entries: Mapping[str, str], prefix: str, scopes: list[str]) -> SourcedProperties:
    merged: SourcedProperties = {}
    for scope in scopes:
        start = scope + prefix
        for raw_key, value in entries.items():
            prop = raw_key[len(start) :]
            if raw_key.startswith(start) and prop and prefix + prop not in _MM2_CLIENT_LOOKALIKES:
                merged[prop] = (value, raw_key)
    return merged
