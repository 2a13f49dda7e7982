"""Client properties for Java Kafka clients (Spark's Kafka source, anything on the JVM): the keys as written.

The SRM file carries Java keys (``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``, Kerberos
keys), and a Java client takes them as they are, JKS stores included. Keys a user wrote in librdkafka's
spelling are mapped back where Java has a counterpart (``sasl.username``/``sasl.password`` -> a JAAS
entry, ``ssl.ca.location`` -> a PEM trust store, a PEM key pair -> a PEM key store); other
librdkafka-only keys are reported as dropped, never passed on. A Java key always wins over a mapped one.
Values are never put into messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from clients.client_properties import LIBRDKAFKA_PROPERTIES, UnsupportedClientProperty

# librdkafka keys that Java clients know under the same name and meaning.
JAVA_SHARED: Final[frozenset[str]] = frozenset(
    """
    bootstrap.servers client.id client.rack client.dns.lookup security.protocol sasl.mechanism
    sasl.kerberos.service.name sasl.kerberos.min.time.before.relogin sasl.kerberos.kinit.cmd
    sasl.oauthbearer.token.endpoint.url sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    ssl.key.password ssl.keystore.location ssl.keystore.password ssl.cipher.suites
    ssl.endpoint.identification.algorithm socket.connection.setup.timeout.ms connections.max.idle.ms
    reconnect.backoff.ms reconnect.backoff.max.ms retry.backoff.ms retry.backoff.max.ms metadata.max.age.ms
    metadata.recovery.strategy metadata.recovery.rebootstrap.trigger.ms max.in.flight.requests.per.connection
    enable.metrics.push allow.auto.create.topics group.id group.instance.id group.protocol
    group.remote.assignor partition.assignment.strategy session.timeout.ms heartbeat.interval.ms
    max.poll.interval.ms enable.auto.commit auto.commit.interval.ms fetch.max.bytes fetch.min.bytes
    max.partition.fetch.bytes isolation.level check.crcs auto.offset.reset transactional.id
    transaction.timeout.ms enable.idempotence retries batch.size acks request.timeout.ms delivery.timeout.ms
    compression.type linger.ms
    """.split()
)
_SCRAM_OR_PLAIN: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_KERBEROS: Final = "com.sun.security.auth.module.Krb5LoginModule"


@dataclass(frozen=True)
class JavaClientProperties:
    """Java client configuration plus the librdkafka-only keys left out of it."""

    config: dict[str, str]
    dropped: tuple[str, ...]


def to_java(props: Mapping[str, str]) -> JavaClientProperties:
    """Java keys as written; librdkafka-only keys mapped back where Java has a counterpart."""
    config = {key: value for key, value in props.items() if not is_librdkafka_only(key)}
    mapped, consumed = _mapped_back(props)
    for key, value in mapped.items():
        config.setdefault(key, value)
    dropped = tuple(sorted(key for key in props if is_librdkafka_only(key) and key not in consumed))
    return JavaClientProperties(config, dropped)


def is_librdkafka_only(key: str) -> bool:
    return key in LIBRDKAFKA_PROPERTIES and key not in JAVA_SHARED


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes, escaped the way Kafka's JAAS parser reads it."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _mapped_back(props: Mapping[str, str]) -> tuple[dict[str, str], set[str]]:
    mapped: dict[str, str] = {}
    consumed: set[str] = set()
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip().upper()
    if "sasl.mechanisms" in props:
        consumed.add("sasl.mechanisms")
        mapped["sasl.mechanism"] = props["sasl.mechanisms"].strip()
    if "sasl.username" in props or "sasl.password" in props:
        consumed.update({"sasl.username", "sasl.password"})
        module = _SCRAM_OR_PLAIN.get(mechanism)
        if module is None:
            raise UnsupportedClientProperty(
                "sasl.username", f"a user name and password need sasl.mechanism PLAIN or SCRAM-SHA-256/512, "
                f"not {mechanism}")
        options = " ".join(f"{name}={jaas_quote(props.get(f'sasl.{name}', ''))}"
                           for name in ("username", "password"))
        mapped["sasl.jaas.config"] = f"{module} required {options};"
    if "sasl.kerberos.keytab" in props or "sasl.kerberos.principal" in props:
        consumed.update({"sasl.kerberos.keytab", "sasl.kerberos.principal"})
        krb5 = ["useKeyTab=true", "storeKey=true"]
        if "sasl.kerberos.keytab" in props:
            krb5.append(f"keyTab={jaas_quote(props['sasl.kerberos.keytab'])}")
        if "sasl.kerberos.principal" in props:
            krb5.append(f"principal={jaas_quote(props['sasl.kerberos.principal'])}")
        mapped["sasl.jaas.config"] = f"{_KERBEROS} required {' '.join(krb5)};"
    if "ssl.ca.location" in props:
        consumed.add("ssl.ca.location")
        mapped.update({"ssl.truststore.location": props["ssl.ca.location"], "ssl.truststore.type": "PEM"})
    elif "ssl.ca.pem" in props:
        consumed.add("ssl.ca.pem")
        mapped.update({"ssl.truststore.certificates": props["ssl.ca.pem"], "ssl.truststore.type": "PEM"})
    mapped.update(_key_pair(props, consumed))
    return mapped, consumed


def _key_pair(props: Mapping[str, str], consumed: set[str]) -> dict[str, str]:
    """A librdkafka client certificate and key as a Java key store (PEM inline, or the PKCS#12 file)."""
    if "ssl.certificate.pem" in props and "ssl.key.pem" in props:
        consumed.update({"ssl.certificate.pem", "ssl.key.pem"})
        return {"ssl.keystore.certificate.chain": props["ssl.certificate.pem"],
                "ssl.keystore.key": props["ssl.key.pem"], "ssl.keystore.type": "PEM"}
    if "ssl.certificate.location" in props and "ssl.key.location" in props:
        consumed.update({"ssl.certificate.location", "ssl.key.location"})
        chain, key = (_read(props, name) for name in ("ssl.certificate.location", "ssl.key.location"))
        return {"ssl.keystore.certificate.chain": chain, "ssl.keystore.key": key, "ssl.keystore.type": "PEM"}
    # ssl.keystore.location without a type: Java's default (JKS) reads PKCS#12 files as well.
    return {}


def _read(props: Mapping[str, str], key: str) -> str:
    try:
        return Path(props[key]).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UnsupportedClientProperty(key, f"cannot read the PEM file: {reason}") from None
