"""resp_commands.packed: Arrow's RESP is byte for byte redis-py's own packing of the same commands."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from redis.connection import PythonRespSerializer

from aggregator.resp_commands import packed


def test_packed_is_redis_py_packing() -> None:
    commands = [("HSET", "srm:latest:{a|b|t}:partitions", "0", '{"ts":1}', "1", "é\r\n"),
                ("PEXPIRE", "k", "604800000"), ("HSET", "k2", "", "x" * 70_000)]
    serializer = PythonRespSerializer(6000, lambda v: v.encode() if isinstance(v, str) else v)
    expected = b"".join(b"".join(serializer.pack(*c)) for c in commands)
    args = pa.array([a for c in commands for a in c], pa.string())
    assert packed(args, np.array([len(c) for c in commands])).to_pybytes() == expected


def test_no_commands_pack_to_nothing() -> None:
    assert packed(pa.array([], pa.string()), np.array([], np.int64)).to_pybytes() == b""
