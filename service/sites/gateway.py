"""Gateway fan-out: one query sent to the services of several sites in parallel, answers merged.

Used by the REST layer once per request: ``service.sites.site_selector`` (the ``site`` selector of the ``/v2``
read endpoints, GET) and ``service.sites.grafana_site_answers`` (``payload.site`` of Grafana queries, POST
with a JSON body)::

    answer = fan_out(gateway, registry.services(), "/v2/replications", [("site", "local")],
                     selector="all", local=lambda: (200, local_body), expired=registry.expired_services())
    answer.to_json()   # {"partial", "sites": [{site, status, ...}], "results": {site: body}, ...}

``Gateway.from_config(config)`` and ``start_registry(config)`` are built once per worker process
(``service.sites.discovered_directory.install_discovery``). ``fan_out`` raises ``UnknownSite`` (answer 404)
and ``ValueError`` for a path that is not a plain API path (answer 400).

Safety: a remote service is called only when its advertised host matches
``service.remote.allowed.hosts`` (host globs such as ``*.srm.example.com``, or CIDRs matched against
IP literals; nothing is allowed by default), without following redirects and without environment proxy
or netrc settings, so a forged advertisement cannot make the gateway call an arbitrary URL. Per-site
credentials: ``service.remote.<site>.username`` + ``.password`` (Basic) or ``.token`` (Bearer);
per-site timeout ``service.remote.<site>.timeout.ms`` (default ``service.remote.timeout.ms``, 5000).
Credentials are sent only when this gateway's own auth is on (``service.auth.*``), or
``service.remote.credentials.without.auth = true`` says a proxy in front authenticates callers: an open
gateway would otherwise hand its stored keys to anyone who can reach it. Any failure of one site, a
malformed answer included, is that site's ``error: ...`` status, never the answer's.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError

from contract.config import SrmConfig
from contract.settings import SETTINGS
from contract.untrusted import shown
from service.sites.advertiser import site_name
from service.sites.registry import EXPIRED_STATUS, RemoteService

LOG = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS: int = SETTINGS["service.remote.timeout.ms"].default  # type: ignore[assignment]
OK = "ok"
TIMEOUT = "timeout"
LOCAL = "local"
ALL = "all"
MAX_PARALLEL_CALLS = 32

LocalAnswer = Callable[[], tuple[int, Any]]
"""The local site's answer (HTTP status, JSON body), computed by the REST layer without HTTP."""


class UnknownSite(LookupError):
    """A site selector naming no site the gateway knows."""


@dataclass(frozen=True)
class AllowList:
    """Host globs (case-insensitive) and networks; a network only matches an IP literal host."""

    globs: tuple[str, ...] = ()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def allows(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:  # an IP literal only ever matches a network entry, never a glob
            return any(address in network for network in self.networks)
        labels = host.lower().rstrip(".").split(".")
        return any(_labels_match(labels, glob.split(".")) for glob in self.globs)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _labels_match(labels: list[str], globs: list[str]) -> bool:
    """Label by label: ``*`` stands for one label, never for dots, so ``service-*`` does not allow
    ``service-east.attacker.net`` (fnmatch's ``*`` crosses dots)."""
    return len(labels) == len(globs) and all(
        fnmatch.fnmatchcase(label, glob) for label, glob in zip(labels, globs, strict=True))


def parse_allowed_hosts(items: Sequence[str]) -> AllowList:
    """``["*.example.com", "10.0.0.0/8", "127.0.0.1"]``; ValueError names an unusable item."""
    globs: list[str] = []
    networks = []
    for raw in items:
        item = raw.strip().lower()
        if not item:
            continue
        if "/" in item:
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"{raw!r} is not a CIDR network such as 10.0.0.0/8") from None
        elif any(c in item for c in ":@#?\\ "):
            try:  # an IPv6 address literal is the one host item with a colon
                networks.append(ipaddress.ip_network(item))
            except ValueError:
                raise ValueError(f"{raw!r} is neither a host glob nor an IP address") from None
        elif _is_ip(item):
            networks.append(ipaddress.ip_network(item))
        elif "[" in item:
            raise ValueError(f"{raw!r}: character classes are not allowed in host globs; use * or ?")
        else:
            globs.append(item.rstrip("."))
    return AllowList(tuple(globs), tuple(networks))


@dataclass(frozen=True)
class SiteAccess:
    timeout_s: float
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        """The Authorization header for this site: Bearer token, Basic credentials, or none."""
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username:
            basic = urllib3.util.make_headers(basic_auth=f"{self.username}:{self.password or ''}")
            return {"Authorization": basic["authorization"]}
        return {}


@dataclass(frozen=True)
class SiteAnswer:
    site: str
    status: str  # "ok", "timeout" or "error: <reason>"
    url: str | None = None
    http_status: int | None = None
    body: Any = None
    elapsed_ms: float | None = None


@dataclass(frozen=True)
class FanOutAnswer:
    sites: list[SiteAnswer]

    def to_json(self) -> dict[str, Any]:
        return merge_answers(self.sites)


class Gateway:
    """Per-process gateway state: settings, one HTTP connection pool and one thread pool."""

    def __init__(self, local_site: str, allowed: AllowList, access: Callable[[str], SiteAccess], *,
                 forwards_credentials: bool = False) -> None:
        self.local_site, self.allowed, self._access = local_site, allowed, access
        self.forwards_credentials = forwards_credentials
        # urllib3 directly: a third of the per-call CPU of requests, and it reads no proxy or netrc
        # settings from the environment. No retries and no redirects: one call per site, to the URL
        # built from the allowed advertisement only.
        self.http = urllib3.PoolManager(num_pools=MAX_PARALLEL_CALLS, maxsize=4, retries=False)
        self.pool = ThreadPoolExecutor(MAX_PARALLEL_CALLS, thread_name_prefix="srm-gateway")

    @classmethod
    def from_config(cls, config: SrmConfig) -> Gateway:
        """Bad settings fail here with a ConfigError naming the key."""
        key = "service.remote.allowed.hosts"
        try:
            allowed = parse_allowed_hosts(config.setting(key))
        except ValueError as exc:
            raise config.config_error(key, str(exc)) from None
        default_ms = _timeout_ms(config, "service.remote.timeout.ms", DEFAULT_TIMEOUT_MS)
        own_auth = bool(config.setting("service.auth.token") or config.setting("service.auth.basic.username"))
        forwards = own_auth or bool(config.setting("service.remote.credentials.without.auth"))
        if not forwards and any(key.startswith("service.remote.") and key.rsplit(".", 1)[-1] in (
                "token", "username", "password") for key in config.keys()):
            LOG.warning("service.remote.<site> credentials are configured but will not be sent: this "
                        "gateway's own auth is off (set service.auth.token or service.auth.basic.*, or "
                        "service.remote.credentials.without.auth = true behind an authenticating proxy)")
        return cls(site_name(config), allowed, lambda site: site_access(config, site, default_ms),
                   forwards_credentials=forwards)

    def access(self, site: str) -> SiteAccess:
        return self._access(site)

    def headers(self, site: str) -> dict[str, str]:
        """What a call to ``site`` carries for authentication: nothing unless credentials may go."""
        return self.access(site).headers() if self.forwards_credentials else {}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.clear()


def site_access(config: SrmConfig, site: str, default_timeout_ms: int) -> SiteAccess:
    prefix = f"service.remote.{site}"
    username, password, token = (config.get(f"{prefix}.{name}") for name in ("username", "password", "token"))
    if token and username:
        raise config.config_error(f"{prefix}.token", f"set either a token or a username for site {site!r}")
    if password and not username:
        raise config.config_error(f"{prefix}.password", f"needs {prefix}.username as well")
    timeout_ms = _timeout_ms(config, f"{prefix}.timeout.ms", default_timeout_ms)
    return SiteAccess(timeout_ms / 1000, username or None, password or None, token or None)


def _timeout_ms(config: SrmConfig, key: str, default: int) -> int:
    value = config.get_int(key, default=default)
    if value is None or value <= 0:
        raise config.config_error(key, "must be a positive number of milliseconds")
    return value


@dataclass(frozen=True)
class Selection:
    local: bool
    remote: dict[str, list[RemoteService]]  # site -> its live services, freshest first
    gone: list[str]  # sites whose advertisements expired


def select_sites(selector: str, local_site: str, has_local: bool, live: Sequence[RemoteService],
                 expired: Sequence[RemoteService] = ()) -> Selection:
    """Which sites a selector (``local``, ``all`` or a site name) asks; our own site is never remote."""
    remote: dict[str, list[RemoteService]] = {}
    for service in sorted(live, key=lambda s: -s.last_seen_ms):
        if service.site != local_site:
            remote.setdefault(service.site, []).append(service)
    gone = sorted({s.site for s in expired} - set(remote) - {local_site})
    if selector == LOCAL:
        return Selection(True, {}, [])
    if selector == ALL:
        return Selection(has_local, remote, gone)
    if selector == local_site:
        return Selection(True, {}, [])
    if selector in remote:
        return Selection(False, {selector: remote[selector]}, [])
    if selector in gone:
        return Selection(False, {}, [selector])
    known = sorted({local_site, *remote, *gone})
    raise UnknownSite(f"unknown site {selector!r}; known: {', '.join(known)} (or 'local', 'all')")


def choose_service(services: Sequence[RemoteService], allowed: AllowList) -> RemoteService | None:
    """The freshest advertised service of a site whose host is allowed, if any."""
    return next((s for s in services if allowed.allows(s.host)), None)


def check_api_path(path: str) -> str:
    """A plain absolute API path; anything that could change the URL's authority or escape the root."""
    if not path.startswith("/") or path.startswith("//"):
        raise ValueError(f"path {path!r} must start with a single '/'")
    if any(c in path for c in "?#\\ ") or ".." in path.split("/") or "://" in path:
        raise ValueError(f"path {path!r} must be a plain API path (no query, fragment, '..' or scheme)")
    return path


def answer_of(site: str, url: str, http_status: int, body: Any, is_json: bool,
              elapsed_ms: float) -> SiteAnswer:
    """A remote site's status from its HTTP answer: ok only for a 2xx JSON answer."""
    if 200 <= http_status < 300 and is_json:
        return SiteAnswer(site, OK, url, http_status, body, elapsed_ms)
    if 200 <= http_status < 300:
        return SiteAnswer(site, "error: answer is not JSON", url, http_status, None, elapsed_ms)
    message = body.get("message") if isinstance(body, dict) else None
    # The remote's text, escaped and cut: it goes into our answer and our log.
    reason = f"HTTP {http_status}" + (f": {shown(message, 200)}" if isinstance(message, str) and message
                                      else "")
    return SiteAnswer(site, f"error: {reason}", url, http_status, body if is_json else None, elapsed_ms)


def merge_answers(answers: Sequence[SiteAnswer]) -> dict[str, Any]:
    """One answer: per-site status (sorted by site), the ``ok`` bodies by site, and ``items``, the
    concatenation of list bodies with each object tagged with its site, when every ``ok`` body is a
    list. ``partial`` is true when any asked site did not answer ``ok``.
    """
    ordered = sorted(answers, key=lambda a: a.site)
    ok = [a for a in ordered if a.status == OK]
    merged: dict[str, Any] = {
        "partial": len(ok) != len(ordered),
        "sites": [{"site": a.site, "status": a.status, "url": a.url, "http_status": a.http_status,
                   "elapsed_ms": a.elapsed_ms} for a in ordered],
        "results": {a.site: a.body for a in ok},
    }
    if ok and all(isinstance(a.body, list) for a in ok):
        merged["items"] = [_tagged(item, a.site) for a in ok for item in a.body]
    return merged


def _tagged(item: Any, site: str) -> dict[str, Any]:
    return {**item, "site": site} if isinstance(item, dict) else {"site": site, "value": item}


def fan_out(gateway: Gateway, services: Sequence[RemoteService], path: str,
            query: Mapping[str, str] | Sequence[tuple[str, str]] = (), selector: str = ALL,
            local: LocalAnswer | None = None, expired: Sequence[RemoteService] = (),
            body: Any = None) -> FanOutAnswer:
    """Ask the selected sites in parallel; a slow or dead site becomes its own status, never an error.

    ``query``: a mapping, or (name, value) pairs when a name repeats. With a ``body`` (any JSON value)
    the sites are asked with POST, for the read endpoints that take their question as a JSON body.
    """
    check_api_path(path)
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    suffix = f"?{urlencode(pairs)}" if pairs else ""
    selection = select_sites(selector, gateway.local_site, local is not None, services, expired)
    started = time.monotonic()
    answers = [SiteAnswer(site, EXPIRED_STATUS) for site in selection.gone]
    calls: list[tuple[str, str, Future[SiteAnswer], float]] = []
    for site, candidates in selection.remote.items():
        service = choose_service(candidates, gateway.allowed)
        if service is None:
            answers.append(SiteAnswer(site, f"error: host {candidates[0].host!r} is not in "
                                            f"service.remote.allowed.hosts; not contacted"))
            continue
        access, url = gateway.access(site), service.base_url + path + suffix
        calls.append((site, url, gateway.pool.submit(_call, gateway.http, site, url, access.timeout_s,
                                                     gateway.headers(site), body),
                      started + access.timeout_s))
    if selection.local:  # in the calling thread (the REST layer's request context), while remotes run
        answers.append(_local_answer(gateway.local_site, local))
    answers += [_collect(site, url, future, deadline, started) for site, url, future, deadline in calls]
    return FanOutAnswer(answers)


def _local_answer(site: str, local: LocalAnswer | None) -> SiteAnswer:
    if local is None:
        return SiteAnswer(site, "error: this service has no local answer for that path")
    began = time.monotonic()
    try:
        http_status, body = local()
    except Exception as exc:  # the local part failing must not hide the remote answers
        LOG.exception("local answer failed")
        return SiteAnswer(site, f"error: {exc.__class__.__name__}")
    return answer_of(site, "local", http_status, body, True, _ms_since(began))


def _collect(site: str, url: str, future: Future[SiteAnswer], deadline: float, started: float) -> SiteAnswer:
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        future.cancel()  # a call still running ends at its own socket timeout
        return SiteAnswer(site, TIMEOUT, url, elapsed_ms=_ms_since(started))
    except Exception as exc:  # noqa: BLE001 - one site's failure is its status, never the answer's
        LOG.warning("site %s at %s: %s", site, url, shown(f"{type(exc).__name__}: {exc}"))
        return SiteAnswer(site, f"error: {type(exc).__name__}", url, elapsed_ms=_ms_since(started))


def _call(http: urllib3.PoolManager, site: str, url: str, timeout_s: float, auth: Mapping[str, str],
          body: Any = None) -> SiteAnswer:
    began = time.monotonic()
    headers = {"Accept": "application/json", **auth}
    method, data = "GET", None
    if body is not None:
        method, data = "POST", orjson.dumps(body)
        headers["Content-Type"] = "application/json"
    try:
        response = http.request(method, url, body=data, headers=headers,
                                timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
                                redirect=False)
    except NewConnectionError as exc:  # first: urllib3 makes it a subclass of its TimeoutError
        LOG.info("site %s at %s: %s", site, url, exc)
        return SiteAnswer(site, "error: cannot connect", url, elapsed_ms=_ms_since(began))
    except TimeoutError:
        return SiteAnswer(site, TIMEOUT, url, elapsed_ms=_ms_since(began))
    except HTTPError as exc:
        return SiteAnswer(site, f"error: {exc.__class__.__name__}", url, elapsed_ms=_ms_since(began))
    except Exception as exc:  # noqa: BLE001 - whatever a site does is that site's error
        return SiteAnswer(site, f"error: {exc.__class__.__name__}", url, elapsed_ms=_ms_since(began))
    try:
        # orjson: nesting beyond 1024 is an error (json raised RecursionError), NaN is refused, and
        # integers beyond 64 bits come back as floats, so the merged answer always serialises.
        body, is_json = orjson.loads(response.data), True
    except orjson.JSONDecodeError:
        body, is_json = None, False
    return answer_of(site, url, response.status, body, is_json, _ms_since(began))


def _ms_since(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 1)
