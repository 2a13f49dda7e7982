"""The two renderings of a cluster's client properties, as methods of ``SrmConfig``.

librdkafka (the driver, the service, srm-control) gets the translation of ``client_properties``; Java
clients (the aggregator's Spark Kafka source) get the keys as written (``java_client_properties``).
Both start from the same layered properties (``layered_client_properties``), so the file has one owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from contract.client_properties import (
    SourcedProperties,
    UnsupportedClientProperty,
    is_secret,
    layered_client_properties,
    to_librdkafka,
)
from contract.java_client_properties import to_java
from contract.librdkafka_features import unsupported_mechanism
from contract.properties_file import ConfigError

LOG = logging.getLogger("contract.config")
_T = TypeVar("_T")


class ClientRenderings:
    """Mixed into SrmConfig, which provides these attributes."""

    path: str
    clusters: Mapping
    _aliases: list[str]
    _values: dict[str, str]
    _warned: set[tuple[str, str, str]]

    def line_of(self, raw_key: str) -> int | None:
        raise NotImplementedError

    def kafka_client_config(
        self, alias: str, role: str = "admin", source: str | None = None, target: str | None = None
    ) -> dict[str, str]:
        """librdkafka configuration of a ``role`` client of cluster ``alias``, optionally inside the
        replication ``source -> target`` (layering: ``layered_client_properties``); bootstrap.servers
        always comes from ``<alias>.bootstrap.servers``; untranslatable settings raise ConfigError.
        """
        if alias not in self.clusters:
            raise ValueError(f"unknown cluster alias {alias!r}; known: {', '.join(self._aliases)}")
        merged = layered_client_properties(self._values, alias, role, source, target)
        return self._librdkafka(alias, role, merged)

    def java_client_config(
        self, alias: str, role: str = "admin", source: str | None = None, target: str | None = None
    ) -> dict[str, str]:
        """The same client properties for a Java Kafka client (Spark's Kafka source): the Java keys as
        written, JKS stores and JAAS entries included; librdkafka-only keys mapped back or dropped."""
        if alias not in self.clusters:
            raise ValueError(f"unknown cluster alias {alias!r}; known: {', '.join(self._aliases)}")
        merged = layered_client_properties(self._values, alias, role, source, target)
        rendering = self._located(merged, lambda props: to_java(props))
        self._warn_dropped(alias, role, merged, rendering.dropped, "librdkafka-only property a Java client")
        config = rendering.config
        config["bootstrap.servers"] = self.clusters[alias].bootstrap_servers
        return config

    def security_of(self, alias: str) -> tuple[str, str | None]:
        """(security.protocol, sasl.mechanism) of cluster ``alias`` as configured, for messages."""
        props = self.clusters[alias].client_properties
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
        if mechanism is None and protocol.startswith("SASL"):
            mechanism = "GSSAPI"  # the default of both Java clients and librdkafka
        return protocol, mechanism.strip().upper() if mechanism else None

    def secret_values(self) -> set[str]:
        """Every secret value of the file (passwords, keys, JAAS password options) worth hiding in logs."""
        from contract.client_faults import jaas_secrets

        found: set[str] = set()
        for raw_key, value in self._values.items():
            if is_secret(raw_key):
                found.add(value)
                found.update(jaas_secrets(value))
        return {value for value in found if len(value) >= 4}

    def _librdkafka(self, alias: str, role: str, merged: SourcedProperties) -> dict[str, str]:
        translation = self._located(merged, lambda props: to_librdkafka(props))
        self._warn_dropped(alias, role, merged, translation.dropped, "Java client property librdkafka")
        config = translation.config
        mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
        implicit = mechanism is None and config.get("security.protocol", "").upper().startswith("SASL")
        if implicit:
            mechanism = "GSSAPI"  # librdkafka's default
        problem = unsupported_mechanism(mechanism) if mechanism else None
        if problem and implicit:
            problem += " (sasl.mechanism is not set, so it is GSSAPI)"
        if problem:
            raw_key = next((merged[k][1] for k in ("sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config")
                            if k in merged), "sasl.mechanism")
            raise ConfigError(problem, source_name=self.path, line=self.line_of(raw_key), key=raw_key)
        config["bootstrap.servers"] = self.clusters[alias].bootstrap_servers
        return config

    def _located(self, merged: SourcedProperties, render: Callable[[dict[str, str]], _T]) -> _T:
        try:
            return render({prop: value for prop, (value, _) in merged.items()})
        except UnsupportedClientProperty as exc:
            raw_key = merged[exc.key][1] if exc.key in merged else exc.key
            raise ConfigError(
                exc.reason, source_name=self.path, line=self.line_of(raw_key), key=raw_key
            ) from exc

    def _warn_dropped(self, alias: str, role: str, merged: SourcedProperties, dropped: tuple[str, ...],
                      what: str) -> None:
        for prop in dropped:
            raw_key = merged[prop][1]
            if (alias, raw_key, what) not in self._warned:
                self._warned.add((alias, raw_key, what))
                LOG.warning("%s:%s: %s is a %s does not support; ignored for %s %s",
                            self.path, self.line_of(raw_key), raw_key, what, alias, role)
