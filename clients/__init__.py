"""How every part talks to the outside world: Kafka and Redis clients built from the properties file.

The client properties rendered for librdkafka or a Java client, JKS stores converted, librdkafka's logs
routed and its faults named (secrets scrubbed), reachability checks, retry back-off, the guard around
records read from Kafka, RE2 for patterns users write, and what every console script does at start-up.
It builds on ``contract`` (the file's keys, the record formats) and is imported by the driver, the
aggregator and the service; ``contract`` never imports it (tests/test_package_boundaries.py).
"""
