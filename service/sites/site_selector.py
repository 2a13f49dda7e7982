"""The ``site`` selector every read endpoint of ``/v2`` takes: ``local``, one site's name, or ``all``.

``site=local`` (the default) and this service's own site name answer from this service's Redis, in
the endpoint's own shape. ``site=<name>`` and ``site=all`` answer a ``SiteAnswers`` envelope built by
the gateway fan-out (``service.sites.gateway``): every asked site with its status (``ok``, ``timeout``,
``error: …``), and each ``ok`` site's answer under ``results``. ``all`` is every live discovered
site plus this one; a dead or slow site only marks the answer ``partial``.

Remote sites are asked the same path and query with ``site=local``, so a gateway that another gateway
discovered answers for itself only: no request ever travels a loop.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import quote

from flask import Flask, Response, current_app, request
from flask_smorest import abort
from marshmallow import Schema, fields
from werkzeug.exceptions import HTTPException

from service.api.common import json_response
from service.extensions import Blueprint
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY
from service.sites.gateway import (
    DEFAULT_TIMEOUT_MS,
    LOCAL,
    AllowList,
    Gateway,
    SiteAccess,
    UnknownSite,
    fan_out,
)
from service.sites.registry import RemoteService

SITE_PARAMETER = "site"
# A service that is no gateway still answers ``site=all`` / its own name; it needs a Gateway object
# for the fan-out, one that allows no host and so never calls anybody.
LOCAL_ONLY_GATEWAY_KEY = "srm.local_only_gateway"
PATH_SAFE = "/:@!$&'()*+,;=-._~"

SITE_PARAMETER_DOC = {
    "name": SITE_PARAMETER,
    "in": "query",
    "required": False,
    "schema": {"type": "string", "default": LOCAL, "pattern": r"^[^\s]+$"},
    "description": (
        "Which sites answer: `local` (default: this service's own metrics, in the plain answer shape), "
        "a site name as listed by `/v2/services`, or `all` (every live site plus this one). A site "
        "name or `all` answers a `SiteAnswers` envelope: per-site status (`ok`, `timeout`, "
        "`error: …`), `partial` when any asked site did not answer `ok`, and each `ok` site's "
        "answer under `results`. An unknown site name answers 404."),
}


class SiteStatusSchema(Schema):
    site = fields.String(required=True)
    status = fields.String(required=True, metadata={"description": "`ok`, `timeout` or `error: <reason>`"})
    url = fields.String(allow_none=True, metadata={"description": "what was called (`local`: no HTTP)"})
    http_status = fields.Integer(allow_none=True)
    elapsed_ms = fields.Float(allow_none=True)


class SiteAnswersSchema(Schema):
    # Named apart from Schema.partial (the load option); the document says `partial`.
    partial_ = fields.Boolean(required=True, data_key="partial",
                              metadata={"description": "some asked site did not answer ok"})
    sites = fields.List(fields.Nested(SiteStatusSchema), required=True)
    results = fields.Dict(keys=fields.String(), values=fields.Raw(), required=True,
                          metadata={"description": "site -> that site's answer, for the `ok` sites"})
    items = fields.List(fields.Raw(), metadata={
        "description": "when every answer is a list: their items, each tagged with its `site` (at most "
                       "100,000; the rest are counted in `items_omitted`)"})
    items_omitted = fields.Integer(metadata={"description": "items left out of `items` (over 100,000)"})


def site_selectable(blp: Blueprint, schema: type[Schema], not_found: str | None = None) -> Callable:
    """Decorates a read view (innermost, under ``@blp.arguments``) in place of ``@blp.response(200, …)``.

    The view's own answer is serialized with ``schema``; a view may also return a ready ``Response``.
    ``not_found`` documents what else than an unknown site answers 404.
    """
    answers = {"description": "The answer of this site, or of the selected sites (`SiteAnswers`)",
               "content": {"application/json": {"schema": {"anyOf": [schema, SiteAnswersSchema]}}}}

    def decorator(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Response:
            selector = request.args.get(SITE_PARAMETER, LOCAL)
            if selector in (LOCAL, local_site(current_app)):
                return _plain(view(*args, **kwargs), schema)
            return _fanned_out(site_gateway(current_app), selector,
                               lambda: local_answer(view, schema, args, kwargs))

        documented = blp.doc(parameters=[SITE_PARAMETER_DOC], responses={"200": answers})(wrapper)
        description = "Unknown site" + (f"; or: {not_found}" if not_found else "")
        return blp.alt_response(404, description=description)(documented)

    return decorator


def site_gateway(app: Flask) -> Gateway:
    """The installed gateway, else one that knows only this site and calls nobody."""
    gateway = app.extensions.get(GATEWAY_KEY) or app.extensions.get(LOCAL_ONLY_GATEWAY_KEY)
    if gateway is None:
        access = SiteAccess(DEFAULT_TIMEOUT_MS / 1000)
        gateway = Gateway(app.config["SERVICE_SITE"], AllowList(), lambda _site: access)
        app.extensions[LOCAL_ONLY_GATEWAY_KEY] = gateway
    return gateway


def discovered_services(app: Flask) -> tuple[list[RemoteService], list[RemoteService]]:
    """(live, expired) services; expired sites are reported as failing, never called."""
    registry = app.extensions.get(REGISTRY_KEY)
    if registry is None:
        return [], []
    return registry.services(), registry.expired_services()


def local_site(app: Flask) -> str:
    gateway = app.extensions.get(GATEWAY_KEY)
    return gateway.local_site if gateway is not None else app.config["SERVICE_SITE"]


def _fanned_out(gateway: Gateway, selector: str, local: Callable[[], tuple[int, Any]]) -> Response:
    live, expired = discovered_services(current_app)
    query = [(key, value) for key, value in request.args.items(multi=True) if key != SITE_PARAMETER]
    try:
        answer = fan_out(gateway, live, quote(request.path, safe=PATH_SAFE),
                         [*query, (SITE_PARAMETER, LOCAL)], selector, local, expired)
    except UnknownSite as exc:
        abort(404, message=str(exc))
    except ValueError as exc:  # a path the fan-out refuses to forward (e.g. a '..' segment)
        abort(400, message=str(exc))
    return json_response(answer.to_json())


def local_answer(view: Callable, schema: type[Schema], args: tuple, kwargs: dict) -> tuple[int, Any]:
    """This site's (HTTP status, JSON body) for a fan-out, computed in this request, without HTTP."""
    try:
        result = view(*args, **kwargs)
    except HTTPException as exc:  # abort(404, …) and friends: this site's error, not the whole answer's
        data = getattr(exc, "data", None) or {}
        return exc.code or 500, {"code": exc.code, "message": data.get("message") or exc.description}
    if isinstance(result, Response):
        return result.status_code, result.get_json()
    return 200, schema().dump(result)


def _plain(result: Any, schema: type[Schema]) -> Response:
    return result if isinstance(result, Response) else json_response(schema().dump(result))


