"""`srm-service --config srm.properties`: serves the REST API with gunicorn."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

from gunicorn.app.base import BaseApplication

from clients import redis_connection
from clients.entry_point import StartupError, parse_and_start
from clients.reachability import redis_problem
from contract.config import SrmConfig
from service.app import create_app
from service.server import connection_close, head_with_body
from service.sites.advertiser import advertiser_settings, gunicorn_hooks
from service.sites.discovered_directory import install_discovery
from service.sites.site_trust import portless_networks

LOG = logging.getLogger("service")
STOP_GRACE_S = 8  # seconds workers get to finish their requests at a stop


def app_settings(config: SrmConfig) -> dict[str, Any]:
    """Flask settings from the properties file; the auth secrets go to the app, never to a log."""
    advertised = advertiser_settings(config)  # /v2/services shows what the advertisements say
    return {
        "REDIS_URL": redis_connection.configured_url(config),
        "AUTH_USERNAME": config.setting("service.auth.basic.username"),
        "AUTH_PASSWORD": config.setting("service.auth.basic.password"),
        "AUTH_TOKEN": config.setting("service.auth.token"),
        "CORS_ORIGINS": tuple(config.setting("service.cors.allowed.origins")),
        "SERVICE_PROTOCOL": advertised.protocol,
        "SERVICE_HOST": advertised.host,
        "SERVICE_PORT": advertised.port,
        "SERVICE_ROOT_PATH": advertised.root_path,
        "SERVICE_TARGET_CLUSTERS": advertised.target_clusters,
        "SERVICE_SITE": advertised.site,
        **request_limits(config),
    }


def request_limits(config: SrmConfig) -> dict[str, int]:
    """The caps on one request's cost (docs/operations.md); each must be a positive integer."""
    limits = {"MAX_POINTS_PER_REQUEST": "service.max.points.per.request",
              "MAX_CONTENT_LENGTH": "service.max.request.bytes",
              "GRAFANA_MAX_TARGETS": "service.grafana.max.targets"}
    values = {}
    for name, key in limits.items():
        value = config.setting(key)
        if value is None or value <= 0:
            raise config.config_error(key, f"must be a positive integer, got {value}")
        values[name] = value
    return values


def check_auth_settings(settings: dict[str, Any]) -> str | None:
    """A half-configured Basic auth would silently leave the API open or locked: name the missing key."""
    if bool(settings["AUTH_USERNAME"]) != bool(settings["AUTH_PASSWORD"]):
        missing = "password" if settings["AUTH_USERNAME"] else "username"
        return f"service.auth.basic.{missing} is required when the other Basic auth key is set"
    return None


def startup_warnings(config: SrmConfig) -> list[str]:
    """What an operator must hear at start: an API anyone who can reach it may read, and allowlisted
    networks any writer of ``heartbeats`` may aim the gateway at, on any port."""
    settings = app_settings(config)
    warnings = [f"service.remote.allowed.hosts: {item!r} is a network without a port, so whoever can write "
                f"to heartbeats can make this gateway call any port of any host in it and read the answer "
                f"back; add the port the services listen on, as in 10.0.0.0/8:6670 or [fd00::/64]:6670 "
                f"(docs/security.md)"
                for item in portless_networks(config.setting("service.remote.allowed.hosts"))]
    if settings["AUTH_TOKEN"] or settings["AUTH_USERNAME"]:
        return warnings
    bind = f"{config.setting('service.host')}:{config.setting('service.port')}"
    warning = (f"authentication is off: anyone who can reach {bind} reads every metric; set "
               "service.auth.token or service.auth.basic.username/password (docs/security.md)")
    if not _loopback(config.setting("service.host")):
        warning += "; this address is not loopback, so other hosts can reach it"
    return [warning, *warnings]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ServiceServer(BaseApplication):
    def __init__(self, config: SrmConfig, hooks: dict[str, Any] | None = None) -> None:
        self.config_file, self.hooks = config, hooks or {}
        super().__init__()

    def load_config(self) -> None:
        config = self.config_file
        self.cfg.set("bind", f"{config.setting('service.host')}:{config.setting('service.port')}")
        self.cfg.set("workers", config.setting("service.workers"))
        self.cfg.set("threads", config.setting("service.threads"))
        self.cfg.set("accesslog", None)
        # gunicorn waits 30 s for workers by default: a slow request or a worker still booting would
        # hold the stop past the 10 s every process promises (docs/operations.md); then it kills them.
        self.cfg.set("graceful_timeout", STOP_GRACE_S)
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
    def prepare(config: SrmConfig) -> ServiceServer:
        problem = check_auth_settings(app_settings(config))
        if problem:
            raise StartupError(f"{config.path}: {problem}")
        for warning in startup_warnings(config):
            # ERROR when other hosts can reach the open API: it must stand out in any log setup.
            LOG.log(logging.ERROR if "not loopback" in warning else logging.WARNING, warning)
        redis_down = redis_problem(config.setting("redis.url"))
        if redis_down:  # not fatal: it may come up after the service, which answers 503 until then
            LOG.warning("%s; the API answers 503 until it does", redis_down)
        return ServiceServer(config, gunicorn_hooks(config))

    server = parse_and_start("srm-service", __doc__.splitlines()[0], argv, prepare)
    if isinstance(server, int):
        return server
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
