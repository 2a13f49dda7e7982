"""Polling a live service's JSON answer until it says what a test waits for (e2e test helper)."""

from __future__ import annotations

import time
from collections.abc import Callable

import requests


def poll_json(url: str, done: Callable[[dict], bool], timeout_s: float) -> dict | None:
    """The first 200 answer `done` accepts, else the last 200 answer seen (None if there was none)."""
    answer, deadline = None, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = requests.get(url, timeout=10)
        if response.status_code == 200:
            answer = response.json()
            if done(answer):
                return answer
        time.sleep(1)
    return answer
