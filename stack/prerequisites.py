"""Checks for the external programs the local stack runs, with install hints instead of tracebacks."""

from __future__ import annotations

import shutil

from clients.entry_point import StartupError

INSTALL_HINTS = {
    "chromium": "install Chromium (the Swagger UI test drives it), e.g. `apt-get install -y chromium`",
    "java": "install a Java 17+ runtime, e.g. `apt-get install -y openjdk-17-jre-headless`",
    "mvn": "install Apache Maven, e.g. `apt-get install -y maven`",
    "prometheus": "install Prometheus (the alert-rule tests run it), e.g. `apt-get install -y prometheus`",
    "promtool": "install Prometheus's promtool, e.g. `apt-get install -y prometheus`",
    "redis-server": "install Redis, e.g. `apt-get install -y redis-server`",
    "keytool": "install a Java 17+ runtime (keytool ships with it), e.g. "
               "`apt-get install -y openjdk-17-jre-headless`",
}


class MissingPrerequisite(StartupError):
    """A program the local stack needs is not on PATH (a console script prints it as one line, exit 2)."""


def require(program: str) -> str:
    """Return the absolute path of `program`, or raise naming it and how to install it."""
    path = shutil.which(program)
    if path is None:
        hint = INSTALL_HINTS.get(program, "install it and put it on PATH")
        raise MissingPrerequisite(f"`{program}` was not found on PATH: {hint}")
    return path
