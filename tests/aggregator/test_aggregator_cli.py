"""`srm-aggregator` start-up: settings -> query specs, the Spark master, clear errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aggregator.__main__ import main, query_specs, spark_master
from contract.config import ConfigError, parse_config

BASE = """clusters = east, west
east.bootstrap.servers = 127.0.0.1:1
west.bootstrap.servers = 127.0.0.1:2
east->west.enabled = true
west->east.enabled = true
"""


def test_one_spec_per_target_with_the_aggregator_settings():
    config = parse_config(BASE + "aggregator.trigger.interval.ms = 250\n"
                          "aggregator.max.offsets.per.trigger = 9\n"
                          "aggregator.metrics.topics.pattern = srm-metrics\\\\.east\\\\.internal\n"
                          "aggregator.checkpoint.dir = /tmp/chk\nredis.url = redis://r:1/2\n")
    specs = {s.target: s for s in query_specs(config)}
    assert set(specs) == {"east", "west"}
    west = specs["west"]
    assert (west.bootstrap_servers, west.trigger_interval, west.max_offsets_per_trigger) == (
        "127.0.0.1:2", "250 milliseconds", 9)
    assert (west.topics_pattern, west.checkpoint_dir, west.redis_url) == (
        r"srm-metrics\.east\.internal", "/tmp/chk", "redis://r:1/2?socket_connect_timeout=5&socket_timeout=10")
    assert specs["east"].query_name == "rollup_east" and west.watermark_delay_ms == 30_000


def test_batches_are_bounded_by_default_and_zero_unbounds_them():
    (spec, *_) = query_specs(parse_config(BASE))
    assert spec.max_offsets_per_trigger == 200_000
    (spec, *_) = query_specs(parse_config(BASE + "aggregator.max.offsets.per.trigger = 0\n"))
    assert spec.max_offsets_per_trigger is None


def test_subjects_per_replication_are_capped_at_200000_by_default_and_the_cap_must_be_positive():
    (spec, *_) = query_specs(parse_config(BASE))
    assert spec.max_subjects_per_replication == 200_000
    (spec, *_) = query_specs(parse_config(BASE + "aggregator.max.subjects.per.replication = 5000\n"))
    assert spec.max_subjects_per_replication == 5000
    for value in ("0", "-5", "many"):
        with pytest.raises(ConfigError, match="aggregator.max.subjects.per.replication"):
            query_specs(parse_config(BASE + f"aggregator.max.subjects.per.replication = {value}\n"))


def test_spark_master_precedence(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert spark_master(parse_config(BASE), None) == "local[2]"
    assert spark_master(parse_config(BASE + "aggregator.spark.master = local[1]\n"), None) == "local[1]"
    assert spark_master(parse_config(BASE + "aggregator.spark.master = local[1]\n"), "spark://m:7077") == \
        "spark://m:7077"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1234")  # started by spark-submit: keep its master
    assert spark_master(parse_config(BASE), None) is None


def test_redis_timeouts_come_from_the_settings_unless_the_url_names_them():
    (spec, *_) = query_specs(parse_config(BASE + "redis.url = redis://r:1/0?socket_timeout=3\n"
                                          "redis.connect.timeout.ms = 1500\n"))
    assert spec.redis_url == "redis://r:1/0?socket_timeout=3&socket_connect_timeout=1.5"


@pytest.mark.parametrize(("line", "expected"), [
    ("redis.socket.timeout.ms = 0", "redis.socket.timeout.ms"),
    ("aggregator.trigger.interval.ms = soon", "aggregator.trigger.interval.ms"),
    ("aggregator.max.offsets.per.trigger = -5", "aggregator.max.offsets.per.trigger"),
])
def test_bad_settings_name_the_key_without_a_traceback(tmp_path: Path, capsys, line: str, expected: str):
    path = tmp_path / "srm.properties"
    path.write_text(BASE + line + "\n")
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.usefixtures("external_processes")
def test_aggregator_processes_put_off_returning_arrows_freed_pages():
    """Every aggregator process (the driver, spark-submit's) imports the package
    before pyarrow, whose allocator reads the setting once, when it loads: freed pages are returned
    when the process says (long_lived.return_freed_memory), not 10 ms after."""
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    probe = ("import sys, os, aggregator; "
             "print('pyarrow' in sys.modules, os.environ.get('MIMALLOC_PURGE_DELAY'))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "3600000"]


@pytest.mark.usefixtures("external_processes")
def test_a_stop_that_hangs_ends_the_process():
    """SIGTERM, then a stop stuck for good (as py4j's cleanup once was under spark-submit): the process
    still exits, with a message."""
    probe = """
import os, signal, threading
import aggregator.__main__ as cli
import aggregator.supervisor as supervisor

class Stuck:
    def __init__(self, *_, **__):
        pass
    def start_all(self):
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        return self
    def check(self):
        pass
    def stop_all(self):
        threading.Event().wait()

supervisor.QuerySupervisor = Stuck
cli.STOP_TIMEOUT_S = 0.5
cli.supervise(None, [])
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "stop did not finish in 0.5 s; exiting" in out.stderr
