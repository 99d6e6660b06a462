"""`quafka consumer-groups`: list, describe and delete consumer groups and reset or delete their
committed offsets, with the options, output and exit codes of Kafka 4.4's kafka-consumer-groups.sh
(ConsumerGroupCommand).

Members, their assignments and the group's assignor come from DescribeGroups (classic groups; the
assignment bytes decoded with Kafka's consumer protocol). Simple groups (consumers that assign()
and commit) are type Classic, state Empty, with no members. Tables use Kafka's layout
(`_common.kafka_table`: a blank line, the header, the rows; no trailing padding).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from quafka.client.errors import KafkaException

from ._common import MISSING, ToolError, add_bootstrap, kafka_parser_errors, kafka_table, open_admin, run_tool
from .share_groups import (_clamp, _coordinator, _describe_topics, _quoted, parse_datetime, parse_topic_partitions,
                           read_reset_plan)

EXAMPLES = """
examples:
  quafka consumer-groups --list
  quafka consumer-groups --list --state                  # GROUP and STATE columns
  quafka consumer-groups --list --type --state Empty     # GROUP, TYPE and STATE of the Empty groups
  quafka consumer-groups --describe --group billing      # CURRENT-OFFSET, LOG-END-OFFSET and LAG
  quafka consumer-groups --describe --group billing --state
  quafka consumer-groups --describe --all-groups --members

  # offsets can only be reset while the group has no active members (stop its consumers first)
  quafka consumer-groups --reset-offsets --group billing --topic orders --to-earliest --dry-run
  quafka consumer-groups --reset-offsets --group billing --topic orders:0,1 --to-offset 100 --execute
  quafka consumer-groups --reset-offsets --group billing --all-topics --shift-by -10 --execute
  quafka consumer-groups --reset-offsets --group billing --all-topics --by-duration PT1H --execute
  quafka consumer-groups --reset-offsets --group billing --all-topics \\
      --to-datetime 2026-01-31T09:00:00.000+01:00 --execute
  quafka consumer-groups --reset-offsets --group billing --all-topics --to-current --dry-run --export > plan.csv
  quafka consumer-groups --reset-offsets --group billing --from-file plan.csv --execute

  quafka consumer-groups --delete-offsets --group billing --topic orders
  quafka consumer-groups --delete --group billing
"""

CONSUMER_TYPES = {"classic": "Classic", "consumer": "Consumer"}
CONSUMER_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning",
                         "Reconciling")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "shift_by", "to_datetime", "by_duration", "to_earliest", "to_latest", "to_current",
             "from_file")
NO_EXECUTE_WARNING = ("WARN: No action will be performed as the --execute option is missing. In version 5.0, this "
                      "command will require either --dry-run or --execute to be specified. You should add the "
                      "--dry-run option explicitly if you are scripting this command and want to keep the current "
                      "default behavior without prompting.")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "consumer-groups",
        help="list, describe, delete consumer groups and reset their offsets (kafka-consumer-groups)",
        description="List, describe and delete consumer groups, and reset or delete their committed offsets, "
                    "with the options and output of Kafka 4.4's kafka-consumer-groups.sh.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list the consumer groups (classic and consumer)")
    actions.add_argument("--describe", action="store_true",
                         help="describe consumer groups: offsets and lag (default), --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete consumer groups (they must be empty)")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the committed offsets of inactive groups: a scenario (--to-*, --shift-by, "
                              "--by-duration, --from-file), a scope (--topic, --all-topics) and --dry-run or "
                              "--execute")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete the group's committed offsets of --topic topics (one group)")
    scope = p.add_argument_group("scope")
    scope.add_argument("--group", metavar="GROUP", action="append", default=[],
                       help="the consumer group id (repeatable, except for --delete-offsets)")
    scope.add_argument("--all-groups", action="store_true",
                       help="apply to every consumer group (--describe, --delete, --reset-offsets)")
    scope.add_argument("--topic", metavar="TOPIC", action="append", default=[],
                       help="a topic (repeatable); 'topic:0,1,2' names partitions (--reset-offsets, --delete-offsets)")
    scope.add_argument("--all-topics", action="store_true",
                       help="--reset-offsets: every topic the group has committed offsets for")
    views = p.add_argument_group("--describe and --list options")
    views.add_argument("--offsets", action="store_true",
                       help="--describe: partitions with CURRENT-OFFSET, LOG-END-OFFSET and LAG (default)")
    views.add_argument("--members", action="store_true", help="--describe: the members of the group")
    views.add_argument("--state", nargs="?", const="", metavar="STATES",
                       help="--describe: the group's state; --list: a STATE column, or only the groups in these "
                            "comma-separated states (" + ", ".join(CONSUMER_GROUP_STATES) + ")")
    views.add_argument("--type", nargs="?", const="", metavar="TYPES",
                       help="--list: a TYPE column, or only the groups of these comma-separated types "
                            "(classic, consumer)")
    views.add_argument("--verbose", action="store_true",
                       help="--describe: add LEADER-EPOCH, epochs and assignments where known")
    reset = p.add_argument_group("--reset-offsets options")
    reset.add_argument("--dry-run", action="store_true",
                       help="show the new offsets without changing anything (the default without --execute)")
    reset.add_argument("--execute", action="store_true", help="reset the offsets")
    reset.add_argument("--export", action="store_true",
                       help="print the new offsets as CSV (topic,partition,offset; with several groups "
                            "group,topic,partition,offset), for --from-file")
    reset.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    reset.add_argument("--to-latest", action="store_true", help="reset to the latest offset (log end)")
    reset.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset (kept within the log)")
    reset.add_argument("--shift-by", type=int, metavar="N",
                       help="move the committed offset by N (negative: back), kept within the log")
    reset.add_argument("--to-datetime", metavar="DATETIME",
                       help="reset to the first offset at or after a time: YYYY-MM-DDThh:mm:ss.sss with an "
                            "optional zone (Z, +hh:mm, +hhmm, +hh; default UTC)")
    reset.add_argument("--by-duration", metavar="DURATION",
                       help="reset to the first offset at or after now minus an ISO-8601 duration, PnDTnHnMnS "
                            "(e.g. PT30M, P1DT2H)")
    reset.add_argument("--to-current", action="store_true",
                       help="reset to the committed offset (the log end where the group has none)")
    reset.add_argument("--from-file", metavar="FILE",
                       help="reset to the offsets of a CSV file (topic,partition,offset or "
                            "group,topic,partition,offset lines), such as --export writes")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS",
                   help="timeout of each request to the broker, in ms (default 30000)")
    kafka_parser_errors(p)
    p.set_defaults(func=run)


# ----------------------------------------------------------------------------- options

def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args: argparse.Namespace, name: str) -> bool:
    return getattr(args, name) not in (None, False)


def check_args(args: argparse.Namespace) -> str:
    """Kafka's ConsumerGroupCommandOptions.checkArgs: the action, and the options it allows."""
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                        "--delete-offsets")
    action = chosen[0]
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise ToolError("Options --members, --offsets and --verbose can only be used with --describe")
    if action not in ("describe", "list") and args.state is not None:
        raise ToolError("Option --state can only be used with --describe or --list")
    if action != "list" and args.type is not None:
        raise ToolError("Option --type can only be used with --list")
    if action != "reset_offsets":
        used = [s for s in SCENARIOS + ("dry_run", "execute", "export", "all_topics") if _given(args, s)]
        if used:
            raise ToolError(f"Option {_opt(used[0])} can only be used with --reset-offsets")
    if args.group and args.all_groups:
        raise ToolError("Option --group can't be used with option --all-groups")
    if action == "list" and (args.group or args.all_groups or args.topic):
        raise ToolError("Option --list does not take --group, --all-groups or --topic")
    if action == "describe":
        if not args.group and not args.all_groups:
            raise ToolError("Option --describe takes one of these options: --all-groups, --group")
        if sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1:
            raise ToolError("Option --describe takes at most one of these options: --members, --offsets, --state")
        if args.state:
            raise ToolError("Option --describe does not take a value for --state")
        if args.topic:
            raise ToolError("Option --describe does not take --topic")
    if action == "delete":
        if not args.group and not args.all_groups:
            raise ToolError("Option --delete takes one of these options: --all-groups, --group")
        if args.topic:
            raise ToolError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if action == "delete_offsets":
        if len(args.group) != 1 or not args.topic or args.all_groups:
            raise ToolError("Option --delete-offsets takes the following options: --group (one), --topic")
        args.group = args.group[0]
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise ToolError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not args.group and not args.all_groups:
            raise ToolError("Option --reset-offsets takes one of these options: --all-groups, --group")
        scenarios = [s for s in SCENARIOS if _given(args, s)]
        if not scenarios:
            raise ToolError("Option --reset-offsets requires one of the following scenarios: " +
                            ", ".join(_opt(s) for s in SCENARIOS))
        if len(scenarios) > 1:
            raise ToolError(f"Option {_opt(scenarios[0])} can't be used with option {_opt(scenarios[1])}")
        if args.topic and args.all_topics:
            raise ToolError("Option --topic can't be used with option --all-topics")
        if not args.topic and not args.all_topics and args.from_file is None:
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.by_duration is not None:
            parse_duration(args.by_duration)  # a bad duration or datetime fails before connecting
        if args.to_datetime is not None:
            parse_datetime(args.to_datetime)
        if not args.dry_run and not args.execute:
            print(NO_EXECUTE_WARNING, file=sys.stderr)
    if args.timeout < 1:
        raise ToolError("--timeout must be at least 1 (ms)")
    return action


def parse_states(text: str) -> list[str]:
    """'stable, empty' → ['Stable', 'Empty'] (case-insensitive, as Kafka's GroupState.parse)."""
    by_lower = {s.lower(): s for s in CONSUMER_GROUP_STATES}
    states = [by_lower.get(s.strip().lower()) for s in text.split(",")]
    if None in states:
        raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(CONSUMER_GROUP_STATES)}")
    return [s for s in states if s is not None]


def parse_types(text: str) -> list[str]:
    """'Classic,consumer' → ['classic', 'consumer'] (case-insensitive)."""
    types = [s.strip().lower() for s in text.split(",")]
    if any(t not in CONSUMER_TYPES for t in types):
        raise ToolError(f"Invalid types list '{text}'. Valid types are: {', '.join(CONSUMER_TYPES.values())}")
    return types


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?"
                       r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> datetime.timedelta:
    """Java's Duration.parse: PnDTnHnMn.nS (each part optional, signed; a leading '-' negates)."""
    m = _DURATION.fullmatch(text.strip())
    if not m or text.strip().upper().endswith("T") or not any(m.group(i) for i in range(2, 6)):
        raise ToolError(f"Text cannot be parsed to a Duration: {text} (expected PnDTnHnMnS, e.g. PT30M or P1DT2H)")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    fraction = m.group(6) or ""
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if m.group(5) and m.group(5).startswith("-"):
        nanos = -nanos
    out = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds, microseconds=nanos / 1000)
    return -out if m.group(1) == "-" else out


# ----------------------------------------------------------------------------- groups

def _listed(admin: Any) -> dict[str, Any]:
    """{group id: ListedGroup} of the classic and consumer groups."""
    return {g.group_id: g for g in admin.list_groups(types=list(CONSUMER_TYPES))}


def _not_found(group: str) -> str:
    return f"Consumer group '{group}' does not exist."


def _groups(admin: Any, args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    listed = _listed(admin)
    groups = sorted(listed) if args.all_groups else list(dict.fromkeys(args.group))
    return groups, listed


def _list(admin: Any, args: argparse.Namespace) -> None:
    if args.state is None and args.type is None:
        for g in admin.list_groups(types=list(CONSUMER_TYPES)):
            print(g.group_id)
        return
    states = parse_states(args.state) if args.state else []
    types = parse_types(args.type) if args.type else list(CONSUMER_TYPES)
    groups = admin.list_groups(states=states, types=types)
    width = max([15] + [len(g.group_id) for g in groups]) + 10
    headers, columns = ["GROUP"], [lambda g: g.group_id]
    if args.type is not None:
        headers.append("TYPE")
        columns.append(lambda g: CONSUMER_TYPES.get(str(g.type).lower(), "Unknown"))
    if args.state is not None:
        headers.append("STATE")
        columns.append(lambda g: g.state or "Unknown")
    widths = [width] + [20] * (len(headers) - 1)  # Kafka: "%-{width}s" then " %-20s" per column
    for row in [headers] + [[c(g) for c in columns] for g in groups]:
        print(" ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def _log_ends(admin: Any, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Log-end offsets of the partitions that exist and have a leader (the others are left out)."""
    partitions = sorted(set(partitions))
    if not partitions:
        return {}
    topics = admin.list_topics()
    known = [tp for tp in partitions if tp[0] in topics and tp[1] in topics[tp[0]].partitions
             and topics[tp[0]].partitions[tp[1]].leader >= 0]
    if not known:
        return {}
    return {tp: o for tp, (o, _) in admin.list_offsets({tp: "latest" for tp in known}).items()}


def _member_state_note(group: str, state: str) -> None:
    """Kafka's shouldPrintMemberState notes, on stderr."""
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)


def _description(admin: Any, group: str) -> Any:
    """The group's description (ConsumerGroupDescribe for a KIP-848 group, DescribeGroups for a classic
    one: members, their assignments, the assignor), or None when the broker cannot describe it."""
    try:
        return admin.describe_consumer_groups([group])[group]
    except KafkaException:
        return None


def _assignment_text(assignment: dict[str, tuple[int, ...]]) -> str:
    return ",".join(f"{topic}({','.join(map(str, parts))})" for topic, parts in sorted(assignment.items())) or MISSING


def _describe(admin: Any, args: argparse.Namespace) -> int:
    groups, listed = _groups(admin, args)
    missing = 0
    for group in sorted(groups):
        listing = listed.get(group)
        if listing is None or listing.state == "Dead":
            print(f"Error: {_not_found(group)}", file=sys.stderr)
            missing += 1
            continue
        state = listing.state or "Unknown"
        description = _description(admin, group)
        members = description.members if description is not None else ()
        if args.members:
            _member_state_note(group, state)
            with_instance = any(m.group_instance_id for m in members)  # Kafka adds the column only then
            headers = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + [
                "HOST", "CLIENT-ID", "#PARTITIONS"]
            widths = [15, 15] + ([17] if with_instance else []) + [15, 15, 15]
            if args.verbose:  # ConsumerGroupCommand: epochs and target assignments of KIP-848 groups
                headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
                widths += [15, 20, 15, 0]
            target_epoch = description.assignment_epoch if description is not None else None
            rows = []
            for m in sorted(members, key=lambda m: m.member_id):
                row = [group, m.member_id] + ([m.group_instance_id or MISSING] if with_instance else []) + [
                    m.client_host, m.client_id, sum(len(p) for p in m.assignment.values())]
                if args.verbose:
                    row += [m.member_epoch, _assignment_text(m.assignment),
                            target_epoch if m.target_assignment is not None else None,
                            _assignment_text(m.target_assignment or {})]
                rows.append(row)
            kafka_table(headers, rows, widths)
        elif args.state is not None:
            _member_state_note(group, state)
            coordinator = _coordinator(admin, group)
            strategy = (description.assignment_strategy if description is not None else "") or MISSING
            if args.verbose:
                kafka_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                             "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
                            [[group, coordinator, strategy, state, description.group_epoch if description else None,
                              description.assignment_epoch if description else None, len(members)]],
                            [15, 25, 20, 20, 15, 25, 0])
            else:
                kafka_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                            [[group, coordinator, strategy, state, len(members)]], [15, 25, 20, 20, 0])
        else:
            offsets = admin.list_consumer_group_offsets(group)
            _member_state_note(group, state)
            owner = {(topic, p): m for m in members for topic, parts in m.assignment.items() for p in parts}
            partitions = sorted(set(offsets) | set(owner))
            if not partitions:
                continue
            ends = _log_ends(admin, partitions)
            rows = []
            for tp in partitions:
                offset = offsets[tp][0] if tp in offsets else None
                end = ends.get(tp)
                lag = end - offset if end is not None and offset is not None and offset >= 0 else None
                m = owner.get(tp)
                who = [m.member_id, m.client_host, m.client_id] if m is not None else [None, None, None]
                rows.append([group, tp[0], tp[1]] + ([None] if args.verbose else []) + [offset, end, lag] + who)
            headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + [
                "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
            kafka_table(headers, rows, [15, 15, 10] + ([15] if args.verbose else []) + [15, 15, 15, 15, 15, 0])
    return 1 if missing else 0


def _delete(admin: Any, args: argparse.Namespace) -> int:
    every = {g.group_id: g for g in admin.list_groups()}
    groups, listed = _groups(admin, args)
    failed: dict[str, str] = {}
    to_delete = []
    for group in groups:
        if group not in every:
            failed[group] = _not_found(group)
        elif group not in listed:
            failed[group] = f"Group '{group}' is not a consumer group."
        else:
            to_delete.append(group)
    deleted = []
    if to_delete:
        from quafka.client.errors import ErrorCode

        for group, error in admin.delete_groups(to_delete).items():
            if error is None:
                deleted.append(group)
            elif error.code == ErrorCode.non_empty_group:
                failed[group] = f"Consumer group '{group}' is not empty (it has active members)."
            elif error.code == ErrorCode.group_id_not_found:
                failed[group] = _not_found(group)
            else:
                failed[group] = error.message
    if not failed:
        if deleted:
            print(f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful.")
        return 0
    for group, reason in failed.items():
        print(f"Error: Group '{group}' could not be deleted due to: {reason}", file=sys.stderr)
    if deleted:
        print(f"These consumer groups were deleted successfully: {_quoted(deleted)}")
    return 1


def _delete_offsets(admin: Any, args: argparse.Namespace) -> int:
    from quafka.client.errors import ErrorCode, KafkaException

    group = args.group
    status: dict[tuple[str, int | None], str] = {}
    partitions: list[tuple[str, int]] = []
    for arg in dict.fromkeys(args.topic):
        try:
            partitions += parse_topic_partitions(admin, [arg])
        except ToolError as exc:
            if ":" in arg:  # a malformed 'topic:partitions'
                raise
            status[(arg, None)] = f"Error: {exc}"  # a topic that does not exist: Kafka's row with partition -
    try:
        results = admin.delete_consumer_group_offsets(group, partitions) if partitions else {}
    except KafkaException as exc:
        if exc.code == ErrorCode.group_id_not_found:
            raise ToolError(_not_found(group)) from None
        if exc.code == ErrorCode.non_empty_group:
            raise ToolError(f"Consumer group '{group}' is not empty: the offsets of a group with active members "
                            f"can only be deleted for topics it is not subscribed to") from None
        raise
    for tp, error in results.items():
        status[tp] = "Successful" if error is None else f"Error: {error.message}"
    ok = all(s == "Successful" for s in status.values())
    if ok:
        print(f"Request succeeded for deleting offsets from group {group}.")
    kafka_table(["TOPIC", "PARTITION", "STATUS"],
                [[t, MISSING if p is None else p, s] for (t, p), s in
                 sorted(status.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]))],
                [15, 10, 0])
    if not ok:
        print("Error: Encountered some partition-level error, see the follow-up details.", file=sys.stderr)
    return 0 if ok else 1


# ----------------------------------------------------------------------------- --reset-offsets

def _check_partitions(admin: Any, partitions: Sequence[tuple[str, int]]) -> None:
    """Kafka's checkAllTopicPartitionsValid: every partition exists and has a leader."""
    described = _describe_topics(admin, {t for t, _ in partitions})
    missing = [f"{t}-{p}" for t, p in partitions if p not in described[t].partitions]
    if missing:
        raise ToolError(f'The partitions "{",".join(missing)}" do not exist')
    leaderless = [f"{t}-{p}" for t, p in partitions if described[t].partitions[p].leader < 0]
    if leaderless:
        raise ToolError(f'The partitions "{",".join(leaderless)}" have no leader')


def _at_time(admin: Any, partitions: Sequence[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
    """The first offset at or after ``timestamp``; the log end where every record is older."""
    found = {tp: o for tp, (o, _) in admin.list_offsets({tp: timestamp for tp in partitions}).items()}
    past_end = [tp for tp, o in found.items() if o < 0]
    for topic, partition in past_end:
        print(f"Warn: Partition {partition} from topic {topic} is empty. Falling back to latest known offset.",
              file=sys.stderr)
    if past_end:
        found.update({tp: o for tp, (o, _) in admin.list_offsets({tp: "latest" for tp in past_end}).items()})
    return found


def plan_reset(admin: Any, args: argparse.Namespace, group: str) -> dict[tuple[str, int], int]:
    """The new committed offset of each partition of ``group``, per the scenario."""
    current: dict[tuple[str, int], int] | None = None

    def committed() -> dict[tuple[str, int], int]:
        nonlocal current
        if current is None:
            current = {tp: o for tp, (o, _) in admin.list_consumer_group_offsets(group).items()}
        return current

    if args.from_file is not None:
        requested = read_reset_plan(args.from_file, group)
        partitions = sorted(requested)
    elif args.topic:
        partitions = sorted(parse_topic_partitions(admin, args.topic))
    else:
        partitions = sorted(committed())  # --all-topics
    if not partitions:
        return {}
    _check_partitions(admin, partitions)

    if args.from_file is not None:
        return _clamp(admin, requested)
    if args.to_offset is not None:
        return _clamp(admin, {tp: args.to_offset for tp in partitions})
    if args.to_earliest or args.to_latest:
        spec = "earliest" if args.to_earliest else "latest"
        return {tp: o for tp, (o, _) in admin.list_offsets({tp: spec for tp in partitions}).items()}
    if args.shift_by is not None:
        without = [tp for tp in partitions if tp not in committed()]
        if without:
            raise ToolError(f"Cannot shift offset for partition {without[0][0]}-{without[0][1]} since there is no "
                            f"current committed offset")
        return _clamp(admin, {tp: committed()[tp] + args.shift_by for tp in partitions})
    if args.to_datetime is not None:
        return _at_time(admin, partitions, parse_datetime(args.to_datetime))
    if args.by_duration is not None:
        since = parse_duration(args.by_duration)
        return _at_time(admin, partitions, max(0, int(time.time() * 1000 - since.total_seconds() * 1000)))
    # --to-current
    out = {tp: committed()[tp] for tp in partitions if tp in committed()}
    without = [tp for tp in partitions if tp not in out]
    if without:
        out.update({tp: o for tp, (o, _) in admin.list_offsets({tp: "latest" for tp in without}).items()})
    return out


def _reset(admin: Any, args: argparse.Namespace) -> int:
    groups, listed = _groups(admin, args)
    plans: dict[str, dict[tuple[str, int], int]] = {}
    refused = False
    for group in groups:
        state = listed[group].state if group in listed else "Dead"
        if state not in ("Empty", "Dead"):
            print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                  f"is {state}.", file=sys.stderr)
            plans[group] = {}
            refused = True
            continue
        plan = dict(sorted(plan_reset(admin, args, group).items()))
        if args.execute and plan:
            admin.alter_consumer_group_offsets(group, plan)
        plans[group] = plan
    if args.export:
        with_group = len(args.group) != 1
        print("".join(f"{g + ',' if with_group else ''}{t},{p},{o}\n"
                      for g, plan in plans.items() for (t, p), o in plan.items()))
    elif plans:
        rows = [[g, t, p, o] for g, plan in plans.items() for (t, p), o in plan.items()]
        kafka_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [15, 15, 10, 0])
    return 1 if refused else 0


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        action = check_args(args)
        with open_admin(args, timeout_ms=args.timeout) as admin:
            if action == "list":
                _list(admin, args)
                return 0
            if action == "describe":
                return _describe(admin, args)
            if action == "delete":
                return _delete(admin, args)
            if action == "delete_offsets":
                return _delete_offsets(admin, args)
            return _reset(admin, args)

    return run_tool("consumer-groups", body)
