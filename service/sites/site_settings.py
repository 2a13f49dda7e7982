"""What the configuration says about each remote site: its URL, credentials and timeout.

``service.remote.<site>.url``, ``.token``, ``.username`` + ``.password`` and ``.timeout.ms`` are read
once, when the gateway is built, so a mistake in any site's keys fails at start with the key named.
Credentials without the site's URL are such a mistake: they go only to a configured URL
(docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import urllib3

from contract.config import SrmConfig
from contract.settings import SETTINGS, default_of
from service.sites.site_trust import Endpoint, parse_site_url

DEFAULT_TIMEOUT_MS: Final = default_of("service.remote.timeout.ms", int)
WAITING_PER_THREAD = 16  # calls to one site that may wait, per thread of that site
SITE_KEY_SUFFIXES = (".url", ".token", ".username", ".password", ".timeout.ms")


@dataclass(frozen=True)
class SiteAccess:
    timeout_s: float
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    url: Endpoint | None = None  # service.remote.<site>.url: the only place the site is called, if set

    def headers(self) -> dict[str, str]:
        """The Authorization header for this site: Bearer token, Basic credentials, or none."""
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username:
            basic = urllib3.util.make_headers(basic_auth=f"{self.username}:{self.password or ''}")
            return {"Authorization": basic["authorization"]}
        return {}



def configured_site_names(config: SrmConfig) -> list[str]:
    """Sites with a ``service.remote.<site>.<url|token|username|password|timeout.ms>`` key."""
    prefix, names = "service.remote.", set[str]()
    for key in config.keys():
        if key.startswith(prefix) and key not in SETTINGS:
            rest = key[len(prefix):]
            names.update(rest[:-len(suffix)] for suffix in SITE_KEY_SUFFIXES
                         if rest.endswith(suffix) and len(rest) > len(suffix))
    return sorted(names)


def site_access(config: SrmConfig, site: str, default_timeout_ms: int) -> SiteAccess:
    prefix = f"service.remote.{site}"
    username, password, token, url = (config.get(f"{prefix}.{name}")
                                      for name in ("username", "password", "token", "url"))
    if token and username:
        raise config.config_error(f"{prefix}.token", f"set either a token or a username for site {site!r}")
    if password and not username:
        raise config.config_error(f"{prefix}.password", f"needs {prefix}.username as well")
    endpoint = None
    if url:
        try:
            endpoint = parse_site_url(url)
        except ValueError as exc:
            raise config.config_error(f"{prefix}.url", str(exc)) from None
    elif token or username:
        key = f"{prefix}.token" if token else f"{prefix}.username"
        raise config.config_error(key, f"credentials go only to a configured site URL: set {prefix}.url "
                                       "(scheme://host:port)")
    timeout_ms = positive_setting(config, f"{prefix}.timeout.ms", default_timeout_ms)
    return SiteAccess(timeout_ms / 1000, username or None, password or None, token or None, endpoint)


def positive_setting(config: SrmConfig, key: str, default: int | None = None) -> int:
    """A positive integer setting (of the table, or any key with a ``default``); ConfigError otherwise."""
    value = config.get_int(key, default=default) if default is not None else config.setting(key)
    if not isinstance(value, int) or value <= 0:
        raise config.config_error(key, "must be a positive number")
    return value
