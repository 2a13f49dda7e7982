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
from typing import Any

from service.grafana.variable_values import RefusedValue, selector_of
from service.sites.gateway import LOCAL, OK, Gateway, UnknownSite, fan_out
from service.sites.registry import RemoteService

LOG = logging.getLogger(__name__)

SITE_KEY = "site"
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
    """A site's frames, each saying which site it comes from. A remote answer is untrusted: anything
    not shaped like a table (``columns`` of ``{text, type}``, ``rows`` of lists) or a series
    (``target`` text, ``datapoints`` of ``[value, time]``) is dropped and logged."""
    if not isinstance(frames, list):
        return []
    found = []
    dropped = 0
    for frame in frames:
        if not isinstance(frame, dict):
            dropped += 1
        elif frame.get("type") == "table" and _is_table(frame):
            found.append({**frame, "columns": [{"text": "Site", "type": "string"}, *frame["columns"]],
                          "rows": [[site, *row] for row in frame["rows"]]})
        elif frame.get("type") != "table" and _is_series(frame):
            tags = frame.get("tags") if isinstance(frame.get("tags"), dict) else {}
            name = f"{site}: {frame.get('target', '')}"
            found.append({**frame, "target": name, "tags": {**tags, "site": site}})
        else:
            dropped += 1
    if dropped:
        LOG.warning("grafana query: dropped %d malformed frame(s) from site %s", dropped, site)
    return found


def _is_table(frame: dict) -> bool:
    columns, rows = frame.get("columns"), frame.get("rows")
    return (isinstance(columns, list) and all(isinstance(c, dict) and isinstance(c.get("text"), str)
                                              for c in columns)
            and isinstance(rows, list) and all(isinstance(row, list) for row in rows))


def _is_series(frame: dict) -> bool:
    points = frame.get("datapoints", [])
    return (isinstance(frame.get("target", ""), str) and isinstance(points, list)
            and all(isinstance(p, list) and len(p) == 2
                    and all(v is None or isinstance(v, int | float) and not isinstance(v, bool) for v in p)
                    for p in points))


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
        answer = fan_out(gateway, live, QUERY_PATH, (), selector, lambda b=body: (200, local(b)), expired,
                         body=body)
        for site in answer.sites:
            if site.status == OK:
                try:
                    frames += tagged(site.site, site.body)
                except Exception:  # noqa: BLE001 - one site's answer never fails the query
                    LOG.exception("grafana query: the answer of site %s could not be used", site.site)
            else:
                LOG.info("grafana query: site %s did not answer: %s", site.site, site.status)
    return frames
