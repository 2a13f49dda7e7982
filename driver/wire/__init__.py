"""Byte formats of the records the driver reads and writes."""
