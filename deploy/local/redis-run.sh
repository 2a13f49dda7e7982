#!/bin/sh
# compose.yaml gives the command (`redis-server --appendonly yes ...`); the official image's build turns
# protected mode off, this one passes it on the command line instead.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server --protected-mode no "$@"
fi
exec "$@"
