"""What the driver, the aggregator and the service must agree on, kept apart from all three.

The settings file and its one table of keys (which keys configure which Kafka client, and which hold
secrets), the replication policy with every topic name, every record format the parts exchange through
Kafka (``contract.records``) and the rules their parsers follow for bytes from outside, the Redis key
layout, the status vocabulary and the lag rules. ``driver``, ``aggregator`` and ``service`` import from
here and from ``clients``, never from each other; ``contract`` imports nothing of the project's but
itself (tests/test_package_boundaries.py).
"""
