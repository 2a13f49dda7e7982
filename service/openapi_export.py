"""Writes the service's OpenAPI document to swagger/openapi.json (`make openapi`).

The document is generated from the code (flask-smorest); tests/service/test_openapi_document.py fails
when the committed copy differs from what the app serves.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from service import extensions
from service.app import create_app

DOCUMENT = Path(__file__).resolve().parent.parent / "swagger" / "openapi.json"


def render() -> str:
    app = create_app()
    with app.app_context():
        spec = app.extensions[extensions.API_KEY].spec.to_dict()
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def main() -> int:
    DOCUMENT.parent.mkdir(exist_ok=True)
    DOCUMENT.write_text(render())
    print(f"wrote {DOCUMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
