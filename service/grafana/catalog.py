"""What the datasource can offer Grafana's editors: subjects, filter values, variable answers."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from contract.records.raw_metrics import SERVED_METRICS as METRICS
from service.grafana.filters import Filter, payload_filters, select
from service.grafana.queries import ALERTS, STATUS_TABLE, QueryError, Subject
from service.metrics_reader import MetricsReader, Replication

VARIABLE_QUERIES = ("clusters", "targets", "sources", "topics", "groups", "metrics")
AGGREGATES = (("per topic (or group)", "topic"), ("per replication", "replication"))


def metric_names() -> list[str]:
    return [*METRICS, STATUS_TABLE, ALERTS]  # lag_seconds, group_lag_seconds: windows like the others


def topic_subjects(replications: Sequence[Replication]) -> list[Subject]:
    return [
        Subject(r.source, r.target, topic, upstream)
        for r in replications
        for topic, upstream in sorted(r.topics.items())
    ]


def group_subjects(reader: MetricsReader, replications: Sequence[Replication]) -> list[Subject]:
    """One subject per (replication, group, topic): group series are stored per remote topic."""
    return [
        Subject(r.source, r.target, topic, upstream, group)
        for r in replications
        for group in reader.groups(r.target, r.source)
        for topic, upstream in sorted(r.topics.items())
    ]


def values_of(reader: MetricsReader, key: str, filters: Sequence[Filter] = ()) -> list[str]:
    """Distinct values of one filter key among the subjects the filters leave."""
    replications = reader.replications()
    if key == "group":
        subjects = group_subjects(reader, replications)
    elif key == "topic":
        subjects = topic_subjects(replications)
    else:
        subjects = [Subject(r.source, r.target) for r in replications]
    chosen = select(subjects, [f for f in filters if f.key != key])
    return sorted({v for s in chosen if (v := s.labels().get(key))})


def variable_values(reader: MetricsReader, payload: object) -> list[str]:
    """Answer a variable query: `<what> key=value ...` in `payload.target`, or raw JSON keys.

    Values come as the plugin formats them: `source=(east|north)` from a regex-formatted multi-value
    variable, a JSON list from a json-formatted one (`variable_values.selector_of`)."""
    if isinstance(payload, Mapping):
        text, params = str(payload.get("target") or ""), {k: v for k, v in payload.items() if k != "target"}
    else:
        text, params = str(payload or ""), {}
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise QueryError(f"payload.target: {exc}") from None
    if not words:
        return []
    what, pairs = words[0], words[1:]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise QueryError(f"payload.target: expected key=value, got {pair!r}")
        params[key] = value
    filters = payload_filters(params)
    if what == "metrics":
        return metric_names()
    if what == "clusters":
        return sorted(set(values_of(reader, "source", filters)) | set(values_of(reader, "target", filters)))
    if what in ("targets", "sources", "topics", "groups"):
        return values_of(reader, what.removesuffix("s"), filters)
    raise QueryError(f"payload.target: unknown query {what!r}; expected one of {', '.join(VARIABLE_QUERIES)}")


def metric_descriptors() -> list[dict]:
    """POST /metrics: every target with its payload editors (options come from /metric-payload-options)."""

    def payloads(metric: str) -> list[dict]:
        keys = ["source", "target", "topic"]
        if metric in METRICS and METRICS[metric].subject == "group":
            keys.append("group")
        editors: list[dict[str, object]] = [
            {
                "name": k,
                "label": k.capitalize(),
                "type": "multi-select" if k in ("topic", "group") else "select",
                "placeholder": f"any {k}",
            }
            for k in keys
        ]
        editors.append({"name": "site", "label": "Site", "type": "select", "placeholder": "this site"})
        if metric in METRICS:
            editors.append(
                {
                    "name": "aggregate",
                    "label": "Series",
                    "type": "select",
                    "options": [{"label": label, "value": value} for label, value in AGGREGATES],
                }
            )
        return editors

    return [
        {"label": name.replace("_", " "), "value": name, "payloads": payloads(name)}
        for name in metric_names()
    ]
