"""`quafka console-share-consumer`: read a topic through a share group and print its records, as
Kafka 4.4's kafka-console-share-consumer.sh does (options, DefaultMessageFormatter output, the
"Processed a total of N messages" line on stderr, exit codes).

Every record is acknowledged explicitly after it is printed: ACCEPT by default, RELEASE with
``--release``, REJECT with ``--reject``; a record that cannot be formatted is REJECTed with
``--reject-message-on-error`` (otherwise the tool stops with an error and the record is released
when the consumer closes). Records fetched but not printed (``--max-messages`` reached) are
released by the consumer's close, so they are delivered again.
"""

from __future__ import annotations

import argparse
import math
import signal
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ._common import ToolError, add_bootstrap, check_bootstrap, latest_hint, load_properties, run_tool, security_config

DEFAULT_GROUP = "console-share-consumer"
DEFAULT_CLIENT_ID = "console-share-consumer"
FORMATTER_NAMES = ("DefaultMessageFormatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
                   "kafka.tools.DefaultMessageFormatter")
#: Consumer keys Kafka's tool sets itself (byte-array deserializers); dropped from the user's configs.
_IGNORED_CONSUMER_KEYS = ("key.deserializer", "value.deserializer")

EXAMPLES = """
formatter properties (--formatter-property KEY=VALUE, repeatable):
  print.timestamp, print.partition, print.offset, print.delivery, print.epoch, print.headers,
  print.key (default false), print.value (default true)   true|false
  key.separator (default TAB)  line.separator (default NEWLINE)  headers.separator (default ,)
  null.literal (default null)
  key.deserializer, value.deserializer, headers.deserializer   Kafka deserializer class names:
      StringDeserializer (default), ByteArrayDeserializer, IntegerDeserializer, LongDeserializer,
      ShortDeserializer, DoubleDeserializer, FloatDeserializer, UUIDDeserializer

examples:
  quafka console-share-consumer --topic orders
  quafka console-share-consumer --topic orders --group billing --max-messages 10
  quafka console-share-consumer --topic orders --timeout-ms 5000 \\
      --formatter-property print.key=true --formatter-property print.offset=true \\
      --formatter-property print.delivery=true
  quafka console-share-consumer --topic orders --release --formatter-property print.delivery=true
  quafka console-share-consumer --topic orders --reject --max-messages 1     # archive one record
  quafka console-share-consumer --topic orders --command-property max.poll.records=10

output (print.timestamp, print.partition, print.offset, print.delivery, print.key on):
  CreateTime:1718000000000	Partition:0	Offset:5	Delivery:1	order-5	{"id": 5}
"""


# ----------------------------------------------------------------------------- key=value arguments

def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """KEY=VALUE strings (split at the first '='), as Kafka's CommandLineUtils.parseKeyValueArgs."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"invalid {option} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


# ----------------------------------------------------------------------------- deserializers

def _fixed(name: str, size: int, fmt: str) -> Callable[[bytes], str]:
    def decode(data: bytes) -> str:
        if len(data) != size:
            raise ValueError(f"Size of data received by {name} is not {size}")
        value = struct.unpack(fmt, data)[0]
        if isinstance(value, float):
            return _java_double(value)
        return str(value)
    return decode


def _java_double(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _uuid(data: bytes) -> str:
    text = data.decode("utf-8")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ValueError(f"Error parsing data into UUID: {text!r}") from None


def _void(data: bytes) -> str:
    raise ValueError("Data should be null for a VoidDeserializer.")


_DESERIALIZERS: dict[str, Callable[[bytes], str] | None] = {
    "StringDeserializer": None, "ByteArrayDeserializer": None, "ByteBufferDeserializer": None,
    "BytesDeserializer": None,
    "IntegerDeserializer": _fixed("IntegerDeserializer", 4, ">i"),
    "LongDeserializer": _fixed("LongDeserializer", 8, ">q"),
    "ShortDeserializer": _fixed("ShortDeserializer", 2, ">h"),
    "DoubleDeserializer": _fixed("DoubleDeserializer", 8, ">d"),
    "FloatDeserializer": _fixed("FloatDeserializer", 4, ">f"),
    "UUIDDeserializer": _uuid,
    "VoidDeserializer": _void,
}


def deserializer(name: str | None) -> Callable[[bytes], str] | None:
    """A Kafka deserializer class name (simple or org.apache.kafka.common.serialization.X) → a
    function bytes → text, or None for the identity (bytes printed as they are)."""
    if not name:
        return None
    simple = name.rsplit(".", 1)[-1]
    if simple not in _DESERIALIZERS:
        raise ToolError(f"unknown deserializer {name!r}; supported: {', '.join(_DESERIALIZERS)}")
    return _DESERIALIZERS[simple]


# ----------------------------------------------------------------------------- DefaultMessageFormatter

def _bool(value: str) -> bool:
    return value.strip().lower() == "true"


class MessageFormatter:
    """Kafka's DefaultMessageFormatter: the enabled fields in a fixed order (timestamp, partition,
    offset, delivery, epoch, headers, key, value), separated by key.separator, then
    line.separator."""

    FLAGS = ("timestamp", "partition", "offset", "delivery", "epoch", "headers", "key", "value")

    def __init__(self, props: dict[str, str]) -> None:
        self.show = {flag: flag == "value" for flag in self.FLAGS}
        for flag in self.FLAGS:
            if f"print.{flag}" in props:
                self.show[flag] = _bool(props[f"print.{flag}"])
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()
        self.key_deserializer = deserializer(props.get("key.deserializer"))
        self.value_deserializer = deserializer(props.get("value.deserializer"))
        self.headers_deserializer = deserializer(props.get("headers.deserializer"))

    def _bytes(self, data: bytes | None, convert: Callable[[bytes], str] | None) -> bytes:
        if data is None:
            return self.null_literal
        return data if convert is None else convert(bytes(data)).encode()

    def format(self, record: Any) -> bytes:
        """The bytes printed for ``record`` (a quafka.client Record); raises when a deserializer fails."""
        fields: list[bytes] = []
        show = self.show
        if show["timestamp"]:
            kind = "LogAppendTime" if record.timestamp_type == 1 else "CreateTime"
            fields.append(f"{kind}:{record.timestamp}".encode() if record.timestamp >= 0 else b"NO_TIMESTAMP")
        if show["partition"]:
            fields.append(b"Partition:%d" % record.partition)
        if show["offset"]:
            fields.append(b"Offset:%d" % record.offset)
        if show["delivery"]:
            count = record.delivery_count
            fields.append(b"Delivery:NOT_PRESENT" if count is None else b"Delivery:%d" % count)
        if show["epoch"]:
            epoch = record.leader_epoch
            fields.append(b"Epoch:NOT_PRESENT" if epoch is None or epoch < 0 else b"Epoch:%d" % epoch)
        if show["headers"]:
            if not record.headers:
                fields.append(b"NO_HEADERS")
            else:
                fields.append(self.headers_separator.join(
                    key.encode() + b":" + self._bytes(value, self.headers_deserializer)
                    for key, value in record.headers))
        if show["key"]:
            fields.append(self._bytes(record.key, self.key_deserializer))
        if show["value"]:
            fields.append(self._bytes(record.value, self.value_deserializer))
        if not fields:
            return b""
        return self.key_separator.join(fields) + self.line_separator


# ----------------------------------------------------------------------------- the tool

def add_parser(sub) -> None:
    p = sub.add_parser(
        "console-share-consumer",
        help="print a topic's records, consumed through a share group",
        description="Read data from a topic using a share group and write it to standard output "
                    "(Kafka's kafka-console-share-consumer.sh).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p, command_config=False)
    p.add_argument("--topic", help="REQUIRED: the topic to consume from")
    p.add_argument("--group", help=f"the share group id (default {DEFAULT_GROUP})")
    p.add_argument("--command-property", "--consumer-property", dest="command_property", action="append",
                   default=[], metavar="KEY=VALUE",
                   help="a share consumer config (repeatable; wins over --command-config)")
    p.add_argument("--command-config", "--consumer-config", dest="command_config", metavar="FILE",
                   help="a properties file of share consumer configs")
    p.add_argument("--formatter", default=FORMATTER_NAMES[1], metavar="CLASS",
                   help="the message formatter (only Kafka's DefaultMessageFormatter is available)")
    p.add_argument("--formatter-property", "--property", dest="formatter_property", action="append", default=[],
                   metavar="KEY=VALUE", help="a formatter property (repeatable; see below)")
    p.add_argument("--formatter-config", metavar="FILE",
                   help="a properties file of formatter properties (--formatter-property wins)")
    p.add_argument("--key-deserializer", metavar="CLASS", help="deserializer for keys (see below)")
    p.add_argument("--value-deserializer", metavar="CLASS", help="deserializer for values (see below)")
    p.add_argument("--max-messages", type=int, metavar="N",
                   help="exit after N messages (default: consume until interrupted)")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit when no message has been available for MS milliseconds")
    ack = p.add_mutually_exclusive_group()
    ack.add_argument("--reject", action="store_true", help="REJECT each message once printed (archives it)")
    ack.add_argument("--release", action="store_true",
                     help="RELEASE each message once printed (it is delivered again, up to the delivery limit)")
    p.add_argument("--reject-message-on-error", action="store_true",
                   help="REJECT a message that cannot be formatted instead of stopping")
    p.add_argument("--enable-systest-events", action="store_true",
                   help="print 'shutdown_complete' on stdout when the consumer has shut down")
    p.set_defaults(func=run)


def consumer_config(args) -> dict[str, Any]:
    """The ShareConsumer config: --command-config file, then --command-property, then the tool's own keys."""
    file_props = load_properties(args.command_config) if args.command_config else {}
    extra = parse_key_values(args.command_property, "--command-property")
    groups = []
    for group in (args.group, file_props.get("group.id"), extra.get("group.id")):
        if group is not None and group not in groups:
            groups.append(group)
    if len(groups) > 1:
        raise ToolError("The group ids provided in different places (directly using '--group', via "
                        "'--command-property', or via '--command-config') do not match. Detected group ids: "
                        + ", ".join(f"'{g}'" for g in groups))
    config: dict[str, Any] = {**file_props, **extra}
    for key in _IGNORED_CONSUMER_KEYS:
        config.pop(key, None)
    config["bootstrap.servers"] = args.bootstrap_server
    config.setdefault("client.id", DEFAULT_CLIENT_ID)
    config["group.id"] = groups[0] if groups else DEFAULT_GROUP
    config["share.acknowledgement.mode"] = "explicit"
    return config


def formatter_props(args) -> dict[str, str]:
    props = load_properties(args.formatter_config) if args.formatter_config else {}
    if args.key_deserializer:
        props["key.deserializer"] = args.key_deserializer
    if args.value_deserializer:
        props["value.deserializer"] = args.value_deserializer
    props.update(parse_key_values(args.formatter_property, "--formatter-property"))
    return props


class _Stop(Exception):
    """--timeout-ms passed with no message."""


class SignalStop:
    """SIGINT/SIGTERM wake the consumer up (its poll raises WakeupException) so that the tool
    closes it cleanly; installed only on the main thread, restored afterwards."""

    def __init__(self, on_signal: Callable[[], None]) -> None:
        self.on_signal = on_signal
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # a second signal: stop waiting for a clean shutdown
            raise KeyboardInterrupt
        self.signum = signum
        self.on_signal()

    def __enter__(self) -> "SignalStop":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum


def run(args) -> int:
    return run_tool("console-share-consumer", lambda: _consume(args))


def _consume(args) -> int:
    from quafka.client import AcknowledgeType, ShareConsumer, WakeupException

    if not args.topic:
        raise ToolError("--topic is a required argument")
    if args.formatter not in FORMATTER_NAMES:
        raise ToolError(f"unknown formatter {args.formatter!r}: only DefaultMessageFormatter is available")
    if args.max_messages is not None and args.max_messages < 0:
        args.max_messages = None
    formatter = MessageFormatter(formatter_props(args))
    config = consumer_config(args)
    ack_type = (AcknowledgeType.REJECT if args.reject else AcknowledgeType.RELEASE if args.release
                else AcknowledgeType.ACCEPT)
    timeout_s = args.timeout_ms / 1000 if args.timeout_ms is not None and args.timeout_ms >= 0 else None
    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
    sys.stdout.flush()

    consumer = ShareConsumer(config)  # a bad config is reported first, without a network round trip
    try:
        check_bootstrap(args.bootstrap_server, args.topic, security=security_config(config))
    except BaseException:
        consumer.close()
        raise
    hint = latest_hint(args.bootstrap_server, config["group.id"], args.topic, security_config(config))
    if hint is not None:
        print(hint, file=sys.stderr, flush=True)
    count = 0
    stopper = SignalStop(consumer.wakeup)
    try:
        with stopper:
            consumer.subscribe([args.topic])
            while args.max_messages is None or count < args.max_messages:
                try:
                    records = _receive(consumer, timeout_s)
                except (_Stop, WakeupException):
                    break
                chunks = []
                for record in records:
                    if args.max_messages is not None and count >= args.max_messages:
                        break  # not acknowledged: released when the consumer closes
                    count += 1
                    try:
                        chunks.append(formatter.format(record))
                    except Exception as exc:  # noqa: BLE001 - a deserializer failed
                        if not args.reject_message_on_error:
                            _write(out, b"".join(chunks))  # what was printed before the bad one
                            raise ToolError(f"cannot format the message at {record.topic}-{record.partition} "
                                            f"offset {record.offset}: {exc}") from None
                        print(f"Error processing message, rejecting this message: {exc}", file=sys.stderr)
                        consumer.acknowledge(record, AcknowledgeType.REJECT)
                        continue
                    consumer.acknowledge(record, ack_type)
                try:
                    _write(out, b"".join(chunks))
                except (BrokenPipeError, ValueError):
                    print("Unable to write to standard out, closing consumer.", file=sys.stderr)
                    break
    finally:
        try:
            consumer.close()
        finally:
            print(f"Processed a total of {count} messages", file=sys.stderr)
            if args.enable_systest_events:
                print("shutdown_complete", flush=True)
    return stopper.exit_code or 0


def _receive(consumer, timeout_s: float | None) -> list:
    """The next non-empty poll; _Stop when ``timeout_s`` passes without a record."""
    start = time.monotonic()
    while True:
        wait = 1.0 if timeout_s is None else max(0.0, min(1.0, start + timeout_s - time.monotonic()))
        records = consumer.poll(wait)
        if records:
            return records
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            raise _Stop


def _write(out, data: bytes) -> None:
    if not data:
        return
    if out is None:
        sys.stdout.write(data.decode("utf-8", "replace"))
        sys.stdout.flush()
    else:
        out.write(data)
        out.flush()
