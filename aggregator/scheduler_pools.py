"""Spark FAIR scheduler pools, one per target cluster, so a busy cluster cannot starve the others.

A pool named by `spark.scheduler.pool` but missing from the allocation file still works, with a
warning per pool; generating the file from the target list declares each one (equal weight).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import quoteattr

ALLOCATION_FILE_CONF = "spark.scheduler.allocation.file"


def fair_scheduler_xml(pools: Iterable[str]) -> str:
    lines = ['<?xml version="1.0"?>', "<allocations>"]
    for pool in pools:
        lines += [f"  <pool name={quoteattr(pool)}>", "    <schedulingMode>FAIR</schedulingMode>",
                  "    <weight>1</weight>", "    <minShare>1</minShare>", "  </pool>"]
    lines.append("</allocations>")
    return "\n".join(lines) + "\n"


def write_fair_scheduler_file(pools: Iterable[str], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fair_scheduler_xml(pools))
    return path
