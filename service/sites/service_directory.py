"""The seam between the REST API and service discovery.

`/v2/services` lists what the object at ``app.extensions[SERVICES_KEY]`` returns. Until multi-site
discovery installs its own directory there, the app lists only itself (``LocalServiceDirectory``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol

SERVICES_KEY = "srm.services"


def _software_version() -> str:
    try:
        return metadata.version("srm-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"


SOFTWARE_VERSION = _software_version()
"""What /v2/services and the advertisements give as ``version``: the installed package's."""


@dataclass(frozen=True)
class ServiceRecord:
    """One SRM service as advertised: where to reach it and which target clusters it reports on."""

    protocol: str
    host: str
    port: int
    root_path: str
    target_clusters: tuple[str, ...]
    site: str
    version: str
    ts: int
    local: bool
    status: str  # ok, timeout, or "error: <text>" as the gateway last saw it


class ServiceDirectory(Protocol):
    def services(self) -> list[ServiceRecord]: ...


@dataclass(frozen=True)
class LocalServiceDirectory:
    protocol: str
    host: str
    port: int
    root_path: str
    target_clusters: tuple[str, ...]
    site: str

    def services(self) -> list[ServiceRecord]:
        return [
            ServiceRecord(
                self.protocol,
                self.host,
                self.port,
                self.root_path,
                self.target_clusters,
                self.site,
                SOFTWARE_VERSION,
                int(time.time() * 1000),
                True,
                "ok",
            )
        ]
