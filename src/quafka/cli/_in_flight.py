"""`quafka share-groups`: a share group's in-flight records, "where is my record", and the force
actions — quafka's own, over quafka's API extension (QuafkaDescribeInFlight and QuafkaAlterInFlight;
client/_admin_in_flight.py). Apache Kafka has no such API: against a broker that does not serve the
extension the Admin raises ExtensionUnavailable, whose one line (it needs a quafka broker) the tool
prints as its error, exiting 1.

- ``--describe --in-flight --group G [--topic T [--partition P]] [--max-rows N]``: per share
  partition two header lines (the window's start and end offsets, the log's start and end, records
  in flight against the record-lock limit, how many wait for a redelivery backoff or a delivery time
  and how many are blocked by key ordering, key ordering on or off, the dead-letter queue), then a
  table ``OFFSETS STATE DELIVERIES HOLDER LOCK-LEFT DUE WAIT [KEY]`` (KEY with key ordering on), a
  line when rows were cut at --max-rows, and the failed keys of key ordering as a table ``KEY
  FAILED-AT WAITING-OFFSETS``. ``--output json``: the same as a JSON array, one object per partition.
- ``... --topic T --partition P --offset O``: where that record is — in the window (its state,
  deliveries, holder, lock left, due time, wait, key), settled below the start offset (and, when
  the group has a dead-letter queue, the dead letter found there for it), deleted from the log,
  not delivered yet, or not produced yet.
- ``--release`` / ``--archive --group G --topic T --partition P --offsets A-B`` and ``--release
  --key K`` (or ``--key-hex``): a dry run unless ``--execute`` (ValidateOnly), printing the records of
  the range (before; after with --execute) and a summary line, as --redrive does.

Keys are bytes: shown as text when they are printable UTF-8, else as 0x-hex (which --key-hex takes),
cut to KEY_WIDTH characters in tables; JSON carries them whole (text, or {"base64": ...}, as the
dead letters' JSON does).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from quafka.client.in_flight_locate import classify, due_text, duration, holder, latest_letter, needs_letter, utc

from ._common import ToolError, format_table

MAX_ROWS_LIMIT = 10_000  # the broker's limit of rows per share partition
KEY_WIDTH = 32
FORCE_ACTIONS = ("release", "archive")
#: quafka's in-flight options, the actions that take them, and how the error names their use
IN_FLIGHT_OPTIONS = {
    "in_flight": (("describe",), "--describe"),
    "partition": (("describe", "release", "archive"), "--describe --in-flight, --release or --archive"),
    "offset": (("describe",), "--describe --in-flight"),
    "max_rows": (("describe",), "--describe --in-flight"),
    "key": (("release",), "--release"),
    "key_hex": (("release",), "--release"),
    "reset_delivery_count": (("release",), "--release --offsets"),
}
SKIPPED = "settled, on their way to the dead-letter queue, or being written"

EXAMPLES = """
  # in-flight records (quafka's own; they need a quafka broker): holders, locks, due times, failed keys
  quafka share-groups --describe --in-flight --group orders --topic jobs --partition 0
  quafka share-groups --describe --in-flight --group orders --topic jobs --partition 0 --offset 1234
  # force actions on one share partition: a dry run unless --execute
  quafka share-groups --release --group orders --topic jobs --partition 0 --offsets 100-120 --execute
  quafka share-groups --archive --group orders --topic jobs --partition 0 --offsets 57 --execute
  quafka share-groups --release --group orders --topic jobs --partition 0 --key customer-42 --execute
"""


def add_actions(actions: Any) -> None:
    actions.add_argument("--release", action="store_true",
                         help="make records of one share partition deliverable at once (--offsets A-B; a holder "
                              "loses its lock), or release a failed key of key ordering (--key); a dry run unless "
                              "--execute (quafka's own action; needs a quafka broker)")
    actions.add_argument("--archive", action="store_true",
                         help="archive records of one share partition (--offsets A-B), through the group's "
                              "dead-letter queue when it has one; a dry run unless --execute (quafka's own "
                              "action; needs a quafka broker)")


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--in-flight, --release and --archive options (quafka's own; they need a "
                                      "quafka broker)")
    group.add_argument("--in-flight", action="store_true",
                       help="--describe: each share partition's in-flight records (offsets, state, deliveries, "
                            "holder, lock time left, due time, why they wait, key) and its failed keys; --topic "
                            "and --partition narrow it")
    group.add_argument("--partition", type=int, metavar="P",
                       help="--describe --in-flight, --release, --archive: the partition of --topic")
    group.add_argument("--offset", type=int, metavar="O",
                       help="--describe --in-flight with --topic and --partition: where the record at offset O is "
                            "(in flight, settled, dead-lettered, deleted, or not delivered yet)")
    group.add_argument("--max-rows", type=int, metavar="N",
                       help=f"--describe --in-flight: at most N rows per share partition (default 1000, at most "
                            f"{MAX_ROWS_LIMIT})")
    group.add_argument("--key", metavar="KEY",
                       help="--release: release this failed key of key ordering (UTF-8 text), so that its next "
                            "record can be delivered again")
    group.add_argument("--key-hex", metavar="HEX",
                       help="--release: the failed key as hexadecimal bytes, e.g. 00ff or 0x00ff (as the tables "
                            "show keys that are not printable text)")
    group.add_argument("--reset-delivery-count", action="store_true",
                       help="--release --offsets: also set the records' delivery counts to 0")


# ----------------------------------------------------------------------------- options

def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False  # (0 is a partition, an offset)


def check_usage(args: argparse.Namespace, action: str) -> None:
    """Each in-flight option only with an action that takes it."""
    for name, (actions, uses) in IN_FLIGHT_OPTIONS.items():
        if not _given(args, name):
            continue
        if action not in actions or (action == "describe" and name != "in_flight" and not args.in_flight):
            raise ToolError(f"Option {_opt(name)} can only be used with {uses}")


def check_args(args: argparse.Namespace, action: str) -> None:
    """The options of --describe --in-flight, --release and --archive (after check_usage); parses
    --offsets A-B into (A, B) and the key into bytes (args.key_bytes)."""
    if action == "describe" and args.in_flight:
        _check_describe(args)
    elif action in FORCE_ACTIONS:
        _check_force(args, action)


def _check_describe(args: argparse.Namespace) -> None:
    if args.all_groups or len(args.group) != 1:
        raise ToolError("Option --in-flight supports one share group at a time: --group")
    if args.verbose:
        raise ToolError("Option --verbose cannot be used with --in-flight")
    if args.all_topics:
        raise ToolError("Option --in-flight does not take --all-topics (it shows every partition without --topic)")
    if any(":" in t for t in args.topic):
        raise ToolError("Option --in-flight takes --topic T and --partition P (not T:P)")
    if args.partition is not None:
        if len(args.topic) != 1:
            raise ToolError("Option --partition takes exactly one --topic")
        if args.partition < 0:
            raise ToolError(f"Invalid partition {args.partition}: partitions are numbered from 0")
    if args.offset is not None:
        if len(args.topic) != 1 or args.partition is None:
            raise ToolError("Option --offset takes the options: --topic, --partition (one share partition)")
        if args.offset < 0:
            raise ToolError(f"Invalid offset {args.offset}: offsets are numbered from 0")
        if args.max_rows is not None:
            raise ToolError("Option --max-rows can't be used with option --offset")
    if args.max_rows is not None and not 1 <= args.max_rows <= MAX_ROWS_LIMIT:
        raise ToolError(f"--max-rows must be 1 to {MAX_ROWS_LIMIT}, not {args.max_rows}")


def _check_force(args: argparse.Namespace, action: str) -> None:
    name = _opt(action)
    if not args.group:
        raise ToolError(f"Option {name} takes the option: --group")
    if len(args.group) > 1 or args.all_groups:
        raise ToolError(f"Option {name} supports one share group at a time: --group")
    if args.all_topics:
        raise ToolError(f"Option {name} does not take --all-topics")
    if len(args.topic) != 1 or ":" in args.topic[0]:
        raise ToolError(f"Option {name} takes the options: --topic, --partition (one share partition)")
    if args.partition is None:
        raise ToolError(f"Option {name} takes the option: --partition (it changes one share partition at a time)")
    if args.partition < 0:
        raise ToolError(f"Invalid partition {args.partition}: partitions are numbered from 0")
    if args.dry_run and args.execute:
        raise ToolError(f"Option {name} only accepts one of --execute and --dry-run")
    keyed = args.key is not None or args.key_hex is not None
    if args.key is not None and args.key_hex is not None:
        raise ToolError("Option --key can't be used with option --key-hex")
    if keyed and args.offsets is not None:
        other = "--key" if args.key is not None else "--key-hex"
        raise ToolError(f"Option --offsets can't be used with option {other}")
    if action == "release" and not keyed and args.offsets is None:
        raise ToolError("Option --release takes one of these options: --key, --key-hex, --offsets")
    if action == "archive" and args.offsets is None:
        raise ToolError("Option --archive takes the option: --offsets")
    if args.reset_delivery_count and keyed:
        raise ToolError("Option --reset-delivery-count can only be used with --release --offsets")
    args.key_bytes = None
    if keyed:
        args.key_bytes = args.key.encode("utf-8") if args.key is not None else parse_hex(args.key_hex)
    else:
        args.offsets = parse_range(args.offsets, action)


def parse_range(text: Any, action: str) -> tuple[int, int]:
    """'100-120' → (100, 120); '7' → (7, 7): offsets of the share partition, both ends included."""
    if not isinstance(text, str):
        raise ToolError(f"Option --offsets of --{action} takes a range of offsets, e.g. --offsets 100-120")
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise ToolError(f"Invalid offset range '{text}': expected A-B with 0 <= A <= B (offsets of the partition, "
                        f"both included), e.g. 100-120, or one offset")
    first = int(m.group(1))
    return first, int(m.group(2)) if m.group(2) is not None else first


def parse_hex(text: str) -> bytes:
    digits = text.strip()
    digits = digits[2:] if digits.lower().startswith("0x") else digits
    try:
        return bytes.fromhex(digits)
    except ValueError:
        raise ToolError(f"Invalid --key-hex '{text}': expected an even number of hexadecimal digits, "
                        f"e.g. 00ff or 0x00ff") from None


# ----------------------------------------------------------------------------- formatting

def key_text(key: bytes | None, width: int | None = KEY_WIDTH) -> str | None:
    """A key for a table: printable UTF-8 text as it is, other bytes (and text that would read as
    hex) as 0x-hex; longer than ``width``: cut, ending in '...'."""
    if key is None:
        return None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or not text or not text.isprintable() or re.fullmatch(r"0x[0-9a-fA-F]*", text):
        text = "0x" + key.hex()
    if width is not None and len(text) > width:
        text = text[:width - 3] + "..."
    return text


def key_phrase(key: bytes) -> str:
    """A key in a sentence: 'text' quoted, 0x-hex as it is."""
    text = key_text(key, None) or ""
    return text if text.startswith("0x") else f"'{text}'"


def key_json(key: bytes | None) -> Any:
    """Text when the key is UTF-8, else {"base64": ...} (as the dead letters' JSON)."""
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(key).decode("ascii")}


def offsets_text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def offset_list(offsets: Iterable[int]) -> str:
    """2,5-7,9: consecutive offsets as ranges."""
    parts: list[str] = []
    run: list[int] = []
    for o in offsets:
        if run and o == run[-1] + 1:
            run.append(o)
            continue
        if run:
            parts.append(offsets_text(run[0], run[-1]))
        run = [o]
    if run:
        parts.append(offsets_text(run[0], run[-1]))
    return ",".join(parts) or "-"


def wait_text(r: Any, failed: set[bytes]) -> str | None:
    """Why an AVAILABLE range is not delivered now: backoff, delivery-time, behind-key (an earlier
    record of its key is unsettled), key-failed (its key is parked); pending-write when a state
    write is deciding it."""
    reasons = [r.wait_reason] if r.wait_reason else []
    if r.blocked:
        reasons.append("key-failed" if r.key is not None and r.key in failed else "behind-key")
    if r.pending:
        reasons.append("pending-write")
    return ",".join(reasons) or None


def tp_name(view: Any) -> str:
    return f"{view.topic}-{view.partition}"


def range_table(view: Any, ranges: Sequence[Any], now_ms: int) -> str:
    failed = {f.key for f in view.failed_keys}
    headers = ["OFFSETS", "STATE", "DELIVERIES", "HOLDER", "LOCK-LEFT", "DUE", "WAIT"]
    if view.key_ordering:
        headers.append("KEY")
    rows = []
    for r in ranges:
        row = [offsets_text(r.first_offset, r.last_offset), r.state, r.delivery_count, holder(r),
               duration(r.lock_remaining_ms) if r.lock_remaining_ms is not None else None,
               due_text(r.due_at_ms, now_ms), wait_text(r, failed)]
        if view.key_ordering:
            row.append(key_text(r.key))
        rows.append(row)
    return format_table(headers, rows)


def failed_keys_table(failed: Sequence[Any]) -> str:
    return format_table(["KEY", "FAILED-AT", "WAITING-OFFSETS"],
                        [[key_text(f.key), f.failed_offset, offset_list(f.waiting_offsets)] for f in failed])


def partition_header(view: Any, group: str) -> str:
    dlq = f"; dead-letter queue {view.dead_letter_topic}" if view.dead_letter_topic else ""
    return (f"Share partition {tp_name(view)} of group '{group}': start offset {view.start_offset}, end offset "
            f"{view.end_offset}, log start offset {view.log_start_offset}, log end offset {view.log_end_offset}\n"
            f"In flight {view.in_flight_count} of {view.max_record_locks} record locks; waiting "
            f"{view.waiting_backoff_count} for backoff, {view.waiting_delivery_count} for delivery time; blocked "
            f"{view.blocked_count}; key ordering {'on' if view.key_ordering else 'off'}{dlq}")


def range_json(r: Any, now_ms: int) -> dict[str, Any]:
    return {"first_offset": r.first_offset, "last_offset": r.last_offset, "state": r.state,
            "delivery_count": r.delivery_count, "member_id": r.member_id, "client_id": r.client_id,
            "client_host": r.client_host, "lock_remaining_ms": r.lock_remaining_ms, "due_at_ms": r.due_at_ms,
            "due_at": utc(r.due_at_ms) if r.due_at_ms is not None else None,
            "due_in_ms": max(r.due_at_ms - now_ms, 0) if r.due_at_ms is not None else None,
            "wait_reason": r.wait_reason or None, "blocked": r.blocked, "pending": r.pending, "key": key_json(r.key)}


def partition_json(view: Any, group: str, now_ms: int) -> dict[str, Any]:
    return {"group": group, "topic": view.topic, "partition": view.partition, "start_offset": view.start_offset,
            "end_offset": view.end_offset, "log_start_offset": view.log_start_offset,
            "log_end_offset": view.log_end_offset, "in_flight_count": view.in_flight_count,
            "max_record_locks": view.max_record_locks, "waiting_backoff_count": view.waiting_backoff_count,
            "waiting_delivery_count": view.waiting_delivery_count, "blocked_count": view.blocked_count,
            "key_ordering": view.key_ordering, "dead_letter_topic": view.dead_letter_topic,
            "truncated": view.truncated, "rows": [range_json(r, now_ms) for r in view.ranges],
            "failed_keys": [{"key": key_json(f.key), "failed_offset": f.failed_offset,
                             "waiting_offsets": list(f.waiting_offsets)} for f in view.failed_keys]}


def _now_ms() -> int:
    return int(time.time() * 1000)


# ----------------------------------------------------------------------------- --describe --in-flight

@contextmanager
def _group_errors(group: str) -> Iterator[None]:
    """The broker's GROUP_ID_NOT_FOUND as the tool's usual line."""
    from quafka.client.errors import ErrorCode, KafkaException

    try:
        yield
    except KafkaException as exc:
        if exc.code == ErrorCode.group_id_not_found:
            raise ToolError(f"Share group '{group}' does not exist.") from None
        raise


def _scope(args: argparse.Namespace) -> Any:
    if not args.topic:
        return None
    if args.partition is not None:
        return {args.topic[0]: [args.partition]}
    return list(dict.fromkeys(args.topic))


def describe(admin: Any, args: argparse.Namespace) -> int:
    group = args.group[0]
    if args.offset is not None:
        return locate(admin, args, group)
    with _group_errors(group):
        views = admin.describe_in_flight(group, _scope(args), max_rows=args.max_rows or 1000)
    now_ms = _now_ms()
    views = [views[tp] for tp in sorted(views)]
    if args.output == "json":
        print(json.dumps([partition_json(v, group, now_ms) for v in views], indent=2))
        return 0
    if not views:
        print(f"\nShare group '{group}' has no share-partition state: none of its members has fetched yet.")
        return 0
    for view in views:
        print("\n" + partition_header(view, group))
        if view.ranges:
            print("\n" + range_table(view, view.ranges, now_ms))
        else:
            print("\nNo records in flight.")
        if view.truncated:
            print(f"Only the first {len(view.ranges)} rows are shown: more records are in flight "
                  f"(--max-rows, at most {MAX_ROWS_LIMIT}).")
        if view.failed_keys:
            print("\nFailed keys (key ordering): their records wait until the key is released with "
                  "--release --key KEY (or --key-hex HEX)")
            print("\n" + failed_keys_table(view.failed_keys))
    return 0


# ----------------------------------------------------------------------------- where is my record

def locate(admin: Any, args: argparse.Namespace, group: str) -> int:
    """--offset: where the record is, as one line (and the row's details when it is in the window);
    the classification is the client's (quafka.client.in_flight_locate), shared with the dashboard."""
    topic, partition, offset = args.topic[0], args.partition, args.offset
    with _group_errors(group):
        view = admin.describe_in_flight(group, {topic: [partition]}, offset=offset)[(topic, partition)]
    now_ms = _now_ms()
    row = view.ranges[0] if view.ranges else None
    letter = None
    if needs_letter(view, offset) and view.dead_letter_topic:
        letter = latest_letter(admin.list_dead_letters(group, view.dead_letter_topic, topic), partition, offset)
    where, text = classify(view, offset, now_ms, letter)
    if args.output == "json":
        out = {"group": group, "topic": topic, "partition": partition, "offset": offset, "where": where,
               "summary": text, "row": range_json(row, now_ms) if row is not None else None,
               "dead_letter": letter.to_json() if letter is not None else None,
               "start_offset": view.start_offset, "end_offset": view.end_offset,
               "log_start_offset": view.log_start_offset, "log_end_offset": view.log_end_offset,
               "dead_letter_topic": view.dead_letter_topic}
        print(json.dumps(out, indent=2))
        return 0
    print(f"Offset {offset} of {topic}-{partition} (share group '{group}'): {text}.")
    if row is not None:
        failed = {f.key for f in view.failed_keys}
        details = [("state", row.state), ("deliveries", row.delivery_count), ("holder", holder(row)),
                   ("lock left", duration(row.lock_remaining_ms) if row.lock_remaining_ms is not None else None),
                   ("due", due_text(row.due_at_ms, now_ms)), ("wait", wait_text(row, failed)),
                   ("key", key_text(row.key, None) if view.key_ordering else None),
                   ("window", f"start offset {view.start_offset}, end offset {view.end_offset}, log end offset "
                              f"{view.log_end_offset}")]
        for name, value in details:
            print(f"  {name.ljust(11)}{'-' if value is None else value}")
    return 0


# ----------------------------------------------------------------------------- --release, --archive

def force(admin: Any, args: argparse.Namespace, action: str) -> int:
    from quafka.client.errors import ErrorCode, KafkaException

    group, topic, partition = args.group, args.topic[0], args.partition
    key = args.key_bytes
    name = f"{topic}-{partition}"
    dry = not args.execute
    if key is not None:
        request: dict[str, Any] = {"key": key}
        call = "release-key"
    else:
        first, last = args.offsets
        request = {"first_offset": first, "last_offset": last, "reset_delivery_count": args.reset_delivery_count}
        call = action

    def describe_partition() -> Any:
        return admin.describe_in_flight(group, {topic: [partition]}, max_rows=MAX_ROWS_LIMIT)[(topic, partition)]

    with _group_errors(group):
        before = describe_partition() if key is not None else None
        try:
            result = admin.alter_in_flight(group, topic, partition, call, validate_only=dry, **request)
        except KafkaException as exc:
            if call == "release-key" and exc.code == ErrorCode.invalid_request:
                failed = ", ".join(key_phrase(f.key) for f in before.failed_keys) if before else ""
                known = f" (its failed keys: {failed})" if failed else " (it has no failed keys)"
                raise ToolError(f"Key {key_phrase(key)} is not failed (parked or dead-lettering) in {name} of "
                                f"share group '{group}'{known}: there is nothing to release.") from None
            raise
        view = describe_partition()
    now_ms = _now_ms()
    if key is not None:
        return _report_key(view, before, key, group, dry, now_ms)
    first, last = args.offsets
    shown = [_clip(r, first, last) for r in view.ranges if r.last_offset >= first and r.first_offset <= last]
    if shown:
        print("\n" + range_table(view, shown, now_ms))
    span = f"offset {first}" if first == last else f"offsets {first}-{last}"
    where = f"of {name} ({span}) in share group '{group}'"
    if action == "release":
        verb, effect = "released", "deliverable at once"
        if args.reset_delivery_count:
            effect += ", delivery counts reset to 0"
    elif view.dead_letter_topic:
        verb = "archived"
        effect = f"written to the dead-letter queue {view.dead_letter_topic} first (reason force-archived)"
    else:
        verb, effect = "archived", "no dead letter is written (the group has no dead-letter queue)"
    rest = f"{result.not_fetched} not fetched yet (nothing holds them)"
    keys = f"{result.keys_released} failed key(s) with their next record in range" if result.keys_released else ""
    if dry:
        keys = f"; {keys} would be released" if keys else ""
        print(f"\nDry run: {result.changed} record(s) {where} would be {verb}: {effect}. {result.skipped} would be "
              f"skipped ({SKIPPED}); {rest}{keys}. Nothing was changed (add --execute to apply).")
    else:
        keys = f"; released {keys}" if keys else ""
        print(f"\n{verb.capitalize()} {result.changed} record(s) {where}: {effect}. Skipped {result.skipped} "
              f"({SKIPPED}); {rest}{keys}.")
    return 0


def _clip(r: Any, first: int, last: int) -> Any:
    return dataclasses.replace(r, first_offset=max(r.first_offset, first), last_offset=min(r.last_offset, last))


def _report_key(view: Any, before: Any, key: bytes, group: str, dry: bool, now_ms: int) -> int:
    shown = key_phrase(key)
    where = f"of {tp_name(view)} in share group '{group}'"
    entry = next((f for f in before.failed_keys if f.key == key), None) if before is not None else None
    waiting = list(entry.waiting_offsets) if entry is not None else []
    head = f"its next record (offset {waiting[0]})" if waiting else "its next record, when one comes"
    if dry:
        if entry is not None:
            print("\n" + failed_keys_table([entry]))
        print(f"\nDry run: key {shown} {where} is failed; releasing it would let {head} be delivered again. "
              f"Nothing was changed (add --execute to apply).")
        return 0
    rows = [r for r in view.ranges if r.key == key]
    if rows:
        print("\n" + range_table(view, rows, now_ms))
    print(f"\nReleased key {shown} {where}: {head} can be delivered again.")
    return 0
