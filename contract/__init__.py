"""What the driver, the aggregator and the service must agree on, kept apart from all three.

The settings file and its one table of keys, the Kafka client builder, the replication policy with
every topic name, every record format the parts exchange through Kafka (``contract.records``), the
Redis key layout, and the status vocabulary. ``driver``, ``aggregator`` and ``service`` import from
here and never from each other (tests/test_package_boundaries.py).
"""
