"""Grafana JSON datasource endpoints (simpod-json-datasource 0.6.x) under `/grafana`.

Configure the datasource URL as `http://<host>:<port>/grafana` in Server access mode. Every route
answers with or without a trailing slash and never redirects: Grafana's proxy forwards the datasource
URL unchanged ("Save & test" GETs `/grafana` itself) and does not follow redirects, and a redirect's
`Location` names a host the browser may not reach. The legacy simple-json `/search` and `/annotations`
calls are answered too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

from flask import Response, current_app, jsonify, request
from flask.views import MethodView
from flask_smorest import abort

from service.api.common import DEFAULT_RANGE_MS
from service.extensions import Blueprint, metrics_reader
from service.grafana import catalog, schemas
from service.grafana.filters import filters_of, payload_filters
from service.grafana.queries import FILTER_KEYS, QueryError
from service.grafana.query_answers import answer_query, current_alerts
from service.sites.gateway import ALL, LOCAL, UnknownSite
from service.sites.grafana_site_answers import SITE_KEY, answer_across_sites, target_sites
from service.sites.site_selector import discovered_services, local_site, site_gateway

blp = Blueprint(
    "grafana",
    __name__,
    url_prefix="/grafana",
    description="Grafana JSON datasource (simpod-json-datasource 0.6.x contract)",
)

# Only this blueprint drops strict slashes: the /v2 API keeps Flask's usual rule.
route = partial(blp.route, strict_slashes=False)


@blp.after_request
def allow_browser_access(response: Response) -> Response:
    # Grafana's server (proxy) access mode needs no CORS. Browser access calls us from the page of a
    # Grafana origin: only the origins of service.cors.allowed.origins (CORS_ORIGINS) are answered, so
    # another site's page cannot read metrics with the visitor's credentials.
    origin = request.headers.get("Origin")
    response.vary.add("Origin")
    if origin and origin in current_app.config.get("CORS_ORIGINS", ()):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Headers"] = "accept, authorization, content-type"
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
    return response


def _range(body: Mapping) -> tuple[int, int]:
    span = body.get("range") or {}
    to_ms = span.get("to_ms", int(time.time() * 1000))
    from_ms = span.get("from_ms", to_ms - DEFAULT_RANGE_MS)
    if from_ms > to_ms:
        abort(400, message="range.from must not be after range.to")
    return from_ms, to_ms


def _answer(compute, *args) -> Response:
    try:
        return jsonify(compute(*args))
    except QueryError as exc:
        abort(400, message=str(exc))


@route("/")
class TestConnection(MethodView):
    @blp.doc(responses={"200": schemas.ANSWERS["health"]})
    def get(self) -> Response:
        """Grafana's "Save & test": a GET of the datasource URL, `/grafana` or `/grafana/`, answered 200."""
        return jsonify(status="ok")


@route("/metrics")
class Metrics(MethodView):
    @blp.arguments(schemas.MetricsRequestSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["metrics"]})
    def post(self, _body: dict) -> Response:
        """Metrics the query editor lists, with their payload editors."""
        return jsonify(catalog.metric_descriptors())


@route("/metric-payload-options")
class MetricPayloadOptions(MethodView):
    @blp.arguments(schemas.PayloadOptionsSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["options"]})
    def post(self, body: dict) -> Response:
        """Options of one payload editor, narrowed by the payload chosen so far."""
        name = body.get("name")
        if name == "aggregate":
            return jsonify([{"label": label, "value": value} for label, value in catalog.AGGREGATES])
        if name == SITE_KEY:  # the sites a gateway can ask (a plain service: only itself)
            live, _ = discovered_services(current_app)
            sites = sorted({local_site(current_app), *(s.site for s in live)})
            return jsonify([{"label": v, "value": v} for v in [LOCAL, ALL, *sites]])
        if name not in FILTER_KEYS:
            return jsonify([])

        def options() -> list[dict]:
            filters = payload_filters(body.get("payload"))
            return [{"label": v, "value": v} for v in catalog.values_of(metrics_reader(), name, filters)]

        return _answer(options)


@route("/query")
class Query(MethodView):
    @blp.arguments(schemas.QuerySchema)
    @blp.doc(responses={"200": schemas.ANSWERS["query"]})
    def post(self, body: dict) -> Response:
        """Time series (one per topic or group, with tags), the status table and annotations.

        A target's `payload.site` (a site name or `all`) asks other sites through the gateway; their
        frames say their site (`site` tag, `<site>: ` name prefix, leading `Site` table column)."""
        from_ms, to_ms = _range(body)
        targets, cap = body.get("targets") or [], int(current_app.config["GRAFANA_MAX_TARGETS"])
        if len(targets) > cap:
            abort(400, message=f"targets: {len(targets)} targets, over the limit of {cap} per query "
                               "(service.grafana.max.targets)")
        reader = metrics_reader()
        here = (LOCAL, local_site(current_app))
        try:
            if all(set(target_sites(t)) <= set(here) for t in body.get("targets") or []):
                return _answer(answer_query, reader, body, from_ms, to_ms)
            query = {**body, "range": {"from": from_ms, "to": to_ms}}
            return _answer(answer_across_sites, site_gateway(current_app), *discovered_services(current_app),
                           query, lambda b: answer_query(reader, b, from_ms, to_ms))
        except UnknownSite as exc:
            abort(400, message=f"payload.site: {exc}")


@route("/variable")
class Variable(MethodView):
    @blp.arguments(schemas.VariableSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["variable"]})
    def post(self, body: dict) -> Response:
        """Query variables: `clusters`, `targets`, `sources`, `topics`, `groups`, `metrics` (+ key=value)."""

        def items() -> list[dict]:
            values = catalog.variable_values(metrics_reader(), body.get("payload"))
            return [{"__text": v, "__value": v} for v in values]

        return _answer(items)


@route("/tag-keys")
class TagKeys(MethodView):
    @blp.doc(responses={"200": schemas.ANSWERS["tag_keys"]})
    def post(self) -> Response:
        """Keys for ad-hoc filters."""
        return jsonify([{"type": "string", "text": key} for key in FILTER_KEYS])


@route("/tag-values")
class TagValues(MethodView):
    @blp.arguments(schemas.TagValuesSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["tag_values"]})
    def post(self, body: dict) -> Response:
        """Values of one ad-hoc filter key, narrowed by the other filters set."""
        if body["key"] not in FILTER_KEYS:
            return jsonify([])

        def items() -> list[dict]:
            filters, _notices = filters_of(body.get("filters") or [])  # no frame to show notices in
            return [{"text": v} for v in catalog.values_of(metrics_reader(), body["key"], filters)]

        return _answer(items)


@route("/search")
class Search(MethodView):
    @blp.arguments(schemas.SearchSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["search"]})
    def post(self, body: dict) -> Response:
        """Legacy simple-json metric search (simpod < 0.6)."""
        needle = (body.get("target") or "").lower()
        return jsonify([name for name in catalog.metric_names() if needle in name.lower()])


@route("/annotations")
class Annotations(MethodView):
    @blp.arguments(schemas.AnnotationsSchema)
    @blp.doc(responses={"200": schemas.ANSWERS["annotations"]})
    def post(self, body: dict) -> Response:
        """Legacy simple-json annotations: the current alerts."""
        from_ms, to_ms = _range(body)
        annotation = body.get("annotation") if isinstance(body.get("annotation"), dict) else {}
        rows = current_alerts(metrics_reader(), [])
        return jsonify(
            [
                {
                    "annotation": annotation,
                    "time": r[0],
                    "timeEnd": r[1],
                    "title": r[2],
                    "text": r[3],
                    "tags": r[4].split(","),
                }
                for r in rows
                if from_ms <= r[1] and r[0] <= to_ms
            ]
        )
