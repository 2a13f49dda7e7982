"""Small SRM properties files the configuration tests (tests/contract, tests/clients) start from."""

from __future__ import annotations

from contract.config import SrmConfig, parse_config

BASE = """\
clusters = east, west
east.bootstrap.servers = east-1:9092,east-2:9092
west.bootstrap.servers = west-1:9092
"""
THREE = """\
clusters = A, B, C
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
C.bootstrap.servers = c:9092
"""
NAME = "srm.properties"


def parse(extra: str = "", base: str = BASE) -> SrmConfig:
    """`base` with `extra` lines appended, parsed as the file NAME."""
    return parse_config(base + extra, NAME)
