"""The Java rendering of the client properties (Spark's Kafka source), and per-process validation.

The Java client gets the file's keys as written (JAAS, JKS), so a file the Java side reads natively is
not refused because librdkafka could not; keys written in librdkafka's spelling are mapped back.
"""

from __future__ import annotations

import logging
import os
import stat

import pytest

from clients.client_renderings import check_client_configs, java_client_config, kafka_client_config
from clients.java_client_properties import to_java
from contract.config import ConfigError, SrmConfig, parse_config
from stack.pki import StackPki

BASE = "clusters = east, west\neast.bootstrap.servers = e:9092\nwest.bootstrap.servers = w:9092\n"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def checked(text: str, renderings: tuple[str, ...] = ("librdkafka",)) -> SrmConfig:
    """The file as a process that builds ``renderings`` clients loads it (``clients.entry_point``)."""
    config = parse_config(text, "srm.properties")
    check_client_configs(config, renderings)
    return config


def test_java_keys_pass_through_as_written():
    config = checked(BASE + (
        "east.security.protocol = SASL_SSL\neast.sasl.mechanism = SCRAM-SHA-512\n"
        f'east.sasl.jaas.config = {SCRAM} required username="srm" password="pw";\n'
        "east.ssl.truststore.location = /etc/ts.jks\neast.ssl.truststore.password = changeit\n"
        "east.ssl.keystore.location = /etc/ks.jks\neast.ssl.keystore.password = changeit\n"
        "east.consumer.max.poll.records = 100\n"), ("java",))
    java = java_client_config(config, "east", role="consumer")
    assert java == {
        "bootstrap.servers": "e:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="srm" password="pw";',
        "ssl.truststore.location": "/etc/ts.jks", "ssl.truststore.password": "changeit",
        "ssl.keystore.location": "/etc/ks.jks", "ssl.keystore.password": "changeit",
        "max.poll.records": "100"}


def test_jks_files_that_librdkafka_cannot_use_are_fine_for_the_java_rendering():
    text = BASE + "west.ssl.truststore.location = /nonexistent/ts.jks\n"
    with pytest.raises(ConfigError, match="cannot read the store"):
        checked(text)  # the driver's check: librdkafka would need the file
    config = checked(text, ("java",))  # the aggregator's
    assert java_client_config(config, "west")["ssl.truststore.location"] == "/nonexistent/ts.jks"


def test_librdkafka_spellings_are_mapped_back(tmp_path):
    (tmp_path / "c.pem").write_text("CHAIN")
    (tmp_path / "k.pem").write_text("KEY")
    java = to_java({"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "a\"b", "sasl.password": "p\\w",
                    "ssl.ca.location": "/etc/ca.pem", "ssl.certificate.location": str(tmp_path / "c.pem"),
                    "ssl.key.location": str(tmp_path / "k.pem"), "socket.keepalive.enable": "true"})
    assert java.config == {
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} required username="a\\"b" password="p\\\\w";',
        "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM",
        "ssl.keystore.certificate.chain": "CHAIN", "ssl.keystore.key": "KEY", "ssl.keystore.type": "PEM"}
    assert java.dropped == ("socket.keepalive.enable",)


def test_kerberos_keys_become_a_krb5_jaas_entry_for_java_and_a_config_error_for_librdkafka():
    java = to_java({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
                    "sasl.kerberos.service.name": "kafka", "sasl.kerberos.keytab": "/etc/srm.keytab",
                    "sasl.kerberos.principal": "srm@EXAMPLE.COM"})
    assert java.config["sasl.jaas.config"] == (
        'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
        'keyTab="/etc/srm.keytab" principal="srm@EXAMPLE.COM";')
    assert java.config["sasl.kerberos.service.name"] == "kafka"
    text = BASE + ("east.security.protocol = SASL_PLAINTEXT\neast.sasl.mechanism = GSSAPI\n"
                   "east.sasl.kerberos.service.name = kafka\n")
    assert java_client_config(checked(text, ("java",)), "east")
    with pytest.raises(ConfigError) as caught:
        checked(text)
    assert str(caught.value).startswith("srm.properties:5: east.sasl.mechanism: Kerberos (GSSAPI) is not "
                                        "built into this librdkafka")


def test_dropped_librdkafka_only_keys_warn_once(caplog):
    config = checked(BASE + "east.enable.ssl.certificate.verification = false\n", ("java",))
    with caplog.at_level(logging.WARNING):
        java_client_config(config, "east")
        java_client_config(config, "east", role="consumer")
    assert "enable.ssl.certificate.verification = " not in caplog.text
    assert caplog.text.count("east.enable.ssl.certificate.verification is a librdkafka-only property") <= 1


def test_username_without_a_password_mechanism_is_a_located_error():
    with pytest.raises(ConfigError, match="need sasl.mechanism PLAIN or SCRAM"):
        checked(BASE + "east.sasl.username = srm\neast.sasl.password = pw\n", ("java",))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return StackPki(tmp_path_factory.mktemp("pki")).create()


@pytest.mark.usefixtures("external_processes")
def test_jks_stores_are_converted_for_librdkafka_with_keytool(pki):
    config = parse_config(BASE + (
        f"east.ssl.truststore.location = {pki.truststore_jks}\n"
        f"east.ssl.truststore.password = {pki.store_password}\n"
        f"east.ssl.keystore.location = {pki.client_jks}\neast.ssl.keystore.password = {pki.store_password}\n"
    ), "srm.properties")
    rendered = kafka_client_config(config, "east")
    ca = rendered["ssl.ca.location"]
    assert open(ca).read().strip() == pki.ca_pem.read_text().strip()
    assert stat.S_IMODE(os.stat(rendered["ssl.keystore.location"]).st_mode) == 0o600
    assert rendered["ssl.keystore.location"].endswith("key.p12")
    assert kafka_client_config(config, "east", role="producer")["ssl.ca.location"] == ca  # exported once


@pytest.mark.usefixtures("external_processes")
def test_a_wrong_store_password_is_named_without_the_password(pki):
    with pytest.raises(ConfigError) as caught:
        checked(BASE + f"east.ssl.keystore.location = {pki.client_jks}\n"
                       "east.ssl.keystore.password = not-the-password\n")
    assert "keytool cannot read the store" in str(caught.value)
    assert "not-the-password" not in str(caught.value)


def test_without_keytool_a_jks_store_is_a_config_error_saying_what_to_do(pki, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    moved = pki.directory / "moved.jks"
    moved.write_bytes(pki.truststore_jks.read_bytes())  # a file not converted yet
    with pytest.raises(ConfigError) as caught:
        checked(BASE + f"east.ssl.truststore.location = {moved}\n")
    assert "needs the JDK's keytool on PATH" in str(caught.value)
