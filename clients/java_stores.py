"""JKS stores made readable for librdkafka, with the JDK's own ``keytool``.

librdkafka reads PEM and PKCS#12 only; enterprise Java users hand over JKS trust and key stores. A JKS
trust store is exported to a PEM file of its certificates (``keytool -list -rfc``), a JKS key store is
converted to PKCS#12 (``keytool -importkeystore``). Store passwords reach keytool through its
environment, never its command line (``ps`` shows argv to everyone).

A PKCS#12 copy holds the private key, so no copy may outlive the process, not even a SIGKILL (no
``atexit`` runs then). keytool writes into a private (0700) directory of its own, named with this
process's id; the result is read into an anonymous memory file (``memfd_create``: 0600, gone with
the last descriptor, so with the process) and the directory is removed at once. Clients read the
copy at ``/proc/self/fd/<n>``, which a forked worker inherits. A process killed while keytool runs
leaves its directory behind; the next conversion on the host removes the directories of processes
that no longer run. Results are cached per file, modification time and password.
"""

from __future__ import annotations

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
_descriptors: list[int] = []  # the memory files behind the cached paths
_PREFIX: Final = "srm-stores-"


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
            _cache[cache_key] = _in_memory(suffix, make)
        return _cache[cache_key]


def _in_memory(suffix: str, make) -> str:
    """``make(path)`` run in a private directory, its result moved into a memory file; the path a
    client opens it at."""
    _remove_orphans()
    workdir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))  # mode 0700
    try:
        out = workdir / suffix
        make(out)
        data = out.read_bytes()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    fd = os.memfd_create(f"srm-{suffix}", os.MFD_CLOEXEC)  # open for the life of the process
    os.fchmod(fd, 0o600)
    os.write(fd, data)
    _descriptors.append(fd)
    return f"/proc/self/fd/{fd}"


def _remove_orphans() -> None:
    """Removes the conversion directories of processes that no longer run (killed during keytool)."""
    for leftover in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = leftover.name[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        if leftover.is_dir() and leftover.stat().st_uid == os.getuid():
            shutil.rmtree(leftover, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
