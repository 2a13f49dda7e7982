"""Byte formats of the records the parts exchange through Kafka: MM2's internal topics, the raw-metrics
record and the service advertisement. (The Connect progress record and the control record have one
reader and writer, the driver: ``driver.progress_record``, ``driver.control_record``.)"""
