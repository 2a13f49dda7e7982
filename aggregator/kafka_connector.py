"""The jars of Spark's Kafka source (`spark-sql-kafka-0-10`), resolved by Spark's own Ivy, and the Java
that runs them.

Spark resolves `--packages` coordinates with Ivy at a JVM's start, from Maven Central, and copies the
jars into `<spark.jars.ivy>/jars`. The aggregator has it do so once per connector version, into a folder
of its cache (`$SRM_CACHE_DIR`, default `~/.cache/srm-monitor`), and then starts every session on those
local files: a warm start asks no repository anything and works with no network; Maven is never needed.
`python -m aggregator.kafka_connector` resolves and prints the jars, comma-separated, for
`spark-submit --jars` (and for an image to carry them).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pyspark

from clients.entry_point import CONFIG_ERROR_EXIT, StartupError

SCALA_VERSION = "2.13"
# What the connector's pom brings that pyspark/jars already ships (two copies on one classpath break
# logging and compression), as Ivy exclusion globs: Hadoop's client, slf4j, snappy, lz4 (its group since
# Spark 4.2) and Scala's parallel collections. Spark excludes its own modules (spark-tags and the like).
# Left are the connector's own 5 jars (of 11): the source, its token provider, kafka-clients,
# commons-pool2 and jsr305.
PROVIDED_BY_PYSPARK = ("org.apache.hadoop:*", "org.slf4j:*", "org.xerial.snappy:*", "at.yawk.lz4:*",
                       "org.scala-lang.modules:*")
DONE_MARKER = ".resolved"


class JavaNotFound(StartupError):
    """No Java to run Spark (named in one line instead of PySpark's traceback)."""


class ConnectorUnresolved(StartupError):
    """Spark's Ivy could not fetch the connector on a first start (no network, a proxy, a bad version)."""


def require_java() -> str:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set (as Spark's launcher
    picks it), else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise JavaNotFound(f"JAVA_HOME is {java_home}, but {java} is not an executable: point "
                               f"JAVA_HOME at a Java 17+ installation or unset it")
        return str(java)
    found = shutil.which("java")
    if found is None:
        raise JavaNotFound("`java` was not found on PATH: install a Java 17+ runtime, e.g. "
                           "`apt-get install -y openjdk-17-jre-headless`")
    return found


def coordinates() -> str:
    """The Maven coordinates of the connector matching the installed pyspark."""
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{metadata.version('pyspark')}"


def cache_dir() -> Path:
    return Path(os.environ.get("SRM_CACHE_DIR", Path.home() / ".cache" / "srm-monitor"))


def ivy_home() -> Path:
    """Spark's Ivy folder for this connector: named after what decides its jars, so that another pyspark
    version or exclusion list resolves afresh beside it."""
    digest = hashlib.sha1(repr((coordinates(), PROVIDED_BY_PYSPARK)).encode()).hexdigest()[:12]
    return cache_dir() / "ivy" / f"spark-kafka-{metadata.version('pyspark')}-{digest}"


def jars() -> list[str]:
    """The connector's jars, resolved first if this cache has not got them yet."""
    home = ivy_home()
    if not (home / DONE_MARKER).exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        # Several aggregators (the demo's, the tests') may start at once: one resolution per folder.
        with open(home.parent / f".{home.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (home / DONE_MARKER).exists():
                _resolve(home)
    return sorted(str(jar) for jar in (home / "jars").glob("*.jar"))


def _resolve(home: Path) -> None:
    """Spark's Ivy (spark-submit's --packages, on a program that does nothing) into a staging folder,
    renamed into place once complete: an interrupted resolution leaves nothing half made."""
    require_java()
    staging = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    idle = staging / "resolve_only.py"
    idle.write_text("")
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--packages", coordinates(),
         "--exclude-packages", ",".join(PROVIDED_BY_PYSPARK), "--conf", f"spark.jars.ivy={staging}",
         str(idle)], env=env, capture_output=True, text=True)
    if done.returncode != 0 or not list((staging / "jars").glob("*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        unresolved = re.search(r"unresolved dependency: ([^\]]+)", done.stderr)
        cause = unresolved.group(1) if unresolved else (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConnectorUnresolved(
            f"Spark could not fetch its Kafka connector {coordinates()} ({cause[:300]}): its first start "
            f"needs Maven Central (Java's proxy settings in JAVA_TOOL_OPTIONS, e.g. -Dhttps.proxyHost=…), "
            f"or a copy of {cache_dir() / 'ivy'} from a machine where it ran")
    idle.unlink()
    shutil.rmtree(staging / "cache")  # Ivy's own copies of the poms and jars: the session reads jars/
    staging.chmod(0o755)  # mkdtemp's 0700: readable by the user an image runs the aggregator as
    (staging / DONE_MARKER).write_text("\n".join(sorted(p.name for p in (staging / "jars").glob("*.jar")))
                                       + "\n")
    if home.exists():  # a marker-less leftover of an older copy
        shutil.rmtree(home)
    staging.rename(home)


def main() -> int:
    """Resolve the connector (if needed) and print its jars, comma-separated, for spark-submit --jars."""
    try:
        print(",".join(jars()))
    except StartupError as exc:
        print(f"aggregator.kafka_connector: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
