"""`srm-control`: edit a replication's allow/deny lists, or export a group's translated offsets.

    srm-control topics --source east --target west --add orders,payments
    srm-control topics --source east --target west --add-blacklist 'test-.*' --list
    srm-control groups --source east --target west --remove billing
    srm-control offsets --source east --target west --group billing --export > billing.csv

SRM's flags: ``--add``/``--remove`` edit the allow list (also spelled ``--add-allowlist``,
``--add-whitelist``...), ``--add-blacklist``/``--remove-blacklist`` the deny list (also
``--add-denylist``...). Entries are names or regexes matching whole names. The lists live in the
target cluster's ``srm-control.internal`` (format: ``driver.control_record``); running drivers apply them
without a restart.

Exit codes: 0 done; 1 nothing to export; 2 bad arguments, bad configuration or a cluster that does not
answer, always as one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
import uuid
from typing import NoReturn

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from clients import kafka_clients
from clients.client_renderings import check_client_configs
from clients.kafka_clients import ClusterUnavailable
from contract.config import ConfigError, SrmConfig, load_config
from contract.records.mm2 import RECORD_PARTITION, Checkpoint
from driver.control_lists import (
    ControlLists,
    ControlWriteError,
    cluster_metadata,
    ensure_control_topic,
    write_changes,
)
from driver.control_record import ControlChange, ControlEntry, ControlFormatError
from driver.internal_topic_feed import checked_checkpoint
from driver.offset_export import export_csv

LOG = logging.getLogger(__name__)

PROG = "srm-control"
DEFAULT_TIMEOUT_S = 10.0
# librdkafka would print its own connection errors to stderr; the CLI reports one line of its own.
QUIET_CLIENTS = {"log_level": 0}
EDIT_FLAGS = (  # (dest, list, present, spellings)
    ("add_allow", "allow", True, ("--add", "--add-allowlist", "--add-whitelist")),
    ("remove_allow", "allow", False, ("--remove", "--remove-allowlist", "--remove-whitelist")),
    ("add_deny", "deny", True, ("--add-blacklist", "--add-denylist")),
    ("remove_deny", "deny", False, ("--remove-blacklist", "--remove-denylist")),
)

CheckpointKey = tuple[str, tuple[str, int]]  # (group, (remote topic, partition))


class UsageError(Exception):
    """A problem the user can fix in the command line, the configuration or the cluster."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} -h)")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(message)s", stream=sys.stderr)
    try:
        args = _parser().parse_args(argv)
        config = _load(args.config)
        _check_pair(config, args.source, args.target)
        if args.command == "offsets":
            return _export_offsets(config, args)
        return _edit_lists(config, args)
    except (UsageError, ConfigError, ClusterUnavailable, ControlWriteError) as exc:
        message = " ".join(str(exc).split())  # one line, whatever librdkafka put in the text
        print(message if message.startswith(PROG) else f"{PROG}: {message}", file=sys.stderr)
        return 2


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{topics,groups,offsets}")
    for kind in ("topics", "groups"):
        sub = commands.add_parser(kind, help=f"edit or list the {kind} allow and deny lists")
        _common_arguments(sub)
        for dest, list_name, present, spellings in EDIT_FLAGS:
            verb = "add to" if present else "remove from"
            sub.add_argument(*spellings, dest=dest, action="append", default=[], metavar="NAMES",
                             help=f"comma-separated {kind} (names or regexes) to {verb} the {list_name} list")
        sub.add_argument("--list", action="store_true", help="print the current allow and deny lists")
    offsets = commands.add_parser("offsets", help="export a group's translated offsets as CSV")
    _common_arguments(offsets)
    offsets.add_argument("--group", required=True, help="consumer group")
    offsets.add_argument("--export", action="store_true", required=True,
                         help="print CSV for kafka-consumer-groups --reset-offsets --from-file")
    return parser


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    default_config = os.environ.get("SRM_CONFIG") or "srm.properties"
    parser.add_argument("--config", default=default_config,
                        help="SRM properties file (default: $SRM_CONFIG, else ./srm.properties)")
    parser.add_argument("--source", required=True, help="source cluster alias")
    parser.add_argument("--target", required=True, help="target cluster alias")
    parser.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds to wait for the target cluster (default {DEFAULT_TIMEOUT_S:g})")


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < 3600:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 3600 seconds")
    return seconds


def _load(path: str) -> SrmConfig:
    if not os.path.exists(path):
        raise UsageError(f"configuration file {path!r} not found; pass --config or set $SRM_CONFIG")
    config = load_config(path)
    check_client_configs(config)
    return config


def _check_pair(config: SrmConfig, source: str, target: str) -> None:
    known = ", ".join(config.clusters)
    for flag, alias in (("--source", source), ("--target", target)):
        if alias not in config.clusters:
            raise UsageError(f"{flag} {alias!r} is not a cluster listed in 'clusters' of {config.path} "
                             f"(known: {known})")
    if source == target:
        raise UsageError(f"--source and --target are both {source!r}; a replication needs two clusters")


def _edit_lists(config: SrmConfig, args: argparse.Namespace) -> int:
    changes = _requested_changes(args)
    if not changes and not args.list:
        raise UsageError(f"{PROG} {args.command}: nothing to do; give --add, --remove, --add-blacklist, "
                         f"--remove-blacklist or --list")
    if changes:
        write_changes(config, args.target, changes, args.timeout, QUIET_CLIENTS)
        for change in changes:
            e = change.entry
            print(f"{'added to' if change.present else 'removed from'} the {e.kind} {e.list_name} list of "
                  f"{e.source}->{e.target}: {e.name}")
    if args.list:
        _print_lists(config, args)
    return 0


def _requested_changes(args: argparse.Namespace) -> list[ControlChange]:
    changes, ts = [], int(time.time() * 1000)
    for dest, list_name, present, spellings in EDIT_FLAGS:
        for value in getattr(args, dest):
            names = [name.strip() for name in value.split(",") if name.strip()]
            if not names:
                raise UsageError(f"{spellings[0]} got {value!r}: no {args.command} named")
            changes += [ControlChange(_entry(args, list_name, name), present, ts) for name in names]
    return changes


def _entry(args: argparse.Namespace, list_name: str, name: str) -> ControlEntry:
    try:
        re.compile(name)
        return ControlEntry(args.source, args.target, args.command, list_name, name)
    except re.error as exc:
        raise UsageError(f"{name!r} is not a valid regular expression: {exc}") from None
    except ControlFormatError as exc:
        raise UsageError(str(exc)) from None


def _print_lists(config: SrmConfig, args: argparse.Namespace) -> None:
    # Fails fast on an unreachable cluster; the reader below would keep retrying.
    admin = kafka_clients.admin(config, args.target, QUIET_CLIENTS)
    ensure_control_topic(config, args.target, admin, args.timeout)
    lists = ControlLists(config, args.target, poll_timeout_s=0.2, client_overrides=QUIET_CLIENTS).start()
    try:
        if not lists.wait_until_loaded(args.timeout):
            raise ClusterUnavailable(f"could not read the lists from cluster {args.target!r} within "
                                     f"{args.timeout:g} s")
        read = lists.topic_lists if args.command == "topics" else lists.group_lists
        allow, deny = read(args.source, args.target)
    finally:
        lists.stop()
    for list_name, entries in (("allow", allow), ("deny", deny)):
        print(f"{args.command} {list_name} list of {args.source}->{args.target} ({len(entries)}):")
        for name in sorted(entries):
            print(f"  {name}")


def _export_offsets(config: SrmConfig, args: argparse.Namespace) -> int:
    topic = config.replication_policy(args.source, args.target).checkpoints_topic(args.source)
    checkpoints = read_checkpoints(config, args.target, topic, args.timeout)
    offsets = {partition: c.downstream_offset for (group, partition), c in checkpoints.items()
               if group == args.group}
    if not offsets:
        print(f"{PROG}: nothing to export: no checkpoints of group {args.group!r} in {topic} on "
              f"{args.target!r}", file=sys.stderr)
        return 1
    try:
        plan = export_csv(offsets)
    except ValueError as exc:  # a checkpoint kafka-consumer-groups could not apply
        raise UsageError(f"cannot export group {args.group!r}: {exc}") from None
    sys.stdout.write(plan)
    return 0


def read_checkpoints(config: SrmConfig, alias: str, topic: str,
                     timeout_s: float) -> dict[CheckpointKey, Checkpoint]:
    """The latest checkpoint of every (group, (remote topic, partition)) in ``topic`` on ``alias``.

    Reads partition 0 (MM2 writes and reads checkpoints only there) from the beginning to its end.
    Records that do not decode are reported on stderr and skipped.
    """
    admin = kafka_clients.admin(config, alias, QUIET_CLIENTS)
    metadata = cluster_metadata(config, alias, admin, timeout_s, topic)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        return {}
    consumer = kafka_clients.consumer(config, alias, f"srm-control-export-{uuid.uuid4().hex}",
                                      overrides={"enable.partition.eof": True, **QUIET_CLIENTS})
    try:
        return _read_to_end(consumer, topic, timeout_s)
    finally:
        consumer.close()


def _read_to_end(consumer: Consumer, topic: str, timeout_s: float) -> dict[CheckpointKey, Checkpoint]:
    partition = TopicPartition(topic, RECORD_PARTITION, OFFSET_BEGINNING)
    consumer.assign([partition])
    watermarks = consumer.get_watermark_offsets(partition, timeout=timeout_s)
    if watermarks is None:
        raise ClusterUnavailable(f"no offsets of {topic} within {timeout_s:g} s")
    low, end = watermarks
    latest: dict[CheckpointKey, Checkpoint] = {}
    position, deadline = low, time.monotonic() + timeout_s
    while position < end:
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"{topic}: read up to offset {position} of {end} in {timeout_s:g} s")
        for message in consumer.consume(500, timeout=0.2):
            error, offset = message.error(), message.offset()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    assert offset is not None  # an end-of-partition event has one
                    position = max(position, offset)
                continue
            assert offset is not None  # a record has one
            position = offset + 1
            try:
                checkpoint = checked_checkpoint(Checkpoint.decode(message.key(), message.value()))
            except ValueError as exc:  # WireFormatError or an illegal name/offset
                LOG.warning("skipping undecodable checkpoint %s[%d]@%d: %s", message.topic(),
                            message.partition(), message.offset(), exc)
                continue
            latest[(checkpoint.consumer_group_id, (checkpoint.topic, checkpoint.partition))] = checkpoint
    return latest


if __name__ == "__main__":
    sys.exit(main())
