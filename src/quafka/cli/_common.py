"""What every `quafka` tool shares: the connection options, Kafka-style exit codes and one-line
errors, tables, progress on a terminal, and a client config file.

Exit codes follow Kafka's tools: 0 on success, 1 on any error (a bad option, an unreachable
broker, a broker error). Errors are one line on stderr, ``Error: ...``, naming what was wrong.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

__all__ = ["ADMIN_KEYS", "DEFAULT_BOOTSTRAP", "EXIT_ERROR", "EXIT_OK", "PROBE_TIMEOUT_MS", "Progress", "ToolError", "latest_hint",
           "add_bootstrap", "check_bootstrap", "client_config", "format_table", "kafka_parser_errors",
           "librdkafka_logging", "load_properties", "open_admin", "print_table", "run_tool", "security_config"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"  # documented deviation: Kafka's tools require --bootstrap-server
EXIT_OK, EXIT_ERROR = 0, 1
ADMIN_KEYS = ("bootstrap.servers", "client.id", "request.timeout.ms")


class ToolError(Exception):
    """An error the tool reports as one line and exit code 1."""


def add_bootstrap(parser: argparse.ArgumentParser, *, command_config: bool = True) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", default=DEFAULT_BOOTSTRAP,
                        help=f"the broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP}; "
                             "Kafka's tools require this option)")
    if command_config:
        parser.add_argument("--command-config", metavar="FILE",
                            help="a properties file of client configs (key=value lines)")


def load_properties(path: str) -> dict[str, str]:
    """A Java properties file (`quafka.protocol.properties`: Kafka's tools read theirs with
    java.util.Properties), as one line of error when it cannot be read or parsed."""
    from quafka.protocol.properties import PropertiesError, parse_properties

    try:
        with open(path, encoding="utf-8") as fh:
            return parse_properties(fh.read())
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None
    except PropertiesError as exc:
        raise ToolError(f"{path}: {exc} (key {exc.key!r})") from None


def security_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The security keys (security.protocol, ssl.*, sasl.*: docs/security.md) of a client config, for
    the short-lived Admin clients a tool opens besides its main client (the bootstrap probe, hints)."""
    from quafka.client import SECURITY_KEYS

    return {k: v for k, v in config.items() if k in SECURITY_KEYS}


def client_config(args: argparse.Namespace, allowed: Iterable[str] | None = None) -> dict[str, Any]:
    """bootstrap.servers from --bootstrap-server plus the --command-config file's keys (those in
    ``allowed`` when given; the others are ignored, as Kafka's tools pass them to a client that
    ignores what it does not know)."""
    config: dict[str, Any] = {}
    path = getattr(args, "command_config", None)
    if path:
        props = load_properties(path)
        keep = set(allowed) if allowed is not None else None
        config.update({k: v for k, v in props.items() if keep is None or k in keep})
    config["bootstrap.servers"] = args.bootstrap_server
    return config


def kafka_parser_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make a subcommand's parser report bad options as Kafka's tools do: one line on stderr and exit
    code 1 (argparse's default is the usage text and exit code 2). Unknown options count too."""
    prog = parser.prog

    def error(message: str):
        print(f"Error: {message} (see '{prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)

    original = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        namespace, extras = original(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    parser._kafka_errors = True  # type: ignore[attr-defined]
    return parser


def open_admin(args: argparse.Namespace, timeout_ms: int | None = None):
    """A quafka Admin for --bootstrap-server and --command-config (the Admin's own keys are used;
    other client keys in the file are ignored, as Kafka's Admin ignores unknown ones; the security
    keys are the Admin's). The bootstrap is probed first (check_bootstrap), so that a tool fails
    within ~2 s with one line when no bootstrap server answers, whatever its request timeout."""
    from quafka.client import SECURITY_KEYS, Admin

    config = client_config(args, ADMIN_KEYS + SECURITY_KEYS)
    check_bootstrap(config["bootstrap.servers"], security=security_config(config))
    if timeout_ms is not None:
        config["request.timeout.ms"] = timeout_ms
    return Admin(config)


#: How long the bootstrap probe waits for a broker to answer (connect and request): a tool fails
#: within ~2 s when no bootstrap server answers, instead of retrying for minutes as librdkafka does.
PROBE_TIMEOUT_MS = 1500  # to find a bootstrap address that accepts a connection
ANSWER_TIMEOUT_MS = 10000  # for the probe's metadata answer once connected


def check_bootstrap(bootstrap: str, topic: str | None = None, *, auto_create: bool = False,
                    timeout_ms: int = PROBE_TIMEOUT_MS, security: Mapping[str, Any] | None = None) -> None:
    """Fail fast, before a tool starts its real work: one short metadata round trip to
    ``bootstrap`` (a quafka Admin with a ``timeout_ms`` connect/request timeout). Raises ToolError
    (one line) when no bootstrap server answers, or when ``topic`` is given and does not exist —
    unless ``auto_create`` (the tool's client asks for auto-creation, as a producer does) and the
    broker has ``auto.create.topics.enable=true``. Kafka's tools only repeat
    UNKNOWN_TOPIC_OR_PARTITION warnings there. ``security``: the tool's security keys
    (`security_config`); an authentication failure is reported here, as one line."""
    from quafka.client import Admin
    from quafka.client.errors import KafkaException
    from quafka.protocol.errors import ErrorCode

    _require_a_listener(bootstrap, timeout_ms)
    # a broker accepted the connection: give its answer the normal time (a loaded broker may be slow)
    try:
        admin = Admin({"bootstrap.servers": bootstrap, "client.id": "quafka-cli-probe",
                       "request.timeout.ms": ANSWER_TIMEOUT_MS, **(security or {})})
    except KafkaException as exc:
        raise ToolError(exc.message) from None
    try:
        try:
            if topic is None:
                admin.describe_cluster()
                return
            try:
                admin.describe_topics([topic])
                return
            except KafkaException as exc:
                if exc.code != ErrorCode.unknown_topic_or_partition:
                    raise
            if auto_create and _auto_create_enabled(admin):
                return
        except KafkaException as exc:
            raise ToolError(exc.message) from None
        create = f"create it with 'quafka topics --bootstrap-server {bootstrap} --create --topic {topic}'"
        why = "and the broker does not auto-create topics (auto.create.topics.enable=false)" if auto_create else \
            "(share consumers never auto-create topics)"
        raise ToolError(f"Topic '{topic}' does not exist {why}; {create}")
    finally:
        admin.close()


def latest_hint(bootstrap: str, group: str, topic: str, security: Mapping[str, Any] | None = None) -> str | None:
    """One line for a share-consumer tool about to initialise partitions of ``topic`` for
    ``group`` at ``latest`` (``share.auto.offset.reset``, Kafka's default, rightly kept) while the
    topic already holds records that it will therefore never deliver; None otherwise. Partitions
    the group already has a start offset for follow it, whatever the config says now (Kafka's
    rule): those need ``share-groups --reset-offsets``. Best effort: any error means no hint."""
    from quafka.client import Admin
    from quafka.client.errors import KafkaException

    try:
        admin = Admin({"bootstrap.servers": bootstrap, "client.id": "quafka-cli-probe",
                       "request.timeout.ms": ANSWER_TIMEOUT_MS, **(security or {})})
    except KafkaException:
        return None
    try:
        reset = (admin.describe_configs("group", group).get("share.auto.offset.reset") or "latest").strip()
        if reset != "latest":
            return None
        partitions = sorted(admin.describe_topics([topic])[topic].partitions)
        try:
            started = admin.list_share_group_offsets(group, [topic])
        except KafkaException:  # the group does not exist yet: nothing is initialised
            started = {}
        fresh = [p for p in partitions if started.get((topic, p), (-1, -1))[0] < 0]
        if not fresh:
            return None
        earliest = admin.list_offsets({(topic, p): "earliest" for p in fresh})
        latest = admin.list_offsets({(topic, p): "latest" for p in fresh})
        waiting = sum(max(latest[(topic, p)][0] - earliest[(topic, p)][0], 0) for p in fresh)
    except (KafkaException, KeyError, OSError):
        return None
    finally:
        admin.close()
    if waiting <= 0:
        return None
    return (f"Note: share group '{group}' starts reading '{topic}' at its latest offset "
            f"(share.auto.offset.reset=latest, the default), so the {waiting} record(s) already in it will not "
            f"be delivered. To read from the beginning, first run: quafka configs --bootstrap-server {bootstrap} "
            f"--alter --entity-type groups --entity-name {group} --add-config share.auto.offset.reset=earliest "
            f"(once the group has read a partition, move it with: quafka share-groups --bootstrap-server "
            f"{bootstrap} --reset-offsets --group {group} --topic {topic} --to-earliest --execute)")


def _require_a_listener(bootstrap: str, timeout_ms: int) -> None:
    """ToolError (one line) unless some bootstrap address accepts a TCP connection within
    ``timeout_ms`` in all: refused, unresolvable and unreachable servers fail fast this way."""
    import socket

    deadline = time.monotonic() + timeout_ms / 1000.0
    errors = []
    for address in [a.strip() for a in bootstrap.split(",") if a.strip()]:
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "localhost"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.create_connection((host, int(port)), timeout=remaining):
                return
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise ToolError(f"no bootstrap server reachable (tried {bootstrap}): {'; '.join(errors) or 'timed out'}")


def _auto_create_enabled(admin) -> bool:
    """auto.create.topics.enable of a broker of the cluster (DescribeConfigs)."""
    brokers = admin.describe_cluster().brokers
    if not brokers:
        return False
    value = admin.describe_configs("broker", str(brokers[0].node_id)).get("auto.create.topics.enable")
    return str(value).strip().lower() == "true"


class _OncePerMessage(logging.Filter):
    """Drops a librdkafka log line its client already logged (numbers in the text ignored: "after
    0ms" and "after 3ms" are one line). confluent-kafka logs ("%s [%s] %s", facility, client, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, ...]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 3:
            key = (str(args[0]), str(args[1]), re.sub(r"\d+", "#", str(args[2])))
        else:
            key = (re.sub(r"\d+", "#", record.getMessage()),)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class _StderrHandler(logging.StreamHandler):
    """Writes to the current sys.stderr (not the one of the moment the handler was made)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _librdkafka_logger() -> logging.Logger:
    logger = logging.getLogger("quafka.cli.librdkafka")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: librdkafka %(message)s"))
        handler.addFilter(_OncePerMessage())
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    return logger


def librdkafka_logging(config: dict[str, Any]) -> dict[str, Any]:
    """Route a confluent-kafka client's librdkafka logging to our logger: warnings and above only
    (``log_level`` 4, unless the config sets it), each distinct line once."""
    config.setdefault("logger", _librdkafka_logger())
    config.setdefault("log_level", 4)
    return config


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns left-aligned, each as wide as its widest cell plus one space (Kafka's layout)."""
    rows = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = [" ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> None:
    print(format_table(headers, rows), file=out or sys.stdout)


class Progress:
    """A progress bar on a terminal (stderr), a plain line every ``every_s`` seconds otherwise."""

    def __init__(self, total: int | None, label: str, stream: TextIO | None = None, every_s: float = 5.0) -> None:
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self._last = time.monotonic()
        self._start = self._last

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1:
            self._last = now
            if self.total:
                filled = int(30 * min(self.done / self.total, 1.0))
                bar = "#" * filled + "." * (30 - filled)
                self.stream.write(f"\r{self.label} [{bar}] {self.done:,}/{self.total:,}")
            else:
                self.stream.write(f"\r{self.label} {self.done:,}")
            self.stream.flush()
        elif not self.tty and now - self._last >= self.every_s:
            self._last = now
            of = f"/{self.total:,}" if self.total else ""
            self.stream.write(f"{self.label}: {self.done:,}{of}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run_tool(name: str, body: Callable[[], int | None]) -> int:
    """Run a tool's body: errors become one line on stderr and exit code 1."""
    from quafka.client.errors import KafkaException

    try:
        code = body()
        return EXIT_OK if code is None else code
    except ToolError as exc:
        print(f"Error: {exc}", file=sys.stderr)
    except KafkaException as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_ERROR


MISSING = "-"  # a Kafka table's empty cell


def kafka_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], min_widths: Sequence[int],
                out: Any = None) -> None:
    """Kafka's printf tables: a blank line first, then the header and the rows; each column but the
    last padded to max(its minimum width, its widest cell) plus one space."""
    rows = [[MISSING if c is None else str(c) for c in r] for r in rows]
    widths = [max([m, len(h)] + [len(r[i]) for r in rows]) for i, (h, m) in enumerate(zip(headers, min_widths))]
    lines = [""]
    for r in [list(headers)] + rows:
        lines.append(" ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + " " + r[-1])
    print("\n".join(lines), file=out or sys.stdout)
