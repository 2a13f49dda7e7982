"""The seam between the REST API and service discovery (DESIGN §6).

`/v2/services` lists what the object at ``app.extensions[SERVICES_KEY]`` returns. Until multi-site
discovery installs its own directory there, the app lists only itself (``LocalServiceDirectory``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

SERVICES_KEY = "srm.services"
VERSION = "0.1.0"


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
                VERSION,
                int(time.time() * 1000),
                True,
                "ok",
            )
        ]
