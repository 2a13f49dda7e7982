"""Local stack of real components (Kafka KRaft brokers, Redis, Spark connector jars).

Used alike by `make demo`, the pytest fixtures and `bench/`: no Docker engine needed, every part is a
real process started from Maven Central jars or Debian packages.
"""
