"""swagger/openapi.json must be what the app serves: regenerate it with `make openapi`."""

from __future__ import annotations

import json

from service.app import create_app
from service.openapi_export import DOCUMENT, render


def test_committed_document_matches_the_code():
    assert DOCUMENT.exists(), "swagger/openapi.json is missing: run `make openapi`"
    assert DOCUMENT.read_text() == render(), "swagger/openapi.json is stale: run `make openapi`"


def test_served_document_is_the_committed_one():
    client = create_app().test_client()
    served = client.get("/openapi.json")
    assert served.status_code == 200
    assert served.get_json() == json.loads(DOCUMENT.read_text())
    assert "/v2/topic-metrics/{source}/{target}/{upstreamTopic}/{metric}" in served.get_json()["paths"]
