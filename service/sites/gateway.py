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

Where a call goes (``service.sites.site_trust``, docs/security.md): a site with
``service.remote.<site>.url`` is called at that URL only, whatever its advertisements say, and only there
do its credentials go (``.username`` + ``.password`` for Basic, or ``.token`` for Bearer). A site
without one is called at its freshest advertisement whose scheme, host and port
``service.remote.allowed.hosts`` allows, never with credentials. Names are resolved and the call connects
to the checked address. Credentials are sent only when this gateway's own auth is on (``service.auth.*``),
or ``service.remote.credentials.without.auth = true`` says a proxy in front authenticates callers: an
open gateway would otherwise hand its stored keys to anyone who can reach it.

Each call has a total deadline (``service.remote.<site>.timeout.ms``, default
``service.remote.timeout.ms``), a body cap (``service.remote.max.body.bytes``), each site its own
``service.remote.max.concurrent.calls`` threads (more calls wait for one until their deadline), and a
circuit breaker
(``service.remote.breaker.*``) for a site that keeps timing out (``service.sites.remote_call``,
``service.sites.circuit_breaker``). Any failure of one site, a malformed answer included, is that
site's ``error: ...`` status, never the answer's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final
from urllib.parse import urlencode

import orjson

from contract.config import SrmConfig
from contract.settings import default_of
from contract.untrusted import shown
from service.sites.advertiser import site_name
from service.sites.circuit_breaker import Admission, CircuitBreakers
from service.sites.registry import EXPIRED_STATUS, RemoteService
from service.sites.remote_call import TIMEOUT, CallFailed, RemoteClient, parse_answer
from service.sites.site_outcomes import SiteOutcomes, outcome_of
from service.sites.site_settings import (
    DEFAULT_TIMEOUT_MS,
    WAITING_PER_THREAD,
    SiteAccess,
    configured_site_names,
    positive_setting,
    site_access,
)
from service.sites.site_trust import AllowList, Endpoint, RefusedAddress, Resolver, parse_allowed_hosts

LOG = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES: Final = default_of("service.remote.max.body.bytes", int)
OK = "ok"
LOCAL = "local"
ALL = "all"
MAX_MERGED_ITEMS = 100_000  # items of a merged answer; the site bodies under ``results`` stay whole
COLLECT_GRACE_S = 0.25  # a call ends at its own deadline; this is only for its thread to hand it over

LocalAnswer = Callable[[], tuple[int, Any]]
"""The local site's answer (HTTP status, JSON body), computed by the REST layer without HTTP."""


class UnknownSite(LookupError):
    """A site selector naming no site the gateway knows."""


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
    """Per-process gateway state: settings, connection pools, a thread pool and the circuit breakers."""

    def __init__(self, local_site: str, allowed: AllowList, access: Callable[[str], SiteAccess], *,
                 forwards_credentials: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 breakers: CircuitBreakers | None = None, calls_per_site: int = 4) -> None:
        self.local_site, self.allowed, self._access = local_site, allowed, access
        self.forwards_credentials = forwards_credentials
        self.client = RemoteClient(max_body_bytes)
        self.resolver = Resolver(allowed)
        self.breakers = breakers or CircuitBreakers()
        self.calls_per_site = calls_per_site
        # Each site has its own few threads: a tarpit ties up only its own, and calls waiting for them
        # end at their deadline. Created on first use; sites are capped (service.remote.max.sites).
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._executors_lock = threading.Lock()
        self.outcomes = SiteOutcomes()  # how calls to each site ended, for /metrics

    @classmethod
    def from_config(cls, config: SrmConfig) -> Gateway:
        """Bad settings fail here with a ConfigError naming the key."""
        key = "service.remote.allowed.hosts"
        try:
            allowed = parse_allowed_hosts(config.setting(key))
        except ValueError as exc:
            raise config.config_error(key, str(exc)) from None
        default_ms = positive_setting(config, "service.remote.timeout.ms", DEFAULT_TIMEOUT_MS)
        sites = {site: site_access(config, site, default_ms) for site in configured_site_names(config)}
        default = SiteAccess(default_ms / 1000)
        own_auth = bool(config.setting("service.auth.token") or config.setting("service.auth.basic.username"))
        forwards = own_auth or bool(config.setting("service.remote.credentials.without.auth"))
        if not forwards and any(access.headers() for access in sites.values()):
            LOG.warning("service.remote.<site> credentials are configured but will not be sent: this "
                        "gateway's own auth is off (set service.auth.token or service.auth.basic.*, or "
                        "service.remote.credentials.without.auth = true behind an authenticating proxy)")
        calls = positive_setting(config, "service.remote.max.concurrent.calls")
        breakers = CircuitBreakers(failures=positive_setting(config, "service.remote.breaker.failures"),
                                   open_s=positive_setting(config, "service.remote.breaker.open.ms") / 1000,
                                   max_waiting=WAITING_PER_THREAD * calls)
        return cls(site_name(config), allowed, lambda site: sites.get(site, default),
                   forwards_credentials=forwards, breakers=breakers, calls_per_site=calls,
                   max_body_bytes=positive_setting(config, "service.remote.max.body.bytes"))

    def access(self, site: str) -> SiteAccess:
        return self._access(site)

    def headers(self, site: str) -> dict[str, str]:
        """What a call to ``site`` carries for authentication: nothing unless credentials may go, and
        only to the site's configured URL."""
        access = self.access(site)
        return access.headers() if self.forwards_credentials and access.url is not None else {}

    def target(self, site: str, candidates: Sequence[RemoteService]) -> tuple[Endpoint, bool] | str:
        """(endpoint, configured) to call for ``site``, or the reason it is not called."""
        configured = self.access(site).url
        if configured is not None:  # the registry keeps only its advertisements at that URL
            return configured, True
        service = choose_service(candidates, self.allowed)
        if service is None:
            return (f"error: {shown(candidates[0].base_url, 100)} is not in service.remote.allowed.hosts; "
                    "not contacted")
        return Endpoint(service.protocol, service.host, service.port, service.root_path), False

    def executor(self, site: str) -> ThreadPoolExecutor:
        with self._executors_lock:
            executor = self._executors.get(site)
            if executor is None:
                executor = ThreadPoolExecutor(self.calls_per_site, thread_name_prefix="srm-gateway")
                self._executors[site] = executor
            return executor

    def close(self) -> None:
        with self._executors_lock:
            for executor in self._executors.values():
                executor.shutdown(wait=False, cancel_futures=True)
        self.client.clear()


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
    """The freshest advertised service of a site whose scheme, host and port are allowed, if any."""
    return next((s for s in services if allowed.allows(s.host, s.port, s.protocol)), None)


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
    list. ``partial`` is true when any asked site did not answer ``ok``. ``items`` holds at most
    ``MAX_MERGED_ITEMS`` (each is a new object); ``items_omitted`` counts the ones left out.
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
        every = ((item, a.site) for a in ok for item in a.body)
        merged["items"] = [_tagged(item, site) for item, site in islice(every, MAX_MERGED_ITEMS)]
        total = sum(len(a.body) for a in ok)
        if total > MAX_MERGED_ITEMS:
            merged["items_omitted"] = total - MAX_MERGED_ITEMS
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
    path_query = path + (f"?{urlencode(pairs)}" if pairs else "")
    data = None if body is None else _json_bytes(body)
    selection = select_sites(selector, gateway.local_site, local is not None, services, expired)
    started = time.monotonic()
    answers = [SiteAnswer(site, EXPIRED_STATUS) for site in selection.gone]
    calls: list[tuple[str, str, Future[SiteAnswer], float]] = []
    for site, candidates in selection.remote.items():
        target = gateway.target(site, candidates)
        if isinstance(target, str):
            answers.append(SiteAnswer(site, target))
            continue
        endpoint, configured = target
        access, url = gateway.access(site), endpoint.base_url + path_query
        admission = gateway.breakers.admit(site)
        if admission.refused is not None:
            answers.append(SiteAnswer(site, f"error: {admission.refused}", url, elapsed_ms=0.0))
            continue
        deadline = started + access.timeout_s
        try:
            future = gateway.executor(site).submit(_call, gateway, site, endpoint, configured, path_query,
                                                   gateway.headers(site), data, deadline, access.timeout_s,
                                                   admission)
        except RuntimeError:  # the pool is shut down: this process is stopping
            gateway.breakers.done(site, admission, failed=False)
            answers.append(SiteAnswer(site, "error: gateway stopping", url))
            continue
        calls.append((site, url, future, deadline))
    # The local answer runs in the calling thread (the REST layer's request context), while remotes run.
    mine = [_local_answer(gateway.local_site, local)] if selection.local else []
    answers += [_collect(site, url, future, deadline, started) for site, url, future, deadline in calls]
    for answer in answers:
        gateway.outcomes.count(answer.site, outcome_of(answer.status, EXPIRED_STATUS))
    return FanOutAnswer(mine + answers)


def _json_bytes(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # an integer beyond 64 bits in the caller's body: the stdlib writes it as it came
        return json.dumps(body, separators=(",", ":")).encode()


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
        return future.result(timeout=max(0.0, deadline - time.monotonic()) + COLLECT_GRACE_S)
    except FutureTimeout:  # still queued behind other calls, or resolving a name; it ends on its own
        return SiteAnswer(site, TIMEOUT, url, elapsed_ms=_ms_since(started))
    except Exception as exc:  # one site's failure is its status, never the answer's
        LOG.warning("site %s at %s: %s", site, url, shown(f"{type(exc).__name__}: {exc}"))
        return SiteAnswer(site, f"error: {type(exc).__name__}", url, elapsed_ms=_ms_since(started))


def _call(gateway: Gateway, site: str, endpoint: Endpoint, configured: bool, path_query: str,
          auth: Mapping[str, str], data: bytes | None, deadline: float, timeout_s: float,
          admission: Admission) -> SiteAnswer:
    began, url, failed = time.monotonic(), endpoint.base_url + path_query, False
    headers = {"Accept": "application/json", **auth}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        if began >= deadline:  # queued past its deadline: not worth a name lookup or a connection
            return SiteAnswer(site, TIMEOUT, url, elapsed_ms=0.0)
        address = gateway.resolver.checked_address(endpoint, configured)
        reply = gateway.client.call(endpoint, address, path_query, headers, data, deadline, timeout_s)
        body, is_json = parse_answer(reply.data)  # after the breaker's verdict: the site did answer
        return answer_of(site, url, reply.status, body, is_json, _ms_since(began))
    except CallFailed as exc:
        failed = exc.breaks
        return SiteAnswer(site, exc.status, url, elapsed_ms=_ms_since(began))
    except RefusedAddress as exc:
        LOG.warning("site %s: %s", site, shown(str(exc), 300))
        return SiteAnswer(site, f"error: {shown(str(exc), 300)}", url, elapsed_ms=_ms_since(began))
    except Exception as exc:  # whatever a site does is that site's error
        failed = True
        LOG.warning("site %s at %s: %s", site, url, shown(f"{type(exc).__name__}: {exc}"))
        return SiteAnswer(site, f"error: {exc.__class__.__name__}", url, elapsed_ms=_ms_since(began))
    finally:
        gateway.breakers.done(site, admission, failed)


def _ms_since(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 1)
