"""What the installed librdkafka can do, asked of librdkafka itself once per process.

The confluent-kafka wheels are built without Cyrus SASL, so Kerberos (GSSAPI) is missing there; a
client asking for it fails when it is created. Checking at start-up turns that into a ConfigError.
"""

from __future__ import annotations

import functools

_KNOWN_BUILT_IN = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"})


def unsupported_mechanism(mechanism: str) -> str | None:
    """Why librdkafka cannot use SASL ``mechanism``, or None when it can."""
    name = mechanism.strip().upper()
    if name in _KNOWN_BUILT_IN:
        return None
    return _probe(name)


@functools.cache
def _probe(mechanism: str) -> str | None:
    from confluent_kafka import KafkaException, Producer

    try:
        # Creating a client connects to nothing until it is used; the mechanism is checked at creation.
        Producer({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "log_level": 0})
    except KafkaException as exc:
        text = exc.args[0].str()
        options = text.split("Current build options:", 1)[1].strip() if "build options:" in text else "?"
        if mechanism == "GSSAPI":
            return (f"Kerberos (GSSAPI) is not built into this librdkafka (its SASL mechanisms: {options}); "
                    "the driver and the service cannot use it, the aggregator (Java) can")
        return f"SASL mechanism {mechanism} is not available in this librdkafka (build options: {options})"
    return None
