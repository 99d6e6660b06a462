"""`quafka topics`: create, list, describe, alter (add partitions) and delete topics, as kafka-topics.sh.

Output follows Kafka 4.4's TopicCommand: ``Created topic X.``; ``--list`` prints one name a line;
``--describe`` prints ``Topic: X<TAB>TopicId: ...<TAB>PartitionCount: ...<TAB>ReplicationFactor: ...
<TAB>Configs: k=v,...`` and one ``<TAB>Topic: X<TAB>Partition: N<TAB>Leader: ...<TAB>Replicas: ...
<TAB>Isr: ...`` line per partition. ``--topic`` is a regular expression for every action but
``--create``, as in Kafka.
"""

from __future__ import annotations

import argparse
import re
from typing import Any
from uuid import UUID

from quafka.client.coordinator_records import kafka_uuid_str

from ._common import ToolError, add_bootstrap, kafka_parser_errors, open_admin, run_tool
from .configs import describe_config_entries, parse_add_config

EXAMPLES = """
examples:
  quafka topics --create --topic jobs --partitions 3
  quafka topics --create --topic jobs --partitions 3 --config retention.ms=86400000 --if-not-exists
  quafka topics --list --exclude-internal
  quafka topics --describe --topic jobs
  quafka topics --describe --topic 'jobs.*'          # --topic is a regular expression
  quafka topics --alter --topic jobs --partitions 6   # partitions can only be added
  quafka topics --delete --topic jobs --if-exists
"""

ACTIONS = ("list", "describe", "create", "alter", "delete")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (kafka-topics)",
        description="Create, list, describe, alter (add partitions to) and delete topics, with "
                    "kafka-topics.sh's options and output. To change topic configs use 'quafka configs'.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    p.add_argument("--create", action="store_true", help="create a new topic")
    p.add_argument("--list", action="store_true", help="list the topics")
    p.add_argument("--describe", action="store_true", help="describe the topics")
    p.add_argument("--alter", action="store_true", help="add partitions to a topic (with --partitions)")
    p.add_argument("--delete", action="store_true", help="delete the topics")
    p.add_argument("--topic", metavar="TOPIC",
                   help="the topic to create; for the other actions a regular expression of topic names "
                        "(quote it in the shell)")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="number of partitions (create; with --alter the new, larger total). "
                        "Default on create: the broker's num.partitions")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="replication factor for --create (quafka is a single node: 1)")
    p.add_argument("--config", metavar="KEY=VALUE", action="append", default=[],
                   help="a topic config for --create (repeatable)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: do nothing if the topic already exists")
    p.add_argument("--if-exists", action="store_true",
                   help="with --alter, --describe or --delete: do nothing if no topic matches")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave out internal topics (__consumer_offsets, __share_group_state) when "
                        "listing or describing by pattern")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="with --describe: only topics that override configs, and no partition lines")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a leader")
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def kafka_uuid(topic_id: UUID | None) -> str:
    """Kafka prints Uuids as URL-safe base64 without padding (22 characters)."""
    return kafka_uuid_str(topic_id if topic_id is not None else UUID(int=0))


def _check_args(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise ToolError(f"Missing required argument \"--topic\" for --{action}")
    if action == "alter" and args.partitions is None:
        raise ToolError("--alter needs --partitions (to alter topic configs, use 'quafka configs')")
    if args.config and action != "create":
        raise ToolError("Option --config can only be used with --create (to alter topic configs, use 'quafka configs')")
    if args.if_not_exists and action != "create":
        raise ToolError("Option --if-not-exists can only be used with --create")
    if args.if_exists and action not in ("alter", "describe", "delete"):
        raise ToolError("Option --if-exists can only be used with --alter, --describe or --delete")
    if args.replication_factor is not None and action != "create":
        raise ToolError("Option --replication-factor can only be used with --create")
    if args.partitions is not None and action not in ("create", "alter"):
        raise ToolError("Option --partitions can only be used with --create or --alter")
    if (args.topics_with_overrides or args.unavailable_partitions) and action != "describe":
        raise ToolError("--topics-with-overrides and --unavailable-partitions can only be used with --describe")
    return action


def _matching(admin: Any, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Topic names (sorted) that match Kafka's include-list regex (commas mean "or")."""
    topics = admin.list_topics(include_internal=True)
    names = sorted(n for n, d in topics.items() if not (exclude_internal and d.is_internal))
    if not pattern:
        return names
    try:
        regex = re.compile(pattern.strip().replace(",", "|"))
    except re.error as exc:
        raise ToolError(f"--topic {pattern!r} is not a valid regular expression: {exc}") from None
    return [n for n in names if regex.fullmatch(n)]


def _ensure_found(found: list[str], args: argparse.Namespace) -> None:
    if args.topic and not found and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")


def _create(admin: Any, args: argparse.Namespace) -> None:
    from quafka.client import NewTopic
    from quafka.client.errors import ErrorCode, KafkaException

    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    configs: dict[str, str] = {}
    for item in args.config:
        if "=" not in item:
            raise ToolError(f"Invalid topic config: all configs to be added must be in the format \"key=val\", "
                            f"got {item!r}")
        configs.update(parse_add_config(item) if "[" in item else dict([item.split("=", 1)]))
    if "." in args.topic and "_" in args.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    topic = NewTopic(args.topic, -1 if args.partitions is None else args.partitions,
                     -1 if args.replication_factor is None else args.replication_factor, configs)
    try:
        admin.create_topics([topic])
    except KafkaException as exc:
        if exc.code == ErrorCode.topic_already_exists and args.if_not_exists:
            return
        raise
    print(f"Created topic {args.topic}.")


def _describe(admin: Any, args: argparse.Namespace) -> None:
    names = _matching(admin, args.topic, args.exclude_internal)
    _ensure_found(names, args)
    if not names:
        return
    descriptions = admin.describe_topics(names)
    for name in names:
        desc = descriptions[name]
        partitions = [desc.partitions[p] for p in sorted(desc.partitions)]
        if not args.unavailable_partitions:
            entries = describe_config_entries(admin, "topic", name)
            overrides = [e for e in entries if not e.is_default]
            if not args.topics_with_overrides or overrides:
                configs = ",".join(f"{e.name}={'null' if e.value is None else e.value}" for e in overrides)
                print(f"Topic: {name}\tTopicId: {kafka_uuid(desc.topic_id)}\tPartitionCount: {len(partitions)}"
                      f"\tReplicationFactor: 1\tConfigs: {configs}")
        if args.topics_with_overrides:
            continue
        for part in partitions:
            if args.unavailable_partitions and part.leader >= 0:
                continue
            leader = str(part.leader) if part.leader >= 0 else "none"
            replicas = str(part.leader) if part.leader >= 0 else ""
            isr = replicas
            print(f"\tTopic: {name}\tPartition: {part.partition}\tLeader: {leader}\tReplicas: {replicas}"
                  f"\tIsr: {isr}\tElr: N/A\tLastKnownElr: N/A")


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        action = _check_args(args)
        with open_admin(args) as admin:
            if action == "create":
                _create(admin, args)
            elif action == "list":
                for name in _matching(admin, args.topic, args.exclude_internal):
                    print(name)
            elif action == "describe":
                _describe(admin, args)
            elif action == "alter":
                names = _matching(admin, args.topic, args.exclude_internal)
                _ensure_found(names, args)
                if names:
                    admin.create_partitions({n: args.partitions for n in names})
            elif action == "delete":
                names = _matching(admin, args.topic, args.exclude_internal)
                _ensure_found(names, args)
                if names:
                    admin.delete_topics(names)
        return 0

    return run_tool("topics", body)
