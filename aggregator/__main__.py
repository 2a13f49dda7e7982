"""`srm-aggregator --config srm.properties`: one rollup query per service target cluster.

Runs under `python -m aggregator`, the console script, or
`spark-submit --jars $(python -m aggregator.kafka_connector) aggregator/__main__.py --config …` (the
master then comes from spark-submit unless --master is given). A query that fails is restarted alone from its
checkpoint, so one broken cluster does not stop the rollups of the others.

Settings (besides the SRM keys): `aggregator.checkpoint.dir`, `aggregator.spark.master`,
`aggregator.trigger.interval.ms`, `aggregator.watermark.delay.seconds`,
`aggregator.max.offsets.per.trigger` (default 200000, 0 = unbounded),
`aggregator.max.subjects.per.replication` (default 200000: new subjects beyond it are refused),
`aggregator.metrics.topics.pattern` (Java regex of the raw metrics topics to read; default all),
`aggregator.stall.trigger.intervals` (a batch running this many triggers with input waiting is restarted),
`redis.url`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from aggregator.query import RollupQuerySpec
from aggregator.scheduler_pools import ALLOCATION_FILE_CONF, write_fair_scheduler_file
from clients import redis_connection
from clients.client_renderings import java_client_config
from clients.entry_point import StartupError, config_parser, start
from clients.reachability import Unreachable, redis_problem, warn_unreachable_clusters
from contract.config import SrmConfig

# A stop that takes longer ends the process anyway (SIGTERM to exit within 10 s). Under spark-submit the
# JVM may be gone first, and a driver was seen blocked for good in py4j's cleanup; the checkpoints and the
# sink's one MULTI per batch make a hard exit as safe as a crash.
STOP_TIMEOUT_S = 9.0
# Each query's stop waits this long for its running batch (spark.sql.streaming.stopTimeout), then the
# batch is abandoned: Spark replays it on the next start and the sink skips what Redis has.
QUERY_STOP_TIMEOUT_MS = 4000
# What is left of the deadline after the queries stopped goes to the sinks finishing a batch whose query's
# stop gave up on it (its merge), so Redis is left at a batch boundary; the Spark context stops last.
SPARK_STOP_RESERVE_S = 2.0

LOG = logging.getLogger("aggregator")
# Consumer settings Spark's Kafka source refuses or owns (it fails the query when they are given).
SPARK_MANAGED = frozenset({"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                           "enable.auto.commit", "interceptor.classes"})


def query_specs(config: SrmConfig) -> list[RollupQuerySpec]:
    checkpoint_dir = config.setting("aggregator.checkpoint.dir") or ""
    redis_url = redis_connection.configured_url(config)
    trigger_ms = config.setting("aggregator.trigger.interval.ms")
    watermark_s = config.setting("aggregator.watermark.delay.seconds")
    # Each micro-batch is collected into the driver (as Arrow) to be aggregated: a bound keeps a backlog
    # from arriving as one huge batch. 0 means unbounded.
    max_offsets = config.setting("aggregator.max.offsets.per.trigger")
    max_subjects = config.setting("aggregator.max.subjects.per.replication")
    if max_subjects is None or max_subjects < 1:
        raise config.config_error("aggregator.max.subjects.per.replication",
                                  f"must be a positive integer, got {max_subjects}")
    for key, value in (("aggregator.trigger.interval.ms", trigger_ms),
                       ("aggregator.watermark.delay.seconds", watermark_s),
                       ("aggregator.max.offsets.per.trigger", max_offsets)):
        if value is None or value < 0:
            raise config.config_error(key, f"must be a non-negative integer, got {value}")
    specs = []
    for target in config.service_target_clusters:
        # Spark's Kafka source is the Java client: it takes the file's Java keys as written.
        client = java_client_config(config, target, role="consumer")
        bootstrap = client.pop("bootstrap.servers")
        for key in sorted(SPARK_MANAGED & set(client)):
            LOG.warning("%s.%s is set by Spark's Kafka source itself; ignored for the aggregator",
                        target, key)
            del client[key]
        specs.append(RollupQuerySpec(
            target=target, bootstrap_servers=bootstrap, redis_url=redis_url,
            checkpoint_dir=checkpoint_dir, kafka_options=client,
            trigger_interval=f"{trigger_ms} milliseconds", watermark_delay_ms=watermark_s * 1000,
            max_offsets_per_trigger=max_offsets or None, max_subjects_per_replication=max_subjects,
            topics_pattern=config.setting("aggregator.metrics.topics.pattern"),
        ))
    return specs


def spark_master(config: SrmConfig, cli_master: str | None) -> str | None:
    from aggregator.session import launched_by_spark_submit

    if cli_master:
        return cli_master
    configured = config.setting("aggregator.spark.master")
    if configured:
        return configured
    return None if launched_by_spark_submit() else "local[2]"


def check_prerequisites() -> None:
    """Java for Spark, and the Kafka connector jars (Spark's Ivy fetches them on the first start): named
    in one line (StartupError) instead of PySpark's traceback."""
    from aggregator import kafka_connector

    kafka_connector.require_java()
    kafka_connector.jars()


def run(specs: list[RollupQuerySpec], master: str | None, config: SrmConfig | None = None) -> None:
    from aggregator.session import build_session

    with tempfile.TemporaryDirectory(prefix="srm-aggregator-") as scratch:
        targets = [spec.target for spec in specs]
        pools = write_fair_scheduler_file(targets, Path(scratch) / "fairscheduler.xml")
        # Spark reads the allocation file once, when the session starts.
        spark = build_session(master, extra={ALLOCATION_FILE_CONF: str(pools),
                                             "spark.sql.streaming.stopTimeout": str(QUERY_STOP_TIMEOUT_MS)})
    supervise(spark, specs, config)


def watch_clusters(config: SrmConfig, specs: list[RollupQuerySpec], stopping: threading.Event) -> None:
    """Probes the target clusters, so the API shows one that is down while it is (cluster_watch)."""
    from aggregator.cluster_watch import ClusterWatch
    from clients import kafka_clients

    client = redis_connection.connect(specs[0].redis_url)
    admins = {spec.target: kafka_clients.admin(config, spec.target) for spec in specs}
    ClusterWatch(client, admins, stopping).start()


def supervise(spark, specs: list[RollupQuerySpec], config: SrmConfig | None = None) -> None:
    from aggregator.query import close_sinks
    from aggregator.supervisor import STALL_INTERVALS, QuerySupervisor

    stall_intervals = config.setting("aggregator.stall.trigger.intervals") if config is not None else None
    if config is not None and (stall_intervals is None or stall_intervals < 1):
        raise config.config_error("aggregator.stall.trigger.intervals",
                                  f"must be a positive integer, got {stall_intervals}")
    supervisor = QuerySupervisor(spark, specs, stall_intervals=stall_intervals or STALL_INTERVALS).start_all()
    stopping = threading.Event()
    if config is not None:
        watch_clusters(config, specs, stopping)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    while not stopping.is_set():
        supervisor.check()
        stopping.wait(1.0)
    jvm = _jvm_process(spark)
    watchdog = threading.Timer(STOP_TIMEOUT_S, _exit_hung, args=(jvm,))
    watchdog.daemon = True
    watchdog.start()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    try:
        supervisor.stop_all()
        close_sinks(spark, max(0.0, deadline - SPARK_STOP_RESERVE_S - time.monotonic()))
        spark.stop()
    except Exception as exc:  # a SIGTERM to the process group reached the JVM too, and it went first
        LOG.warning("the Spark side ended before the queries were stopped (%s); Spark replays the "
                    "unfinished batch on the next start", type(exc).__name__)
    finally:
        _end_jvm(jvm, deadline)
        watchdog.cancel()


def _jvm_process(spark) -> subprocess.Popen | None:
    """The JVM this process launched (None under spark-submit, which launched us)."""
    context = getattr(spark, "sparkContext", None)
    return getattr(getattr(context, "_gateway", None), "proc", None)


def _end_jvm(jvm: subprocess.Popen | None, deadline: float) -> None:
    """The JVM's own shutdown hooks (run when the SIGTERM reached it too) were seen to take over 15 s:
    what is left of it at the deadline is killed."""
    if jvm is None:
        return
    try:
        jvm.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        LOG.warning("the Spark JVM did not exit in time; killing it")
        jvm.kill()
        jvm.wait()


def _exit_hung(jvm: subprocess.Popen | None) -> None:
    # Not through logging: its locks may be what the stop is stuck on.
    os.write(2, f"srm-aggregator: stop did not finish in {STOP_TIMEOUT_S:g} s; exiting\n".encode())
    if jvm is not None and jvm.poll() is None:
        jvm.kill()
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("srm-aggregator", __doc__.splitlines()[0])
    parser.add_argument("--master", help="Spark master (default: aggregator.spark.master, the "
                                         "spark-submit master, or local[2])")
    args = parser.parse_args(argv)

    def prepare(config: SrmConfig) -> tuple[list[RollupQuerySpec], str | None, SrmConfig]:
        specs = query_specs(config)
        if not specs:
            raise StartupError(f"{config.path}: no target clusters (set service.target.clusters)")
        check_prerequisites()
        problem = redis_problem(config.setting("redis.url") or "")
        if problem:
            raise Unreachable(problem)
        warn_unreachable_clusters(config, [spec.target for spec in specs],
                                  "its rollups start once it answers")
        return specs, spark_master(config, args.master), config

    started = start("srm-aggregator", args, prepare, clients=("java",))
    if isinstance(started, int):
        return started
    run(*started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
