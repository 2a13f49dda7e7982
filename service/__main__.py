"""`srm-service --config srm.properties`: serves the REST API with gunicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from gunicorn.app.base import BaseApplication

from contract.config import ConfigError, SrmConfig, load_config
from service.app import create_app
from service.server import connection_close, head_with_body
from service.sites.advertiser import gunicorn_hooks, site_name
from service.sites.discovered_directory import install_discovery

DEFAULT_PORT = 6670  # SRM Service's default REST port


def app_settings(config: SrmConfig) -> dict[str, Any]:
    """Flask settings from the properties file; the auth secrets go to the app, never to a log."""
    host = config.get("service.host", default="127.0.0.1")
    return {
        "REDIS_URL": config.get("redis.url", default="redis://127.0.0.1:6379/0"),
        "AUTH_USERNAME": config.get("service.auth.basic.username", default=None),
        "AUTH_PASSWORD": config.get("service.auth.basic.password", default=None),
        "AUTH_TOKEN": config.get("service.auth.token", default=None),
        "SERVICE_PROTOCOL": config.get("service.advertised.protocol", default="http"),
        "SERVICE_HOST": config.get("service.advertised.host", default=host),
        "SERVICE_PORT": config.get_int("service.advertised.port",
                                       default=config.get_int("service.port", default=DEFAULT_PORT)),
        "SERVICE_ROOT_PATH": config.get("service.advertised.root.path", default="/"),
        "SERVICE_TARGET_CLUSTERS": tuple(config.get_list("service.target.clusters", default=[])),
        "SERVICE_SITE": site_name(config),  # the name the advertiser and the gateway use too
    }


def check_auth_settings(settings: dict[str, Any]) -> str | None:
    """A half-configured Basic auth would silently leave the API open or locked: name the missing key."""
    if bool(settings["AUTH_USERNAME"]) != bool(settings["AUTH_PASSWORD"]):
        missing = "password" if settings["AUTH_USERNAME"] else "username"
        return f"service.auth.basic.{missing} is required when the other Basic auth key is set"
    return None


class ServiceServer(BaseApplication):
    def __init__(self, config: SrmConfig, hooks: dict[str, Any] | None = None) -> None:
        self.config_file, self.hooks = config, hooks or {}
        super().__init__()

    def load_config(self) -> None:
        host = self.config_file.get("service.host", default="127.0.0.1")
        port = self.config_file.get_int("service.port", default=DEFAULT_PORT)
        self.cfg.set("bind", f"{host}:{port}")
        self.cfg.set("workers", self.config_file.get_int("service.workers", default=2))
        self.cfg.set("threads", self.config_file.get_int("service.threads", default=4))
        self.cfg.set("accesslog", None)
        for name, hook in self.hooks.items():  # the advertiser: one per deployment, in the master
            self.cfg.set(name, hook)

    def load(self) -> Any:
        # Per worker, after the fork: discovery starts a consumer thread, which must not cross a fork.
        connection_close.install()
        head_with_body.install()
        app = create_app(app_settings(self.config_file))
        install_discovery(app, self.config_file)
        return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srm-service", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="SRM properties file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        settings = app_settings(config)
        hooks = gunicorn_hooks(config)
    except ConfigError as exc:
        print(f"srm-service: {exc}", file=sys.stderr)
        return 2
    problem = check_auth_settings(settings)
    if problem:
        print(f"srm-service: {args.config}: {problem}", file=sys.stderr)
        return 2
    ServiceServer(config, hooks).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
