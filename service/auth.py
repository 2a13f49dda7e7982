"""Optional authentication from the properties file: HTTP Basic, a bearer token, or both.

`service.auth.basic.username` + `service.auth.basic.password` and/or `service.auth.token`. With
neither set, the API is open. Health, readiness and the API documentation stay open so probes and
people can reach them; secrets are compared in constant time and never logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from dataclasses import dataclass, field

from flask import Flask, Response, jsonify, request

from contract.untrusted import shown

LOG = logging.getLogger(__name__)

AUTH_KEY = "srm.auth"
OPEN_PATHS = ("/health", "/ready", "/openapi.json", "/swagger-ui", "/swagger-ui-assets/")


@dataclass(frozen=True)
class Credentials:
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @property
    def required(self) -> bool:
        return bool(self.username or self.token)

    def accepts(self, authorization: str | None) -> bool:
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and self.token:
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic" and self.username:
            return self._basic(value.strip())
        return False

    def _basic(self, encoded: str) -> bool:
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        same_user = hmac.compare_digest(user.encode(), (self.username or "").encode())
        same_password = hmac.compare_digest(password.encode(), (self.password or "").encode())
        return same_user and same_password


def _is_open(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in OPEN_PATHS)


def _challenge(credentials: Credentials) -> Response:
    schemes = (['Basic realm="srm-service"'] if credentials.username else []) + (
        ["Bearer"] if credentials.token else []
    )
    answer = jsonify(
        code=401,
        status="Unauthorized",
        message="authentication required: " + " or ".join(s.split()[0] for s in schemes),
    )
    answer.status_code = 401
    answer.headers["WWW-Authenticate"] = ", ".join(schemes)
    return answer


def init_app(app: Flask, credentials: Credentials) -> None:
    app.extensions[AUTH_KEY] = credentials
    if not credentials.required:
        return
    LOG.info(
        "authentication required (%s)",
        ", ".join(
            kind for kind, on in (("basic", credentials.username), ("bearer token", credentials.token)) if on
        ),
    )

    @app.before_request
    def authenticate() -> Response | None:
        # A CORS preflight (OPTIONS) carries no credentials by definition and answers no data.
        if (_is_open(request.path) or request.method == "OPTIONS"
                or credentials.accepts(request.headers.get("Authorization"))):
            return None
        # The scheme only: the header's value is a secret (or a guess at one).
        scheme = (request.headers.get("Authorization") or "none").split(" ", 1)[0]
        # The path is decoded (%0a is a newline): escaped, so a caller cannot forge log lines.
        LOG.warning("rejected %s %s from %s (authorization scheme: %s)", shown(request.method, 20),
                    shown(request.path, 200), request.remote_addr, shown(scheme, 20))
        return _challenge(credentials)
