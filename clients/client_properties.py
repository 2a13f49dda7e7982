"""Java Kafka client properties (as MM2/SRM files carry them) turned into librdkafka configuration.

Keys librdkafka knows under the same name pass through. Java-only keys with a clean librdkafka
counterpart are translated (JAAS PLAIN/SCRAM/Kerberos/OIDC credentials, PEM or PKCS#12 stores, a few
renamed settings). Java-only keys that cannot matter for connectivity are reported as dropped. A Java
setting that carries connectivity but cannot be translated is an error: silently
connecting without it would fail later and obscurely. JKS stores are converted with the JDK's keytool
(``clients.java_stores``). Values are never put into messages.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

LOG = logging.getLogger(__name__)

LIBRDKAFKA_PROPERTIES: Final[frozenset[str]] = frozenset(
    """
    bootstrap.servers client.id client.rack client.dns.lookup client.software.name client.software.version
    security.protocol sasl.mechanism sasl.mechanisms sasl.username sasl.password
    sasl.kerberos.service.name sasl.kerberos.principal sasl.kerberos.kinit.cmd sasl.kerberos.keytab
    sasl.kerberos.min.time.before.relogin enable.sasl.oauthbearer.unsecure.jwt sasl.oauthbearer.config
    sasl.oauthbearer.method sasl.oauthbearer.client.id sasl.oauthbearer.client.secret sasl.oauthbearer.scope
    sasl.oauthbearer.extensions sasl.oauthbearer.token.endpoint.url sasl.oauthbearer.grant.type
    sasl.oauthbearer.sub.claim.name sasl.oauthbearer.metadata.authentication.type
    sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret
    sasl.oauthbearer.assertion.algorithm sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.private.key.pem
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.claim.aud
    sasl.oauthbearer.assertion.claim.exp.seconds sasl.oauthbearer.assertion.claim.iss
    sasl.oauthbearer.assertion.claim.jti.include sasl.oauthbearer.assertion.claim.nbf.seconds
    sasl.oauthbearer.assertion.claim.sub sasl.oauthbearer.assertion.jwt.template.file
    ssl.ca.location ssl.ca.pem ssl.crl.location ssl.certificate.location ssl.certificate.pem ssl.key.location
    ssl.key.password ssl.key.pem ssl.keystore.location ssl.keystore.password ssl.cipher.suites
    ssl.curves.list ssl.sigalgs.list ssl.endpoint.identification.algorithm enable.ssl.certificate.verification
    ssl.engine.id ssl.engine.location ssl.providers https.ca.location https.ca.pem
    socket.timeout.ms socket.send.buffer.bytes socket.receive.buffer.bytes socket.keepalive.enable
    socket.nagle.disable socket.max.fails socket.connection.setup.timeout.ms broker.address.ttl
    broker.address.family connections.max.idle.ms reconnect.backoff.jitter.ms reconnect.backoff.ms
    reconnect.backoff.max.ms retry.backoff.ms retry.backoff.max.ms metadata.max.age.ms
    topic.metadata.refresh.interval.ms topic.metadata.refresh.fast.interval.ms topic.metadata.refresh.sparse
    topic.metadata.propagation.max.ms metadata.recovery.strategy metadata.recovery.rebootstrap.trigger.ms
    api.version.request api.version.request.timeout.ms api.version.fallback.ms broker.version.fallback
    message.max.bytes message.copy.max.bytes receive.message.max.bytes max.in.flight.requests.per.connection
    max.in.flight statistics.interval.ms enable.metrics.push debug log.connection.close
    allow.auto.create.topics
    group.id group.instance.id group.protocol group.remote.assignor partition.assignment.strategy
    session.timeout.ms heartbeat.interval.ms group.protocol.type coordinator.query.interval.ms
    max.poll.interval.ms enable.auto.commit auto.commit.interval.ms enable.auto.offset.store
    queued.min.messages queued.max.messages.kbytes fetch.wait.max.ms fetch.queue.backoff.ms
    fetch.message.max.bytes max.partition.fetch.bytes fetch.max.bytes fetch.min.bytes fetch.error.backoff.ms
    isolation.level enable.partition.eof check.crcs auto.offset.reset
    transactional.id transaction.timeout.ms enable.idempotence enable.gapless.guarantee
    queue.buffering.max.messages queue.buffering.max.kbytes queue.buffering.max.ms linger.ms
    message.send.max.retries retries batch.num.messages batch.size delivery.report.only.error
    sticky.partitioning.linger.ms acks request.required.acks request.timeout.ms message.timeout.ms
    delivery.timeout.ms partitioner compression.codec compression.type compression.level
    """.split()
)
"""librdkafka (2.x) properties a file may set for our clients; callbacks and test hooks are left out."""

_RENAMED: Final[Mapping[str, str]] = {
    "max.request.size": "message.max.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}
_ASSIGNORS: Final[Mapping[str, str]] = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "range": "range",
    "roundrobin": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
}
_TRUST_KEYS: Final = tuple(
    "ssl.truststore.location ssl.truststore.type ssl.truststore.password ssl.truststore.certificates".split()
)
_KEYSTORE_KEYS: Final = tuple(
    "ssl.keystore.location ssl.keystore.type ssl.keystore.password ssl.keystore.certificate.chain "
    "ssl.keystore.key".split()
)

_JAAS_ENTRY = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\b", re.I)
_JAAS_OPTION = re.compile(r'\s*(?P<name>[\w.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))')
_PLAIN_OR_SCRAM: Final = frozenset(
    {
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    }
)
_KERBEROS: Final = "com.sun.security.auth.module.Krb5LoginModule"
_OAUTHBEARER: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class UnsupportedClientProperty(ValueError):
    """A Java client property that carries connectivity but has no librdkafka equivalent."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class ClientPropertyTranslation:
    """librdkafka configuration plus the Java-only keys left out of it."""

    config: dict[str, str]
    dropped: tuple[str, ...]


Translator = Callable[[Mapping[str, str]], tuple[set[str], dict[str, str]]]


def to_librdkafka(props: Mapping[str, str]) -> ClientPropertyTranslation:
    """Translate Java client properties; native librdkafka keys win over translated Java ones."""
    # Key-store keys share names with librdkafka but not meaning (Java defaults to JKS): always translated.
    config = {
        key: value
        for key, value in props.items()
        if key in LIBRDKAFKA_PROPERTIES and key not in _KEYSTORE_KEYS
    }
    consumed = set(config)
    translators: tuple[Translator, ...] = (_jaas, _trust_store, _key_store, _renamed_settings)
    for translate in translators:
        keys, translated = translate(props)
        consumed.update(keys)
        for key, value in translated.items():
            config.setdefault(key, value)
    _normalise_values(config)
    dropped = tuple(sorted(key for key in props if key not in consumed))
    return ClientPropertyTranslation(config, dropped)


def _jaas(props: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    text = props.get("sasl.jaas.config")
    if text is None:
        return set(), {}
    module, options = _parse_jaas(text)
    if module in _PLAIN_OR_SCRAM:
        missing = [name for name in ("username", "password") if name not in options]
        if missing:
            raise UnsupportedClientProperty(
                "sasl.jaas.config", f"{module} has no {' or '.join(missing)} option"
            )
        return {"sasl.jaas.config"}, {
            "sasl.username": options["username"],
            "sasl.password": options["password"],
        }
    if module == _KERBEROS:
        names = {"principal": "sasl.kerberos.principal", "keyTab": "sasl.kerberos.keytab"}
        return {"sasl.jaas.config"}, {names[k]: v for k, v in options.items() if k in names}
    if module == _OAUTHBEARER and "clientId" in options:
        mapped = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": options["clientId"]}
        for option, key in (
            ("clientSecret", "sasl.oauthbearer.client.secret"),
            ("scope", "sasl.oauthbearer.scope"),
        ):
            if option in options:
                mapped[key] = options[option]
        return {"sasl.jaas.config"}, mapped
    raise UnsupportedClientProperty(
        "sasl.jaas.config",
        f"login module {module} has no librdkafka equivalent; set sasl.username/sasl.password or "
        "sasl.oauthbearer.* instead",
    )


def _parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """Module name and options of a single JAAS login-module entry (Kafka's sasl.jaas.config syntax)."""
    head = _JAAS_ENTRY.match(text)
    if head is None:
        raise UnsupportedClientProperty(
            "sasl.jaas.config", "not a '<LoginModule> required key=\"value\";' entry"
        )
    options: dict[str, str] = {}
    position = head.end()
    while (option := _JAAS_OPTION.match(text, position)) is not None:
        quoted = option.group("quoted")
        options[option.group("name")] = (
            re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option["bare"]
        )
        position = option.end()
    rest = text[position:].strip()
    if rest.startswith(";"):
        rest = rest[1:].strip()
    elif rest:
        raise UnsupportedClientProperty("sasl.jaas.config", f"cannot parse the options of {head['module']}")
    if rest:
        raise UnsupportedClientProperty("sasl.jaas.config", "only one login module entry is supported")
    return head["module"], options


def _trust_store(props: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    mapped: dict[str, str] = {}
    if "ssl.truststore.certificates" in props:
        mapped["ssl.ca.pem"] = props["ssl.truststore.certificates"]
    location = props.get("ssl.truststore.location")
    store_type = props.get("ssl.truststore.type", "JKS").strip().upper()
    if location is not None and "ssl.ca.location" not in props:
        if store_type == "PEM":
            mapped["ssl.ca.location"] = location
        else:  # JKS or PKCS12: librdkafka reads neither as a trust store; exported with keytool
            from clients.java_stores import pem_trust_store

            mapped["ssl.ca.location"] = pem_trust_store(
                "ssl.truststore.location", location, props.get("ssl.truststore.password"), store_type)
    return set(_TRUST_KEYS) & set(props), mapped


def _key_store(props: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    mapped: dict[str, str] = {}
    if "ssl.keystore.certificate.chain" in props:
        mapped["ssl.certificate.pem"] = props["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in props:
        mapped["ssl.key.pem"] = props["ssl.keystore.key"]
    location = props.get("ssl.keystore.location")
    if location is not None and "ssl.certificate.location" not in props:
        mapped.update(_key_store_file(location, props))
    return set(_KEYSTORE_KEYS) & set(props), mapped


def _key_store_file(location: str, props: Mapping[str, str]) -> dict[str, str]:
    declared = props.get("ssl.keystore.type")
    # Modern JVMs read PKCS#12 files through the default JKS type, so only a *.jks file without a declared
    # type is taken for JKS; librdkafka itself only reads PKCS#12 from ssl.keystore.location.
    is_jks_file = location.lower().endswith(".jks")
    store_type = declared.strip().upper() if declared else ("JKS" if is_jks_file else "PKCS12")
    if store_type == "PKCS12":
        mapped = {"ssl.keystore.location": location}
        if "ssl.keystore.password" in props:
            mapped["ssl.keystore.password"] = props["ssl.keystore.password"]
        return mapped
    if store_type == "PEM":
        # A Java PEM key store is one file holding the private key and the certificate chain.
        return {"ssl.certificate.location": location, "ssl.key.location": location}
    from clients.java_stores import pkcs12_key_store  # JKS: converted with keytool

    converted, password = pkcs12_key_store("ssl.keystore.location", location,
                                           props.get("ssl.keystore.password"), props.get("ssl.key.password"),
                                           store_type)
    return {"ssl.keystore.location": converted, "ssl.keystore.password": password}


def _renamed_settings(props: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    mapped = {_RENAMED[key]: value for key, value in props.items() if key in _RENAMED}
    consumed = set(_RENAMED) & set(props)
    if "buffer.memory" in props:
        consumed.add("buffer.memory")
        mapped["queue.buffering.max.kbytes"] = _kilobytes("buffer.memory", props["buffer.memory"])
    return consumed, mapped


def _kilobytes(key: str, value: str) -> str:
    try:
        return str(max(1, math.ceil(int(value.strip()) / 1024)))
    except ValueError:
        raise UnsupportedClientProperty(key, "expected a number of bytes") from None


def _normalise_values(config: dict[str, str]) -> None:
    """Rewrite Java spellings of values librdkafka spells differently."""
    if config.get("ssl.endpoint.identification.algorithm") == "":
        config["ssl.endpoint.identification.algorithm"] = "none"
    if config.get("auto.offset.reset", "").lower() == "none":
        config["auto.offset.reset"] = "error"
    strategy = config.get("partition.assignment.strategy")
    if strategy is not None:
        names = [_ASSIGNORS.get(part.strip()) for part in strategy.split(",") if part.strip()]
        if all(names) and names:
            config["partition.assignment.strategy"] = ",".join(name for name in names if name)
        else:
            # No librdkafka counterpart (e.g. the eager StickyAssignor): its default assignors apply.
            LOG.warning("partition.assignment.strategy names an assignor librdkafka lacks; using its default")
            del config["partition.assignment.strategy"]
