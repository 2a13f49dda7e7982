"""A throw-away certificate authority for the secured local brokers, made at test time.

One EC P-256 CA signs a broker certificate (SAN ``localhost`` and ``127.0.0.1``, so hostname
verification stays on) and a client certificate for mTLS. The files come in every shape a user of
Java clients or librdkafka has: PEM, PKCS#12, a Java PEM key store (key and chain in one file) and JKS
(made by the JDK's own ``keytool``). Store passwords are random per PKI; they go to keytool through its
environment, never its command line.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from stack.prerequisites import require

VALID_DAYS = 7


@dataclass
class StackPki:
    """The CA and the stores of one test run, all under ``directory``."""

    directory: Path
    store_password: str = field(default_factory=lambda: f"store-{secrets.token_hex(8)}", repr=False)

    @property
    def ca_pem(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca_pem(self) -> Path:
        """A CA that signed nothing here: trusting it must fail the TLS handshake."""
        return self.directory / "other-ca.pem"

    @property
    def truststore_jks(self) -> Path:
        return self.directory / "truststore.jks"

    @property
    def broker_p12(self) -> Path:
        return self.directory / "broker.p12"

    @property
    def client_chain_pem(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key_pem(self) -> Path:
        return self.directory / "client-key.pem"

    @property
    def client_bundle_pem(self) -> Path:
        """Unencrypted key followed by the chain: a Java PEM key store, and a librdkafka PEM pair."""
        return self.directory / "client-bundle.pem"

    @property
    def client_p12(self) -> Path:
        return self.directory / "client.p12"

    @property
    def client_jks(self) -> Path:
        return self.directory / "client.jks"

    def create(self) -> StackPki:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import pkcs12
        from cryptography.x509 import DNSName, IPAddress
        from cryptography.x509.oid import ExtendedKeyUsageOID

        self.directory.mkdir(parents=True, exist_ok=True)
        pem = serialization.Encoding.PEM
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate("srm-test-ca", ca_key, None, ca_key, is_ca=True)
        self.ca_pem.write_bytes(ca.public_bytes(pem))
        other_key = ec.generate_private_key(ec.SECP256R1())
        self.other_ca_pem.write_bytes(
            _certificate("srm-other-ca", other_key, None, other_key, is_ca=True).public_bytes(pem))
        protect = serialization.BestAvailableEncryption(self.store_password.encode())
        usages = {"broker": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
                  "client": [ExtendedKeyUsageOID.CLIENT_AUTH]}
        for name, usage in usages.items():
            key = ec.generate_private_key(ec.SECP256R1())
            sans = ([DNSName("localhost"), IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    if name == "broker" else [])
            cert = _certificate(f"srm-{name}", key, ca, ca_key, usages=usage, sans=sans)
            self._write_private(self.directory / f"{name}.p12", pkcs12.serialize_key_and_certificates(
                name.encode(), key, cert, [ca], protect))
            chain = cert.public_bytes(pem) + ca.public_bytes(pem)
            plain_key = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())
            (self.directory / f"{name}.pem").write_bytes(chain)
            self._write_private(self.directory / f"{name}-key.pem", plain_key)
            self._write_private(self.directory / f"{name}-bundle.pem", plain_key + chain)
        self._jks_stores()
        return self

    def _jks_stores(self) -> None:
        keytool = require("keytool")
        env = {**os.environ, "SRM_STORE_PASS": self.store_password}
        for store in (self.truststore_jks, self.client_jks):
            store.unlink(missing_ok=True)
        commands = [
            [keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(self.ca_pem),
             "-keystore", str(self.truststore_jks), "-storetype", "JKS", "-storepass:env", "SRM_STORE_PASS"],
            [keytool, "-importkeystore", "-noprompt", "-srckeystore", str(self.client_p12),
             "-srcstoretype", "PKCS12", "-srcstorepass:env", "SRM_STORE_PASS",
             "-destkeystore", str(self.client_jks), "-deststoretype", "JKS",
             "-deststorepass:env", "SRM_STORE_PASS", "-destkeypass:env", "SRM_STORE_PASS"],
        ]
        for command in commands:
            done = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise RuntimeError(f"keytool {command[1]} failed: {done.stdout}{done.stderr}")

    @staticmethod
    def _write_private(path: Path, data: bytes) -> None:
        path.touch(mode=0o600, exist_ok=True)
        path.write_bytes(data)


def _certificate(subject: str, key, issuer, issuer_key, *, is_ca: bool = False,
                 usages: list | None = None, sans: list | None = None):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(name if issuer is None else issuer.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
    if is_ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())
