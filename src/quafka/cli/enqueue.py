"""`quafka enqueue --app module:app --topic T`: enqueue jobs from JSON lines on stdin.

A backfill, a replay of failed jobs from a log, a one-off job from a shell: a Sidekiq or Celery
user pushes those from the command line, and should not need a hand-made Producer that guesses
how the app encodes its jobs. This command goes through the app itself, ``App.enqueue``
(framework/enqueue.py: confluent-kafka's idempotent producer, ``acks=all``), so a job is written
exactly as the app's own code would write it.

**Input.** One job per line, UTF-8, each line one JSON value: the job's value (``{"to": "ann"}``,
``42``, ``"hello"``). Blank lines are skipped. ``--key-field F`` takes each job's key from field F
of its object; ``--delay-ms N`` holds every job back N ms (where the group honours delivery
times). With ``--envelope`` each line is an object ``{"value": ..., "key": ..., "headers": {...},
"delay_ms": ..., "at_ms": ...}`` (only ``value`` required).

**Serialization.** ``App.enqueue``'s: objects, arrays, numbers, true and false as compact JSON,
null as no value, a string as its UTF-8 text; except that a string to a topic that a route of the
app reads with ``deserializer="json"`` is written as JSON (``"hello"`` with its quotes), so that
the route reads back the string it was given rather than failing to deserialize it.

**Errors.** A line that is not JSON (or not a valid envelope, or that the producer refuses)
stops the command with exit code 1 and an error naming the line number: nothing of that line or
after it is sent, and the jobs of the lines before it are flushed, i.e. enqueued (the error says
how many). A job the broker does not acknowledge makes the final flush fail: exit code 1 with
the reasons (each failed job is also logged as it fails). A topic that does not exist is refused
before anything is read, unless the broker creates topics on first use; a topic that no route of
the app reads draws a warning (the jobs would reach no worker of this app) and is enqueued to.

**Output.** Progress on stderr for long inputs (``Progress``: a bar on a terminal, a line every
5 s otherwise), then ``enqueued N jobs to T`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._common import Progress, ToolError, check_bootstrap, run_tool, security_config
from .worker import load_app

EXAMPLES = """
input: one job per line, each line the job's value as JSON; blank lines are skipped.
  With --envelope, each line is {"value": ..., "key": ..., "headers": {...}, "delay_ms": ..., "at_ms": ...}
  (only "value" is required; at_ms is a time in epoch milliseconds).
  A bad line stops the command (exit code 1) naming its line number: the jobs of the lines before
  it are enqueued, nothing from that line on.

examples:
  printf '%s\\n' '{"to": "ann"}' '{"to": "bob"}' | quafka enqueue --app myapp:app --topic mail
  quafka enqueue --app myapp:app --topic mail --key-field to < jobs.jsonl     # key = each job's "to"
  quafka enqueue --app myapp:app --topic mail --delay-ms 60000 < jobs.jsonl   # not before a minute
  echo '{"value": {"to": "cy"}, "key": "cy", "headers": {"trace": "t-1"}, "delay_ms": 5000}' \\
      | quafka enqueue --app myapp:app --topic mail --envelope
  jq -c '.jobs[]' export.json | quafka enqueue --app myapp:app --topic mail --bootstrap-server kafka-1:9092
"""

ENVELOPE_KEYS = ("value", "key", "headers", "delay_ms", "at_ms")
SHOWN_CHARS = 60  # how much of a bad line an error quotes


def add_parser(sub) -> None:
    p = sub.add_parser(
        "enqueue",
        help="enqueue jobs from JSON lines on stdin through a quafka.framework app (App.enqueue)",
        description="Enqueue one job per line of stdin (a JSON value, or an envelope with --envelope) to "
                    "--topic, with the app's App.enqueue: idempotent, acks=all, the app's serialization.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--app", required=True, metavar="MODULE:APP",
                   help="the app, as module:attribute (attribute default: app), imported with the current "
                        "directory on the path")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to enqueue the jobs to")
    p.add_argument("--key-field", metavar="FIELD",
                   help="each job's key is this field of its JSON object (a string, or a number as its JSON "
                        "text); a job without it is an error")
    p.add_argument("--envelope", action="store_true",
                   help='each line is {"value": ..., "key": ..., "headers": {...}, "delay_ms": ..., "at_ms": ...}')
    p.add_argument("--delay-ms", type=int, metavar="MS",
                   help="deliver each job no sooner than MS ms after it is enqueued (an envelope's delay_ms or "
                        "at_ms wins)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="connect here instead of the app's bootstrap.servers")
    p.add_argument("--timeout-s", type=float, default=30.0, metavar="SECONDS",
                   help="how long the final flush waits for the broker's acknowledgements (default 30)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Job:
    """One line's job, as ``App.enqueue`` takes it."""

    value: Any
    key: str | None = None
    headers: list[tuple[str, str | None]] | None = None
    delay_ms: int | float | None = None
    at_ms: int | None = None


class BadLine(Exception):
    """A line that cannot be enqueued: its number and why."""

    def __init__(self, number: int, why: str) -> None:
        super().__init__(f"line {number}: {why}")
        self.number = number


def run(args: argparse.Namespace) -> int:
    return run_tool("enqueue", lambda: _run(args))


def _check_options(args: argparse.Namespace) -> None:
    if not args.topic.strip():
        raise ToolError("--topic must name a topic")
    if args.delay_ms is not None and args.delay_ms < 0:
        raise ToolError(f"--delay-ms must be >= 0, got {args.delay_ms}")
    if not args.timeout_s > 0:
        raise ToolError(f"--timeout-s must be > 0 seconds, got {args.timeout_s}")
    if args.key_field is not None and args.envelope:
        raise ToolError('--key-field cannot be used with --envelope (give each line\'s "key")')


def _run(args: argparse.Namespace) -> int:
    from quafka.framework import RouteConfigError

    _check_options(args)
    # the framework's own warnings and errors (a failed job, a delay that will not be honoured) on stderr
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app = load_app(args.app)
    except (ToolError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the app's module raised while it was imported: one line, as for any error
        raise ToolError(f"{args.app}: importing it raised {type(exc).__name__}: {exc}") from None
    if args.bootstrap_server:
        app.kafka["bootstrap.servers"] = args.bootstrap_server
    try:
        readers = readers_of(app, args.topic)
    except RouteConfigError as exc:
        raise ToolError(f"{args.app}: {exc}") from None
    if not readers:
        routes = ", ".join(r.name for r in _routes(app)) or "none"
        print(f"warning: no route of {args.app} reads topic '{args.topic}' (its routes: {routes}); the jobs will "
              f"reach no worker of this app", file=sys.stderr)
    check_bootstrap(app.kafka["bootstrap.servers"], args.topic, auto_create=True, security=security_config(app.kafka))
    json_strings = any(r.settings["deserializer"] == "json" for r in readers)
    count = enqueue_lines(app, args, sys.stdin.buffer, json_strings)
    print(f"enqueued {count} {'job' if count == 1 else 'jobs'} to {args.topic}")
    return 0


def _routes(app: Any) -> list[Any]:
    """The app's validated routes; [] for an app that declares none (one that only enqueues)."""
    from quafka.framework import RouteConfigError

    try:
        return app.routes()
    except RouteConfigError as exc:
        if all(p.route == "(app)" and p.key == "routes" for p in exc.problems):
            return []
        raise


def readers_of(app: Any, topic: str) -> list[Any]:
    """The app's routes that read ``topic`` (RouteConfigError when the app's routes do not hold)."""
    return [r for r in _routes(app) if r.topic == topic]


def enqueue_lines(app: Any, args: argparse.Namespace, lines: Iterable[bytes], json_strings: bool) -> int:
    """Enqueue a job per line (wait=False), then flush; the number of jobs. A bad line: the jobs
    before it are flushed, then ToolError naming the line."""
    from confluent_kafka import KafkaException as ProducerException

    from quafka.framework import EnqueueError

    progress = Progress(None, f"enqueued to {args.topic}")
    count = 0
    try:
        for number, raw in enumerate(lines, 1):
            job = parse_line(raw, number, envelope=args.envelope, key_field=args.key_field)
            if job is None:
                continue
            value = job.value
            if json_strings and isinstance(value, str):
                value = json.dumps(value, ensure_ascii=False).encode("utf-8")  # the route reads JSON
            delay_ms = job.delay_ms if job.delay_ms is not None or job.at_ms is not None else args.delay_ms
            try:
                app.enqueue(args.topic, value, key=job.key, headers=job.headers, delay_ms=delay_ms, at=job.at_ms,
                            wait=False)
            except (ValueError, TypeError, BufferError, ProducerException, EnqueueError) as exc:
                raise BadLine(number, f"not enqueued: {exc}") from None
            count += 1
            progress.update()
    except BadLine as bad:
        progress.close()
        sent = _flush_after_error(app, args, count)
        raise ToolError(f"{bad}; {sent}, nothing from line {bad.number} on") from None
    except KeyboardInterrupt:
        progress.close()
        print(f"interrupted: {_flush_after_error(app, args, count)}", file=sys.stderr)
        raise
    progress.close()
    try:
        app.flush(args.timeout_s)
    except EnqueueError as exc:
        raise ToolError(f"not every job reached {args.topic}: {exc} (of {count} read; the others were "
                        f"enqueued)") from None
    return count


def _flush_after_error(app: Any, args: argparse.Namespace, count: int) -> str:
    """Flush the jobs enqueued before an error; what became of them, for the error's text."""
    from quafka.framework import EnqueueError

    try:
        app.flush(args.timeout_s)
    except EnqueueError as exc:
        return f"of the {count} job(s) of the lines before it, some were not enqueued ({exc})"
    return f"the {count} job(s) of the lines before it were enqueued"


def parse_line(raw: bytes, number: int, *, envelope: bool = False, key_field: str | None = None) -> Job | None:
    """The job of line ``number`` (None for a blank line); BadLine when it is not one."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise BadLine(number, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text.strip()
        shown = shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS] + "..."
        raise BadLine(number, f"not JSON ({exc.msg} at column {exc.colno}): {shown!r}") from None
    if not envelope:
        key = None
        if key_field is not None:
            if not isinstance(data, dict) or key_field not in data:
                raise BadLine(number, f"the job has no field {key_field!r} (--key-field)")
            key = _key(data[key_field], number, f"field {key_field!r}")
        return Job(data, key)
    if not isinstance(data, dict) or "value" not in data:
        raise BadLine(number, 'an envelope (--envelope) is a JSON object with "value", e.g. {"value": {"id": 7}}')
    unknown = sorted(set(data) - set(ENVELOPE_KEYS))
    if unknown:
        raise BadLine(number, f"unknown envelope key(s) {', '.join(unknown)}; an envelope takes "
                              f"{', '.join(ENVELOPE_KEYS)}")
    headers = data.get("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(v is None or isinstance(v, str) for v in headers.values()):
            raise BadLine(number, '"headers" must be an object of strings (or nulls), e.g. {"trace": "t-1"}')
        headers = list(headers.items())
    delay_ms, at_ms = data.get("delay_ms"), data.get("at_ms")
    if delay_ms is not None and (isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)) or delay_ms < 0):
        raise BadLine(number, f'"delay_ms" must be a number of milliseconds >= 0, got {delay_ms!r}')
    if at_ms is not None and (isinstance(at_ms, bool) or not isinstance(at_ms, int) or at_ms < 0):
        raise BadLine(number, f'"at_ms" must be a time in epoch milliseconds (an integer >= 0), got {at_ms!r}')
    if delay_ms is not None and at_ms is not None:
        raise BadLine(number, 'give "delay_ms" or "at_ms", not both')
    return Job(data["value"], _key(data.get("key"), number, '"key"'), headers, delay_ms, at_ms)


def _key(value: Any, number: int, what: str) -> str | None:
    """A job key: a string as it is, a number as its JSON text, null as no key."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    raise BadLine(number, f"{what} must be a string or a number to be a key, got {json.dumps(value)[:SHOWN_CHARS]}")
