"""Grafana queries for other sites: a target's `payload.site` (`local`, a site name, or `all`).

Grafana joins the datasource URL with `/query`, so the HTTP `site` parameter of the `/v2` endpoints
cannot reach these calls; the selector rides in each target's payload instead. A gateway forwards the
targets of a remote selector to those sites' `/grafana/query` (POST, the same body with only those
targets, `site` removed so the remote answers for itself), and tags every frame it gets back with its
site: series get `site` in their tags and `<site>: ` before their name, tables a leading `Site`
column. A site that does not answer adds no frame and is logged; the other sites still answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from service.grafana.queries import QueryError
from service.grafana.variable_values import RefusedValue, selector_of
from service.sites.gateway import LOCAL, OK, Gateway, UnknownSite, fan_out
from service.sites.registry import RemoteService

LOG = logging.getLogger(__name__)

SITE_KEY = "site"
NOTICE_SEVERITIES = ("info", "warning", "error")
QUERY_PATH = "/grafana/query"

LocalFrames = Callable[[Mapping], list[dict]]
"""This site's frames for a query body (the datasource's own answer)."""


def target_sites(target: Mapping) -> list[str]:
    """The sites a target asks, from its `payload.site` as the plugin formats it: a name (maybe
    regex-escaped, `east\\-1`), `all`, or an alternation of names from a multi-value variable."""
    for key in ("payload", "data"):  # `data` is the payload of simpod < 0.3
        payload = target.get(key)
        if isinstance(payload, Mapping) and payload.get(SITE_KEY) not in (None, "", "$__all"):
            return _site_names(payload[SITE_KEY])
    return [LOCAL]


def _site_names(raw: object) -> list[str]:
    # UnknownSite messages are answered after "payload.site: ", so they do not repeat it.
    try:
        selector = selector_of(raw, "value")
    except RefusedValue as refused:
        raise UnknownSite(f"{refused}; name a site, a list of sites, or all") from None
    if selector is None:
        return [LOCAL]
    if selector.patterns:
        raise UnknownSite(f"{selector.describe()}: name a site, a list of sites, or all, not a pattern")
    return sorted(selector.literals)


def without_site(target: Mapping) -> dict:
    """The target as the chosen site answers it: for itself."""
    copy = dict(target)
    for key in ("payload", "data"):
        if isinstance(copy.get(key), Mapping):
            copy[key] = {k: v for k, v in copy[key].items() if k != SITE_KEY}
    return copy


def by_site(targets: Sequence[Mapping]) -> dict[str, list[dict]]:
    """Targets grouped by the sites they ask, in their first appearance order; a target asking several
    sites goes to each."""
    groups: dict[str, list[dict]] = {}
    for target in targets:
        for site in target_sites(target):
            groups.setdefault(site, []).append(without_site(target))
    return groups


def tagged(site: str, frames: Any) -> list[dict]:
    """A site's frames, each saying which site it comes from. A remote answer is untrusted: each frame
    is rebuilt from the fields a table (``columns`` of ``{text, type}``, ``rows`` of string, number or
    null cells) or a series (``target`` text, ``datapoints`` of ``[value, time]``) may have, with
    ``refId``, string ``tags`` and ``meta.notices`` kept when well formed; anything else is dropped and
    logged, so what goes on is always what the datasource documents."""
    if not isinstance(frames, list):
        return []
    found = []
    for frame in frames:
        rebuilt = (_table(site, frame) if frame.get("type") == "table" else _series(site, frame)) \
            if isinstance(frame, dict) else None
        if rebuilt is not None:
            found.append(rebuilt | _extras(frame))
    if len(found) < len(frames):
        LOG.warning("grafana query: dropped %d malformed frame(s) from site %s", len(frames) - len(found),
                    site)
    return found


def _table(site: str, frame: dict) -> dict | None:
    columns, rows = frame.get("columns"), frame.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("type", ""), str)
               for c in columns):
        return None
    if not all(isinstance(row, list) and all(_is_cell(cell) for cell in row) for row in rows):
        return None
    return {"type": "table",
            "columns": [{"text": "Site", "type": "string"},
                        *({k: c[k] for k in ("text", "type") if k in c} for c in columns)],
            "rows": [[site, *row] for row in rows]}


def _series(site: str, frame: dict) -> dict | None:
    target, points = frame.get("target"), frame.get("datapoints")
    if not isinstance(target, str) or not isinstance(points, list):
        return None
    if not all(isinstance(p, list) and len(p) == 2 and all(v is None or _is_number(v) for v in p)
               for p in points):
        return None
    tags = frame.get("tags")
    tags = tags if isinstance(tags, dict) else {}
    return {"target": f"{site}: {target}", "datapoints": points,
            "tags": {**{k: v for k, v in tags.items() if isinstance(v, str)}, "site": site}}


def _extras(frame: dict) -> dict:
    extras: dict[str, Any] = {}
    if isinstance(frame.get("refId"), str):
        extras["refId"] = frame["refId"]
    meta = frame.get("meta")
    notices = meta.get("notices") if isinstance(meta, dict) else None
    if isinstance(notices, list):
        kept = [{"severity": n["severity"], "text": n["text"]} for n in notices if isinstance(n, dict)
                and n.get("severity") in NOTICE_SEVERITIES and isinstance(n.get("text"), str)]
        extras["meta"] = {"notices": kept}
    return extras


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_cell(value: object) -> bool:
    return value is None or isinstance(value, str) or _is_number(value)


def _local_status(local: LocalFrames, body: Mapping) -> tuple[int, Any]:
    """This site's part of a multi-site query: a question it cannot answer is its 400, as over HTTP."""
    try:
        return 200, local(body)
    except QueryError as exc:
        return 400, {"code": 400, "message": str(exc)}


def answer_across_sites(gateway: Gateway, live: Sequence[RemoteService], expired: Sequence[RemoteService],
                        query: Mapping, local: LocalFrames) -> list[dict]:
    """Frames for a query (a JSON body, range in epoch ms) whose targets name sites; raises UnknownSite
    for a site nobody knows."""
    frames: list[dict] = []
    for selector, targets in by_site(query.get("targets") or []).items():
        body = {**query, "targets": targets}
        if selector in (LOCAL, gateway.local_site):
            frames += local(body)
            continue
        answer = fan_out(gateway, live, QUERY_PATH, (), selector, partial(_local_status, local, body),
                         expired, body=body)
        for site in answer.sites:
            if site.status == OK:
                try:
                    found = tagged(site.site, site.body)
                except Exception:  # one site's answer never fails the query
                    LOG.exception("grafana query: the answer of site %s could not be used", site.site)
                    found = []
                frames += found
                sent = len(site.body) if isinstance(site.body, list) else 1
                if len(found) < sent:
                    gateway.outcomes.dropped_frames(site.site, sent - len(found))
            else:
                LOG.info("grafana query: site %s did not answer: %s", site.site, site.status)
    return frames
