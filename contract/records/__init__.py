"""Byte formats of every record the parts exchange through Kafka: MM2's internal topics, the Connect
progress record, the control record, the raw-metrics record and the service advertisement."""
