"""`quafka share-groups`: list, describe, delete share groups and manage their start offsets, with
the options, output and exit codes of Kafka 4.4's kafka-share-groups.sh (ShareGroupCommand).

Tables use Kafka's layout: a blank line, then the header and one line per row, columns padded to
Kafka's minimum widths. ``--reset-offsets`` prints ``GROUP TOPIC PARTITION NEW-OFFSET`` (or, with
``--export``, ``topic,partition,offset`` CSV lines that ``--from-file`` reads back).

Two actions of quafka's own handle a share group's dead letters (KIP-1191), through topics and
groups only, so they work against Apache Kafka 4.4 too (`_dead_letters.py` holds them,
client/dead_letters.py does the work):
``--dead-letters`` lists them from the DLQ topic (``GROUP TOPIC PARTITION OFFSET DELIVERY-COUNT
REASON DIED-AT DLQ-PARTITION DLQ-OFFSET COPY ERROR-CLASS ERROR``, or JSON with ``--output json``),
and ``--redrive`` produces them again, each once, printing ``GROUP DLQ-PARTITION DLQ-OFFSET TOPIC
PARTITION OFFSET TO-TOPIC PAYLOAD STATUS`` and a summary line. Both find the DLQ topic in the
group's ``errors.deadletterqueue.topic.name`` unless ``--from-dlq`` names it. Before it sends
anything, ``--redrive`` warns on stderr when the workers were failing lately on the exception
classes of the letters it redrives (``still_failing``): a redrive into broken workers only makes
the jobs die again. It is a warning: the redrive goes on.

quafka's in-flight tools need a quafka broker (its API extension; `_in_flight.py` holds them):
``--describe --in-flight`` shows a share group's records in flight, ``--offset`` where one record
is, and ``--release`` / ``--archive`` force records of one share partition (a dry run unless
``--execute``).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from quafka.client.dead_letters import FAILING_WINDOW_MS

from . import _dead_letters, _in_flight
from ._common import Progress, ToolError, add_bootstrap, kafka_parser_errors, kafka_table, open_admin, run_tool

EXAMPLES = """
examples:
  quafka share-groups --list
  quafka share-groups --list --state                 # GROUP and STATE columns
  quafka share-groups --list --state Stable,Empty
  quafka share-groups --describe --group orders      # offsets: START-OFFSET and LAG per partition
  quafka share-groups --describe --group orders --members --verbose
  quafka share-groups --describe --all-groups --state

  # start offsets can only be reset while the group has no members (stop its consumers first)
  quafka share-groups --reset-offsets --group orders --topic jobs --to-earliest --dry-run
  quafka share-groups --reset-offsets --group orders --topic jobs:0,1 --to-offset 100 --execute
  quafka share-groups --reset-offsets --group orders --all-topics \\
      --to-datetime 2026-01-31T09:00:00.000+01:00 --execute
  quafka share-groups --reset-offsets --group orders --all-topics --to-current --dry-run --export > plan.csv
  quafka share-groups --reset-offsets --group orders --from-file plan.csv --execute

  quafka share-groups --delete-offsets --group orders --topic jobs
  quafka share-groups --delete --group orders

  # dead letters (KIP-1191): list them from the group's errors.deadletterqueue.topic.name (or --from-dlq)
  quafka share-groups --dead-letters --group orders
  quafka share-groups --dead-letters --group orders --topic jobs --from-dlq dlq.orders --output json
  # redrive them: to their source topics (or --to-topic), each dead letter at most once; --offsets
  # is a range of DLQ offsets (inclusive) applied to every partition of the DLQ topic; it warns
  # when the workers failed on the same exception within --failing-window-s (default 300)
  quafka share-groups --redrive --group orders --all --dry-run
  quafka share-groups --redrive --group orders --from-dlq dlq.orders --offsets 120-180 --execute
  quafka share-groups --redrive --group orders --to-topic jobs.retry --all --execute
""" + _in_flight.EXAMPLES

SHARE_GROUP_STATES = ("Empty", "Stable", "Dead")
KAFKA_ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
ACTIONS = KAFKA_ACTIONS + ("dead_letters", "redrive", "release", "archive")  # the last four are quafka's own
#: quafka's own options and the actions that take them; QUAFKA_OPTION_USES: how an error names a use
QUAFKA_OPTIONS = {"from_dlq": ("dead_letters", "redrive"), "to_topic": ("redrive",), "all": ("redrive",),
                  "output": ("dead_letters", "describe"), "failing_window_s": ("redrive",)}
QUAFKA_OPTION_USES = {"output": "--dead-letters or --describe --in-flight"}
SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "to_current", "from_file")
ALTER_CHUNK = 500  # partitions per AlterShareGroupOffsets request (the progress bar steps by this)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "share-groups",
        help="list, describe, delete share groups and reset their offsets (kafka-share-groups)",
        description="List, describe and delete share groups, and reset or delete their start offsets, "
                    "with the options and output of Kafka 4.4's kafka-share-groups.sh.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list the share groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe share groups: offsets (default), --members, --state or --in-flight")
    actions.add_argument("--delete", action="store_true", help="delete share groups (they must be empty)")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the start offsets of one inactive share group; needs --dry-run or "
                              "--execute, a scenario (--to-*) and a scope (--topic, --all-topics or --from-file)")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete the group's offsets (share-partition state) of --topic topics")
    actions.add_argument("--dead-letters", action="store_true",
                         help="list the group's dead letters (KIP-1191) from its DLQ topic; --topic keeps one "
                              "source topic's (quafka's own action)")
    actions.add_argument("--redrive", action="store_true",
                         help="produce the group's dead letters again, each at most once (the progress is kept "
                              "as committed offsets of the consumer group quafka-redrive.GROUP): needs "
                              "--offsets A-B or --all, and --dry-run or --execute (quafka's own action)")
    _in_flight.add_actions(actions)
    scope = p.add_argument_group("scope")
    scope.add_argument("--group", metavar="GROUP", action="append", default=[],
                       help="the share group id (repeatable for --describe and --delete)")
    scope.add_argument("--all-groups", action="store_true", help="apply to every share group (--describe, --delete)")
    scope.add_argument("--topic", metavar="TOPIC", action="append", default=[],
                       help="a topic (repeatable); for --reset-offsets 'topic:0,1,2' names partitions; for "
                            "--dead-letters the source topic whose dead letters to list (one); for --in-flight the "
                            "topics to show; for --release and --archive the topic (one, with --partition)")
    scope.add_argument("--all-topics", action="store_true",
                       help="--reset-offsets: every topic the group has offsets for")
    views = p.add_argument_group("--describe and --list options")
    views.add_argument("--offsets", nargs="?", const=True, default=None, metavar="A-B",
                       help="--describe: partitions with START-OFFSET and LAG (default); --redrive: the dead "
                            "letters at DLQ offsets A to B (inclusive) on every partition of the DLQ topic; "
                            "--release and --archive: the records at offsets A to B (inclusive, or one offset A) "
                            "of --topic and --partition")
    views.add_argument("--members", action="store_true", help="--describe: the members and their assignments")
    views.add_argument("--state", nargs="?", const="", metavar="STATES",
                       help="--describe: the group's state; --list: a STATE column, or only the groups in "
                            "these comma-separated states (Empty, Stable, Dead)")
    views.add_argument("--verbose", action="store_true",
                       help="--describe: add LEADER-EPOCH, GROUP-EPOCH/ASSIGNMENT-EPOCH or MEMBER-EPOCH")
    reset = p.add_argument_group("--reset-offsets options")
    reset.add_argument("--dry-run", action="store_true",
                       help="show the new offsets (--redrive: what would be sent; --release, --archive: what "
                            "would change, their default) without changing anything")
    reset.add_argument("--execute", action="store_true",
                       help="reset the offsets (--redrive: send the records; --release, --archive: apply)")
    reset.add_argument("--export", action="store_true",
                       help="print the new offsets as CSV (topic,partition,offset), for --from-file")
    reset.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    reset.add_argument("--to-latest", action="store_true", help="reset to the latest offset (log end)")
    reset.add_argument("--to-datetime", metavar="DATETIME",
                       help="reset to the first offset at or after a time: YYYY-MM-DDThh:mm:ss.sss with an "
                            "optional zone (Z, +hh:mm, +hhmm, +hh; default UTC)")
    reset.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset (kept within the log)")
    reset.add_argument("--to-current", action="store_true",
                       help="reset to the current start offset (the log end where the group has none)")
    reset.add_argument("--from-file", metavar="FILE",
                       help="reset to the offsets of a CSV file (topic,partition,offset or "
                            "group,topic,partition,offset lines), such as --export writes")
    dead = p.add_argument_group("--dead-letters and --redrive options")
    dead.add_argument("--from-dlq", metavar="TOPIC",
                      help="the DLQ topic (default: the group's errors.deadletterqueue.topic.name)")
    dead.add_argument("--to-topic", metavar="TOPIC",
                      help="--redrive: produce to this topic instead of each dead letter's source topic (the "
                           "partitioner picks the partition by key)")
    dead.add_argument("--all", action="store_true", help="--redrive: every dead letter of the group")
    dead.add_argument("--failing-window-s", type=float, default=None, metavar="SECONDS",
                      help=f"--redrive: warn when dead letters with the exception class of a letter being "
                           f"redriven were written within this many seconds (default "
                           f"{FAILING_WINDOW_MS // 1000}; 0: no check)")
    dead.add_argument("--output", choices=("table", "json"), default=None,
                      help="--dead-letters, --describe --in-flight: a table (default) or JSON")
    _in_flight.add_options(p)
    p.add_argument("--timeout", type=int, default=30000, metavar="MS",
                   help="timeout of each request to the broker, in ms (default 30000)")
    kafka_parser_errors(p)
    p.set_defaults(func=run)


# ----------------------------------------------------------------------------- options

def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_args(args: argparse.Namespace) -> str:
    """Kafka's ShareGroupCommandOptions.checkArgs: the action, and the options it allows."""
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        # Kafka's words when only Kafka's actions are involved; quafka's added otherwise
        listed = KAFKA_ACTIONS if chosen and set(chosen) <= set(KAFKA_ACTIONS) else ACTIONS
        raise ToolError(f"Command must include exactly one action: {', '.join(_opt(a) for a in listed)}.")
    action = chosen[0]
    topics_given = bool(args.topic)
    offsets_given = args.offsets is not None
    if action in ("redrive", "release", "archive") and (args.members or args.verbose):
        raise ToolError("Options --members and --verbose can only be used with --describe")
    if action not in ("describe", "redrive", "release", "archive") and (args.members or offsets_given or args.verbose):
        raise ToolError("Options --members, --offsets and --verbose can only be used with --describe")
    if action == "describe" and isinstance(args.offsets, str):
        raise ToolError("Option --describe does not take a value for --offsets")
    for name, allowed in QUAFKA_OPTIONS.items():
        if getattr(args, name) not in (None, False) and action not in allowed:
            uses = QUAFKA_OPTION_USES.get(name) or " or ".join(_opt(a) for a in allowed)
            raise ToolError(f"Option {_opt(name)} can only be used with {uses}")
    if args.output is not None and action == "describe" and not args.in_flight:
        raise ToolError(f"Option --output can only be used with {QUAFKA_OPTION_USES['output']}")
    _in_flight.check_usage(args, action)
    if action not in ("describe", "list") and args.state is not None:
        raise ToolError("Option --state can only be used with --describe or --list")
    if action != "reset_offsets":
        used = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
        forcing = action in ("redrive", "release", "archive")
        used += [o for o in (("export",) if forcing else ("dry_run", "execute", "export")) if getattr(args, o)]
        if used:
            also = ", --redrive, --release or --archive" if used[0] in ("dry_run", "execute") else ""
            raise ToolError(f"Option {_opt(used[0])} can only be used with --reset-offsets{also}")
    if args.group and args.all_groups:
        raise ToolError("Option --group cannot be used with --all-groups")
    if action == "list" and (args.group or args.all_groups or topics_given or args.all_topics):
        raise ToolError("Option --list does not take --group, --all-groups, --topic or --all-topics")
    if action == "describe":
        if not args.group and not args.all_groups:
            raise ToolError("Option --describe takes one of these options: --all-groups, --group")
        if sum(bool(x) for x in (args.in_flight, args.members, args.offsets, args.state is not None)) > 1:
            raise ToolError("Option --describe takes at most one of these options: --in-flight, --members, "
                            "--offsets, --state")
        if args.state:
            raise ToolError("Option --describe does not take a value for --state")
        if (topics_given or args.all_topics) and not args.in_flight:
            raise ToolError("Option --describe does not take --topic or --all-topics")
    if action == "delete":
        if not args.group and not args.all_groups:
            raise ToolError("Option --delete takes the options --group or --all-groups.")
        if topics_given or args.all_topics:
            raise ToolError("Option --delete does not take the options --topic or --all-topics.")
    if action == "delete_offsets":
        if not args.group or not topics_given:
            raise ToolError("Option --delete-offsets takes the following options: --group, --topic")
        if args.all_groups or args.all_topics:
            raise ToolError("Option --delete-offsets does not take --all-groups or --all-topics")
    if action in ("reset_offsets", "delete_offsets") and len(args.group) > 1:
        raise ToolError(f"Option {_opt(action)} supports one share group at a time")
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise ToolError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not args.dry_run and not args.execute:
            raise ToolError("Option --reset-offsets takes the option: --execute or --dry-run")
        if not args.group:
            raise ToolError("Option --reset-offsets takes the option: --group")
        if args.all_groups:
            raise ToolError("Option --reset-offsets supports one group at a time: --group, not --all-groups")
        scopes = [s for s, given in (("topic", topics_given), ("all_topics", args.all_topics),
                                     ("from_file", args.from_file is not None)) if given]
        if not scopes:
            raise ToolError("Option --reset-offsets takes one of these options: --all-topics, --from-file, --topic")
        if len(scopes) > 1:
            raise ToolError(f"Option {_opt(scopes[0])} can't be used with option {_opt(scopes[1])}")
        scenarios = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
        if not scenarios:
            raise ToolError("Option --reset-offsets takes one of these options: --from-file, --to-current, "
                            "--to-datetime, --to-earliest, --to-latest, --to-offset")
        if len(scenarios) > 1:
            raise ToolError(f"Option {_opt(scenarios[0])} can't be used with option {_opt(scenarios[1])}")
    elif args.all_topics:
        raise ToolError("Option --all-topics can only be used with --reset-offsets")
    if action in ("dead_letters", "redrive"):
        _check_dead_letter_args(args, action)
    _in_flight.check_args(args, action)
    if args.timeout < 1:
        raise ToolError("--timeout must be at least 1 (ms)")
    if action in ("reset_offsets", "delete_offsets", "dead_letters", "redrive", "release", "archive"):
        args.group = args.group[0]
    return action


def _check_dead_letter_args(args: argparse.Namespace, action: str) -> None:
    """The options of quafka's --dead-letters and --redrive; parses --offsets A-B into (A, B)."""
    if not args.group:
        raise ToolError(f"Option {_opt(action)} takes the option: --group")
    if len(args.group) > 1 or args.all_groups:
        raise ToolError(f"Option {_opt(action)} supports one share group at a time: --group")
    if args.all_topics:
        raise ToolError(f"Option {_opt(action)} does not take --all-topics")
    if action == "dead_letters":
        if len(args.topic) > 1:
            raise ToolError("Option --dead-letters takes at most one --topic")
        return
    if args.topic:
        raise ToolError("Option --redrive does not take --topic (--to-topic names the target topic)")
    if args.failing_window_s is not None and not args.failing_window_s >= 0:
        raise ToolError(f"Option --failing-window-s takes a number of seconds >= 0, got {args.failing_window_s}")
    if args.dry_run and args.execute:
        raise ToolError("Option --redrive only accepts one of --execute and --dry-run")
    if not args.dry_run and not args.execute:
        raise ToolError("Option --redrive takes the option: --execute or --dry-run")
    if args.offsets is not None and args.all:
        raise ToolError("Option --offsets can't be used with option --all")
    if args.offsets is None and not args.all:
        raise ToolError("Option --redrive takes one of these options: --all, --offsets")
    if args.offsets is not None:
        args.offsets = parse_offset_range(args.offsets)


def parse_offset_range(text: Any) -> tuple[int, int]:
    """'120-180' → (120, 180); '7' → (7, 7). Offsets are DLQ offsets, both ends included."""
    if not isinstance(text, str):
        raise ToolError("Option --offsets of --redrive takes a range of DLQ offsets, e.g. --offsets 120-180")
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise ToolError(f"Invalid offset range '{text}': expected A-B with 0 <= A <= B (DLQ offsets, both "
                        f"included), e.g. 120-180")
    first = int(m.group(1))
    return first, int(m.group(2)) if m.group(2) is not None else first


def parse_states(text: str) -> list[str]:
    """'stable, empty' → ['Stable', 'Empty'] (case-insensitive, as Kafka's GroupState.parse)."""
    by_lower = {s.lower(): s for s in SHARE_GROUP_STATES}
    states = [by_lower.get(s.strip().lower()) for s in text.split(",")]
    if None in states:
        raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(SHARE_GROUP_STATES)}")
    return [s for s in states if s is not None]


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})"
                       r"(?:(Z)|([+-])(\d{2})(?::?(\d{2}))?)?")


def parse_datetime(text: str) -> int:
    """Kafka's Utils.getDateTime: yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone (Z, ±hh:mm, ±hhmm,
    ±hh); no zone means UTC. Returns epoch milliseconds."""
    if "T" not in text:
        raise ToolError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    m = _DATETIME.fullmatch(text)
    if not m:
        raise ToolError(f'Unparseable date: "{text}" (expected YYYY-MM-DDThh:mm:ss.sss with an optional zone, '
                        f'e.g. 2026-01-31T09:00:00.000 or 2026-01-31T09:00:00.000+01:00)')
    year, month, day, hour, minute, second, millis = (int(g) for g in m.groups()[:7])
    offset = datetime.timedelta(0)
    if m.group(9):
        offset = datetime.timedelta(hours=int(m.group(10)), minutes=int(m.group(11) or 0))
        if m.group(9) == "-":
            offset = -offset
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, millis * 1000,
                                   tzinfo=datetime.timezone(offset))
    except ValueError:
        raise ToolError(f'Unparseable date: "{text}"') from None
    return int(moment.timestamp() * 1000)


def parse_topic_partitions(admin: Any, topic_args: Sequence[str]) -> list[tuple[str, int]]:
    """--topic values: 't' (every partition) or 't:0,1,2'."""
    out: list[tuple[str, int]] = []
    whole: list[str] = []
    for arg in topic_args:
        if ":" not in arg:
            whole.append(arg)
            continue
        parts = arg.split(":")
        if len(parts) != 2 or not parts[0]:
            raise ToolError(f"Invalid topic arg '{arg}', expected topic name and partitions")
        for p in parts[1].split(","):
            try:
                out.append((parts[0], int(p)))
            except ValueError:
                raise ToolError(f"Invalid partition '{p}' specified in topic arg '{arg}'") from None
    if whole:
        described = _describe_topics(admin, whole)
        for name in whole:
            out += [(name, p) for p in sorted(described[name].partitions)]
    return list(dict.fromkeys(out))


def _describe_topics(admin: Any, names: Iterable[str]) -> dict[str, Any]:
    from quafka.client.errors import ErrorCode, KafkaException

    try:
        return admin.describe_topics(sorted(set(names)))
    except KafkaException as exc:
        if exc.code == ErrorCode.unknown_topic_or_partition:
            raise ToolError(exc.message.replace("topic ", "Topic ", 1)) from None
        raise


def read_reset_plan(path: str, group: str) -> dict[tuple[str, int], int]:
    """A reset plan CSV: 'topic,partition,offset' lines (for this group) or
    'group,topic,partition,offset' lines (only this group's are used)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh.read().splitlines() if line.strip()]
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None

    def as_int(value: str, number: int) -> int:
        try:
            return int(value)
        except ValueError:
            raise ToolError(f"{path}:{number}: {value!r} is not a number") from None

    plan: dict[tuple[str, int], int] = {}
    with_group = bool(lines) and len(lines[0].split(",")) == 4
    for number, line in enumerate(lines, 1):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != (4 if with_group else 3):
            raise ToolError(f"{path}:{number}: expected {'group,' if with_group else ''}topic,partition,offset, "
                            f"got {line!r}")
        if with_group:
            if fields[0] != group:
                continue
            fields = fields[1:]
        plan[(fields[0], as_int(fields[1], number))] = as_int(fields[2], number)
    if not plan:
        raise ToolError(f"No reset plan for group {group} found.")
    return plan


# ----------------------------------------------------------------------------- output

def _group_not_found(group: str) -> ToolError:
    return ToolError(f"Share group '{group}' does not exist.")


# ----------------------------------------------------------------------------- actions

def _list(admin: Any, args: argparse.Namespace) -> None:
    if args.state is None:
        for g in admin.list_groups(types=["share"]):
            print(g.group_id)
        return
    states = parse_states(args.state) if args.state else []
    groups = admin.list_groups(states=states, types=["share"])
    width = max([15] + [len(g.group_id) for g in groups])
    print(f"{'GROUP'.ljust(width)} STATE")
    for g in groups:
        print(f"{g.group_id.ljust(width)} {g.state or 'Unknown'}")


def _describe_groups(admin: Any, groups: Sequence[str]) -> dict[str, Any]:
    from quafka.client.errors import ErrorCode, KafkaException

    out = {}
    for group in groups:
        try:
            out[group] = admin.describe_share_groups([group])[group]
        except KafkaException as exc:
            if exc.code == ErrorCode.group_id_not_found:
                raise _group_not_found(group) from None
            raise
    return dict(sorted(out.items()))


def _coordinator(admin: Any, group: str) -> str:
    """'host:port  (id)' of the group's coordinator, as Kafka prints it."""
    node = admin.find_coordinator(group)
    return f"{node.host}:{node.port}  ({node.node_id})"


def _describe(admin: Any, args: argparse.Namespace) -> None:
    groups = sorted(g.group_id for g in admin.list_groups(types=["share"])) if args.all_groups else args.group
    descriptions = _describe_groups(admin, groups)
    if args.members:
        for group, desc in descriptions.items():
            if desc.state == "Empty" or not desc.members:
                print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
                continue
            members = sorted(desc.members, key=lambda m: m.member_id)
            rows = []
            for m in members:
                assignment = ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}"
                                      for t, ps in sorted(m.assignment.items()) if ps)
                count = sum(len(ps) for ps in m.assignment.values())
                row = [group, m.member_id, m.client_host, m.client_id, count]
                rows.append(row + ([m.member_epoch] if args.verbose else []) + [assignment])
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            headers += (["MEMBER-EPOCH"] if args.verbose else []) + ["ASSIGNMENT"]
            kafka_table(headers, rows, [15, 15, 15, 15, 12] + ([13] if args.verbose else []) + [0])
        return
    if args.state is not None:
        for group, desc in descriptions.items():
            if desc.state == "Empty":
                print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
            coordinator = _coordinator(admin, group)
            if args.verbose:
                kafka_table(["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"],
                            [[group, coordinator, desc.state, desc.group_epoch, desc.assignment_epoch,
                              len(desc.members)]], [15, 25, 15, 12, 17, 0])
            else:
                kafka_table(["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                            [[group, coordinator, desc.state, len(desc.members)]], [15, 25, 15, 0])
        return
    for group in descriptions:
        offsets = admin.list_share_group_offsets(group)
        if not offsets:
            print(f"\nShare group '{group}' has no offset information.")
            continue
        rows = []
        for (topic, partition), (start, lag) in sorted(offsets.items()):
            start_s = start if start >= 0 else None
            lag_s = lag if lag >= 0 else None
            rows.append([group, topic, partition] + ([None] if args.verbose else []) + [start_s, lag_s])
        headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + ["START-OFFSET", "LAG"]
        kafka_table(headers, rows, [15, 15, 10] + ([13] if args.verbose else []) + [13, 0])


def _quoted(groups: Iterable[str]) -> str:
    return ", ".join("'" + g + "'" for g in groups)


def _delete(admin: Any, args: argparse.Namespace) -> int:
    every = {g.group_id: g for g in admin.list_groups()}
    listed = {g: listing for g, listing in every.items() if str(listing.type).lower() == "share"}
    groups = sorted(listed) if args.all_groups else list(dict.fromkeys(args.group))
    failed: dict[str, str] = {}
    to_delete = []
    for group in groups:
        listing = listed.get(group)
        if listing is None and group not in every:
            # Kafka's ShareGroupCommand says "is not a share group" here too; a group that does not
            # exist at all (deleted already, or a typo) is named as such (issue 15)
            failed[group] = f"Share group '{group}' does not exist."
        elif listing is None:
            failed[group] = f"Group '{group}' is not a share group."
        elif listing.state == "Dead":
            failed[group] = f"Share group '{group}' group state is DEAD."
        elif listing.state != "Empty":
            failed[group] = f"Share group '{group}' is not EMPTY."
        else:
            to_delete.append(group)
    deleted = []
    if to_delete:
        for group, error in admin.delete_groups(to_delete).items():
            if error is None:
                deleted.append(group)
            else:
                failed[group] = error.message
    if not failed:
        if deleted:
            print(f"Deletion of requested share groups ({_quoted(deleted)}) was successful.")
        return 0
    for group, reason in failed.items():
        print(f"Error: Group '{group}' could not be deleted due to: {reason}", file=sys.stderr)
    if deleted:
        print(f"These share groups were deleted successfully: {_quoted(deleted)}")
    return 1


GROUP_LEVEL_ERRORS = ("invalid_group_id", "group_id_not_found", "group_authorization_failed", "non_empty_group")


def _delete_offsets(admin: Any, args: argparse.Namespace) -> int:
    from quafka.client.errors import ErrorCode, KafkaException

    group_errors = {getattr(ErrorCode, name) for name in GROUP_LEVEL_ERRORS}
    status: dict[str, str] = {}
    for topic in sorted(set(args.topic)):
        try:
            admin.delete_share_group_offsets(args.group, [topic])
            status[topic] = "Successful"
        except KafkaException as exc:
            if exc.code == ErrorCode.group_id_not_found:
                raise _group_not_found(args.group) from None
            if exc.code in group_errors:
                raise
            status[topic] = f"Error: {exc.message}"
    kafka_table(["TOPIC", "STATUS"], sorted(status.items()), [15, 0])
    return 0 if all(s == "Successful" for s in status.values()) else 1


def _log_range(admin: Any, partitions: Sequence[tuple[str, int]]) -> tuple[dict, dict]:
    earliest = {tp: o for tp, (o, _) in admin.list_offsets({tp: "earliest" for tp in partitions}).items()}
    latest = {tp: o for tp, (o, _) in admin.list_offsets({tp: "latest" for tp in partitions}).items()}
    return earliest, latest


def _clamp(admin: Any, requested: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    earliest, latest = _log_range(admin, list(requested))
    out = {}
    for tp, offset in requested.items():
        name = f"{tp[0]}-{tp[1]}"
        if offset > latest[tp]:
            print(f"Warning: New offset ({offset}) is higher than latest offset for topic partition {name}. "
                  f"Value will be set to {latest[tp]}.", file=sys.stderr)
            offset = latest[tp]
        elif offset < earliest[tp]:
            print(f"Warning: New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                  f"Value will be set to {earliest[tp]}.", file=sys.stderr)
            offset = earliest[tp]
        out[tp] = offset
    return out


def _current_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from quafka.client.errors import ErrorCode, KafkaException

    try:
        return {tp: start for tp, (start, _) in admin.list_share_group_offsets(group).items() if start >= 0}
    except KafkaException as exc:
        if exc.code == ErrorCode.group_id_not_found:
            return {}
        raise


def plan_reset(admin: Any, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    """The new start offset of each partition, per the scenario; refuses a group with members."""
    from quafka.client.errors import ErrorCode, KafkaException

    group = args.group
    try:
        state = admin.describe_share_groups([group])[group].state
    except KafkaException as exc:
        if exc.code != ErrorCode.group_id_not_found:
            raise
        state = "Dead"  # no such group yet: Kafka resets it anyway (which creates it)
    if state not in ("Empty", "Dead"):
        raise ToolError(f"Share group '{group}' is not empty.")

    if args.from_file is not None:
        requested = read_reset_plan(args.from_file, group)
        partitions = sorted(requested)
    elif args.topic:
        partitions = sorted(parse_topic_partitions(admin, args.topic))
    else:
        # --all-topics: every partition the group has offsets (share-partition state) for
        partitions = sorted(admin.list_share_group_offsets(group)) if state != "Dead" else []
    if not partitions:
        return {}
    described = _describe_topics(admin, {t for t, _ in partitions})
    missing = [f"{t}-{p}" for t, p in partitions if p not in described[t].partitions]
    if missing:
        raise ToolError(f'The partitions "{",".join(missing)}" do not exist')
    leaderless = [f"{t}-{p}" for t, p in partitions if described[t].partitions[p].leader < 0]
    if leaderless:
        raise ToolError(f'The partitions "{",".join(leaderless)}" have no leader')

    if args.to_earliest or args.to_latest:
        spec = "earliest" if args.to_earliest else "latest"
        return {tp: o for tp, (o, _) in admin.list_offsets({tp: spec for tp in partitions}).items()}
    if args.to_datetime is not None:
        timestamp = parse_datetime(args.to_datetime)
        found = {tp: o for tp, (o, _) in admin.list_offsets({tp: timestamp for tp in partitions}).items()}
        past_end = [tp for tp, o in found.items() if o < 0]
        for topic, partition in past_end:
            print(f"Warn: Partition {partition} from topic {topic} is empty. Falling back to latest known offset.",
                  file=sys.stderr)
        if past_end:
            latest = admin.list_offsets({tp: "latest" for tp in past_end})
            found.update({tp: o for tp, (o, _) in latest.items()})
        return found
    if args.to_offset is not None:
        return _clamp(admin, {tp: args.to_offset for tp in partitions})
    if args.to_current:
        current = _current_offsets(admin, group)
        without = [tp for tp in partitions if tp not in current]
        out = {tp: current[tp] for tp in partitions if tp in current}
        if without:
            out.update({tp: o for tp, (o, _) in admin.list_offsets({tp: "latest" for tp in without}).items()})
        return out
    return _clamp(admin, requested)  # --from-file


def _reset(admin: Any, args: argparse.Namespace) -> None:
    plan = dict(sorted(plan_reset(admin, args).items()))
    if args.execute and plan:
        items = list(plan.items())
        progress = Progress(len(items), "Resetting offsets") if len(items) > ALTER_CHUNK else None
        for i in range(0, len(items), ALTER_CHUNK):
            chunk = dict(items[i:i + ALTER_CHUNK])
            admin.alter_share_group_offsets(args.group, chunk)
            if progress:
                progress.update(len(chunk))
        if progress:
            progress.close()
    if args.export:
        print("".join(f"{t},{p},{o}\n" for (t, p), o in plan.items()))
    elif plan:
        kafka_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[args.group, t, p, o] for (t, p), o in plan.items()],
                    [max(15, len(args.group)), 15, 10, 0])


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        action = check_args(args)
        with open_admin(args, timeout_ms=args.timeout) as admin:
            if action == "list":
                _list(admin, args)
            elif action == "describe" and args.in_flight:
                return _in_flight.describe(admin, args)
            elif action == "describe":
                _describe(admin, args)
            elif action == "delete":
                return _delete(admin, args)
            elif action == "delete_offsets":
                return _delete_offsets(admin, args)
            elif action == "dead_letters":
                _dead_letters.list_letters(admin, args)
            elif action == "redrive":
                _dead_letters.redrive(admin, args)
            elif action in ("release", "archive"):
                return _in_flight.force(admin, args, action)
            else:
                _reset(admin, args)
        return 0

    return run_tool("share-groups", body)
