"""Grafana JSON datasource (simpod-json-datasource 0.6.x contract) over the rollups."""
