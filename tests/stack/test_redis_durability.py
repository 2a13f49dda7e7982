"""The stack's redis-server is durable as deployed: what was written survives a restart and a kill -9."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from stack.redis_server import RedisServer


@pytest.mark.usefixtures("external_processes")
def test_writes_survive_a_restart_and_a_crash(tmp_path: Path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        client.set("before-restart", 1)
        client.close()
        server.restart()
        client = redis.Redis.from_url(server.url)
        assert client.get("before-restart") == b"1"
        pipe = client.pipeline(transaction=True)
        pipe.set("in-one-multi", 1)
        pipe.set("also-in-it", 2)
        pipe.execute()
        client.close()
        time.sleep(1.5)  # everysec: the AOF is fsynced within a second
        server.kill()
        server.start()
        client = redis.Redis.from_url(server.url)
        assert client.mget("before-restart", "in-one-multi", "also-in-it") == [b"1", b"1", b"2"]
        client.close()
    finally:
        server.cleanup()


@pytest.mark.usefixtures("external_processes")
def test_a_paused_server_is_a_hung_one_until_resumed(tmp_path: Path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=0.5)
        server.pause()
        try:
            client.ping()
            raise AssertionError("a SIGSTOPped Redis answered")
        except redis.TimeoutError:
            pass
        server.resume()
        assert redis.Redis.from_url(server.url, socket_timeout=2).ping()
    finally:
        server.cleanup()
