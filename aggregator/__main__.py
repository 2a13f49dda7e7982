"""`srm-aggregator --config srm.properties`: one rollup query per service target cluster.

Runs under `python -m aggregator`, the console script, or
`spark-submit --jars <spark-sql-kafka jars> aggregator/__main__.py --config …` (the master then comes
from spark-submit unless --master is given). A query that fails is restarted alone from its
checkpoint, so one broken cluster does not stop the rollups of the others.

Settings (besides the SRM keys): `aggregator.checkpoint.dir`, `aggregator.spark.master`,
`aggregator.trigger.interval.ms`, `aggregator.watermark.delay.seconds`,
`aggregator.max.offsets.per.trigger` (default 200000, 0 = unbounded),
`aggregator.metrics.topics.pattern` (Java regex of the raw metrics topics to read; default all),
`redis.url`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from aggregator.query import RollupQuerySpec
from aggregator.scheduler_pools import ALLOCATION_FILE_CONF, write_fair_scheduler_file
from contract.config import SrmConfig
from contract.entry_point import StartupError, config_parser, start

# A stop that takes longer ends the process anyway. Under spark-submit the JVM may be gone first, and a
# driver was seen blocked for good in py4j's cleanup; the checkpoints make a hard exit as safe as a crash.
STOP_TIMEOUT_S = 60.0

LOG = logging.getLogger("aggregator")
# Consumer settings Spark's Kafka source refuses or owns (it fails the query when they are given).
SPARK_MANAGED = frozenset({"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                           "enable.auto.commit", "interceptor.classes"})


def query_specs(config: SrmConfig) -> list[RollupQuerySpec]:
    checkpoint_dir = config.setting("aggregator.checkpoint.dir") or ""
    redis_url = config.setting("redis.url") or ""
    trigger_ms = config.setting("aggregator.trigger.interval.ms")
    watermark_s = config.setting("aggregator.watermark.delay.seconds")
    # Each micro-batch is collected into the driver (as Arrow) to be aggregated: a bound keeps a backlog
    # from arriving as one huge batch. 0 means unbounded.
    max_offsets = config.setting("aggregator.max.offsets.per.trigger")
    for key, value in (("aggregator.trigger.interval.ms", trigger_ms),
                       ("aggregator.watermark.delay.seconds", watermark_s),
                       ("aggregator.max.offsets.per.trigger", max_offsets)):
        if value is None or value < 0:
            raise config.config_error(key, f"must be a non-negative integer, got {value}")
    specs = []
    for target in config.service_target_clusters:
        # Spark's Kafka source is the Java client: it takes the file's Java keys as written.
        client = config.java_client_config(target, role="consumer")
        bootstrap = client.pop("bootstrap.servers")
        for key in sorted(SPARK_MANAGED & set(client)):
            LOG.warning("%s.%s is set by Spark's Kafka source itself; ignored for the aggregator",
                        target, key)
            del client[key]
        specs.append(RollupQuerySpec(
            target=target, bootstrap_servers=bootstrap, redis_url=redis_url,
            checkpoint_dir=checkpoint_dir, kafka_options=client,
            trigger_interval=f"{trigger_ms} milliseconds", watermark_delay_ms=watermark_s * 1000,
            max_offsets_per_trigger=max_offsets or None,
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


def run(specs: list[RollupQuerySpec], master: str | None) -> None:
    from aggregator.session import build_session

    with tempfile.TemporaryDirectory(prefix="srm-aggregator-") as scratch:
        targets = [spec.target for spec in specs]
        pools = write_fair_scheduler_file(targets, Path(scratch) / "fairscheduler.xml")
        # Spark reads the allocation file once, when the session starts.
        spark = build_session(master, extra={ALLOCATION_FILE_CONF: str(pools)})
    supervise(spark, specs)


def supervise(spark, specs: list[RollupQuerySpec]) -> None:
    from aggregator.supervisor import QuerySupervisor

    supervisor = QuerySupervisor(spark, specs).start_all()
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    while not stopping.is_set():
        supervisor.check()
        stopping.wait(1.0)
    watchdog = threading.Timer(STOP_TIMEOUT_S, _exit_hung)
    watchdog.daemon = True
    watchdog.start()
    supervisor.stop_all()
    spark.stop()
    watchdog.cancel()


def _exit_hung() -> None:
    # Not through logging: its locks may be what the stop is stuck on.
    os.write(2, f"srm-aggregator: stop did not finish in {STOP_TIMEOUT_S:g} s; exiting\n".encode())
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("srm-aggregator", __doc__.splitlines()[0])
    parser.add_argument("--master", help="Spark master (default: aggregator.spark.master, the "
                                         "spark-submit master, or local[2])")
    args = parser.parse_args(argv)

    def prepare(config: SrmConfig) -> tuple[list[RollupQuerySpec], str | None]:
        specs = query_specs(config)
        if not specs:
            raise StartupError(f"{config.path}: no target clusters (set service.target.clusters)")
        return specs, spark_master(config, args.master)

    started = start("srm-aggregator", args, prepare, clients=("java",))
    if isinstance(started, int):
        return started
    run(*started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
