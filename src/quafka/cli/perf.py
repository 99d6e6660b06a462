"""`quafka perf producer`, `quafka perf consumer` and `quafka perf share-consumer`: Kafka 4.4's
kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh and kafka-share-consumer-perf-test.sh —
the same options and the same output lines.

The producer test produces through confluent-kafka's Producer and measures each record's latency
from produce() to its delivery callback; the consumer test reads through one confluent-kafka
Consumer that subscribe()s in a classic consumer group; the share consumer test runs ``--threads``
quafka ShareConsumers (one per thread) in one share group.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import random
import re
import sys
import threading
import time
from typing import Any

from ._common import ToolError, add_bootstrap, check_bootstrap, latest_hint, load_properties, run_tool, security_config
from .console_producer import _auto_creates, make_producer
from .console_share_consumer import parse_key_values

REPORTING_INTERVAL_MS = 5000
PRODUCER_EXAMPLES = """
output: a line every 5 s, then the totals:
  12000 records sent, 2399.5 records/sec (2.34 MB/sec), 3.2 ms avg latency, 41.0 ms max latency.
  50000 records sent, 2500.312500 records/sec (2.44 MB/sec), 3.10 ms avg latency, 41.00 ms max latency, \
2 ms 50th, 8 ms 95th, 15 ms 99th, 40 ms 99.9th.

examples:
  quafka perf producer --topic perf --num-records 50000 --record-size 1024 --throughput -1
  quafka perf producer --topic perf --num-records 10 --payload-monotonic --throughput 0.5
  quafka perf producer --topic perf --num-records 100000 --record-size 100 --throughput 10000 \\
      --producer-props acks=1 linger.ms=5 compression.type=lz4
"""
SHARE_CONSUMER_EXAMPLES = """
output (the header unless --hide-header, then one line for the share group):
  start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
  2024-06-10 12:00:00:000, 2024-06-10 12:00:04:250, 4.7684, 1.1220, 11764.7059, 50000, 4250

examples:
  quafka perf share-consumer --topic perf --num-records 50000
  quafka perf share-consumer --topic perf --num-records 50000 --threads 3 --show-consumer-stats
  quafka perf share-consumer --topic perf --num-records 50000 --show-detailed-stats --reporting-interval 1000
"""
def add_parser(sub) -> None:
    p = sub.add_parser(
        "perf",
        help="performance tests: producer, consumer, share-consumer",
        description="Performance tests in the shape of Kafka's kafka-producer-perf-test.sh, "
                    "kafka-consumer-perf-test.sh and kafka-share-consumer-perf-test.sh.",
        epilog="examples:\n  quafka perf producer --topic perf --num-records 10000 --record-size 100 --throughput -1\n"
               "  quafka perf consumer --topic perf --num-records 10000\n"
               "  quafka perf share-consumer --topic perf --num-records 10000\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    perf_sub = p.add_subparsers(dest="perf_command", metavar="TEST")
    p.set_defaults(func=lambda args: _no_test(p))
    _add_producer(perf_sub)
    from .perf_consumer import add_consumer_parser  # its own module; it uses helpers of this one

    add_consumer_parser(perf_sub)
    _add_share_consumer(perf_sub)


def _no_test(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 1


# ============================================================================= producer

def _add_producer(sub) -> None:
    p = sub.add_parser(
        "producer",
        help="produce records at a given rate and report throughput and latency",
        description="Verify the producer performance (Kafka's kafka-producer-perf-test.sh). Exactly one "
                    "of --record-size, --payload-file and --payload-monotonic gives the payloads.",
        epilog=PRODUCER_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p, command_config=False)
    p.add_argument("--topic", help="REQUIRED: produce messages to this topic")
    p.add_argument("--num-records", type=int, metavar="NUM-RECORDS", help="REQUIRED: number of messages to produce")
    p.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                   help="message size in bytes (random uppercase letters)")
    p.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                   help="a UTF-8 file of payloads; each message takes one of them at random")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="the delimiter of --payload-file's payloads (default \\n)")
    p.add_argument("--payload-monotonic", action="store_true",
                   help="the payload is a monotonically increasing integer (0, 1, 2, ...)")
    p.add_argument("--throughput", type=float, metavar="THROUGHPUT",
                   help="REQUIRED: throttle to about THROUGHPUT messages/sec (fractions allowed, e.g. 0.5); "
                        "-1 disables throttling")
    p.add_argument("--producer-props", "--command-property", dest="producer_props", action="extend", nargs="+",
                   default=[], metavar="PROP-NAME=PROP-VALUE",
                   help="producer configs (win over --producer.config)")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="CONFIG-FILE",
                   help="a producer config properties file")
    p.add_argument("--warmup-records", type=int, default=0, metavar="WARMUP-RECORDS",
                   help="records left out of the steady-state statistics, printed as an extra summary line")
    p.set_defaults(func=run_producer)


class ProducerStats:
    """Kafka's ProducerPerformance.Stats: sampled latencies (ms), a window line every 5 s."""

    def __init__(self, num_records: int, steady_state: bool = False) -> None:
        self.start = self.window_start = time.monotonic()
        self.sampling = max(1, num_records // max(1, min(num_records, 500000)))
        self.latencies: list[int] = []
        self.iteration = self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.steady_state = steady_state
        self.suppressed = False
        self._new_window()

    def _new_window(self) -> None:
        self.window_start = time.monotonic()
        self.window_count = self.window_bytes = self.window_latency = self.window_max = 0

    def record(self, latency: int, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += size
        self.window_latency += latency
        self.window_max = max(self.window_max, latency)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency)
        if (now - self.window_start) * 1000 >= REPORTING_INTERVAL_MS:
            if self.steady_state and self.count == self.window_count:
                print("In steady state.", flush=True)
            if not self.suppressed:
                self.print_window()
            self._new_window()
        self.iteration += 1

    def print_window(self) -> None:
        elapsed_ms = max((time.monotonic() - self.window_start) * 1000, 1e-3)
        print(f"{self.window_count} records sent, {1000.0 * self.window_count / elapsed_ms:.1f} records/sec "
              f"({1000.0 * self.window_bytes / elapsed_ms / (1024 * 1024):.2f} MB/sec), "
              f"{self.window_latency / max(self.window_count, 1):.1f} ms avg latency, "
              f"{float(self.window_max):.1f} ms max latency.", flush=True)

    def total_line(self) -> str:
        elapsed_ms = max((time.monotonic() - self.start) * 1000, 1e-3)
        latencies = sorted(self.latencies) or [0]
        p50, p95, p99, p999 = (latencies[min(int(p * len(latencies)), len(latencies) - 1)]
                               for p in (0.5, 0.95, 0.99, 0.999))
        return (f"{self.count}{' steady state' if self.steady_state else ''} records sent, "
                f"{1000.0 * self.count / elapsed_ms:f} records/sec "
                f"({1000.0 * self.bytes / elapsed_ms / (1024 * 1024):.2f} MB/sec), "
                f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, "
                f"{float(self.max_latency):.2f} ms max latency, "
                f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")


class _Payloads:
    """The payload of record i: random letters (--record-size), one of a file's payloads, or i."""

    def __init__(self, args) -> None:
        self.rng = random.Random(0)
        self.size = args.record_size
        self.monotonic = args.payload_monotonic
        self.choices: list[bytes] = []
        if args.payload_file:
            path = os.path.abspath(args.payload_file)
            print(f"Reading payloads from: {path}", flush=True)
            delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                raise ToolError(f"cannot read {path}: {exc.strerror}") from None
            self.choices = [part.encode() for part in text.split(delimiter) if part]
            if not self.choices:
                raise ToolError("File does not exist or empty file provided.")
            print(f"Number of messages read: {len(self.choices)}", flush=True)
        elif self.size is not None:
            # random uppercase letters, as Kafka's; one pool sliced at a moving offset keeps it cheap
            self.pool = bytes(self.rng.randrange(26) + 65 for _ in range(self.size + 4096))

    def __call__(self, i: int) -> bytes:
        if self.choices:
            return self.choices[self.rng.randrange(len(self.choices))]
        if self.size is not None:
            start = self.rng.randrange(4096)
            return self.pool[start:start + self.size]
        return str(i).encode()


def run_producer(args) -> int:
    return run_tool("perf producer", lambda: _producer_test(args))


def _producer_config(args) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server}
    if args.producer_config:
        config.update(load_properties(args.producer_config))
    for prop in args.producer_props:
        key, sep, value = prop.partition("=")
        if not sep or not key or "=" in value:
            raise ToolError(f"Invalid property: {prop}")
        config[key] = value
    config.setdefault("client.id", "perf-producer-client")
    return config


def _check_producer_args(args) -> None:
    missing = [name for name, value in (("--topic", args.topic), ("--num-records", args.num_records),
                                        ("--throughput", args.throughput)) if value is None]
    if missing:
        raise ToolError(f"argument {missing[0]} is required")
    payloads = sum(1 for given in (args.record_size is not None, args.payload_file is not None,
                                   args.payload_monotonic) if given)
    if payloads != 1:
        raise ToolError("exactly one of --record-size, --payload-file and --payload-monotonic must be specified")
    if args.num_records <= 0:
        raise ToolError("--num-records should be greater than zero")
    if args.record_size is not None and args.record_size <= 0:
        raise ToolError("--record-size should be greater than zero")
    if args.warmup_records >= args.num_records:
        raise ToolError("The value for --warmup-records must be strictly fewer than the number of records in "
                        "the test, --num-records.")
    if args.throughput == 0 or args.throughput != args.throughput:
        raise ToolError("--throughput must be positive (records/sec) or -1 (no throttling)")


def _producer_test(args) -> int:
    _check_producer_args(args)
    payload_of = _Payloads(args)
    config = _producer_config(args)
    producer = make_producer(config)
    check_bootstrap(args.bootstrap_server, args.topic, auto_create=_auto_creates(config),
                    security=security_config(config))
    warmup = max(args.warmup_records, 0)
    if warmup > 0:
        print(f"Warmup first {warmup} records. Steady state results will print after the complete test summary.",
              flush=True)
    stats = ProducerStats(args.num_records)
    steady: list[ProducerStats] = []
    failures: list[str] = []

    def delivered(sent_at: float, size: int, targets: tuple[ProducerStats, ...], err, msg) -> None:
        now = time.monotonic()
        if err is not None:
            failures.append(err.str())
            if len(failures) <= 5:
                print(f"Error: delivery failed: {err.str()}", file=sys.stderr)
            return
        latency = int((now - sent_at) * 1000)
        for target in targets:
            target.record(latency, size, now)

    start = time.monotonic()
    rate = args.throughput
    for i in range(args.num_records):
        if rate > 0 and i > 0:
            _wait_until(producer, start + i / rate)
        if warmup and i == warmup:
            steady.append(ProducerStats(args.num_records - warmup, steady_state=True))
            stats.suppressed = True
        payload = payload_of(i)
        sent_at = time.monotonic()
        callback = functools.partial(delivered, sent_at, len(payload), (stats, *steady))
        while True:
            try:
                producer.produce(args.topic, value=payload, on_delivery=callback)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    while producer.flush(1.0) > 0:
        pass
    print(stats.total_line(), flush=True)
    for s in steady:
        print(s.total_line(), flush=True)
    if failures:
        raise ToolError(f"{len(failures)} of {args.num_records} records could not be sent; last error: {failures[-1]}")
    return 0


def _wait_until(producer, deadline: float) -> None:
    """Serve delivery callbacks until ``deadline`` (time.monotonic)."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        producer.poll(min(remaining, 0.1))


# ============================================================================= share consumer

def _add_share_consumer(sub) -> None:
    p = sub.add_parser(
        "share-consumer",
        help="consume records through a share group and report throughput",
        description="Verify the share consumer performance (Kafka's kafka-share-consumer-perf-test.sh).",
        epilog=SHARE_CONSUMER_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p, command_config=False)
    p.add_argument("--topic", help="REQUIRED: the topic to consume from")
    p.add_argument("--num-records", type=int, metavar="COUNT", help="REQUIRED: the number of records to consume")
    p.add_argument("--messages", type=int, metavar="COUNT", help="(DEPRECATED) use --num-records")
    p.add_argument("--group", default="perf-share-consumer", metavar="GID",
                   help="the share group id (default perf-share-consumer)")
    p.add_argument("--threads", type=int, default=1, metavar="COUNT",
                   help="the number of share consumers, one per thread (default 1)")
    p.add_argument("--show-consumer-stats", action="store_true", help="also report each share consumer's stats")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
                   help="the amount of data to fetch in a single request: fetch.max.bytes (default 1048576)")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE",
                   help="accepted for compatibility; the quafka client has no socket buffer setting")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS",
                   help="the longest time allowed between returned records (default 10000)")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="INTERVAL_MS",
                   help="interval of the --show-detailed-stats lines (default 5000)")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="report stats every --reporting-interval for each share consumer")
    p.add_argument("--print-metrics", action="store_true", help="print the share consumers' metrics at the end")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="FORMAT",
                   help="a java.text.SimpleDateFormat pattern for the time columns (default yyyy-MM-dd HH:mm:ss:SSS)")
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.add_argument("--command-property", dest="command_property", action="append", default=[], metavar="PROP=VALUE",
                   help="a share consumer config (repeatable; wins over --command-config)")
    p.add_argument("--command-config", metavar="FILE", help="a share consumer config properties file")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="(DEPRECATED) use --command-config")
    p.set_defaults(func=run_share_consumer)


_JAVA_FIELD = re.compile(r"'(?:[^']|'')*'|([A-Za-z])\1*")


def java_date_format(pattern: str, epoch_ms: int) -> str:
    """Format ``epoch_ms`` (local time) with a java.text.SimpleDateFormat pattern."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000).astimezone()
    out: list[str] = []
    pos = 0
    for match in _JAVA_FIELD.finditer(pattern):
        out.append(pattern[pos:match.start()])
        pos = match.end()
        token = match.group(0)
        if token.startswith("'"):
            out.append("'" if token == "''" else token[1:-1].replace("''", "'"))
            continue
        letter, n = token[0], len(token)
        out.append(_date_field(moment, letter, n, epoch_ms))
    out.append(pattern[pos:])
    return "".join(out)


def _date_field(moment: datetime.datetime, letter: str, n: int, epoch_ms: int) -> str:
    hour12 = moment.hour % 12 or 12
    numbers = {"y": moment.year if n != 2 else moment.year % 100, "M": moment.month, "d": moment.day,
               "H": moment.hour, "k": moment.hour or 24, "K": moment.hour % 12, "h": hour12,
               "m": moment.minute, "s": moment.second, "S": epoch_ms % 1000, "D": moment.timetuple().tm_yday,
               "u": moment.isoweekday()}
    if letter == "M" and n >= 3:
        return moment.strftime("%B" if n >= 4 else "%b")
    if letter == "E":
        return moment.strftime("%A" if n >= 4 else "%a")
    if letter == "a":
        return moment.strftime("%p")
    if letter in "zZX":
        offset = moment.strftime("%z")
        if letter == "z":
            return moment.strftime("%Z")
        return offset if letter == "Z" or n == 2 else offset[:3] if n == 1 else offset[:3] + ":" + offset[3:]
    if letter in numbers:
        return str(numbers[letter]).zfill(n)
    raise ToolError(f"Illegal pattern character '{letter}' in --date-format")


class _Consumption:
    """Counts shared by the consumer threads."""

    def __init__(self, threads: int) -> None:
        self.lock = threading.Lock()
        self.records = self.bytes = 0
        self.per_consumer = [[0, 0] for _ in range(threads)]  # [records, bytes]
        self.stop = threading.Event()
        self.errors: list[BaseException] = []


def run_share_consumer(args) -> int:
    return run_tool("perf share-consumer", lambda: _share_consumer_test(args))


def _share_consumer_config(args) -> dict[str, Any]:
    path = args.consumer_config or args.command_config
    config: dict[str, Any] = load_properties(path) if path else {}
    config.update(parse_key_values(args.command_property, "--command-property"))
    for key in ("key.deserializer", "value.deserializer", "receive.buffer.bytes"):
        config.pop(key, None)
    config["bootstrap.servers"] = args.bootstrap_server
    config["group.id"] = args.group
    config["fetch.max.bytes"] = args.fetch_size
    config["check.crcs"] = "false"
    config.setdefault("client.id", "perf-share-consumer-client")
    return config


def _share_consumer_test(args) -> int:
    from quafka.client import ShareConsumer

    if not args.topic:
        raise ToolError("Missing required argument \"[topic]\"")
    if (args.num_records is None) == (args.messages is None):
        raise ToolError("Exactly one of the following arguments is required: --messages, --num-records")
    if args.consumer_config and args.command_config:
        raise ToolError("Option \"[consumer.config]\" can't be used with option \"[command-config]\"")
    if args.threads < 1:
        raise ToolError("--threads must be at least 1")
    if args.reporting_interval <= 0:
        raise ToolError("Reporting interval must be greater than 0.")
    java_date_format(args.date_format, 0)  # an illegal pattern fails before anything runs
    if args.messages is not None:
        print("Warning: --messages is deprecated. Use --num-records instead.")
    if args.consumer_config:
        print("Warning: --consumer.config is deprecated. Use --command-config instead.")
    num_records = args.num_records if args.num_records is not None else args.messages
    config = _share_consumer_config(args)

    consumers = [ShareConsumer(config) for _ in range(args.threads)]  # a bad config fails first
    try:
        check_bootstrap(args.bootstrap_server, args.topic, security=security_config(config))
    except BaseException:
        for consumer in consumers:
            consumer.close()
        raise
    hint = latest_hint(args.bootstrap_server, config["group.id"], args.topic, security_config(config))
    if hint is not None:
        print(hint, file=sys.stderr, flush=True)
    if not args.hide_header:
        print("start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms",
              flush=True)
    state = _Consumption(args.threads)
    interrupted = False
    try:
        for consumer in consumers:
            consumer.subscribe([args.topic])
        start_ms = _now_ms()
        threads = [threading.Thread(target=_consume_loop, name=f"perf-share-consumer-{i + 1}",
                                    args=(consumer, i, args, num_records, state), daemon=True)
                   for i, consumer in enumerate(consumers)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            interrupted = True
            state.stop.set()
            for consumer in consumers:
                consumer.wakeup()
            for thread in threads:
                thread.join(5.0)
        end_ms = _now_ms()
        if state.errors and not interrupted:
            raise state.errors[0]
        if args.show_consumer_stats:
            for i, (records, size) in enumerate(state.per_consumer):
                print(f"Share consumer {i + 1} consumption metrics- "
                      + _stats_columns(args.date_format, start_ms, end_ms, size, records))
        if state.records < num_records and not interrupted:
            print(f"WARNING: Exiting before consuming the expected number of records: timeout ({args.timeout} ms) "
                  "exceeded. You can use the --timeout option to increase the timeout.")
        metrics = [consumer.metrics() for consumer in consumers] if args.print_metrics else []
        for consumer in consumers:
            consumer.commit_sync()
        print(_stats_columns(args.date_format, start_ms, end_ms, state.bytes, state.records), flush=True)
        for i, values in enumerate(metrics):
            _print_metrics(values, f"{config['client.id']}-{i + 1}" if len(metrics) > 1 else config["client.id"])
    finally:
        for consumer in consumers:
            try:
                consumer.close(0.5)
            except Exception:  # noqa: BLE001 - closing after another error: report that one
                pass
    return 130 if interrupted else 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stats_columns(date_format: str, start_ms: int, end_ms: int, size: int, records: int) -> str:
    elapsed_s = max(end_ms - start_ms, 1) / 1000
    mb = size / (1024 * 1024)
    return (f"{java_date_format(date_format, start_ms)}, {java_date_format(date_format, end_ms)}, "
            f"{mb:.4f}, {mb / elapsed_s:.4f}, {records / elapsed_s:.4f}, {records}, {end_ms - start_ms}")


def _consume_loop(consumer, index: int, args, num_records: int, state: _Consumption) -> None:
    from quafka.client import WakeupException

    last_consumed = last_report = time.monotonic()
    last_records = last_bytes = 0
    mine = state.per_consumer[index]
    try:
        while not state.stop.is_set():
            with state.lock:
                if state.records >= num_records:
                    return
            if (time.monotonic() - last_consumed) * 1000 > args.timeout:
                return
            records = consumer.poll(0.1)
            now = time.monotonic()
            if not records:
                continue
            last_consumed = now
            size = sum(len(r.key or b"") + len(r.value or b"") for r in records)
            with state.lock:
                state.records += len(records)
                state.bytes += size
                mine[0] += len(records)
                mine[1] += size
            if args.show_detailed_stats and (now - last_report) * 1000 >= args.reporting_interval:
                end_ms, start_ms = _now_ms(), _now_ms() - int((now - last_report) * 1000)
                elapsed_ms = max(end_ms - start_ms, 1)
                print(f"{java_date_format(args.date_format, start_ms)}, {java_date_format(args.date_format, end_ms)}, "
                      f"{mine[1] / (1024 * 1024):.4f}, "
                      f"{1000.0 * (mine[1] - last_bytes) / (1024 * 1024) / elapsed_ms:.4f}, "
                      f"{1000.0 * (mine[0] - last_records) / elapsed_ms:.4f}, {mine[0]}, {elapsed_ms} "
                      f"for share consumer {index + 1}", flush=True)
                last_report, last_records, last_bytes = now, mine[0], mine[1]
    except WakeupException:
        return
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        state.errors.append(exc)
        state.stop.set()


def _print_metrics(values: dict[str, float], client_id: str) -> None:
    """Kafka's ToolsUtils.printMetrics layout: 'group:name:{tags}' padded, ' : ', the value."""
    names = {f"consumer-share-metrics:{name}:{{client-id={client_id}}}": value for name, value in values.items()}
    if not names:
        return
    width = max(len(name) for name in names)
    print(f"\n{'Metric Name':<{width}}   Value")
    for name in sorted(names):
        print(f"{name:<{width}} : {names[name]:.3f}")
