"""`srm-aggregator --config srm.properties`: one rollup query per service target cluster.

Runs under `python -m aggregator`, the console script, or `spark-submit aggregator/__main__.py` (the
master then comes from spark-submit). A query that fails is restarted alone from its checkpoint, so
one broken cluster does not stop the rollups of the others.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from aggregator.query import RollupQuerySpec, start_rollup_query
from driver.config import ConfigError, SrmConfig, load_config

LOG = logging.getLogger("aggregator")

RESTART_BACKOFF_S = 5.0


def query_specs(config: SrmConfig) -> list[RollupQuerySpec]:
    checkpoint_dir = config.get("aggregator.checkpoint.dir", default=".srm-checkpoints") or ""
    redis_url = config.get("redis.url", default="redis://127.0.0.1:6379/0") or ""
    specs = []
    for target in config.service_target_clusters:
        client = config.kafka_client_config(target, role="consumer")
        bootstrap = client.pop("bootstrap.servers")
        specs.append(RollupQuerySpec(
            target=target, bootstrap_servers=bootstrap, redis_url=redis_url,
            checkpoint_dir=checkpoint_dir, kafka_options=client,
            trigger_interval=f"{config.get_int('aggregator.trigger.interval.ms', default=2000)} milliseconds",
            watermark_delay=f"{config.get_int('aggregator.watermark.delay.seconds', default=30)} seconds",
        ))
    return specs


def run(config: SrmConfig, master: str | None) -> None:
    from aggregator.session import build_session

    spark = build_session(master or config.get("aggregator.spark.master", default="local[2]") or "local[2]")
    specs = {spec.query_name: spec for spec in query_specs(config)}
    queries = {name: start_rollup_query(spark, spec) for name, spec in specs.items()}
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    while not stopping.is_set():
        for name, query in list(queries.items()):
            if not query.isActive:
                LOG.error("query %s stopped: %s; restarting from its checkpoint", name, query.exception())
                time.sleep(RESTART_BACKOFF_S)
                queries[name] = start_rollup_query(spark, specs[name])
        stopping.wait(1.0)
    for query in queries.values():
        query.stop()
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srm-aggregator", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="SRM properties file")
    parser.add_argument("--master", help="Spark master (default: aggregator.spark.master or local[2])")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"srm-aggregator: {exc}", file=sys.stderr)
        return 2
    run(config, args.master)
    return 0


if __name__ == "__main__":
    sys.exit(main())
