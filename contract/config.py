"""The SRM-style properties file shared by the driver, the aggregator and the service.

Setting hierarchy (SRM convention), most specific first, for ``get(key, source, target)``:
``<source>-><target>.key`` > ``<target>.key`` > ``<source>.key`` > ``connectors.key`` >
``workers.key`` > ``key``. The target alias comes before the source alias because a replication's
workers, internal topics and heartbeats all live in the target cluster. Client properties follow their
own per-cluster rules (``contract.client_keys``); ``clients.client_renderings`` renders them for each
kind of client.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, TypeVar

from contract.client_keys import connection_properties, is_secret
from contract.properties_file import (
    ConfigError,
    PropertyEntry,
    parse_bool,
    parse_float,
    parse_int,
    read_entries,
    split_list,
)
from contract.replication_policy import DEFAULT_SEPARATOR, ReplicationPolicy, policy_from_config
from contract.settings import PARSED_ON_LOAD, SETTINGS, SettingType

LOG = logging.getLogger(__name__)

_ARROW: Final = "->"
_GLOBAL_SCOPES: Final = ("connectors", "workers")
_ALIAS = re.compile(r"[A-Za-z0-9._-]+")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ClusterSettings:
    """A cluster alias, its bootstrap servers and its connection properties as written (Java names)."""

    alias: str
    bootstrap_servers: str
    client_properties: dict[str, str] = field(repr=False)  # may hold credentials


@dataclass(frozen=True)
class Replication:
    """An ordered cluster pair the driver runs: data and checkpoints when enabled, else heartbeats only."""

    source: str
    target: str
    enabled: bool
    emit_heartbeats: bool

    @property
    def name(self) -> str:
        return f"{self.source}{_ARROW}{self.target}"


_Found = tuple[str, PropertyEntry]
_PARSERS: Final[dict[SettingType, tuple[Callable[[str], Any], str]]] = {
    "boolean": (parse_bool, "true or false"),
    "integer": (parse_int, "an integer"),
    "number": (parse_float, "a number"),
}


class SrmConfig:
    """A parsed, validated properties file; build it with ``load_config`` or ``parse_config``. Its client
    properties are checked, per client rendering a process uses, by ``clients.client_renderings``."""

    def __init__(self, path: str, entries: Mapping[str, PropertyEntry]) -> None:
        self.path = path
        self._entries = dict(entries)
        self._values = {key: entry.value.strip() for key, entry in self._entries.items()}
        self.values: Mapping[str, str] = MappingProxyType(self._values)
        """Every entry of the file, raw key -> trimmed value (client properties are layered from these)."""
        self._aliases = self._cluster_aliases()
        self.clusters = {alias: self._cluster(alias) for alias in self._aliases}
        self.service_remote_clusters = self._alias_list("service.remote.clusters", [])
        # External clusters read by the gateway are not written to unless named explicitly.
        local = [alias for alias in self._aliases if alias not in self.service_remote_clusters]
        self.driver_target_clusters = self._alias_list("driver.target.clusters", local)
        self.service_target_clusters = self._alias_list(
            "service.target.clusters", self.driver_target_clusters
        )
        self._check_replication_keys()
        self._check_typed_settings()
        self._check_policies()

    def __repr__(self) -> str:
        return f"SrmConfig(path={self.path!r}, clusters={list(self.clusters)!r})"

    def get(
        self, key: str, source: str | None = None, target: str | None = None, default: str | None = None
    ) -> str | None:
        found = self._lookup(key, source, target)
        return default if found is None else found[1].value.strip()

    def get_int(
        self, key: str, source: str | None = None, target: str | None = None, default: int | None = None
    ) -> int | None:
        return self._typed(key, source, target, default, parse_int, "an integer")

    def get_float(
        self, key: str, source: str | None = None, target: str | None = None, default: float | None = None
    ) -> float | None:
        return self._typed(key, source, target, default, parse_float, "a number")

    def get_bool(
        self, key: str, source: str | None = None, target: str | None = None, default: bool | None = None
    ) -> bool | None:
        return self._typed(key, source, target, default, parse_bool, "true or false")

    def setting(self, key: str, source: str | None = None, target: str | None = None) -> Any:
        """The typed value of a key of ``contract.settings.SETTINGS``, or the default written there."""
        spec = SETTINGS[key]
        found = self._lookup(key, source, target)
        if found is None:
            return list(spec.default) if isinstance(spec.default, tuple) else spec.default
        if spec.type == "list":
            return split_list(found[1].value)
        if spec.type == "string":
            return self._values[found[0]]
        return self._checked(found, spec.key)

    def get_list(
        self, key: str, source: str | None = None, target: str | None = None, default: list[str] | None = None
    ) -> list[str]:
        """Comma-separated values, trimmed, empty items dropped; a missing key gives ``default`` or []."""
        found = self._lookup(key, source, target)
        if found is None:
            return list(default or [])
        return split_list(found[1].value)

    def line_of(self, raw_key: str) -> int | None:
        entry = self._entries.get(raw_key)
        return None if entry is None else entry.line

    def keys(self) -> list[str]:
        """Every key of the file, as written (per-site keys such as ``service.remote.<site>.url``)."""
        return list(self._values)

    def config_error(
        self, key: str, message: str, source: str | None = None, target: str | None = None
    ) -> ConfigError:
        """An error about ``key`` located at the line of the entry that ``get`` would use."""
        found = self._lookup(key, source, target)
        raw_key = key if found is None else found[0]
        return ConfigError(message, source_name=self.path, line=self.line_of(raw_key), key=raw_key)

    def replications(self) -> list[Replication]:
        """Every ordered pair into a driver target; MM2: disabled by default, heartbeats on by default."""
        pairs = []
        for target in self.driver_target_clusters:
            for source in self._aliases:
                if source == target:
                    continue
                enabled = self.setting("enabled", source, target)
                heartbeats = self.setting("emit.heartbeats.enabled", source, target)
                if enabled or heartbeats:
                    pairs.append(Replication(source, target, enabled, heartbeats))
        return pairs

    def replication_policy(self, source: str, target: str | None = None) -> ReplicationPolicy:
        """The ``replication.policy.*`` settings of a replication as a policy object."""
        return policy_from_config(
            self.setting("replication.policy.class", source, target),
            self.setting("replication.policy.separator", source, target) or DEFAULT_SEPARATOR,
            source,
            self.setting("replication.policy.internal.topic.separator.enabled", source, target),
        )

    def offset_syncs_location(self, source: str, target: str) -> tuple[str, str]:
        """Cluster and name of the offset-syncs topic replication `source -> target` writes (MM2's
        `offset-syncs.topic.location`: on the source by default, named for the other cluster)."""
        location = (self.setting("offset-syncs.topic.location", source, target) or "").lower()
        policy = self.replication_policy(source, target)
        if location == "source":
            return source, policy.offset_syncs_topic(target)
        if location == "target":
            return target, policy.offset_syncs_topic(source)
        raise self.config_error("offset-syncs.topic.location",
                                f"expected 'source' or 'target', got {location!r}", source, target)

    def _lookup(self, key: str, source: str | None, target: str | None) -> _Found | None:
        candidates = [f"{source}{_ARROW}{target}.{key}"] if source and target else []
        candidates += [f"{alias}.{key}" for alias in dict.fromkeys(a for a in (target, source) if a)]
        candidates += [f"{scope}.{key}" for scope in _GLOBAL_SCOPES] + [key]
        for candidate in candidates:
            if candidate in self._entries:
                return candidate, self._entries[candidate]
        return None

    def _typed(self, key: str, source: str | None, target: str | None, default: _T | None,
               parse: Callable[[str], _T], expected: str) -> _T | None:  # fmt: skip
        found = self._lookup(key, source, target)
        return default if found is None else self._parse(found, parse, expected)

    def _parse(self, found: _Found, parse: Callable[[str], _T], expected: str) -> _T:
        raw_key, entry = found
        try:
            return parse(self._values[raw_key])
        except ValueError:
            shown = "a redacted value" if is_secret(raw_key) else repr(self._values[raw_key])
            raise ConfigError(
                f"expected {expected}, got {shown}", source_name=self.path, line=entry.line, key=raw_key
            ) from None

    def _error(self, raw_key: str, message: str) -> ConfigError:
        return ConfigError(message, source_name=self.path, line=self.line_of(raw_key), key=raw_key)

    def _cluster_aliases(self) -> list[str]:
        if "clusters" not in self._entries:
            raise ConfigError("missing; list the cluster aliases, e.g. clusters = east, west",
                              source_name=self.path, key="clusters")  # fmt: skip
        aliases = split_list(self._entries["clusters"].value)
        separator = self.get("replication.policy.separator") or DEFAULT_SEPARATOR
        if not aliases:
            raise self._error("clusters", "lists no cluster alias")
        for alias in aliases:
            problem = _alias_problem(alias, separator)
            if problem:
                raise self._error("clusters", f"alias {alias!r} {problem}")
        if len(set(aliases)) != len(aliases):
            raise self._error("clusters", "lists an alias twice")
        return aliases

    def _cluster(self, alias: str) -> ClusterSettings:
        key = f"{alias}.bootstrap.servers"
        servers = self._entries[key].value.strip() if key in self._entries else ""
        if not servers:
            line = self.line_of(key) or self.line_of("clusters")
            raise ConfigError(f"missing or empty; required for cluster {alias!r} listed in 'clusters'",
                              source_name=self.path, line=line, key=key)  # fmt: skip
        props = {prop: value for prop, (value, _) in connection_properties(self._values, alias).items()}
        return ClusterSettings(alias, servers, props)

    def _alias_list(self, key: str, default: list[str]) -> list[str]:
        if key not in self._entries:
            return list(default)
        aliases = split_list(self._entries[key].value)
        unknown = [alias for alias in aliases if alias not in self.clusters]
        if unknown:
            raise self._error(key, f"{', '.join(map(repr, unknown))} not listed in 'clusters'")
        return aliases

    def _check_replication_keys(self) -> None:
        for raw_key in (key for key in self._entries if _ARROW in key):
            source, rest = raw_key.split(_ARROW, 1)
            target = next((alias for alias in self._aliases if rest.startswith(f"{alias}.")), None)
            if source not in self.clusters:
                raise self._error(raw_key, f"source alias {source!r} is not listed in 'clusters'")
            if target is None:
                raise self._error(raw_key, f"target alias {rest.split('.')[0]!r} is not listed in 'clusters'")
            if source == target:
                raise self._error(raw_key, "source and target are the same cluster")

    def _check_typed_settings(self) -> None:
        for raw_key, entry in self._entries.items():
            for setting in self._setting_names(raw_key):
                if setting in PARSED_ON_LOAD:
                    self._checked((raw_key, entry), setting)

    def _checked(self, found: _Found, key: str) -> Any:
        """The typed value of entry ``found`` of setting ``key``; an interval must be positive."""
        spec = SETTINGS[key]
        value = self._parse(found, *_PARSERS[spec.type])
        if spec.positive and not value > 0:
            raise self._error(found[0], f"must be greater than 0, got {self._values[found[0]]!r}: an "
                              f"interval of 0 or less would repeat its work without pause")
        return value

    def _setting_names(self, raw_key: str) -> list[str]:
        """The setting a raw key sets, once stripped of each scope prefix it might carry."""
        names = [raw_key]
        if _ARROW in raw_key:
            rest = raw_key.split(_ARROW, 1)[1]
            names += [rest[len(a) + 1 :] for a in self._aliases if rest.startswith(f"{a}.")]
        for scope in (*self._aliases, *_GLOBAL_SCOPES):
            if raw_key.startswith(f"{scope}."):
                names.append(raw_key[len(scope) + 1 :])
        return names

    def _check_policies(self) -> None:
        for raw_key, entry in self._entries.items():
            names = self._setting_names(raw_key)
            try:
                if "replication.policy.class" in names:
                    policy_from_config(entry.value)
                if "replication.policy.separator" in names:
                    policy_from_config(None, entry.value.strip())
            except ValueError as exc:
                raise self._error(raw_key, str(exc)) from None


def _alias_problem(alias: str, separator: str) -> str | None:
    if not _ALIAS.fullmatch(alias):
        return "may only contain letters, digits, '.', '_' and '-'"
    if alias in _GLOBAL_SCOPES:
        return "is a reserved prefix"
    if separator in alias:
        return f"contains the replication separator {separator!r}, so remote topic names would be ambiguous"
    return None


def parse_config(text: str, source_name: str = "<string>") -> SrmConfig:
    """Parse and validate properties text; ``source_name`` is used in error messages."""
    return SrmConfig(source_name, read_entries(text, source_name))


def load_config(path: str | os.PathLike[str]) -> SrmConfig:
    """Read, parse and validate a properties file; any problem is a ConfigError naming the file."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source_name=name) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # Java reads .properties files as ISO-8859-1; accept such files too.
        text = raw.decode("latin-1")
    return parse_config(text, name)
