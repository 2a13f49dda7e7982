"""Resolves the Kafka broker jars (for the local clusters of the demo, the tests and the benches) from
Maven Central. (The aggregator's Spark Kafka connector is its own: aggregator/kafka_connector.py.)

Jars land in a cache outside git (`$SRM_CACHE_DIR`, default `~/.cache/srm-monitor`) and are re-used
when present: a second run asks Maven nothing. The set lives in a folder named after the pom's hash, so
a version bump resolves afresh.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from clients.entry_point import CONFIG_ERROR_EXIT, StartupError
from stack.prerequisites import require

LOG = logging.getLogger(__name__)

POMS = Path(__file__).parent / "poms"
# Pinned: Debian's Maven 3.8 otherwise falls back to dependency-plugin 2.8, which lacks the options below.
COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
DONE_MARKER = ".resolved"


class JarResolutionError(StartupError):
    """Maven ran but could not resolve a jar set (no network, no proxy settings, a bad version)."""


def cache_dir() -> Path:
    return Path(os.environ.get("SRM_CACHE_DIR", Path.home() / ".cache" / "srm-monitor"))


def kafka_jars() -> Path:
    """Folder holding Apache Kafka (broker, tools, connect-mirror) and its log4j2 binding."""
    pom = POMS / "kafka" / "pom.xml"
    digest = hashlib.sha1(pom.read_bytes()).hexdigest()[:12]
    return _resolve(pom, cache_dir() / "jars" / f"kafka-{digest}", {})


def kafka_version() -> str:
    """Version of the resolved Apache Kafka broker, read off its jar name (kafka_2.13-<version>.jar)."""
    jar = next(kafka_jars().glob("kafka_2.13-*.jar"))
    return jar.stem.split("-", 1)[1]


def _resolve(pom: Path, target: Path, properties: dict[str, str]) -> Path:
    if (target / DONE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Tests, the demo and benches may resolve at once; one Maven run per folder is enough.
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / DONE_MARKER).exists():
            _run_maven(pom, target, properties)
    return target


def _run_maven(pom: Path, target: Path, properties: dict[str, str]) -> None:
    mvn = require("mvn")
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    args = [mvn, "-B", "-q", "-f", str(pom), COPY_GOAL, "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}"]
    args += [f"-D{k}={v}" for k, v in properties.items()]
    LOG.info("resolving %s from Maven Central into %s", pom.parent.name, target)
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        LOG.debug("Maven's output:\n%s%s", done.stdout[-4000:], done.stderr[-2000:])
        errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("[ERROR]")]
        cause = errors[0].removeprefix("[ERROR]").strip() if errors else f"mvn exited {done.returncode}"
        raise JarResolutionError(
            f"Maven could not resolve {pom.parent.name} jars ({cause[:300]}): Maven Central must be "
            f"reachable (proxy settings go in ~/.m2/settings.xml), or copy {cache_dir()} from a machine "
            f"where `make jars` ran")
    (staging / DONE_MARKER).write_text("\n".join(sorted(p.name for p in staging.glob("*.jar"))) + "\n")
    if target.exists():
        subprocess.run(["rm", "-rf", str(target)], check=True)
    staging.rename(target)


def main() -> int:
    """`python -m stack.jars`: resolve the Kafka jars (used by `make jars`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        folder = kafka_jars()
        print(f"kafka jars: {folder} ({len(list(folder.glob('*.jar')))} jars)")
    except StartupError as exc:
        print(f"stack.jars: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
