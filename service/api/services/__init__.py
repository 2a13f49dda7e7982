"""Discovered SRM services (sites); the local one until discovery provides more."""
