"""Redis commands laid out as one Arrow string array (a command's arguments after each other) and packed
into Redis's wire format (RESP) by Arrow's string kernels, then sent in one MULTI on a connection of the
client's pool.

At 100,000 partitions the sink writes ~10,000 hashes a batch (a topic's latest values each): handed to
redis-py, each HSET was a Python call, its ~20 arguments packed one at a time, and its answer read by a
Python call, ~25 us a command of the sink's thread (and of the GIL the merge thread shares). Here the
arguments stay Arrow strings and the kernels run without the GIL; only the answers are read a command at a
time. (aggregator/window_calls.py packs the merge's script calls the same way.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis


def packed(args: pa.Array, counts: np.ndarray, heads: pa.Array | None = None) -> pa.Buffer:
    """The commands whose arguments (the command's name first) are `args`, `counts[c]` of them for command
    c, in order, as RESP: each command's head (`*<arguments>`) then each argument as a bulk string. `heads`,
    when given, is each command's RESP before its arguments in `args` instead (its `*<n>` and the bulk
    strings of arguments it has in common with the others, such as a script's name)."""
    if not len(counts):
        return pa.py_buffer(b"")
    if heads is None:
        arguments = pc.cast(pa.array(counts, pa.int64()), pa.string())
        heads = pc.binary_join_element_wise("*", arguments, "\r\n", "")
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    at = np.zeros(len(args), np.int64)
    at[firsts] = np.arange(1, len(firsts) + 1)
    prefixes = pc.take(pa.concat_arrays([pa.array([""]), heads]), pa.array(at))
    return back_to_back(bulk(args, prefixes))


def bulk(args: pa.Array, prefixes: pa.Array | str = "") -> pa.Array:
    """Each argument as a RESP bulk string (`$<bytes>`, the argument), after its prefix (a command's head
    before its first argument): one copy of the arguments' bytes."""
    lengths = pc.cast(pc.binary_length(args), pa.string())
    return pc.binary_join_element_wise(prefixes, "$", lengths, "\r\n", args, "\r\n", "")


def back_to_back(text: pa.Array) -> pa.Buffer:
    """The strings of `text` back to back: its data buffer, from its first string to its last."""
    offsets = np.frombuffer(text.buffers()[1], np.int32)[text.offset:text.offset + len(text) + 1]
    data = text.buffers()[2]
    return pa.py_buffer(b"") if data is None else data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def command_parts(*args: str | pa.Buffer) -> list[bytes | pa.Buffer]:
    """One command in RESP, in parts (a binary argument is not copied): for a command beside packed ones."""
    parts: list[bytes | pa.Buffer] = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts += [b"$%d\r\n" % data.size if isinstance(data, pa.Buffer) else b"$%d\r\n" % len(data), data,
                  b"\r\n"]
    return parts


def execute(client: redis.Redis, commands: pa.Buffer, count: int) -> list:
    """Sends `count` commands packed as `commands` (packed) at once, outside a transaction, on a connection
    of the client's pool, and returns their answers; raises the first error among them."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_packed_command([commands])
        return [connection.read_response(disable_decoding=True) for _ in range(count)]
    except BaseException:
        connection.disconnect()  # answers may be left unread
        raise
    finally:
        client.connection_pool.release(connection)


def execute_in_multi(client: redis.Redis, commands: pa.Buffer | Sequence[pa.Buffer | bytes], count: int
                     ) -> list:
    """Sends `count` commands packed as `commands` (packed; or such buffers one after the other) in one MULTI
    and returns their answers; raises the first error among them (the transaction is then not run when Redis
    refused a command as it queued)."""
    parts = [commands] if isinstance(commands, pa.Buffer) else list(commands)
    connection = client.connection_pool.get_connection()
    try:
        connection.send_packed_command([*connection.pack_command("MULTI"), *parts,
                                        *connection.pack_command("EXEC")])
        queued = [connection.read_response(disable_decoding=True) for _ in range(count + 1)]
        executed = connection.read_response(disable_decoding=True)
    except BaseException:
        connection.disconnect()  # answers may be left unread
        raise
    finally:
        client.connection_pool.release(connection)
    problems = [answer for answer in queued if isinstance(answer, Exception)]
    if executed is None or isinstance(executed, Exception):
        raise redis.ResponseError(f"MULTI of {count} commands not run: {problems[:1] or executed}")
    failed = [answer for answer in executed if isinstance(answer, Exception)]
    if failed:
        raise failed[0]
    return list(executed)
