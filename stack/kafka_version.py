"""The one Apache Kafka version of the project, named once: ``kafka.version`` in stack/poms/kafka/pom.xml.

The local stack runs the broker jars Maven resolves from that pom; tests with a Docker engine run the
official ``apache/kafka`` image of the same version (``stack.kafka_container``); compose.yaml pins the
same tag (YAML cannot read it: tests/stack/test_kafka_version.py checks that they agree).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Final

KAFKA_POM: Final = Path(__file__).parent / "poms" / "kafka" / "pom.xml"
KAFKA_IMAGE_REPOSITORY: Final = "apache/kafka"


@cache
def kafka_release() -> str:
    found = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", KAFKA_POM.read_text())
    if found is None:
        raise ValueError(f"{KAFKA_POM} has no <kafka.version> property")
    return found.group(1)


def kafka_image() -> str:
    """The official image of the project's Kafka version, e.g. ``apache/kafka:4.3.1``."""
    return f"{KAFKA_IMAGE_REPOSITORY}:{kafka_release()}"
