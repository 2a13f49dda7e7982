"""Clusters: the aliases the rollups know and SRM's cluster-info summary."""
