"""Client faults named for people, back-off lines, and secrets kept out.

The error strings are librdkafka 2.16's and the Java client's own words, as seen on real brokers
(tests/e2e/test_secured_clusters.py drives the same paths end to end).
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from clients.client_faults import (
    ClientWatch,
    ClusterRejected,
    SecretScrubber,
    classify,
    classify_java,
    jaas_secrets,
    redact_jaas,
)
from clients.client_renderings import secret_values, security_of
from clients.retry_backoff import RetryBackoff
from contract.config import parse_config

SASL_BAD = ("sasl_plaintext://127.0.0.1:40123/bootstrap: SASL authentication error: Authentication failed "
            "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
            "(after 308ms in state AUTH_REQ)")
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="srm" '
              'password="s3cr\\"et-pw";')


@pytest.mark.parametrize(("code", "text", "message"), [
    (KafkaError._AUTHENTICATION, SASL_BAD,
     "east: SASL authentication failed (SCRAM-SHA-512): invalid credentials"),
    (KafkaError._AUTHENTICATION, "sasl_plaintext://127.0.0.1:1/bootstrap: SASL PLAIN mechanism handshake "
     "failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512",
     "east: SASL authentication failed (SCRAM-SHA-512): the broker does not enable SCRAM-SHA-512 "
     "(it offers SCRAM-SHA-512)"),
    (KafkaError._SSL, "ssl://127.0.0.1:1/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
     "certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is "
     "correctly configured", "east: TLS handshake failed: the broker certificate is not trusted (check "
     "ssl.truststore.* and ssl.endpoint.identification.algorithm)"),
    (KafkaError._TRANSPORT, "ssl://127.0.0.1:1/bootstrap: Receive failed: error:0A000412:SSL routines::"
     "ssl/tls alert bad certificate: SSL alert number 42",
     "east: TLS handshake failed: the broker requires a client certificate (mTLS): set ssl.keystore.*"),
    (KafkaError._TRANSPORT, "ssl://127.0.0.1:1/bootstrap: Receive failed: ssl/tls alert certificate "
     "unknown: SSL alert number 46", "east: TLS handshake failed: the broker does not trust the client "
     "certificate"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed",
     "east: not authorized: Broker: Topic authorization failed"),
])
def test_librdkafka_errors_are_named_with_alias_and_mechanism(code, text, message):
    fault = classify(code, text, "east", "SCRAM-SHA-512")
    assert fault is not None
    assert fault.message == message
    assert "127.0.0.1" not in fault.message


@pytest.mark.parametrize(("code", "text"), [
    (KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
    (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
    (KafkaError._TIMED_OUT, "Local: Timed out"),
])
def test_unreachable_is_not_a_refusal(code, text):
    assert classify(code, text, "east") is None


def test_java_exceptions_are_named_too():
    text = ("java.util.concurrent.ExecutionException: "
            "org.apache.kafka.common.errors.SaslAuthenticationException:"
            " Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512")
    assert classify_java(text, "west", "SCRAM-SHA-512").message == (
        "west: SASL authentication failed (SCRAM-SHA-512): invalid credentials")
    pkix = ("org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\nCaused by: "
            "sun.security.validator.ValidatorException: PKIX path building failed")
    assert classify_java(pkix, "west").message == (
        "west: TLS handshake failed: the broker certificate is not trusted (check ssl.truststore.*)")
    assert classify_java("java.net.ConnectException: Connection refused", "west") is None


def test_watch_keeps_the_fault_and_check_raises_it():
    watch = ClientWatch("east", "SCRAM-SHA-512")
    watch.check()  # nothing yet
    watch.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert watch.fault is None
    watch.error_cb(KafkaError(KafkaError._AUTHENTICATION, SASL_BAD))
    with pytest.raises(ClusterRejected) as caught:
        watch.check()
    assert str(caught.value) == "east: SASL authentication failed (SCRAM-SHA-512): invalid credentials"


def test_jaas_secrets_are_found_and_redacted():
    assert jaas_secrets(SCRAM_JAAS) == ['s3cr\\"et-pw']
    assert redact_jaas(SCRAM_JAAS) == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                       'username="srm" password="[redacted]";')


def test_config_secret_values_and_scrubber():
    config = parse_config(
        "clusters = east\neast.bootstrap.servers = e:9092\neast.security.protocol = SASL_SSL\n"
        "east.sasl.mechanism = SCRAM-SHA-512\n"
        'east.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="srm" password="pw-123456";\n'
        "east.ssl.truststore.type = PEM\neast.ssl.truststore.location = /etc/ca.pem\n"
        "east.ssl.keystore.type = PKCS12\neast.ssl.keystore.location = /etc/ks.p12\n"
        "east.ssl.keystore.password = store-pass-9\n", "srm.properties")
    secrets = secret_values(config)
    assert {"pw-123456", "store-pass-9"} <= secrets
    assert "srm" not in secrets
    scrubber = SecretScrubber(secrets)
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "login %s with %s", ("pw-123456", "x"), None)
    try:
        raise RuntimeError("store store-pass-9 refused")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    assert scrubber.filter(record)
    assert record.getMessage() == "login [redacted] with x"
    assert "store-pass-9" not in (record.exc_text or "") and "[redacted]" in (record.exc_text or "")
    assert security_of(config, "east") == ("SASL_SSL", "SCRAM-SHA-512")


def test_backoff_logs_one_line_per_step_and_doubles(caplog):
    logger = logging.getLogger("test.backoff")
    backoff = RetryBackoff("replication east->west", logger, first_s=10, max_s=40)
    with caplog.at_level(logging.INFO, logger="test.backoff"):
        waits = [backoff.failed("east: refused") for _ in range(4)]
        backoff.failed("east: other reason")
        backoff.succeeded()
    assert waits == [10, 20, 40, 40]
    # Only this logger's lines: a thread of an earlier test in this process may log meanwhile.
    lines = [r for r in caplog.records if r.name == "test.backoff"]
    assert [r.levelname for r in lines] == ["ERROR", "WARNING", "WARNING", "WARNING", "ERROR", "INFO"]
    assert lines[0].getMessage() == "east: refused; replication east->west retries in 10 s"
    assert backoff.failed("east: refused") == 10  # success reset the wait


def test_tokens_and_url_secrets_are_secrets_of_the_file():
    from clients.reachability import redacted_url
    from contract.client_keys import is_secret

    config = parse_config(
        "clusters = east\neast.bootstrap.servers = e:9092\n"
        "service.auth.token = tok-service-1\n"
        "service.remote.paris.url = https://srm-paris.example.com:6670\n"
        "service.remote.paris.token = tok-paris-2\n"
        "redis.url = redis://srm:pw-userinfo-3@redis.example.com:6379/0?password=pw-query-4&db=1\n"
        "east.sasl.oauthbearer.token.endpoint.url = https://idp.example.com/token\n", "srm.properties")
    secrets = secret_values(config)
    assert {"tok-service-1", "tok-paris-2", "pw-userinfo-3", "pw-query-4"} <= secrets
    assert "https://idp.example.com/token" not in secrets  # where a token comes from is no secret
    assert is_secret("service.auth.token") and is_secret("service.remote.paris.token")
    assert not is_secret("sasl.oauthbearer.token.endpoint.url")
    line = "calling paris with tok-paris-2; redis at " + config.get("redis.url")
    scrubbed = SecretScrubber(secrets).scrub(line)
    assert not any(secret in scrubbed for secret in ("tok-paris-2", "pw-userinfo-3", "pw-query-4")), scrubbed
    assert "redis.example.com:6379/0" in scrubbed and "db=1" in scrubbed
    assert "pw-query-4" not in redacted_url(config.get("redis.url"))


@pytest.mark.parametrize("url, secret", [
    ("https://site.example/v2/replications?token=abc-123-secret&page=2", "abc-123-secret"),
    ("redis://r:6379/0?password=qs-pass-5", "qs-pass-5"),
    ("http://admin:userinfo-pass-6@site.example:6670/", "userinfo-pass-6"),
])
def test_url_secrets_are_scrubbed_even_when_not_in_the_file(url, secret):
    # A library's error names a URL the configuration never held (an advertised site, a redirect).
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "call to %s failed", (url,), None)
    assert SecretScrubber([]).filter(record)
    assert secret not in record.getMessage() and "[redacted]" in record.getMessage()
    assert "failed" in record.getMessage()
