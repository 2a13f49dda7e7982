"""Which remote addresses a gateway may call, and where a site's credentials may go.

Two sources decide where a call goes, and only the configuration is trusted:

- ``service.remote.<site>.url`` (``https://srm-east.example.com:6670``): the site's own base URL,
  written by whoever runs the gateway. A site with a URL is called there, whatever its advertisements
  say; its stored credentials are sent there and nowhere else.
- ``service.remote.allowed.hosts``: where a site *without* a URL may be called, at the address its
  freshest advertisement names, never with credentials. Items are ``[scheme://]host[:port]`` where host
  is a glob matched label by label (``*.srm.example.com``), an IP address or a CIDR network; an IPv6
  address with a port is written in brackets (``[fd00::1]:6670``).

Every name is resolved before a call and the call connects to the checked address (no second lookup
that DNS could answer differently). Loopback, link-local, unspecified, multicast, reserved and cloud
metadata addresses are refused unless the configuration names them explicitly: an IP literal in the
site's URL, or an allowlist address/network lying wholly inside that same kind of range
(``127.0.0.0/8``, ``169.254.169.254``). A glob never unlocks them, nor does ``0.0.0.0/0``.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES: Final = ("http", "https")
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# Cloud instance metadata services: an answer from one of them is a credential.
METADATA_ADDRESSES: Final = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "169.254.170.2"))
RESOLVE_CACHE_S: Final = 30.0
RESOLVE_CACHE_ENTRIES: Final = 1024


class RefusedAddress(ValueError):
    """A remote address the gateway will not call; the message names why and what would allow it."""


def special_kind(address: IPAddress) -> str | None:
    """Why an address may only be called when named explicitly, or None for an ordinary address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for kind, flag in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                       ("unspecified", address.is_unspecified), ("multicast", address.is_multicast),
                       ("reserved", address.is_reserved)):
        if flag:
            return kind
    return None


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist item: a host glob or a network, with an optional scheme and port."""

    glob: str | None = None
    network: IPNetwork | None = None
    scheme: str | None = None
    port: int | None = None

    def allows(self, host: str, port: int | None = None, scheme: str | None = None) -> bool:
        if self.scheme is not None and scheme != self.scheme or self.port is not None and port != self.port:
            return False
        address = ip_literal(host)
        if address is not None:  # an IP literal only ever matches a network entry, never a glob
            return self.network is not None and address in self.network
        if self.glob is None:
            return False
        labels, globs = host.lower().rstrip(".").split("."), self.glob.split(".")
        # Label by label: ``*`` stands for one label and never crosses a dot, so ``service-*`` does not
        # allow ``service-east.attacker.net`` as fnmatch's ``*`` would.
        return len(labels) == len(globs) and all(
            fnmatch.fnmatchcase(label, glob) for label, glob in zip(labels, globs, strict=True))

    def names_explicitly(self, address: IPAddress) -> bool:
        """This entry is an address or network wholly inside the special range ``address`` is in."""
        if self.network is None or address not in self.network:
            return False
        kind = special_kind(address)
        return special_kind(self.network[0]) == kind and special_kind(self.network[-1]) == kind


@dataclass(frozen=True)
class AllowList:
    entries: tuple[AllowEntry, ...] = ()

    def allows(self, host: str, port: int | None = None, scheme: str | None = None) -> bool:
        """A host (and, when an entry names them, its port and scheme) an advertisement may name."""
        return any(entry.allows(host, port, scheme) for entry in self.entries)

    def names_explicitly(self, address: IPAddress) -> bool:
        return any(entry.names_explicitly(address) for entry in self.entries)


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def parse_allowed_hosts(items: Sequence[str]) -> AllowList:
    """``["*.example.com", "https://srm-east.example.com:6670", "10.0.0.0/8", "127.0.0.1"]``;
    ValueError names an unusable item."""
    return AllowList(tuple(_entry(raw) for raw in items if raw.strip()))


def portless_networks(items: Sequence[str]) -> list[str]:
    """Allowlist items that are networks without a port: whoever can write ``heartbeats`` may aim the
    gateway at any port of any host in them (an admin console, a database with an HTTP API) and read
    the JSON answer back. Unusable items are left to ``parse_allowed_hosts``."""
    found = []
    for raw in items:
        try:
            entry = _entry(raw) if raw.strip() else None
        except ValueError:
            continue
        if entry is not None and entry.network is not None and entry.network.num_addresses > 1 \
                and entry.port is None:
            found.append(raw.strip())
    return found


def _entry(raw: str) -> AllowEntry:
    item, scheme = raw.strip().lower(), None
    if "://" in item:
        scheme, _, item = item.partition("://")
        if scheme not in SCHEMES:
            raise ValueError(f"{raw!r}: scheme must be http or https")
    host, port = _split_port(raw, item)
    if "/" in host:
        try:
            return AllowEntry(network=ipaddress.ip_network(host, strict=False), scheme=scheme, port=port)
        except ValueError:
            raise ValueError(f"{raw!r} is not a CIDR network such as 10.0.0.0/8") from None
    address = ip_literal(host)
    if address is not None:
        return AllowEntry(network=ipaddress.ip_network(address), scheme=scheme, port=port)
    if "[" in host or "]" in host:
        raise ValueError(f"{raw!r}: character classes are not allowed in host globs; use * or ?")
    if any(c in host for c in ":@#\\ /"):
        raise ValueError(f"{raw!r} is neither a host glob nor an IP address")
    if not host.rstrip("."):
        raise ValueError(f"{raw!r} names no host")
    return AllowEntry(glob=host.rstrip("."), scheme=scheme, port=port)


def _split_port(raw: str, item: str) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port``, ``[v6]``, or a bare IPv6 address (no port)."""
    if item.startswith("["):
        host, bracket, rest = item[1:].partition("]")
        if not bracket or rest and not rest.startswith(":"):
            raise ValueError(f"{raw!r} is neither a host glob nor an IP address")
        return host, _port(raw, rest[1:]) if rest else None
    if item.count(":") == 1:
        host, _, port = item.partition(":")
        return host, _port(raw, port)
    return item, None


def _port(raw: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{raw!r} is not host:port with a port from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class Endpoint:
    """Where a call goes: scheme, host (a name or an IP literal), port and the API's root path."""

    scheme: str
    host: str
    port: int
    root_path: str = ""

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.root_path}"


def parse_site_url(text: str) -> Endpoint:
    """``https://srm-east.example.com:6670[/root]``; ValueError says what is wrong."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"{text!r}: scheme must be http or https")
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise ValueError(f"{text!r} must be scheme://host[:port][/root] (no user info)")
    if parts.query or parts.fragment or ".." in parts.path.split("/"):
        raise ValueError(f"{text!r} must be scheme://host[:port][/root] (no query, fragment or '..')")
    return Endpoint(parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme], parts.path.rstrip("/"))


class Resolver:
    """Resolves names with a short cache and checks every address; ``checked_address`` is what to
    connect to."""

    def __init__(self, allowed: AllowList) -> None:
        self.allowed = allowed
        self._cache: dict[tuple[str, int], tuple[float, list[IPAddress]]] = {}
        self._lock = threading.Lock()

    def checked_address(self, endpoint: Endpoint, configured: bool) -> str:
        """The address to connect to, or RefusedAddress. An IP literal the configuration wrote in a
        site's URL is explicit; anything else in a special range must be named by the allowlist."""
        literal = ip_literal(endpoint.host)
        addresses = [literal] if literal is not None else self._resolve(endpoint.host, endpoint.port)
        for address in addresses:
            kind = special_kind(address)
            if kind is None or configured and literal is not None or self.allowed.names_explicitly(address):
                continue
            named = f"{endpoint.host} resolves to" if literal is None else f"{endpoint.host} is"
            raise RefusedAddress(f"{named} {kind} {address}; not called unless service.remote.allowed.hosts "
                                 f"names that address or its range explicitly")
        return str(addresses[0])

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        now, key = time.monotonic(), (host.lower(), port)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise RefusedAddress(f"cannot resolve {host}: {exc}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0])
                                       for info in infos))
        if not addresses:
            raise RefusedAddress(f"cannot resolve {host}: no address")
        with self._lock:
            if len(self._cache) >= RESOLVE_CACHE_ENTRIES:
                self._cache.clear()
            self._cache[key] = (now + RESOLVE_CACHE_S, addresses)
        return addresses
