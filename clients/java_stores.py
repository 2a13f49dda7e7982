"""JKS stores made readable for librdkafka, with the JDK's own ``keytool``.

librdkafka reads PEM and PKCS#12 only; enterprise Java users hand over JKS trust and key stores. A JKS
trust store is exported to a PEM file of its certificates (``keytool -list -rfc``), a JKS key store is
converted to PKCS#12 (``keytool -importkeystore``). Results go into one private (0700) directory per
process, removed at exit, and are cached per file and modification time. Store passwords reach keytool
through its environment, never its command line (``ps`` shows argv to everyone).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from clients.client_properties import UnsupportedClientProperty

KEYTOOL_TIMEOUT_S: Final = 60.0
_PEM_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_lock = threading.Lock()
_cache: dict[tuple[str, str, int, int, str], str] = {}
_workdir: Path | None = None


def pem_trust_store(key: str, location: str, password: str | None, store_type: str) -> str:
    """Path of a PEM file holding the certificates of the ``store_type`` trust store at ``location``."""
    def export(out: Path) -> None:
        text = _keytool(key, ["-list", "-rfc", "-keystore", location, "-storetype", store_type],
                        {"-storepass": password})
        blocks = _PEM_BLOCK.findall(text)
        if not blocks:
            raise UnsupportedClientProperty(key, f"the {store_type} trust store holds no certificate")
        out.write_text("\n".join(blocks) + "\n")

    return _converted(key, location, password, "trust.pem", export)


def pkcs12_key_store(key: str, location: str, store_password: str | None, key_password: str | None,
                     store_type: str) -> tuple[str, str]:
    """(path, password) of a PKCS#12 copy of the ``store_type`` key store at ``location``. A whole-store
    copy needs the key password to equal the store password, as it does in a PKCS#12 store."""
    password = store_password or key_password
    if not password:
        raise UnsupportedClientProperty(key, f"a {store_type} key store needs ssl.keystore.password")

    def convert(out: Path) -> None:
        out.unlink(missing_ok=True)
        _keytool(key, ["-importkeystore", "-noprompt", "-srckeystore", location, "-srcstoretype", store_type,
                       "-destkeystore", str(out), "-deststoretype", "PKCS12"],
                 {"-srcstorepass": password, "-deststorepass": password})

    return _converted(key, location, password, "key.p12", convert), password


def _converted(key: str, location: str, password: str | None, suffix: str,
               make: Callable[[Path], None]) -> str:
    try:
        stat = os.stat(location)
    except OSError as exc:
        raise UnsupportedClientProperty(key, f"cannot read the store: {exc.strerror or exc}") from None
    # Keyed by a digest of the password too: the same store with another password is another answer.
    digest = hashlib.sha256((password or "").encode()).hexdigest()
    cache_key = (suffix, os.path.abspath(location), stat.st_mtime_ns, stat.st_size, digest)
    with _lock:
        if cache_key not in _cache:
            out = _private_dir() / f"{len(_cache)}-{suffix}"
            make(out)
            os.chmod(out, 0o600)
            _cache[cache_key] = str(out)
        return _cache[cache_key]


def _keytool(key: str, args: list[str], passwords: dict[str, str | None]) -> str:
    keytool = shutil.which("keytool")
    if keytool is None:
        raise UnsupportedClientProperty(
            key, "a JKS store needs the JDK's keytool on PATH to be read by librdkafka; install a JDK, or "
            "export the store to PEM (keytool -list -rfc) or PKCS12 (keytool -importkeystore) yourself")
    env = dict(os.environ)
    command = [keytool, *args]
    for number, (option, value) in enumerate(passwords.items()):
        if value:
            env[f"SRM_KEYTOOL_PASS_{number}"] = value
            command += [f"{option}:env", f"SRM_KEYTOOL_PASS_{number}"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=KEYTOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnsupportedClientProperty(key, f"keytool did not run: {exc}") from None
    if done.returncode != 0 or "keytool error" in done.stdout:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if "keytool error" in line]
        reason = lines[0].split("keytool error:", 1)[1].strip() if lines else f"exit status {done.returncode}"
        raise UnsupportedClientProperty(key, f"keytool cannot read the store: {reason}")
    return done.stdout


def _private_dir() -> Path:
    global _workdir
    if _workdir is None:
        _workdir = Path(tempfile.mkdtemp(prefix="srm-stores-"))  # mode 0700
        atexit.register(shutil.rmtree, _workdir, True)
    return _workdir
