"""`/v2/clusters` and SRM's `/v2/cluster-info/{cluster}` (default range: the last 2 hours)."""

from __future__ import annotations

from flask.views import MethodView
from flask_smorest import abort

from service.api.clusters.schemas import ClusterInfoSchema, ClusterListSchema
from service.api.common import TimeRangeArgs
from service.api.replications.resources import status_answer
from service.extensions import Blueprint, metrics_reader
from service.health.replication_overview import replication_healths
from service.metric_summary import MetricSeries, merge_subjects, summarize, summarize_columns
from service.sites.site_selector import site_selectable
from service.window_decoding import metric_windows, window_columns

blp = Blueprint("clusters", __name__, url_prefix="/v2", description="Kafka clusters seen in the rollups")

# The cluster-info summary, as SMM's replication pages show it: throughput, latency and lag.
INFO_METRICS = ("record_count", "byte_count", "replication_latency_ms", "records_lag")


def cluster_roles(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    roles: dict[str, list[str]] = {}
    for source, target in pairs:
        roles.setdefault(target, [])
        roles.setdefault(source, [])
        if "target" not in roles[target]:
            roles[target].insert(0, "target")
        if "source" not in roles[source]:
            roles[source].append("source")
    return roles


def summary(series: MetricSeries) -> dict:
    return {"value": series.value, "min": series.min, "max": series.max, "avg": series.avg, "sum": series.sum}


@blp.route("/clusters")
class Clusters(MethodView):
    @site_selectable(blp, ClusterListSchema)
    def get(self) -> dict:
        """Every cluster alias that is the source or the target of a replication with metrics."""
        roles = cluster_roles(metrics_reader().replication_pairs())
        return {"clusters": [{"cluster": c, "roles": r} for c, r in sorted(roles.items())]}


@blp.route("/cluster-info/<string:cluster>")
class ClusterInfo(MethodView):
    @blp.arguments(TimeRangeArgs(), location="query", as_kwargs=True)
    @site_selectable(blp, ClusterInfoSchema, not_found="unknown cluster")
    def get(self, cluster: str, from_ms: int, to_ms: int, granularity: str) -> dict:
        """Cluster info: its replications with state and metrics. The default time range is 2 hours."""
        reader = metrics_reader()
        pairs = [p for p in reader.replication_pairs() if cluster in p]
        if not pairs:
            abort(404, message=f"no replication from or to cluster {cluster!r} has metrics")
        replications = reader.replications(pairs)
        # Replication-level series only (one hash per replication, whatever the topics), read once
        # for both the replications' figures and the cluster's totals, inside the request's point budget.
        window = reader.resolve_window(from_ms, to_ms, granularity, len(INFO_METRICS) * len(replications))
        found = reader.replication_level_members(replications, INFO_METRICS, window, from_ms, to_ms)
        # Decoded by column (the hot path); into windows only where several replications merge.
        own = {key: summary(summarize_columns(key[2], window, window_columns(members, key[2])))
               for key, members in found.items()}
        answers = []
        for replication, health in zip(replications, replication_healths(reader, replications), strict=True):
            answer = status_answer(health, len(replication.topics))
            answer["metrics"] = {m: own[(replication.source, replication.target, m)] for m in INFO_METRICS}
            answers.append(answer)
        incoming = [(r.source, r.target) for r in replications if r.target == cluster]
        totals = {
            m: own[(*incoming[0], m)] if len(incoming) == 1 else summary(summarize(m, window, merge_subjects(
                metric_windows(found[(*pair, m)], m) for pair in incoming)))
            for m in INFO_METRICS
        } if incoming else {}
        return {
            "cluster": cluster,
            "roles": cluster_roles(pairs)[cluster],
            "from_ms": from_ms,
            "to_ms": to_ms,
            "granularity": window,
            "metrics": totals,
            "replications": answers,
        }
