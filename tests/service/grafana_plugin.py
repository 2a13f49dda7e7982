"""What simpod-json-datasource 0.6.5 sends and how it reads the answers, restated in Python for tests.

Each function restates one rule of the plugin (simPod/GrafanaJsonDatasource at tag v0.6.5) or of the
Grafana packages it calls (@grafana/data 11.3.0, @grafana/scenes 5.20.4: Grafana 11.3.0, the version
compose.yaml pins), and its docstring names the file and lines it follows. Our own code, no copy:
the point is that a test builds its request the way the plugin does and reads the answer the way the
plugin does, so a test passing means a dashboard working.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

PLUGIN = "simPod/GrafanaJsonDatasource@v0.6.5"
Variables = Mapping[str, str | list[str]]
"""Dashboard variables as the user picked them: one value, or a list for a multi-value variable."""

_SCENES_SPECIAL = set("\\^$*+?.()|[]{}/")
_LEGACY_SPECIAL = set("([{}])\\|*+-.?<>#&^$")


def escape_regex(value: str) -> str:
    """Backslash before each of ``\\ ^ $ * + ? . ( ) | [ ] { } /``: @grafana/data 11.3.0
    dist/esm/text/string.js:85-87 ``escapeRegex``, the escaper of scenes' regex format."""
    return "".join("\\" + c if c in _SCENES_SPECIAL else c for c in value)


def escape_string_for_regex(value: str) -> str:
    """The legacy templating escaper, which also escapes ``- < > # &``: @grafana/data 11.3.0
    dist/esm/text/string.js:3-12 ``escapeStringForRegex``."""
    return "".join("\\" + c if c in _LEGACY_SPECIAL else c for c in value)


def format_regex(value: str | list[str], escape: Callable[[str], str] = escape_regex) -> str:
    """Grafana's ``regex`` variable format: one value escaped; a list escaped item by item, a single
    item alone, several as ``(a|b|…)``: @grafana/scenes 5.20.4
    dist/esm/variables/interpolation/formatRegistry.js:35-57."""
    if isinstance(value, str):
        return escape(value)
    items = [escape(str(v)) for v in value]
    return items[0] if len(items) == 1 else "(" + "|".join(items) + ")"


def format_json(value: str | list[str]) -> str:
    """Grafana's ``json`` variable format: the value as JSON text (formatRegistry.js, ``json``)."""
    return json.dumps(value)


def replace(text: str, variables: Variables, fmt: str) -> str:
    """templateSrv.replace for ``$name`` and ``${name}`` references, in the format asked for."""
    formatter = format_regex if fmt == "regex" else format_json
    for name in sorted(variables, key=len, reverse=True):  # $topics before $topic
        formatted = formatter(variables[name])
        text = text.replace("${" + name + "}", formatted).replace("$" + name, formatted)
    return text


def process_payload(payload: str | Mapping[str, Any], editor_mode: str, variables: Variables) -> dict:
    """The payload the plugin sends: ``src/DataSource.ts:230-257`` ``processPayload``.

    A string in code mode: each reference replaced in ``json`` format, a quoted result unquoted
    (``cleanMatch``, :281-287), then parsed (:232-238). Otherwise (an object, or builder mode):
    every top-level value through ``toString()`` and the ``regex`` format, arrays item by item
    (:239-252). Any failure gives ``{}`` (:254-256)."""
    try:
        if isinstance(payload, str) and editor_mode != "builder":
            if not payload.strip():
                return {}
            for name in sorted(variables, key=len, reverse=True):
                formatted = format_json(variables[name])
                cleaned = json.loads(formatted) if formatted.startswith('"') else formatted
                payload = payload.replace("$" + name, cleaned)
            return json.loads(payload)
        copy = json.loads(payload) if isinstance(payload, str) else dict(payload)
        for key, value in copy.items():
            if isinstance(value, list):
                copy[key] = [replace(_to_string(item), variables, "regex") for item in value]
            else:
                copy[key] = replace(_to_string(value), variables, "regex")
        return copy
    except (ValueError, TypeError):
        return {}


def _to_string(value: object) -> str:
    """JavaScript's ``toString()`` for JSON values."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, list):
        return ",".join(_to_string(v) for v in value)
    return str(value)


def process_target(query: Mapping[str, Any], variables: Variables) -> dict:
    """``src/DataSource.ts:259-266`` ``processTarget``: payload as above, the target string through
    the ``regex`` format whatever the editor mode (:262-264)."""
    processed = dict(query)
    mode = str(query.get("editorMode"))
    processed["payload"] = process_payload(query.get("payload") or "", mode, variables)
    if isinstance(query.get("target"), str):
        processed["target"] = replace(query["target"], variables, "regex")
    return processed


def query_request(targets: Sequence[Mapping[str, Any]], variables: Variables, range_ms: tuple[int, int],
                  filters: Sequence[Mapping[str, Any]] = ()) -> dict:
    """The body of ``POST <url>/query``: ``src/DataSource.ts:63-85``. Hidden targets never reach
    ``query`` (``filterQuery``, :59-61); targets without ``target`` are dropped (:268-279); ad-hoc
    filters ride as Grafana's own ``filters``, unformatted (:293-296, README "filters")."""
    visible = [t for t in targets if not t.get("hide") and t.get("target") is not None]
    return {
        "app": "dashboard",
        "range": {"from": range_ms[0], "to": range_ms[1], "raw": {"from": "now-1h", "to": "now"}},
        "interval": "10s",
        "intervalMs": 10_000,
        "maxDataPoints": 1000,
        "targets": [process_target(t, variables) for t in visible],
        "filters": list(filters),
        "scopedVars": {name: {"text": str(v), "value": v} for name, v in variables.items()},
    }


def health_check(status_code: int) -> bool:
    """"Save & test": a GET of the datasource URL itself, working iff the status is exactly 200
    (``src/DataSource.ts:89-101``); a 3xx is not followed by Grafana's proxy and is an error here."""
    return status_code == 200


def to_frames(answer: object) -> list[dict]:
    """``response.data.map(toDataFrame)`` (``src/DataSource.ts:78-82``) with @grafana/data 11.3.0
    dist/esm/dataframe/processDataFrame.js: ``datapoints`` -> a time series named after ``target``,
    labels from ``tags`` (:46-80); ``columns`` -> a table (:10-45); both keep ``refId`` and ``meta``;
    any other shape throws "Unsupported data format" and fails the panel (:218-245)."""
    assert isinstance(answer, list), f"/query must answer an array, got {answer!r}"
    frames = []
    for item in answer:
        if isinstance(item, dict) and "datapoints" in item:
            assert isinstance(item["datapoints"], list)
            frames.append({"name": item.get("target"), "refId": item.get("refId"), "meta": item.get("meta"),
                           "labels": item.get("tags"), "points": [tuple(p) for p in item["datapoints"]]})
        elif isinstance(item, dict) and "columns" in item:
            assert isinstance(item.get("rows"), list), "Expected table rows to be array"
            frames.append({"name": item.get("name"), "refId": item.get("refId"), "meta": item.get("meta"),
                           "fields": [c.get("text") for c in item["columns"]], "rows": item["rows"]})
        else:
            raise AssertionError(f"Unsupported data format: {item!r}")
    return frames


def series_values(frames: Sequence[dict]) -> dict[str, float]:
    """Sum of each time-series frame's values, by frame name (what a "Total" legend shows)."""
    return {f["name"]: sum(v for v, _ in f["points"] if v is not None) for f in frames if "points" in f}


def variable_texts(answer: object) -> list[tuple[str, str | None]]:
    """``src/response_parser.ts:6-31``: the array becomes a frame, one field per key; with fields
    ``__text`` and ``__value`` their pairs (:10-16), else every value of every field as a text
    (:17-25); texts de-duplicated, first value kept (:27-30)."""
    assert isinstance(answer, list), f"/variable must answer an array, got {answer!r}"
    keys = list(answer[0]) if answer else []
    fields = {k: [row.get(k) for row in answer] for k in keys}
    pairs: list[tuple[str, str | None]]
    if "__text" in fields and "__value" in fields:
        pairs = [(str(t), str(v)) for t, v in zip(fields["__text"], fields["__value"], strict=True)]
    else:
        pairs = [(v, None) for values in fields.values() for v in values]
    seen: dict[str, str | None] = {}
    for text, value in pairs:
        seen.setdefault(text, value)
    return list(seen.items())
