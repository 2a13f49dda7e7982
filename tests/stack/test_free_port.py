"""free_port's slices: processes picking ports side by side (the suite's pytest-xdist workers) never
hand out the same port."""

from __future__ import annotations

import socket

import pytest

from stack import kafka_cluster
from stack.kafka_cluster import PORT_SLICE_ENV, free_port, port_slice


@pytest.mark.parametrize("index", [0, 1, 2])
def test_ports_of_a_slice_are_its_own_distinct_and_free(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    monkeypatch.setenv(PORT_SLICE_ENV, f"{index}/3")
    monkeypatch.setattr(kafka_cluster, "_HANDED_OUT", set())
    ports = [free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    assert {(port // 2) % 3 for port in ports} == {index}
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing holds it once handed out


def test_without_a_slice_every_port_is_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SLICE_ENV, raising=False)
    assert port_slice() == (0, 1)


@pytest.mark.parametrize("value", ["2/2", "-1/2", "a/2", "1", "1/0"])
def test_a_bad_slice_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(PORT_SLICE_ENV, value)
    with pytest.raises(ValueError, match=PORT_SLICE_ENV):
        port_slice()
