"""`quafka console-producer`: one record per line of standard input, as Kafka 4.4's
kafka-console-producer.sh with its LineMessageReader (parse.key, key.separator, parse.headers,
headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error).

Produces through confluent-kafka's Producer (librdkafka). Kafka's producer options are mapped to
librdkafka's configuration names; Java-only keys (serializers) are ignored.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ._common import (
    ToolError,
    add_bootstrap,
    check_bootstrap,
    librdkafka_logging,
    load_properties,
    run_tool,
    security_config,
)
from .console_share_consumer import parse_key_values

DEFAULT_CLIENT_ID = "console-producer"

EXAMPLES = r"""
reader properties (--reader-property KEY=VALUE, repeatable):
  parse.key=false  key.separator=TAB  parse.headers=false  headers.delimiter=TAB
  headers.separator=,  headers.key.separator=:  ignore.error=false
  null.marker=STRING   a key, value or header value equal to it is sent as null
  line layout: parse.headers and parse.key: h1:v1,h2:v2<TAB>key<TAB>value
               parse.key:                   key<TAB>value
               parse.headers:               h1:v1,h2:v2<TAB>value

examples:
  echo "hello" | quafka console-producer --topic orders
  printf 'k1:v1\n' | quafka console-producer --topic orders \
      --reader-property parse.key=true --reader-property key.separator=:
  printf 'trace:abc,tenant:7\torder-1\t{"id": 1}\n' | quafka console-producer --topic orders \
      --reader-property parse.headers=true --reader-property parse.key=true
  quafka console-producer --topic orders --sync --command-property acks=1 < lines.txt
"""

#: Kafka producer config names that librdkafka spells differently (value converters where needed).
_RENAMED = {
    "buffer.memory": ("queue.buffering.max.kbytes", lambda v: str(max(1, int(v) // 1024))),
    "send.buffer.bytes": ("socket.send.buffer.bytes", str),
    "receive.buffer.bytes": ("socket.receive.buffer.bytes", str),
}
#: Java-only producer configs (the tool's serializers are byte arrays; librdkafka has no max.block.ms).
_IGNORED = frozenset({"key.serializer", "value.serializer", "max.block.ms", "partitioner.class",
                      "interceptor.classes"})


def librdkafka_config(props: dict[str, Any]) -> dict[str, Any]:
    """Kafka producer configs → librdkafka configs (renamed where librdkafka differs; the Java
    client's security names too: `quafka.client.librdkafka_security_config`)."""
    from quafka.client import librdkafka_security_config

    props = librdkafka_security_config(props)
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key in _IGNORED:
            continue
        if key in _RENAMED:
            name, convert = _RENAMED[key]
            out[name] = convert(value)
        else:
            out[key] = value
    return out


def make_producer(config: dict[str, Any]):
    from confluent_kafka import KafkaException, Producer

    config = librdkafka_logging(librdkafka_config(config))
    if "delivery.timeout.ms" not in config and "message.timeout.ms" not in config:
        config["delivery.timeout.ms"] = 120000  # Kafka's default (librdkafka's is 300000)
    try:
        return Producer(config)
    except KafkaException as exc:
        raise ToolError(f"invalid producer config: {exc.args[0].str() if exc.args else exc}") from None
    except (TypeError, ValueError) as exc:
        raise ToolError(f"invalid producer config: {exc}") from None


# ----------------------------------------------------------------------------- LineMessageReader

class LineReader:
    """Kafka's LineMessageReader: each line is [headers<delimiter>][key<separator>]value."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = props.get("null.marker")
        pairs = (("headers.delimiter", self.headers_delimiter), ("headers.separator", self.headers_separator),
                 ("headers.key.separator", self.headers_key_separator))
        for i, (name_a, a) in enumerate(pairs):
            for name_b, b in pairs[i + 1:]:
                if a == b:
                    raise ToolError(f"{name_a} and {name_b} may not be equal")
        if self.null_marker is not None:
            for name, value in (("key.separator", self.key_separator),) + pairs:
                if value == self.null_marker:
                    raise ToolError(f"null.marker and {name} may not be equal")
        try:
            self._headers_split = re.compile(self.headers_separator)
        except re.error as exc:
            raise ToolError(f"headers.separator is not a valid pattern: {exc}") from None
        self.line_number = 0

    def _field(self, enabled: bool, line: str, start: int, mark: str, name: str) -> str | None:
        if not enabled:
            return None
        index = line.find(mark, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise ToolError(f"No {name} found on line number {self.line_number}: '{line}'")
        return line[start:index]

    def _headers(self, text: str) -> list[tuple[str, bytes | None]]:
        pairs = self._headers_split.split(text)
        while len(pairs) > 1 and pairs[-1] == "":  # Java's split drops trailing empty strings
            pairs.pop()
        out: list[tuple[str, bytes | None]] = []
        for pair in pairs:
            i = pair.find(self.headers_key_separator)
            if i < 0:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise ToolError(f"No header key separator found in pair '{pair}' on line number {self.line_number}")
            key, value = pair[:i], pair[i + len(self.headers_key_separator):]
            if key == self.null_marker:
                raise ToolError(f"Header keys should not be equal to the null marker '{self.null_marker}' "
                                "as they can't be null")
            out.append((key, None if value == self.null_marker else value.encode()))
        return out

    def parse(self, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one line (without its line terminator)."""
        self.line_number += 1
        headers = self._field(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter")
        offset = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._field(self.parse_key, line, offset, self.key_separator, "key separator")
        offset += 0 if key is None else len(key) + len(self.key_separator)
        value = line[offset:]
        return (None if key is None or key == self.null_marker else key.encode(),
                None if value == self.null_marker else value.encode(),
                [] if headers is None or headers == self.null_marker else self._headers(headers))


def read_lines(stream) -> Iterator[str]:
    """Lines of ``stream`` without their terminators (\\n, \\r\\n or \\r, as Java's readLine)."""
    if hasattr(stream, "buffer"):
        stream = io.TextIOWrapper(stream.buffer, encoding="utf-8", errors="replace", newline=None)
    for line in stream:
        yield line.rstrip("\r\n")


# ----------------------------------------------------------------------------- the tool

def add_parser(sub) -> None:
    p = sub.add_parser(
        "console-producer",
        help="produce the lines of standard input to a topic",
        description="Read data from standard input and publish it to a topic, one record per line "
                    "(Kafka's kafka-console-producer.sh).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p, command_config=False)
    p.add_argument("--topic", help="REQUIRED: the topic to produce to")
    p.add_argument("--sync", action="store_true",
                   help="send each record synchronously, waiting for its acknowledgement")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                   help="none, gzip (the default when given without a value), snappy, lz4 or zstd")
    p.add_argument("--batch-size", type=int, metavar="BYTES", help="batch.size (default 16384)")
    p.add_argument("--message-send-max-retries", type=int, metavar="N", help="retries (default 3)")
    p.add_argument("--retry-backoff-ms", type=int, metavar="MS", help="retry.backoff.ms (default 100)")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms (default 1000)")
    p.add_argument("--request-required-acks", metavar="ACKS", help="acks (default -1)")
    p.add_argument("--request-timeout-ms", type=int, metavar="MS", help="request.timeout.ms (default 1500)")
    p.add_argument("--metadata-expiry-ms", type=int, metavar="MS", help="metadata.max.age.ms (default 300000)")
    p.add_argument("--max-block-ms", type=int, metavar="MS", help="accepted; librdkafka has no max.block.ms")
    p.add_argument("--max-memory-bytes", type=int, metavar="BYTES", help="buffer.memory (default 33554432)")
    p.add_argument("--max-partition-memory-bytes", type=int, metavar="BYTES", help="batch.size (default 16384)")
    p.add_argument("--socket-buffer-size", type=int, metavar="BYTES", help="send.buffer.bytes (default 102400)")
    p.add_argument("--reader-property", "--property", dest="reader_property", action="append", default=[],
                   metavar="KEY=VALUE", help="a line reader property (repeatable; see below)")
    p.add_argument("--reader-config", metavar="FILE", help="a properties file of line reader properties")
    p.add_argument("--command-property", "--producer-property", dest="command_property", action="append",
                   default=[], metavar="KEY=VALUE", help="a producer config (repeatable; wins over --command-config)")
    p.add_argument("--command-config", "--producer.config", dest="command_config", metavar="FILE",
                   help="a properties file of producer configs")
    p.set_defaults(func=run)


#: (option attribute, Kafka producer config, Kafka's default) merged like Kafka's maybeMergeOptions:
#: the option wins when given, its default applies when the config is not set otherwise.
_OPTION_CONFIGS = (
    ("timeout", "linger.ms", 1000),
    ("request_required_acks", "acks", "-1"),
    ("request_timeout_ms", "request.timeout.ms", 1500),
    ("message_send_max_retries", "retries", 3),
    ("retry_backoff_ms", "retry.backoff.ms", 100),
    ("socket_buffer_size", "send.buffer.bytes", 102400),
    ("max_memory_bytes", "buffer.memory", 32 * 1024 * 1024),
    ("batch_size", "batch.size", 16384),
    ("max_partition_memory_bytes", "batch.size", None),
    ("metadata_expiry_ms", "metadata.max.age.ms", 300000),
)


def producer_config(args) -> dict[str, Any]:
    props: dict[str, Any] = load_properties(args.command_config) if args.command_config else {}
    props.update(parse_key_values(args.command_property, "--command-property"))
    props["bootstrap.servers"] = args.bootstrap_server
    props["compression.type"] = args.compression_codec or "none"
    props.setdefault("client.id", DEFAULT_CLIENT_ID)
    for attr, key, default in _OPTION_CONFIGS:
        value = getattr(args, attr)
        if value is not None:
            props[key] = value
        elif default is not None and key not in props:
            props[key] = default
    return props


def reader_props(args) -> dict[str, str]:
    props = load_properties(args.reader_config) if args.reader_config else {}
    props.update(parse_key_values(args.reader_property, "--reader-property"))
    return props


def run(args) -> int:
    return run_tool("console-producer", lambda: _produce(args))


def _produce(args, lines: Iterable[str] | None = None) -> int:
    if not args.topic:
        raise ToolError("Missing required argument \"[topic]\"")
    reader = LineReader(reader_props(args))
    config = producer_config(args)
    producer = make_producer(config)
    check_bootstrap(args.bootstrap_server, args.topic, auto_create=_auto_creates(config),
                    security=security_config(config))
    failures: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(str(err.str()))
            print(f"Error when sending message to topic {msg.topic()} with key: "
                  f"{'null' if msg.key() is None else f'{len(msg.key())} bytes'}, value: "
                  f"{'null' if msg.value() is None else f'{len(msg.value())} bytes'} with error: {err.str()}",
                  file=sys.stderr)

    prompt = sys.stdin.isatty() and sys.stdout.isatty()
    try:
        for line in lines if lines is not None else _prompted(read_lines(sys.stdin), prompt):
            key, value, headers = reader.parse(line)
            _send(producer, args.topic, key, value, headers, on_delivery)
            if args.sync:
                producer.flush()
                if failures:
                    raise ToolError(f"sending failed: {failures[-1]}")
            else:
                producer.poll(0)
    finally:
        producer.flush()
    if failures:
        raise ToolError(f"{len(failures)} message(s) could not be sent; last error: {failures[-1]}")
    return 0


def _auto_creates(config: dict[str, Any]) -> bool:
    """Whether the producer asks the broker to auto-create a missing topic (librdkafka's
    allow.auto.create.topics, true for a producer unless set)."""
    return str(config.get("allow.auto.create.topics", "true")).strip().lower() == "true"


def _prompted(lines: Iterator[str], prompt: bool) -> Iterator[str]:
    while True:
        if prompt:
            sys.stdout.write(">")
            sys.stdout.flush()
        try:
            yield next(lines)
        except StopIteration:
            return


def _send(producer, topic: str, key, value, headers, on_delivery) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: serve deliveries, then retry
            producer.poll(0.1)
