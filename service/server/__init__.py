"""Patches to gunicorn's worker I/O, installed in each worker (kept apart from the domain rules)."""
