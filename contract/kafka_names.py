"""Which names read from outside are legal: Kafka topics and groups, cluster aliases, site names.

A name in a record is untrusted like the rest of it. A topic called ``*`` would merge into the
replication-wide series (``contract.redis_layout.ALL_TOPICS``), a megabyte-long one would become a
megabyte of Redis key, and a site called ``all`` would shadow the gateway's fan-out. Kafka itself
allows topic names of 1 to 249 characters from ``[A-Za-z0-9._-]``, except ``.`` and ``..``.
"""

from __future__ import annotations

import re
from typing import Final

from contract.untrusted import Rejected, shown

TOPIC: Final = r"[A-Za-z0-9._-]{1,249}"
TOPIC_ARROW: Final = f"^{TOPIC}$"  # for pyarrow.compute.match_substring_regex (Arrow's regex is RE2)
RESERVED_TOPICS: Final = frozenset({"*", ".", ".."})
MAX_GROUP_CHARS: Final = 1024
ALIAS: Final = r"[A-Za-z0-9._-]{1,249}"
# '+' is legal: an advertiser with several targets and no service.site joins their aliases with '+'.
SITE: Final = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}"
RESERVED_SITES: Final = frozenset({"all", "local"})

_TOPIC = re.compile(TOPIC)
_ALIAS = re.compile(ALIAS)
_SITE = re.compile(SITE)


def check_topic(name: object, what: str = "topic") -> str:
    """``name`` if it is a legal Kafka topic name; ``Rejected`` naming ``what`` otherwise."""
    if not isinstance(name, str) or not _TOPIC.fullmatch(name) or name in RESERVED_TOPICS:
        raise Rejected(f"{what} {_quoted(name)} is not a legal Kafka topic name "
                       "(1-249 characters of A-Z a-z 0-9 . _ -, not '.' or '..')")
    return name


def check_group(name: object, what: str = "group", max_chars: int = MAX_GROUP_CHARS) -> str:
    """``name`` if it is a usable consumer group id: non-empty, printable, at most ``max_chars``,
    not the reserved ``*``."""
    if (not isinstance(name, str) or not name or len(name) > max_chars or not name.isprintable()
            or name == "*"):
        raise Rejected(f"{what} {_quoted(name)} is not a legal group id (1-{max_chars} printable "
                       "characters, not '*')")
    return name


def check_alias(name: object, what: str = "cluster alias") -> str:
    if not isinstance(name, str) or not _ALIAS.fullmatch(name):
        raise Rejected(f"{what} {_quoted(name)} is not a cluster alias (A-Z a-z 0-9 . _ -)")
    return name


def check_site(name: object, what: str = "site") -> str:
    if not isinstance(name, str) or not _SITE.fullmatch(name):
        raise Rejected(f"{what} {_quoted(name)} is not a site name (1-128 characters of A-Z a-z 0-9 . _ + -, "
                       "starting with a letter or digit)")
    if name.lower() in RESERVED_SITES:
        raise Rejected(f"{what} {name!r} is reserved ({', '.join(sorted(RESERVED_SITES))} select sites)")
    return name


def _quoted(name: object) -> str:
    return repr(shown(name, 60)) if isinstance(name, str) else type(name).__name__
