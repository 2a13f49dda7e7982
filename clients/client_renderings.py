"""The two renderings of a cluster's client properties, and the start-up check that they work.

librdkafka (the driver, the service, srm-control) gets the translation of ``client_properties``;
Java clients (the aggregator's Spark Kafka source) get the keys as written (``java_client_properties``). Both
start from the same layered properties (``contract.client_keys``), so the file has one owner.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Final, TypeVar

from clients.client_faults import jaas_secrets, url_secrets
from clients.client_properties import UnsupportedClientProperty, to_librdkafka
from clients.java_client_properties import to_java
from clients.librdkafka_features import unsupported_mechanism
from contract.client_keys import ROLES, SourcedProperties, is_secret, layered_client_properties
from contract.config import SrmConfig
from contract.properties_file import ConfigError

LOG = logging.getLogger(__name__)
_T = TypeVar("_T")

RENDERINGS: Final = ("librdkafka", "java")
"""The two renderings of a cluster's client properties: librdkafka (driver, service, srm-control) and
Java (the aggregator's Spark Kafka source)."""

# Each dropped property is warned about once per loaded file, not once per client built.
_WARNED: weakref.WeakKeyDictionary[SrmConfig, set[tuple[str, str, str]]] = weakref.WeakKeyDictionary()
_WARNED_LOCK = threading.Lock()


def check_client_configs(config: SrmConfig, renderings: tuple[str, ...] = ("librdkafka",)) -> None:
    """Fail at start-up, not at the first connection, on client properties that cannot work in the
    renderings this process builds clients with; a problem is a ConfigError naming the key and line."""
    unknown = set(renderings) - set(RENDERINGS)
    if unknown:
        raise ValueError(f"unknown client rendering(s) {sorted(unknown)}; expected {RENDERINGS}")
    renders = [kafka_client_config if name == "librdkafka" else java_client_config for name in renderings]
    for render in renders:
        for alias in config.clusters:
            for role in ROLES:
                render(config, alias, role)
        for replication in config.replications():
            for alias in (replication.source, replication.target):
                for role in ROLES:
                    render(config, alias, role, replication.source, replication.target)


def kafka_client_config(config: SrmConfig, alias: str, role: str = "admin", source: str | None = None,
                        target: str | None = None) -> dict[str, str]:
    """librdkafka configuration of a ``role`` client of cluster ``alias``, optionally inside the
    replication ``source -> target`` (layering: ``layered_client_properties``); bootstrap.servers
    always comes from ``<alias>.bootstrap.servers``; untranslatable settings raise ConfigError.
    """
    merged = _layered(config, alias, role, source, target)
    translation = _located(config, merged, lambda props: to_librdkafka(props))
    _warn_dropped(config, alias, role, merged, translation.dropped, "Java client property librdkafka")
    rendered = translation.config
    mechanism = rendered.get("sasl.mechanism") or rendered.get("sasl.mechanisms")
    implicit = mechanism is None and rendered.get("security.protocol", "").upper().startswith("SASL")
    if implicit:
        mechanism = "GSSAPI"  # librdkafka's default
    problem = unsupported_mechanism(mechanism) if mechanism else None
    if problem and implicit:
        problem += " (sasl.mechanism is not set, so it is GSSAPI)"
    if problem:
        raw_key = next((merged[k][1] for k in ("sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config")
                        if k in merged), "sasl.mechanism")
        raise ConfigError(problem, source_name=config.path, line=config.line_of(raw_key), key=raw_key)
    rendered["bootstrap.servers"] = config.clusters[alias].bootstrap_servers
    return rendered


def java_client_config(config: SrmConfig, alias: str, role: str = "admin", source: str | None = None,
                       target: str | None = None) -> dict[str, str]:
    """The same client properties for a Java Kafka client (Spark's Kafka source): the Java keys as
    written, JKS stores and JAAS entries included; librdkafka-only keys mapped back or dropped."""
    merged = _layered(config, alias, role, source, target)
    rendering = _located(config, merged, lambda props: to_java(props))
    _warn_dropped(config, alias, role, merged, rendering.dropped, "librdkafka-only property a Java client")
    rendered = rendering.config
    rendered["bootstrap.servers"] = config.clusters[alias].bootstrap_servers
    return rendered


def security_of(config: SrmConfig, alias: str) -> tuple[str, str | None]:
    """(security.protocol, sasl.mechanism) of cluster ``alias`` as configured, for messages."""
    props = config.clusters[alias].client_properties
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
    if mechanism is None and protocol.startswith("SASL"):
        mechanism = "GSSAPI"  # the default of both Java clients and librdkafka
    return protocol, mechanism.strip().upper() if mechanism else None


def secret_values(config: SrmConfig) -> set[str]:
    """Every secret value of the file (passwords, keys, tokens, JAAS password options, and the passwords
    and tokens inside URLs such as ``redis.url``) worth hiding in logs."""
    found: set[str] = set()
    for raw_key, value in config.values.items():
        if is_secret(raw_key):
            found.add(value)
            found.update(jaas_secrets(value))
        found.update(url_secrets(value))
    return {value for value in found if len(value) >= 4}


def _layered(config: SrmConfig, alias: str, role: str, source: str | None,
             target: str | None) -> SourcedProperties:
    if alias not in config.clusters:
        raise ValueError(f"unknown cluster alias {alias!r}; known: {', '.join(config.clusters)}")
    return layered_client_properties(config.values, alias, role, source, target)


def _located(config: SrmConfig, merged: SourcedProperties, render: Callable[[dict[str, str]], _T]) -> _T:
    try:
        return render({prop: value for prop, (value, _) in merged.items()})
    except UnsupportedClientProperty as exc:
        raw_key = merged[exc.key][1] if exc.key in merged else exc.key
        raise ConfigError(
            exc.reason, source_name=config.path, line=config.line_of(raw_key), key=raw_key
        ) from exc


def _warn_dropped(config: SrmConfig, alias: str, role: str, merged: SourcedProperties,
                  dropped: tuple[str, ...], what: str) -> None:
    for prop in dropped:
        raw_key = merged[prop][1]
        with _WARNED_LOCK:
            warned = _WARNED.setdefault(config, set())
            first = (alias, raw_key, what) not in warned
            warned.add((alias, raw_key, what))
        if first:
            LOG.warning("%s:%s: %s is a %s does not support; ignored for %s %s",
                        config.path, config.line_of(raw_key), raw_key, what, alias, role)
