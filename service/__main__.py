"""`srm-service --config srm.properties`: serves the REST API with gunicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from gunicorn.app.base import BaseApplication

from driver.config import ConfigError, SrmConfig, load_config
from service.app import create_app

DEFAULT_PORT = 6670  # SRM Service's default REST port


def app_settings(config: SrmConfig) -> dict[str, Any]:
    return {"REDIS_URL": config.get("redis.url", default="redis://127.0.0.1:6379/0")}


class ServiceServer(BaseApplication):
    def __init__(self, config: SrmConfig) -> None:
        self.config_file = config
        super().__init__()

    def load_config(self) -> None:
        host = self.config_file.get("service.host", default="127.0.0.1")
        port = self.config_file.get_int("service.port", default=DEFAULT_PORT)
        self.cfg.set("bind", f"{host}:{port}")
        self.cfg.set("workers", self.config_file.get_int("service.workers", default=2))
        self.cfg.set("threads", self.config_file.get_int("service.threads", default=4))
        self.cfg.set("accesslog", None)

    def load(self) -> Any:
        return create_app(app_settings(self.config_file))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srm-service", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="SRM properties file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"srm-service: {exc}", file=sys.stderr)
        return 2
    ServiceServer(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
