"""Replication driver: MirrorMaker 2 compatible replication between Kafka clusters, plus raw metrics."""
