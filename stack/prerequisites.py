"""Checks for the external programs the local stack runs, with install hints instead of tracebacks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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


def require_java() -> str:
    """The ``java`` Spark and the brokers will run: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set (as
    Spark's launcher picks it), else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise MissingPrerequisite(f"JAVA_HOME is {java_home}, but {java} is not an executable: point "
                                      f"JAVA_HOME at a Java 17+ installation or unset it")
        return str(java)
    return require("java")
