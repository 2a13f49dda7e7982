"""What every console script does before its own work: parse ``--config``, set up logging, load the file.

A configuration problem ends the process with exit status 2 and one line naming the file, the line and
the key (``ConfigError``), never a traceback: a restart cannot fix it. So does a missing prerequisite
(``StartupError``, e.g. no ``java`` for the aggregator). Something that does not answer yet
(``clients.reachability.Unreachable``, e.g. the aggregator's Redis) is one line too, with exit
status 1: a restart once it answers works. Once the file is read, every secret value in it is hidden
from every log line (``clients.client_faults.SecretScrubber``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from clients.client_faults import install_secret_scrubber
from clients.client_renderings import check_client_configs, secret_values
from clients.reachability import Unreachable
from contract.config import ConfigError, SrmConfig, load_config

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONFIG_ERROR_EXIT = 2
UNREACHABLE_EXIT = 1

_T = TypeVar("_T")


class StartupError(Exception):
    """Start-up cannot go on; the message names what is wrong (exit status 2)."""


def config_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", required=True, help="SRM properties file")
    return parser


def start(prog: str, args: argparse.Namespace, prepare: Callable[[SrmConfig], _T],
          clients: tuple[str, ...] = ("librdkafka",)) -> _T | int:
    """Logging set up, the config loaded and ``prepare(config)`` run; on a ConfigError or StartupError
    the error is printed as ``<prog>: <message>`` and the exit status is returned instead (2; 1 for
    ``Unreachable``). ``clients``: the client renderings this process uses
    (``clients.client_renderings.RENDERINGS``), checked at load."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = load_config(args.config)
        check_client_configs(config, clients)
        install_secret_scrubber(secret_values(config))
        return prepare(config)
    except (ConfigError, StartupError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    except Unreachable as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return UNREACHABLE_EXIT


def parse_and_start(prog: str, description: str, argv: Sequence[str] | None,
                    prepare: Callable[[SrmConfig], _T]) -> _T | int:
    """``config_parser`` + ``start`` for scripts whose only argument is ``--config``."""
    return start(prog, config_parser(prog, description).parse_args(argv), prepare)
