"""Discovered services for ``/v2/services``, and the one call that installs discovery in an app.

``install_discovery(app, config)`` (in each gunicorn worker, i.e. from the application factory or
``load()``, never before a fork): when ``service.remote.clusters`` is set, the service is a gateway and
gets a Registry thread and a Gateway (``app.extensions[REGISTRY_KEY]``/``[GATEWAY_KEY]``), and
``/v2/services`` lists the local service plus the discovered ones. Without remote clusters nothing is
consumed and nothing changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Flask

from contract.config import SrmConfig
from service.sites.gateway import Gateway
from service.sites.registry import EXPIRED_STATUS, Registry, RemoteService, start_registry
from service.sites.service_directory import SERVICES_KEY, ServiceDirectory, ServiceRecord

LOG = logging.getLogger(__name__)

REGISTRY_KEY = "srm.registry"
GATEWAY_KEY = "srm.gateway"


def service_record(service: RemoteService, status: str) -> ServiceRecord:
    return ServiceRecord(service.protocol, service.host, service.port, service.root_path,
                         service.target_clusters, service.site, service.version, service.last_seen_ms, False,
                         status)


@dataclass(frozen=True)
class DiscoveredServiceDirectory:
    local: ServiceDirectory
    registry: Registry

    def services(self) -> list[ServiceRecord]:
        live = [service_record(s, "ok") for s in self.registry.services()]
        expired = [service_record(s, EXPIRED_STATUS) for s in self.registry.expired_services()]
        return [*self.local.services(), *live, *expired]


@dataclass(frozen=True)
class Discovery:
    registry: Registry
    gateway: Gateway

    def stop(self) -> None:
        self.registry.stop()
        self.gateway.close()


def install_discovery(app: Flask, config: SrmConfig) -> Discovery | None:
    """Makes ``app`` a gateway when the config names remote clusters; ConfigError on bad settings."""
    if not config.service_remote_clusters:
        return None
    gateway = Gateway.from_config(config)  # first: bad settings fail before a thread starts
    registry = start_registry(config)
    app.extensions[REGISTRY_KEY], app.extensions[GATEWAY_KEY] = registry, gateway
    app.extensions[SERVICES_KEY] = DiscoveredServiceDirectory(app.extensions[SERVICES_KEY], registry)
    LOG.info("gateway of site %s: discovering services in %s", gateway.local_site,
             ", ".join(registry.clusters))
    return Discovery(registry, gateway)
