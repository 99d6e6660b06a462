"""`quafka perf consumer`: Kafka 4.4's kafka-consumer-perf-test.sh (ConsumerPerformance) — the same
options and the same output lines — reading through one confluent-kafka Consumer that subscribe()s
in a classic consumer group. Shares the date format, clock and stats columns of `perf`.
"""

from __future__ import annotations

import argparse
import random
import re
import time
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
from .perf import _now_ms, java_date_format

CONSUMER_HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
CONSUMER_HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + \
    CONSUMER_HEADER_TAIL
CONSUMER_DETAILED_HEADER = "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + \
    CONSUMER_HEADER_TAIL
CONSUMER_EXAMPLES = f"""
output (the header unless --hide-header, then one line for the test):
  {CONSUMER_HEADER}
  2024-06-10 12:00:00:000, 2024-06-10 12:00:03:250, 4.7684, 1.4672, 50000, 15384.6154, 3012, 238, 20.0353, 210084.0336

examples:
  quafka perf consumer --topic perf --num-records 50000
  quafka perf consumer --include 'perf-.*' --num-records 50000 --group perf-g --from-latest --timeout 30000
  quafka perf consumer --topic perf --num-records 50000 --show-detailed-stats --reporting-interval 1000
"""


# ============================================================================= consumer

def add_consumer_parser(sub) -> None:
    p = sub.add_parser(
        "consumer",
        help="consume records through a classic consumer group and report throughput",
        description="Verify the consumer performance (Kafka's kafka-consumer-perf-test.sh): one confluent-kafka "
                    "Consumer subscribes to --topic (or the topics matching --include) in the classic consumer "
                    "group --group and reads --num-records records.",
        epilog=CONSUMER_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p, command_config=False)
    p.add_argument("--topic", help="the topic to consume from (or --include)")
    p.add_argument("--include", metavar="REGEX",
                   help="a regular expression of the topics to consume from (the whole name must match)")
    p.add_argument("--num-records", type=int, metavar="COUNT", help="REQUIRED: the number of records to consume")
    p.add_argument("--messages", type=int, metavar="COUNT", help="(DEPRECATED) use --num-records")
    p.add_argument("--group", default=f"perf-consumer-{random.randrange(100_000)}", metavar="GID",
                   help="the consumer group id (default perf-consumer-<random number below 100000>, as Kafka)")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
                   help="the most data to fetch from one partition per request: max.partition.fetch.bytes "
                        "(default 1048576)")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE",
                   help="the TCP receive buffer: socket.receive.buffer.bytes (default 2097152)")
    p.add_argument("--from-latest", action="store_true",
                   help="when the group has no committed offset, start at the latest record instead of the earliest")
    p.add_argument("--timeout", type=int, nargs="?", const=10000, default=10000, metavar="MS",
                   help="the longest time allowed between returned records (default 10000)")
    p.add_argument("--reporting-interval", default="5000", metavar="INTERVAL_MS",
                   help="interval of the --show-detailed-stats lines (default 5000)")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="report stats every --reporting-interval (instead of the final line)")
    p.add_argument("--print-metrics", action="store_true",
                   help="print the consumer's librdkafka statistics (the top-level counters) at the end")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="FORMAT",
                   help="a java.text.SimpleDateFormat pattern for the time columns (default yyyy-MM-dd HH:mm:ss:SSS)")
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.add_argument("--command-property", dest="command_property", action="append", default=[], metavar="PROP=VALUE",
                   help="a consumer config such as client.id (repeatable; wins over --command-config)")
    p.add_argument("--command-config", metavar="FILE", help="a consumer config properties file")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="(DEPRECATED) use --command-config")
    p.set_defaults(func=run_consumer)


def run_consumer(args) -> int:
    return run_tool("perf consumer", lambda: _consumer_test(args))


#: Kafka consumer configs that librdkafka spells differently, and Java-only ones (dropped).
_CONSUMER_RENAMED = {"receive.buffer.bytes": "socket.receive.buffer.bytes",
                     "send.buffer.bytes": "socket.send.buffer.bytes"}
_CONSUMER_IGNORED = frozenset({"key.deserializer", "value.deserializer", "interceptor.classes"})


def _consumer_config(args) -> dict[str, Any]:
    """Kafka's ConsumerPerfOptions.props(), in librdkafka's names."""
    path = args.consumer_config or args.command_config
    props: dict[str, Any] = load_properties(path) if path else {}
    props.update(parse_key_values(args.command_property, "--command-property"))
    props["bootstrap.servers"] = args.bootstrap_server
    props["group.id"] = args.group
    props["receive.buffer.bytes"] = str(args.socket_buffer_size)
    props["max.partition.fetch.bytes"] = str(args.fetch_size)
    props["auto.offset.reset"] = "latest" if args.from_latest else "earliest"
    props["check.crcs"] = "false"
    props.setdefault("client.id", "perf-consumer-client")
    from quafka.client import librdkafka_security_config

    config: dict[str, Any] = {}
    for key, value in librdkafka_security_config(props).items():
        if key not in _CONSUMER_IGNORED:
            config[_CONSUMER_RENAMED.get(key, key)] = value
    return librdkafka_logging(config)


def _check_topic(bootstrap: str, topic: str, security: dict[str, Any]) -> None:
    """ToolError (one line) when ``topic`` does not exist: a consumer would wait --timeout for it."""
    from quafka.client import Admin
    from quafka.client.errors import KafkaException
    from quafka.protocol.errors import ErrorCode

    admin = Admin({"bootstrap.servers": bootstrap, "client.id": "quafka-cli-probe", "request.timeout.ms": 10000,
                   **security})
    try:
        admin.describe_topics([topic])
    except KafkaException as exc:
        if exc.code != ErrorCode.unknown_topic_or_partition:
            raise ToolError(exc.message) from None
        raise ToolError(f"Topic '{topic}' does not exist; create it with 'quafka topics --bootstrap-server "
                        f"{bootstrap} --create --topic {topic}'") from None
    finally:
        admin.close()


def _java_div(x: float, y: float) -> float:
    """x / y with Java's double semantics (Infinity, NaN) instead of ZeroDivisionError."""
    if y == 0:
        return float("nan") if x == 0 else float("inf") if x > 0 else float("-inf")
    return x / y


def _java_f4(value: float) -> str:
    """Java's %.4f: Infinity and NaN spelled as Java does."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.4f}"


class _RebalanceTimer:
    """Kafka's ConsumerPerfRebListener: the time from losing the last partition (or from the start)
    to the next assignment is rebalance (join) time."""

    def __init__(self, join_start_ms: int) -> None:
        self.join_start_ms = join_start_ms
        self.join_ms = self.join_ms_in_round = 0
        self.assigned: set[tuple[str, int]] = set()

    def on_revoke(self, _consumer, partitions) -> None:
        self.assigned.difference_update((tp.topic, tp.partition) for tp in partitions)
        if not self.assigned:
            self.join_start_ms = _now_ms()

    def on_assign(self, _consumer, partitions) -> None:
        if not self.assigned:
            elapsed = _now_ms() - self.join_start_ms
            self.join_ms += elapsed
            self.join_ms_in_round += elapsed
        self.assigned.update((tp.topic, tp.partition) for tp in partitions)


def _consumer_test(args) -> int:
    from confluent_kafka import Consumer, KafkaException

    if not args.topic and not args.include:
        raise ToolError("Exactly one of the following arguments is required: --topic, --include")
    if args.topic and args.include:
        raise ToolError("Exactly one of the following arguments is required: --topic, --include")
    if (args.num_records is None) == (args.messages is None):
        raise ToolError("Exactly one of the following arguments is required: --messages, --num-records")
    if args.consumer_config and args.command_config:
        raise ToolError("Option \"[consumer.config]\" can't be used with option \"[command-config]\"")
    if not re.fullmatch(r"\d+", args.reporting_interval):
        raise ToolError(f"Value [{args.reporting_interval}] did not match pattern [^\\d+$]")
    reporting_interval = int(args.reporting_interval)
    if reporting_interval <= 0:
        raise ToolError("Reporting interval must be greater than 0.")
    if args.include:
        try:
            re.compile(args.include)
        except re.error as exc:
            raise ToolError(f"invalid --include regular expression {args.include!r}: {exc}") from None
    java_date_format(args.date_format, 0)  # an illegal pattern fails before anything runs
    if args.messages is not None:
        print("Warning: --messages is deprecated. Use --num-records instead.")
    if args.consumer_config:
        print("Warning: --consumer.config is deprecated. Use --command-config instead.")
    num_records = args.num_records if args.num_records is not None else args.messages
    config = _consumer_config(args)
    stats: list[str] = []
    if args.print_metrics:
        config.setdefault("statistics.interval.ms", 500)
        config["stats_cb"] = stats.append
    security = security_config(config)  # librdkafka names: quafka's client takes them too
    check_bootstrap(args.bootstrap_server, security=security)
    if args.topic:
        _check_topic(args.bootstrap_server, args.topic, security)
    try:
        consumer = Consumer(config)
    except KafkaException as exc:
        raise ToolError(f"invalid consumer config: {exc.args[0].str() if exc.args else exc}") from None
    except (TypeError, ValueError) as exc:
        raise ToolError(f"invalid consumer config: {exc}") from None

    if not args.hide_header:
        print(CONSUMER_DETAILED_HEADER if args.show_detailed_stats else CONSUMER_HEADER, flush=True)
    interrupted = False
    try:
        start_ms = _now_ms()
        timer = _RebalanceTimer(start_ms)
        # the whole name must match, as Java's Pattern.matches; librdkafka takes a '^'-prefixed regex
        topics = [args.topic] if args.topic else [f"^({args.include})$"]
        consumer.subscribe(topics, on_assign=timer.on_assign, on_revoke=timer.on_revoke)
        try:
            records, size = _consume(consumer, args, num_records, reporting_interval, timer)
        except KeyboardInterrupt:
            interrupted = True
            records = size = 0
        end_ms = _now_ms()
        if not interrupted and not args.show_detailed_stats:
            elapsed_s = (end_ms - start_ms) / 1000.0
            fetch_ms = end_ms - start_ms - timer.join_ms
            mb = size / (1024 * 1024)
            print(f"{java_date_format(args.date_format, start_ms)}, {java_date_format(args.date_format, end_ms)}, "
                  f"{mb:.4f}, {_java_f4(_java_div(mb, elapsed_s))}, {records}, "
                  f"{_java_f4(_java_div(records, elapsed_s))}, {timer.join_ms}, {fetch_ms}, "
                  f"{_java_f4(_java_div(mb, fetch_ms / 1000.0))}, {_java_f4(_java_div(records, fetch_ms / 1000.0))}",
                  flush=True)
        if args.print_metrics and not interrupted:
            _await_stats(consumer, stats, int(config["statistics.interval.ms"]))
            _print_librdkafka_stats(stats[-1] if stats else None, config["client.id"])
    finally:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - closing after another error: report that one
            pass
    return 130 if interrupted else 0


def _consume(consumer, args, num_records: int, reporting_interval: int, timer: _RebalanceTimer) -> tuple[int, int]:
    """Kafka's ConsumerPerformance.consume(): poll (100 ms) until ``num_records`` records or until no
    record came for --timeout ms; returns (records, bytes of keys and values)."""
    from confluent_kafka import KafkaException

    records = size = last_records = last_size = 0
    now = last_report = last_consumed = _now_ms()
    while records < num_records and now - last_consumed <= args.timeout:
        batch = consumer.consume(num_messages=min(500, max(num_records - records, 1)), timeout=0.1)
        now = _now_ms()
        if batch:
            last_consumed = now
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                continue
            records += 1
            key, value = msg.key(), msg.value()
            size += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            if now - last_report >= reporting_interval:
                if args.show_detailed_stats:
                    _print_consumer_progress(args.date_format, size, last_size, records, last_records, last_report, now,
                                             timer.join_ms_in_round)
                timer.join_ms_in_round = 0
                last_report, last_records, last_size = now, records, size
    if records < num_records:
        print(f"WARNING: Exiting before consuming the expected number of records: timeout ({args.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.", flush=True)
    return records, size


def _print_consumer_progress(date_format: str, size: int, last_size: int, records: int, last_records: int,
                             start_ms: int, end_ms: int, join_ms: int) -> None:
    """Kafka's printConsumerProgress (thread id 0): basic then extended columns."""
    elapsed_ms = end_ms - start_ms
    interval_mb = (size - last_size) / (1024 * 1024)
    fetch_ms = elapsed_ms - join_ms
    fetch_mb_s = 0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms
    fetch_n_s = 0.0 if fetch_ms <= 0 else 1000.0 * (records - last_records) / fetch_ms
    print(f"{java_date_format(date_format, end_ms)}, 0, {size / (1024 * 1024):.4f}, "
          f"{_java_f4(_java_div(1000.0 * interval_mb, elapsed_ms))}, {records}, "
          f"{_java_f4(_java_div(1000.0 * (records - last_records), elapsed_ms))}, {join_ms}, {fetch_ms}, "
          f"{fetch_mb_s:.4f}, {fetch_n_s:.4f}", flush=True)


def _await_stats(consumer, stats: list[str], interval_ms: int) -> None:
    """Serve librdkafka's statistics callback (with the partitions paused: no record is taken and
    stored for commit) until a statistics report newer than the test's end arrives."""
    try:
        consumer.pause(consumer.assignment())
    except Exception:  # noqa: BLE001 - nothing assigned (e.g. after the timeout): nothing to pause
        pass
    seen = len(stats)
    deadline = time.monotonic() + 2 * max(interval_ms, 1) / 1000.0
    while len(stats) == seen and time.monotonic() < deadline:
        consumer.poll(0.05)


_NOT_METRICS = frozenset({"ts", "time", "age"})  # clocks of the statistics report itself


def _print_librdkafka_stats(raw: str | None, client_id: str) -> None:
    """The top-level numeric fields of librdkafka's statistics JSON, in Kafka's ToolsUtils.printMetrics
    layout ('group:name:{tags}' padded, ' : ', the value)."""
    import json

    if not raw:
        return
    values = {name: value for name, value in json.loads(raw).items()
              if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in _NOT_METRICS}
    _print_metrics_table({f"consumer-metrics:{name}:{{client-id={client_id}}}": value
                          for name, value in values.items()})


def _print_metrics_table(names: dict[str, float]) -> None:
    if not names:
        return
    width = max(len(name) for name in names)
    print(f"\n{'Metric Name':<{width}}   Value")
    for name in sorted(names):
        print(f"{name:<{width}} : {names[name]:.3f}")
