"""`srm-driver --config srm.properties`: runs every replication whose target this driver serves."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from driver.config import ConfigError, load_config
from driver.replication import ReplicationWorker

LOG = logging.getLogger("driver")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srm-driver", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="SRM properties file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"srm-driver: {exc}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    workers = [ReplicationWorker(config, r, stopping) for r in config.replications() if r.enabled]
    if not workers:
        LOG.warning("no enabled replication targets %s", ", ".join(config.driver_target_clusters))
    for worker in workers:
        worker.start()
    stopping.wait()
    for worker in workers:
        worker.join(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
