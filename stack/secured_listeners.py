"""Secured listeners for the local brokers: SASL/SCRAM, TLS, SASL over TLS and mutual TLS at once.

One KRaft node carries every mode on its own listener, so a test picks a mode by picking a port:

| mode | listener | security.protocol |
|---|---|---|
| ``sasl_plaintext`` | SASL | SASL_PLAINTEXT, SCRAM-SHA-512 |
| ``ssl`` | TLS | SSL (server certificate only) |
| ``sasl_ssl`` | SASLTLS | SASL_SSL, SCRAM-SHA-512 |
| ``mtls`` | MTLS | SSL with ``ssl.client.auth=required`` |

PLAINTEXT stays for the broker's own traffic and for test set-up. The SCRAM user is written when the
storage is formatted (``StorageTool format --add-scram``), so no admin step is needed after start.
``client_properties`` writes the SRM (Java) keys a user would put in the properties file for a mode.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Final

from stack.pki import StackPki

MECHANISM: Final = "SCRAM-SHA-512"
LISTENERS: Final[dict[str, str]] = {"sasl_plaintext": "SASL", "ssl": "TLS", "sasl_ssl": "SASLTLS",
                                     "mtls": "MTLS"}
MODES: Final = tuple(LISTENERS)
_PROTOCOLS: Final = {"SASL": "SASL_PLAINTEXT", "TLS": "SSL", "SASLTLS": "SASL_SSL", "MTLS": "SSL"}
_SCRAM_BROKER_JAAS: Final = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def scram_jaas(user: str, password: str) -> str:
    """A client's sasl.jaas.config for SCRAM, quoted as Kafka's JAAS parser reads it."""
    quoted = password.replace("\\", "\\\\").replace('"', '\\"')
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
            f'password="{quoted}";')


@dataclass
class BrokerSecurity:
    """What a broker needs to open the secured listeners: the PKI and the one SCRAM user."""

    pki: StackPki
    user: str = "srm"
    password: str = field(default_factory=lambda: f"pw-{secrets.token_hex(12)}", repr=False)

    def server_settings(self, ports: dict[str, int]) -> dict[str, str]:
        """server.properties lines for the extra listeners (``ports``: listener name -> port)."""
        names = ["PLAINTEXT", "CONTROLLER", *LISTENERS.values()]
        protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT",
                        *(f"{name}:{_PROTOCOLS[name]}" for name in LISTENERS.values())]
        return {
            "listeners": ",".join(f"{name}://127.0.0.1:{ports[name]}" for name in names),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{ports[name]}" for name in names
                                             if name != "CONTROLLER"),
            "listener.security.protocol.map": ",".join(protocol_map),
            "sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.sasl.{MECHANISM.lower()}.sasl.jaas.config": _SCRAM_BROKER_JAAS,
            f"listener.name.sasltls.{MECHANISM.lower()}.sasl.jaas.config": _SCRAM_BROKER_JAAS,
            "ssl.keystore.location": str(self.pki.broker_p12),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.pki.store_password,
            "ssl.key.password": self.pki.store_password,
            # Verifies the client certificates of the MTLS listener.
            "ssl.truststore.location": str(self.pki.ca_pem),
            "ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.client.auth": "required",
        }

    def format_arguments(self) -> list[str]:
        return ["--add-scram", f"{MECHANISM}=[name={self.user},password={self.password}]"]


def client_properties(mode: str, security: BrokerSecurity, trust: str = "pem", key_store: str = "pem",
                      password: str | None = None) -> dict[str, str]:
    """Java client properties (SRM file keys without the alias prefix) to reach the ``mode`` listener.

    ``trust``: ``pem`` (a PEM file) or ``jks``; ``key_store`` (mTLS): ``pem`` (Java PEM key store),
    ``pkcs12`` or ``jks``; ``password`` replaces the SCRAM password (for wrong-credential tests).
    """
    if mode not in LISTENERS:
        raise ValueError(f"unknown security mode {mode!r}; expected one of {', '.join(MODES)}")
    pki = security.pki
    props = {"security.protocol": _PROTOCOLS[LISTENERS[mode]]}
    if mode.startswith("sasl"):
        props["sasl.mechanism"] = MECHANISM
        props["sasl.jaas.config"] = scram_jaas(security.user, password or security.password)
    if mode == "sasl_plaintext":
        return props
    if trust == "jks":
        props.update({"ssl.truststore.location": str(pki.truststore_jks), "ssl.truststore.type": "JKS",
                      "ssl.truststore.password": pki.store_password})
    else:
        props.update({"ssl.truststore.location": str(pki.ca_pem), "ssl.truststore.type": "PEM"})
    if mode == "mtls":
        stores = {"pem": (pki.client_bundle_pem, "PEM"), "pkcs12": (pki.client_p12, "PKCS12"),
                  "jks": (pki.client_jks, "JKS")}
        location, store_type = stores[key_store]
        props.update({"ssl.keystore.location": str(location), "ssl.keystore.type": store_type})
        if store_type != "PEM":
            props.update({"ssl.keystore.password": pki.store_password,
                          "ssl.key.password": pki.store_password})
    return props
