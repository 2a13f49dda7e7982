"""Kafka client faults named for people: which cluster, which mechanism, what is wrong. No secret, ever.

librdkafka reports a rejected login or TLS handshake only through the client's error callback, in
words that name a broker address and not the cluster alias, and it reconnects at a fixed rate for ever
(about 3 times a second for SASL, 20 for TLS), printing a line each time. This module:

- classifies those errors (``classify``) into a ``ConnectivityFault`` whose ``message`` reads like
  ``east: SASL authentication failed (SCRAM-SHA-512): invalid credentials``;
- keeps the newest fault of one client (``ClientWatch``, the client's ``error_cb``), so its owner can
  stop, close the client (the only thing that ends librdkafka's reconnects) and back off;
- hides every secret value of the configuration in every log record (``install_secret_scrubber``).

The callbacks run only inside the client's ``poll``/``consume``/``flush``: owners must poll.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from confluent_kafka import KafkaError

LOG = logging.getLogger(__name__)

AUTHENTICATION: Final = "authentication"
TLS: Final = "tls"
AUTHORIZATION: Final = "authorization"
REDACTED: Final = "[redacted]"

_AUTHORIZATION_CODES: Final = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
_TLS_ALERTS: Final = (
    (re.compile(r"alert number 42|bad certificate|certificate required|alert number 116", re.I),
     "the broker requires a client certificate (mTLS): set ssl.keystore.*"),
    (re.compile(r"alert number 4[68]|certificate unknown|unknown ca", re.I),
     "the broker does not trust the client certificate"),
)
_JAAS_OPTION: Final = re.compile(
    r'(?P<name>[\w.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))')
_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_URL_PASSWORD: Final = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)(?P<secret>[^\s/?#@]+)(?=@)")
_QUERY_VALUE: Final = re.compile(r"(?P<head>[?&;](?P<name>[\w.-]+)=)(?P<secret>[^&;#\s'\"]+)")
_SECRET_QUERY_MARKERS: Final = ("pass", "pwd", "token", "secret", "credential", "key", "sig", "auth")
_PUBLIC_JAAS_OPTIONS: Final = frozenset({"username", "principal", "keytab", "usekeytab", "storekey",
                                         "serviceName".lower(), "debug", "useticketcache", "clientid",
                                         "scope", "unsecuredloginstringclaim_sub"})


class ClusterUnavailable(RuntimeError):
    """A cluster did not answer, or refused an administrative request."""


class ClusterRejected(ClusterUnavailable):
    """A cluster refused this client: bad credentials, TLS trust, or no permission. Its message is
    ``fault.message``, safe to log and to report as a replication's error."""

    def __init__(self, fault: ConnectivityFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


class RequestRefused(ClusterUnavailable):
    """A cluster that accepts this client refused some of its requests for lack of permission (its
    ACLs). Unlike ClusterRejected the client keeps working, so the cluster still takes our reports.
    ``resources`` names what was refused (topics); the message is safe to log and to report."""

    def __init__(self, alias: str, message: str, resources: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.alias, self.resources = alias, tuple(resources)

    @classmethod
    def joined(cls, refusals: list[RequestRefused]) -> RequestRefused:
        if len(refusals) == 1:
            return refusals[0]
        return cls(refusals[0].alias, "; ".join(str(r) for r in refusals),
                   [name for r in refusals for name in r.resources])


@dataclass(frozen=True)
class ConnectivityFault:
    alias: str
    kind: str  # AUTHENTICATION, TLS or AUTHORIZATION
    cause: str
    mechanism: str | None = None

    @property
    def message(self) -> str:
        if self.kind == AUTHENTICATION:
            return f"{self.alias}: SASL authentication failed ({self.mechanism or 'SASL'}): {self.cause}"
        if self.kind == TLS:
            return f"{self.alias}: TLS handshake failed: {self.cause}"
        return f"{self.alias}: not authorized: {self.cause}"


def classify(code: int, text: str, alias: str, mechanism: str | None = None) -> ConnectivityFault | None:
    """The fault a librdkafka error (code and string) means, or None for other errors."""
    if code == KafkaError._AUTHENTICATION:
        if "invalid credentials" in text:
            return ConnectivityFault(alias, AUTHENTICATION, "invalid credentials", mechanism)
        offered = re.search(r"broker's supported mechanisms: ([\w, -]+)", text)
        if offered:
            return ConnectivityFault(alias, AUTHENTICATION, f"the broker does not enable {mechanism} "
                                     f"(it offers {offered.group(1).strip()})", mechanism)
        return ConnectivityFault(alias, AUTHENTICATION, _plain_cause(text), mechanism)
    if code == KafkaError._SSL:
        if "certificate verify failed" in text:
            return ConnectivityFault(alias, TLS, "the broker certificate is not trusted (check "
                                     "ssl.truststore.* and ssl.endpoint.identification.algorithm)")
        return ConnectivityFault(alias, TLS, _plain_cause(text))
    if code == KafkaError._TRANSPORT:
        for pattern, cause in _TLS_ALERTS:
            if pattern.search(text):
                return ConnectivityFault(alias, TLS, cause)
        return None
    if code in _AUTHORIZATION_CODES:
        return ConnectivityFault(alias, AUTHORIZATION, _plain_cause(text))
    return None


def classify_java(text: str, alias: str, mechanism: str | None = None) -> ConnectivityFault | None:
    """The fault a Java Kafka client's exception text (as Spark reports it) means, or None."""
    if "SaslAuthenticationException" in text:
        cause = ("invalid credentials" if "invalid credentials" in text
                 else _java_cause(text, "SaslAuthentication"))
        return ConnectivityFault(alias, AUTHENTICATION, cause, mechanism)
    if "SslAuthenticationException" in text:
        if "PKIX path" in text or "certification path" in text:
            cause = "the broker certificate is not trusted (check ssl.truststore.*)"
        elif "bad_certificate" in text or "certificate_required" in text:
            cause = "the broker requires a client certificate (mTLS): set ssl.keystore.*"
        else:
            cause = _java_cause(text, "SslAuthentication")
        return ConnectivityFault(alias, TLS, cause)
    if "AuthorizationException" in text:
        return ConnectivityFault(alias, AUTHORIZATION, _java_cause(text, "AuthorizationException"))
    return None


def _java_cause(text: str, exception: str) -> str:
    match = re.search(rf"\w*{exception}\w*: ([^\n]+)", text)
    return (match.group(1) if match else exception)[:200]


def _plain_cause(text: str) -> str:
    """librdkafka's words without the broker address and timing, capped."""
    cause = re.sub(r"\(after \d+ms in state \w+\)", "", text)
    cause = re.sub(r"^\S+://\S+/(?:\d+|bootstrap): ", "", cause).strip()
    return cause[:200]


class ClientWatch:
    """The newest fault of one client; ``error_cb`` is the client's librdkafka error callback."""

    def __init__(self, alias: str, mechanism: str | None = None) -> None:
        self.alias, self.mechanism = alias, mechanism
        self._lock = threading.Lock()
        self._fault: ConnectivityFault | None = None

    @property
    def fault(self) -> ConnectivityFault | None:
        with self._lock:
            return self._fault

    def error_cb(self, error: KafkaError) -> None:
        fault = classify(error.code(), error.str(), self.alias, self.mechanism)
        LOG.debug("%s client error %s: %s", self.alias, error.name(), error.str())
        if fault is not None:
            with self._lock:
                self._fault = fault

    def record(self, error: KafkaError) -> ConnectivityFault | None:
        """Classifies an error seen elsewhere (a request's, a delivery report's); keeps it if a fault."""
        self.error_cb(error)
        return classify(error.code(), error.str(), self.alias, self.mechanism)

    def check(self) -> None:
        """Raises ClusterRejected when a fault was seen."""
        fault = self.fault
        if fault is not None:
            raise ClusterRejected(fault)


def jaas_secrets(text: str) -> list[str]:
    """Values of the JAAS options in ``text`` that may be secret (all but user names and the like)."""
    return [match["quoted"] if match["quoted"] is not None else match["bare"]
            for match in _JAAS_OPTION.finditer(text) if match["name"].lower() not in _PUBLIC_JAAS_OPTIONS]


def redact_jaas(text: str) -> str:
    """A JAAS entry with every option value but the public ones replaced by [redacted]."""
    def hide(match: re.Match[str]) -> str:
        if match["name"].lower() in _PUBLIC_JAAS_OPTIONS:
            return match.group(0)
        return f'{match["name"]}="{REDACTED}"'

    return _JAAS_OPTION.sub(hide, text)


def _secret_query_name(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_QUERY_MARKERS)


def url_secrets(text: str) -> list[str]:
    """The secrets inside the URLs of ``text``: user-info passwords and the values of query parameters
    named like secrets (``redis://:pw@host/0``, ``redis://host/0?password=pw``, ``?token=...``)."""
    found: list[str] = []
    for url in _URL.findall(text):
        found += [match["secret"] for match in _URL_PASSWORD.finditer(url)]
        found += [match["secret"] for match in _QUERY_VALUE.finditer(url)
                  if _secret_query_name(match["name"])]
    return found


def redact_url_secrets(text: str) -> str:
    """``text`` with the secrets of its URLs (see ``url_secrets``) replaced by [redacted]."""
    def hide_query(match: re.Match[str]) -> str:
        return f"{match['head']}{REDACTED}" if _secret_query_name(match["name"]) else match.group(0)

    def hide(url: re.Match[str]) -> str:
        without_password = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}", url.group(0))
        return _QUERY_VALUE.sub(hide_query, without_password)

    return _URL.sub(hide, text)


class SecretScrubber(logging.Filter):
    """Replaces each known secret value in a record's message and traceback text by [redacted], and
    whatever stands as a password or token in a URL, known or not (a URL a library puts in an error)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first: a secret that contains another is hidden whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return redact_url_secrets(text) if "://" in text else text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self.scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        return True


def install_secret_scrubber(secrets: Iterable[str]) -> SecretScrubber:
    """Puts a SecretScrubber on every handler of the root logger (where every record ends up)."""
    scrubber = SecretScrubber(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(scrubber)
    return scrubber
