"""A driver whose clusters do not answer stays readable: a bounded number of lines per minute.

Before librdkafka's lines were routed into Python logging, one driver wrote about 80
"Connection refused" lines a second to stderr. Now each task warns once per backoff step and each
librdkafka line shape shows at most once a minute.

The driver waits ``control.lists.load.timeout.seconds`` (30 s by default) for its control lists before
its replication workers start; the test sets it to 2 s, so the workers run for 23 s of the 25 s window
(for 15 s of 45 before). The window holds the start-up lines and the densest backoff steps, so a
minute's allowance is its bound (about 16 lines are written).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from contract.config import ConfigError, parse_config
from driver.__main__ import build_tasks
from stack.kafka_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
CONTROL_WAIT_S = 2
RUN_S = 25.0  # the replication workers run from about CONTROL_WAIT_S on
MAX_LINES_PER_MINUTE = 40


@pytest.mark.integration
def test_unreachable_clusters_give_a_bounded_number_of_lines_per_minute(tmp_path: Path) -> None:
    config = tmp_path / "srm.properties"
    config.write_text(f"""clusters = east, west
east.bootstrap.servers = 127.0.0.1:{free_port()}
west.bootstrap.servers = 127.0.0.1:{free_port()}
east->west.enabled = true
control.lists.load.timeout.seconds = {CONTROL_WAIT_S}
""")
    process = subprocess.Popen([sys.executable, "-m", "driver", "--config", str(config)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    time.sleep(RUN_S)  # under a minute: a minute's allowance bounds it
    os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES_PER_MINUTE, "\n".join(lines)
    assert "srm-control lists of west not read within 2 s" in output, output
    assert not any(line.startswith("%3|") for line in lines), "librdkafka wrote to stderr itself"
    assert "Traceback" not in output
    librdkafka = [re.sub(r"\d+", "#", line.split(" librdkafka.", 1)[1]) for line in lines
                  if " librdkafka." in line]
    assert librdkafka, "librdkafka's lines did not reach Python logging"
    assert max(Counter(librdkafka).values()) == 1, librdkafka


def test_a_negative_wait_for_the_control_lists_is_a_config_error() -> None:
    config = parse_config("clusters = east, west\neast.bootstrap.servers = 127.0.0.1:1\n"
                          "west.bootstrap.servers = 127.0.0.1:2\neast->west.enabled = true\n"
                          "control.lists.load.timeout.seconds = -1\n")
    with pytest.raises(ConfigError, match="control.lists.load.timeout.seconds"):
        build_tasks(config, threading.Event())
