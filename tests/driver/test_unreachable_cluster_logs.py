"""A driver whose clusters do not answer stays readable: a bounded number of lines per minute.

Before librdkafka's lines were routed into Python logging, one driver wrote about 80
"Connection refused" lines a second to stderr. Now each task warns once per backoff step and each
librdkafka line shape shows at most once a minute.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 45.0  # past the 30 s wait for the control lists, so the replication workers start too
MAX_LINES_PER_MINUTE = 40


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_unreachable_clusters_give_a_bounded_number_of_lines_per_minute(tmp_path: Path) -> None:
    config = tmp_path / "srm.properties"
    config.write_text(f"""clusters = east, west
east.bootstrap.servers = 127.0.0.1:{closed_port()}
west.bootstrap.servers = 127.0.0.1:{closed_port()}
east->west.enabled = true
""")
    process = subprocess.Popen([sys.executable, "-m", "driver", "--config", str(config)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    began = time.monotonic()
    time.sleep(RUN_S)
    os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    minutes = (time.monotonic() - began) / 60
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES_PER_MINUTE * minutes, "\n".join(lines)
    assert not any(line.startswith("%3|") for line in lines), "librdkafka wrote to stderr itself"
    assert "Traceback" not in output
    librdkafka = [re.sub(r"\d+", "#", line.split(" librdkafka.", 1)[1]) for line in lines
                  if " librdkafka." in line]
    assert librdkafka, "librdkafka's lines did not reach Python logging"
    assert max(Counter(librdkafka).values()) == 1, librdkafka
