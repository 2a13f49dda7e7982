"""Every console script, started as an operator would on a machine missing something: one line naming
what is missing and how to fix it, exit 2 for what a restart cannot fix and 1 for what does not answer
yet, never a traceback. (srm-control's unreachable cluster: tests/driver/test_control_cli.py.)

Programs are taken off PATH with a directory of links to everything else on it, so the real scripts
run against the real rest of the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aggregator import kafka_connector
from stack.jars import cache_dir
from stack.kafka_cluster import free_port
from stack.prerequisites import MissingPrerequisite, require

ROOT = Path(__file__).resolve().parents[1]


def path_without(tmp_path: Path, *programs: str) -> str:
    """A PATH of one directory linking every program on the current PATH except ``programs``."""
    shadow = tmp_path / "bin"
    shadow.mkdir(exist_ok=True)
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            link, real = shadow / name, Path(folder) / name
            if name in programs or link.exists() or not os.access(real, os.X_OK) or real.is_dir():
                continue
            link.symlink_to(real)
    return str(shadow)


def environment(path: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    if path is not None:
        env["PATH"] = path
    env.update(extra)
    return env


def properties(tmp_path: Path, redis_port: int | None = None, extra: str = "") -> str:
    path = tmp_path / "srm.properties"
    path.write_text(f"""clusters = east, west
east.bootstrap.servers = 127.0.0.1:{free_port()}
west.bootstrap.servers = 127.0.0.1:{free_port()}
east->west.enabled = true
service.target.clusters = west
redis.url = redis://127.0.0.1:{redis_port or free_port()}/0
aggregator.checkpoint.dir = {tmp_path / "checkpoints"}
{extra}""")
    return str(path)


def run(module: str, config: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, "--config", config], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.usefixtures("external_processes")
def test_aggregator_without_java_names_java_and_how_to_install_it(tmp_path: Path) -> None:
    done = run("aggregator", properties(tmp_path), environment(path_without(tmp_path, "java")))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("srm-aggregator: `java` was not found on PATH")
    assert "openjdk-17-jre-headless" in line


@pytest.mark.usefixtures("external_processes")
def test_aggregator_with_a_java_home_without_java_names_java_home(tmp_path: Path) -> None:
    done = run("aggregator", properties(tmp_path), environment(JAVA_HOME=str(tmp_path)))
    assert done.returncode == 2
    assert "JAVA_HOME is " in one_line(done.stderr)


def offline(tmp_path: Path) -> str:
    """Java options for a JVM that reaches no repository: every connection through a closed proxy port,
    and a home without the ~/.m2 that Spark's Ivy would otherwise read jars from."""
    (tmp_path / "home").mkdir(exist_ok=True)
    port = free_port()
    proxies = [f"-D{scheme}.proxyHost=127.0.0.1 -D{scheme}.proxyPort={port}" for scheme in ("http", "https")]
    return " ".join([f"-Duser.home={tmp_path / 'home'}", *proxies])


@pytest.mark.usefixtures("external_processes")
def test_aggregator_offline_without_cached_jars_names_the_connector_and_maven_central(tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    env = environment(SRM_CACHE_DIR=str(cache), JAVA_TOOL_OPTIONS=offline(tmp_path))
    done = run("aggregator", properties(tmp_path), env)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("srm-aggregator: Spark could not fetch its Kafka connector "
                           f"{kafka_connector.coordinates()} (")
    assert "needs Maven Central" in line
    # Nothing half made is left to pass for a resolved connector.
    assert [p.name for p in (cache / "ivy").iterdir() if not p.name.startswith(".")] == []


@pytest.mark.usefixtures("external_processes")
def test_aggregator_offline_with_cached_jars_gets_past_them(tmp_path: Path) -> None:
    kafka_connector.jars()  # the cache the suite uses, resolved here if it was not yet
    env = environment(JAVA_TOOL_OPTIONS=offline(tmp_path))
    done = run("aggregator", properties(tmp_path), env)
    assert done.returncode == 1
    assert "Redis at redis://127.0.0.1:" in one_line(done.stderr)


@pytest.mark.usefixtures("external_processes")
def test_aggregator_without_redis_says_which_redis_and_exits_1(tmp_path: Path) -> None:
    redis_port = free_port()
    done = run("aggregator", properties(tmp_path, redis_port), environment())
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith(f"srm-aggregator: Redis at redis://127.0.0.1:{redis_port}/0 does not answer")
    assert line.endswith("start redis-server there or set redis.url")


@pytest.mark.usefixtures("external_processes")
def test_service_without_redis_warns_once_and_serves(tmp_path: Path) -> None:
    port = free_port()
    config = properties(tmp_path, extra=f"service.port = {port}\nservice.workers = 1\n")
    process = subprocess.Popen([sys.executable, "-m", "service", "--config", config], cwd=ROOT,
                               env=environment(), stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.stderr is not None:
            line = process.stderr.readline()
            lines.append(line)
            if "Listening at" in line:
                break
        redis_lines = [line for line in lines if "does not answer" in line]
        assert len(redis_lines) == 1, lines
        assert "WARNING service: Redis at redis://127.0.0.1:" in redis_lines[0]
        assert "set redis.url; the API answers 503 until it does" in redis_lines[0]
        assert not any("Traceback" in line for line in lines)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(60)  # stopping is test_stop_time's subject; here a loaded machine may be slow


@pytest.mark.usefixtures("external_processes")
def test_driver_names_each_unreachable_cluster_once_at_start(tmp_path: Path) -> None:
    config = properties(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "driver", "--config", config], cwd=ROOT,
                               env=environment(), stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(3)]
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=90)
    assert "driver for east, west: 1 replication(s) enabled, 1 emitting heartbeats only" in lines[0]
    for alias in ("east", "west"):
        assert any(f"cluster {alias!r} does not accept connections (127.0.0.1:" in line
                   and f"fix {alias}.bootstrap.servers" in line for line in lines[1:]), lines


@pytest.mark.usefixtures("external_processes")
def test_jar_resolution_without_maven_is_one_line(tmp_path: Path) -> None:
    env = environment(path_without(tmp_path, "mvn"), SRM_CACHE_DIR=str(tmp_path / "empty-cache"))
    done = subprocess.run([sys.executable, "-m", "stack.jars"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("stack.jars: `mvn` was not found on PATH")


@pytest.mark.usefixtures("external_processes")
def test_demo_without_redis_server_is_one_line(tmp_path: Path) -> None:
    env = environment(path_without(tmp_path, "redis-server"), SRM_CACHE_DIR=str(cache_dir()))
    done = subprocess.run([sys.executable, "-m", "stack.demo"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("make demo: `redis-server` was not found on PATH")


def test_the_browser_test_names_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", path_without(tmp_path, "chromium", "chromium-browser"))
    with pytest.raises(MissingPrerequisite, match=r"`chromium` was not found on PATH: .*apt-get install -y "
                                                  r"chromium"):
        require("chromium")
