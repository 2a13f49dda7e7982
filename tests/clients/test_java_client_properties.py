"""The Java rendering of the client properties (Spark's Kafka source), and per-process validation.

The Java client gets the file's keys as written (JAAS, JKS), so a file the Java side reads natively is
not refused because librdkafka could not; keys written in librdkafka's spelling are mapped back.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    assert rendered["ssl.keystore.location"].startswith("/proc/self/fd/")  # a memory file, see below
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


KEY_COPY_HOLDER = """
import sys
import time

from confluent_kafka import Producer

from clients.client_renderings import kafka_client_config
from contract.config import parse_config

rendered = kafka_client_config(parse_config(sys.stdin.read(), "srm.properties"), "east")
Producer(rendered)  # librdkafka reads the key copy now: a path it cannot open fails here
print(rendered["ssl.keystore.location"], flush=True)
time.sleep(600)
"""


def key_copy_holder(config_text: str, tmpdir: Path, path: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir), **({"PATH": path} if path else {})}
    child = subprocess.Popen([sys.executable, "-c", KEY_COPY_HOLDER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert child.stdin is not None
    child.stdin.write(config_text)
    child.stdin.close()
    return child


def killed(child: subprocess.Popen[str]) -> None:
    os.killpg(child.pid, signal.SIGKILL)  # the process and its keytool, as an OOM kill or kill -9 does
    child.wait(30)


def files_in(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


@pytest.mark.usefixtures("external_processes")
def test_no_copy_of_a_private_key_outlives_a_sigkill(pki, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    child = key_copy_holder(BASE + (
        f"east.security.protocol = SSL\neast.ssl.truststore.type = PEM\n"
        f"east.ssl.truststore.location = {pki.ca_pem}\n"
        f"east.ssl.keystore.location = {pki.client_jks}\neast.ssl.keystore.password = {pki.store_password}\n"
    ), tmpdir)
    try:
        assert child.stdout is not None
        location = child.stdout.readline().strip()
        assert location, "the child did not render the configuration"
        assert files_in(tmpdir) == []  # not on disk even while the process runs
        assert os.path.exists(f"/proc/{child.pid}/fd/{location.rsplit('/', 1)[1]}")
    finally:
        killed(child)
    assert files_in(tmpdir) == []


@pytest.mark.usefixtures("external_processes")
def test_a_conversion_killed_midway_is_cleaned_by_the_next(pki, tmp_path, monkeypatch):
    tmpdir, bin_dir = tmp_path / "tmp", tmp_path / "bin"
    tmpdir.mkdir()
    bin_dir.mkdir()
    slow_keytool = bin_dir / "keytool"  # writes its output, then hangs: the kill lands mid-conversion
    slow_keytool.write_text('#!/bin/sh\nwhile [ "$1" != "-destkeystore" ]; do shift; done\n'
                            'echo "private key bytes" > "$2"\nexec sleep 600\n')
    slow_keytool.chmod(0o755)
    child = key_copy_holder(BASE + f"east.ssl.keystore.location = {pki.client_jks}\n"
                                   f"east.ssl.keystore.password = {pki.store_password}\n",
                            tmpdir, path=f"{bin_dir}:{os.environ['PATH']}")
    try:
        deadline = time.monotonic() + 60
        while not files_in(tmpdir) and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.1)
        assert files_in(tmpdir), "keytool never wrote its output"
    finally:
        killed(child)
    assert files_in(tmpdir)  # what a SIGKILL mid-conversion leaves

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    copy = tmp_path / "copy.jks"  # a store this process has not converted yet
    copy.write_bytes(pki.client_jks.read_bytes())
    config = parse_config(BASE + f"east.ssl.keystore.location = {copy}\n"
                                 f"east.ssl.keystore.password = {pki.store_password}\n", "srm.properties")
    kafka_client_config(config, "east")  # the next conversion on the host (real keytool)
    assert files_in(tmpdir) == []
