"""`quafka demo`: share groups at work in under a minute, with nothing to set up.

It starts an embedded broker (free loopback port, temporary data directory), creates a topic with
ONE partition, produces a few thousand jobs with confluent-kafka's Producer, and runs more share
consumers than partitions (quafka.client.ShareConsumer, explicit acknowledgement, one thread each)
on the same share group. A seeded rule decides what happens to each delivery of each job:

- most jobs succeed: ACCEPT;
- "flaky" jobs fail transiently with some probability per delivery: RELEASE, so the broker
  delivers them again with delivery_count + 1 (to any consumer) — most succeed later, the unlucky
  ones are released at the group's share.delivery.count.limit and the broker archives them;
- "poison" jobs can never be processed: REJECT (archived at once, never delivered again).

While it runs it shows who processed what, the delivery counts and the share partition's in-flight
window. The window comes from two places, and the display says which:
- the share partition start offset (SPSO) and lag: ``Admin.list_share_group_offsets`` — what
  ``quafka share-groups --describe --offsets`` shows;
- the end of the window (SPEO), the in-flight count and the records by state (acquired, available,
  done): the embedded broker's own share partition state, read on its event loop — Kafka exposes no
  admin API for these;
- members and the group state: ``Admin.describe_share_groups``.

At the end, a summary accounts for every job: accepted + rejected + archived = produced. Accepted and
rejected count acknowledgements the broker confirmed (the acknowledgement commit callback);
archived counts jobs never accepted nor rejected whose delivery count (as the broker reported it on
the record) reached the limit. The share group's start offset must then be the end of the topic,
with lag 0. Exit 0 when everything adds up, 1 (one line on stderr) when not or after --timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._common import EXIT_ERROR, EXIT_OK, ToolError, format_table, run_tool

TOPIC = "demo-jobs"
GROUP = "demo-workers"

EXAMPLES = """
what it does:
  starts an embedded broker, creates the 1-partition topic demo-jobs, produces the jobs, and runs
  the share consumers of group demo-workers (more consumers than partitions: share groups let
  every consumer work on the same partition). Jobs that fail are RELEASEd (delivered again with a
  higher delivery count, until share.delivery.count.limit, then archived) or REJECTed (poison).
  Nothing is left behind: the broker's data directory is temporary.

examples:
  quafka demo                                  # 3000 jobs, 4 consumers, seed 42
  quafka demo --jobs 10000 --consumers 8       # more of everything
  quafka demo --seed 7 --delivery-limit 3      # another failure pattern, archive sooner
  quafka demo --work-ms 0 | tail -30           # as fast as it goes; plain output when piped

exit status: 0 when accepted + rejected + archived = produced and the share group's start offset
reached the end of the topic; 1 otherwise, or when the run takes longer than --timeout seconds.
"""

# what the seeded rule makes of the jobs (fractions of all jobs)
POISON_SHARE = 0.02        # always REJECTed
FLAKY_SHARE = 0.20         # each delivery fails (RELEASE) with FLAKY_FAIL_P
FLAKY_FAIL_P = 0.5
PRODUCE_BATCH_RECORDS = 100  # records per produced batch (see Demo._produce)
COUNTER_OF = {"accept": "accepted", "release": "released", "reject": "rejected"}  # WorkerStats fields

ANSI_UP = "\x1b[{n}F"
ANSI_CLEAR_DOWN = "\x1b[J"
ANSI_HIDE_CURSOR, ANSI_SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="see share groups work: an embedded broker, jobs, failing jobs, several consumers",
        description="A self-contained demo of share groups (KIP-932): an embedded broker, a 1-partition "
                    "topic of jobs, more share consumers than partitions, some jobs failing (RELEASE: "
                    "delivered again; REJECT: poison), a live view and a summary that accounts for "
                    "every job. Needs no broker: it starts its own.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=_positive_int, default=3000, metavar="N", help="jobs to produce (default 3000)")
    p.add_argument("--consumers", type=_positive_int, default=4, metavar="N",
                   help="share consumers, one thread each (default 4; the topic has 1 partition)")
    p.add_argument("--seed", type=int, default=42, help="seed of the rule deciding which jobs fail (default 42)")
    p.add_argument("--delivery-limit", type=int, default=4, metavar="N", choices=range(2, 11),
                   help="the group's share.delivery.count.limit, 2..10 (default 4)")
    p.add_argument("--work-ms", type=float, default=2.0, metavar="MS",
                   help="simulated processing time per delivery in milliseconds (default 2)")
    p.add_argument("--max-poll-records", type=_positive_int, default=20, metavar="N",
                   help="records a consumer acquires per fetch (default 20; share.acquire.mode=record_limit)")
    p.add_argument("--timeout", type=float, default=90.0, metavar="SECONDS",
                   help="give up (exit 1) after this many seconds (default 90)")
    p.add_argument("--refresh", type=float, default=0.25, metavar="SECONDS",
                   help="how often the live view is redrawn on a terminal (default 0.25)")
    p.add_argument("--plain", action="store_true",
                   help="plain progress lines even on a terminal (what you get when stdout is not one)")
    p.add_argument("--dashboard", default="http://127.0.0.1:0", metavar="http://HOST:PORT",
                   help="serve the web dashboard of the demo's broker here while it runs (default "
                        "http://127.0.0.1:0: a free port, printed); empty: no dashboard")
    p.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# ---------------------------------------------------------------------------------------- the rule

def _unit(seed: int, *parts: object) -> float:
    """A number in [0, 1) fixed by the seed and the parts (stable across processes and runs)."""
    digest = hashlib.blake2b(repr((seed,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def job_kind(seed: int, job: int) -> str:
    """"poison", "flaky" or "ok" — what the seeded rule makes of job number ``job``."""
    u = _unit(seed, "kind", job)
    if u < POISON_SHARE:
        return "poison"
    if u < POISON_SHARE + FLAKY_SHARE:
        return "flaky"
    return "ok"


def outcome(seed: int, job: int, delivery: int) -> str:
    """"accept", "release" or "reject" for the ``delivery``-th delivery of ``job``."""
    kind = job_kind(seed, job)
    if kind == "poison":
        return "reject"
    if kind == "flaky" and _unit(seed, "try", job, delivery) < FLAKY_FAIL_P:
        return "release"
    return "accept"


# ---------------------------------------------------------------------------------------- book-keeping

@dataclass
class WorkerStats:
    name: str
    member_id: str = ""
    deliveries: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    archived: int = 0          # its RELEASE at the delivery limit made the broker archive the job
    ack_errors: int = 0
    last: str = "-"


@dataclass
class Book:
    """What the consumers did, shared between their threads and the display (under ``lock``)."""

    jobs: int
    limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    workers: list[WorkerStats] = field(default_factory=list)
    accepted: set[int] = field(default_factory=set)     # confirmed by the broker
    rejected: set[int] = field(default_factory=set)     # confirmed by the broker
    released_at_limit: set[int] = field(default_factory=set)  # confirmed RELEASE with delivery_count == limit
    max_delivery: dict[int, int] = field(default_factory=dict)  # job → highest delivery count seen
    deliveries_by_count: Counter = field(default_factory=Counter)
    duplicates: list[str] = field(default_factory=list)  # a job delivered again after being finished
    recent: deque = field(default_factory=lambda: deque(maxlen=6))
    errors: list[str] = field(default_factory=list)
    ack_errors: list[str] = field(default_factory=list)  # acknowledgements the broker refused (first few)

    def archived(self) -> set[int]:
        """Jobs never accepted nor rejected whose delivery count reached the limit."""
        return {j for j, n in self.max_delivery.items()
                if n >= self.limit and j not in self.accepted and j not in self.rejected}

    def done(self) -> int:
        """Jobs finished so far, as far as confirmed acknowledgements tell (the live view)."""
        return len(self.accepted) + len(self.rejected) + len(self.released_at_limit - self.accepted - self.rejected)


# ---------------------------------------------------------------------------------------- the run

def run(args: argparse.Namespace) -> int:
    return run_tool("demo", lambda: Demo(args, sys.stdout).run())


class Demo:
    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        if args.timeout <= 0:
            raise ToolError(f"--timeout must be > 0, got {args.timeout}")
        self.args = args
        self.out = out
        self.live = out.isatty() and not args.plain
        self.book = Book(args.jobs, args.delivery_limit)
        self.stop = threading.Event()
        self.window: dict[str, Any] = {}
        self.start = time.monotonic()
        self.timings: dict[str, float] = {}
        self._drawn_lines = 0

    # -------------------------------------------------------------- top level

    def run(self) -> int:
        from quafka import EmbeddedBroker

        a = self.args
        self._say(f"quafka demo: {a.jobs:,} jobs, {a.consumers} share consumers on 1 partition, "
                  f"delivery limit {a.delivery_limit}, seed {a.seed}")
        # short heartbeats so that every consumer gets its assignment quickly (the broker is ours)
        broker_config = {"group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500}
        with EmbeddedBroker(config=broker_config) as broker:
            self.broker = broker
            bootstrap = broker.bootstrap_servers
            with self._dashboard(bootstrap):
                finished, offsets = self._run_on(bootstrap)
        wall = time.monotonic() - self.start
        return self._summary(finished, offsets, wall)

    @contextlib.contextmanager
    def _dashboard(self, bootstrap: str):
        """The web dashboard (docs/dashboard.md) of the demo's broker, its URL printed, while the
        demo runs; nothing with --dashboard ''."""
        if not self.args.dashboard:
            yield
            return
        from quafka.dashboard.server import DashboardThread
        from quafka.dashboard.settings import DashboardSettings, SettingsError

        try:
            settings = DashboardSettings({"bootstrap.servers": bootstrap, "client.id": "quafka-demo-dashboard"},
                                         listen=self.args.dashboard)
            dashboard = DashboardThread(settings).start()
        except (SettingsError, OSError) as exc:
            raise ToolError(f"--dashboard {self.args.dashboard}: {exc}") from None
        self._say(f"dashboard: {dashboard.url} (read-only; open it to watch the share group)")
        try:
            yield
        finally:
            dashboard.stop()

    def _run_on(self, bootstrap: str) -> tuple[Any, Any]:
        from quafka.client import Admin

        a = self.args
        with Admin({"bootstrap.servers": bootstrap, "client.id": "quafka-demo-admin"}) as admin:
            admin.create_topics({TOPIC: (1, 1)})
            admin.alter_configs("group", GROUP, set={
                "share.auto.offset.reset": "earliest",
                "share.assignment.interval.ms": "0",
                "share.delivery.count.limit": str(a.delivery_limit),
                "share.record.lock.duration.ms": "15000",
            })
            self._say(f"broker {bootstrap} (data in a temporary directory); topic {TOPIC} (1 partition); "
                      f"group {GROUP}: share.auto.offset.reset=earliest, share.assignment.interval.ms=0, "
                      f"share.delivery.count.limit={a.delivery_limit}, share.record.lock.duration.ms=15000")
            t0 = time.monotonic()
            self._produce(bootstrap)
            self.timings["produce"] = time.monotonic() - t0
            kinds = Counter(job_kind(a.seed, j) for j in range(a.jobs))
            self._say(f"produced {a.jobs:,} jobs in {self.timings['produce']:.1f} s "
                      f"(the rule for seed {a.seed}: {kinds['ok']:,} ok, {kinds['flaky']:,} flaky "
                      f"(each delivery fails with p={FLAKY_FAIL_P}), {kinds['poison']:,} poison)")
            t0 = time.monotonic()
            finished = self._consume(bootstrap, admin)
            self.timings["consume"] = time.monotonic() - t0
            offsets = self._final_offsets(admin)
        return finished, offsets

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _produce(self, bootstrap: str) -> None:
        from confluent_kafka import KafkaException as ConfluentError
        from confluent_kafka import Producer

        failures: list[str] = []

        def report(err, _msg) -> None:
            if err is not None:
                failures.append(str(err))

        # Small record batches: a batch is the unit a ShareFetch sends and a share consumer decodes,
        # however few of its records were acquired. librdkafka's defaults (batch.num.messages=10000,
        # batch.size=1 MB) put all the jobs in one or two batches, and then every fetch of
        # --max-poll-records records would carry and decode the whole topic: O(jobs) per fetch.
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                             "batch.num.messages": PRODUCE_BATCH_RECORDS, "client.id": "quafka-demo-producer"})
        try:
            for job in range(self.args.jobs):
                value = f'{{"job": {job}, "task": "resize image {job:05d}.png"}}'.encode()
                while True:
                    try:
                        producer.produce(TOPIC, key=f"job-{job}".encode(), value=value, on_delivery=report)
                        break
                    except BufferError:
                        producer.poll(0.01)
            remaining = producer.flush(30)
        except ConfluentError as exc:
            raise ToolError(f"producing the jobs failed: {exc}") from None
        if remaining or failures:
            raise ToolError(f"producing the jobs failed: {failures[0] if failures else f'{remaining} undelivered'}")

    # -------------------------------------------------------------- consumers

    def _consume(self, bootstrap: str, admin) -> bool:
        book = self.book
        threads = []
        for n in range(self.args.consumers):
            stats = WorkerStats(f"consumer-{n + 1}")
            book.workers.append(stats)
            t = threading.Thread(target=self._worker, args=(bootstrap, stats), name=f"demo-{stats.name}", daemon=True)
            threads.append(t)
        for t in threads:
            t.start()
        deadline = self.start + self.args.timeout
        refresh = max(self.args.refresh, 0.05) if self.live else 0.1
        next_line, last_quarter = 0.0, -1
        finished = False
        if self.live:
            self.out.write(ANSI_HIDE_CURSOR)
        try:
            while True:
                self._sample(admin)
                now = time.monotonic()
                finished = self._window_drained()
                if self.live:
                    self._draw()
                else:
                    quarter = 4 * book.done() // max(book.jobs, 1)
                    if quarter > last_quarter or now >= next_line or finished:
                        last_quarter, next_line = quarter, now + 5.0
                        self._say(self._progress_line())
                if finished or now >= deadline or any(not t.is_alive() for t in threads):
                    break
                time.sleep(refresh)
        finally:
            self.stop.set()
            for t in threads:
                t.join(30)
            if self.live:
                self._sample(admin)
                self._draw()
                self.out.write(ANSI_SHOW_CURSOR)
                self.out.flush()
        return finished

    def _worker(self, bootstrap: str, stats: WorkerStats) -> None:
        from quafka.client import AcknowledgeType, KafkaException, ShareConsumer

        a, book = self.args, self.book
        types = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
                 "reject": AcknowledgeType.REJECT}
        pending: dict[int, tuple[int, str, int]] = {}  # offset → (job, outcome, delivery count)

        def on_commit(offsets, exc) -> None:
            with book.lock:
                for _tp, offs in offsets.items():
                    for off in offs:
                        job, what, count = pending.pop(off, (None, "", 0))
                        if job is None:
                            continue
                        if exc is not None:
                            stats.ack_errors += 1
                            if len(book.ack_errors) < 3:
                                book.ack_errors.append(f"{stats.name}: {what.upper()} of job {job} "
                                                       f"(delivery {count}) refused: {exc}")
                            continue
                        if what == "accept":
                            book.accepted.add(job)
                        elif what == "reject":
                            book.rejected.add(job)
                        elif count >= book.limit:
                            book.released_at_limit.add(job)
                            stats.archived += 1

        config = {"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": f"quafka-demo-{stats.name}",
                  "share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit",
                  "max.poll.records": a.max_poll_records, "fetch.max.wait.ms": 100}
        work_s = max(a.work_ms, 0.0) / 1000
        try:
            consumer = ShareConsumer(config)
            stats.member_id = consumer.member_id
            consumer.set_acknowledgement_commit_callback(on_commit)
            try:
                consumer.subscribe([TOPIC])
                while not self.stop.is_set():
                    records = consumer.poll(0.1)
                    for r in records:
                        job = int(r.key.decode().rsplit("-", 1)[1])
                        count = r.delivery_count or 1
                        what = outcome(a.seed, job, count)
                        if work_s:
                            time.sleep(work_s)
                        with book.lock:
                            if job in book.accepted or job in book.rejected:
                                book.duplicates.append(f"job {job} delivered again (delivery {count}) after it "
                                                       f"was acknowledged")
                            pending[r.offset] = (job, what, count)
                            stats.deliveries += 1
                            book.deliveries_by_count[count] += 1
                            book.max_delivery[job] = max(book.max_delivery.get(job, 0), count)
                            field_name = COUNTER_OF[what]
                            setattr(stats, field_name, getattr(stats, field_name) + 1)
                            stats.last = f"job {job} {what.upper()} (delivery {count})"
                            if what != "accept":
                                book.recent.append(f"{stats.name} {what.upper():7} job {job:5d} "
                                                   f"(delivery {count}/{book.limit})"
                                                   + (" → archived" if what == "release" and count >= book.limit
                                                      else ""))
                        consumer.acknowledge(r, types[what])
                consumer.commit_sync(10)
            finally:
                consumer.close(10)
        except KafkaException as exc:
            with book.lock:
                book.errors.append(f"{stats.name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported in the summary, never silently lost
            with book.lock:
                book.errors.append(f"{stats.name}: {type(exc).__name__}: {exc}")

    # -------------------------------------------------------------- broker-side view

    def _sample(self, admin) -> None:
        """Refresh self.window: Admin's start offset and lag, describe_share_groups' members, and
        the embedded broker's share partition (end offset, in-flight records by state)."""
        w: dict[str, Any] = {}
        try:
            offsets = admin.list_share_group_offsets(GROUP, [TOPIC])
            start, lag = offsets.get((TOPIC, 0), (-1, -1))
            w["start"], w["lag"] = start, lag
        except Exception as exc:  # noqa: BLE001 - the group may not exist for a moment
            w["admin_error"] = str(exc)
        try:
            desc = admin.describe_share_groups([GROUP])[GROUP]
            w["state"], w["members"] = desc.state, len(desc.members)
        except Exception:  # noqa: BLE001
            pass
        try:
            w.update(self.broker.call(_share_partition_view, self.broker.server))
        except Exception:  # noqa: BLE001
            pass
        self.window = w

    def _window_drained(self) -> bool:
        """Admin says start offset = end of topic, lag 0."""
        w = self.window
        return w.get("start") == self.args.jobs and w.get("lag") == 0

    def _final_offsets(self, admin) -> tuple[int, int]:
        """(start offset, lag) of the share group's partition, from Admin."""
        offsets = admin.list_share_group_offsets(GROUP, [TOPIC])
        return offsets.get((TOPIC, 0), (-1, -1))

    # -------------------------------------------------------------- display

    def _window_parts(self) -> list[str]:
        w = self.window
        if w.get("start", -1) < 0:
            return ["in-flight window: (no share state yet)"]
        parts = [f"in-flight window: start offset {w['start']}, lag {w['lag']} (Admin)"]
        if "end" in w:
            parts.append(f"end offset {w['end']}, in flight {w['in_flight']}: acquired {w['acquired']}, "
                         f"available {w['available']}, done {w['done']} (broker)")
        return parts

    def _window_text(self) -> str:
        return "; ".join(self._window_parts())

    def _progress_line(self) -> str:
        b = self.book
        with b.lock:
            done, acc, rej = b.done(), len(b.accepted), len(b.rejected)
            arc = done - acc - rej
            per = " ".join(f"{s.name}={s.deliveries}" for s in b.workers)
            redeliveries = sum(n for c, n in b.deliveries_by_count.items() if c > 1)
        elapsed = time.monotonic() - self.start
        return (f"progress {elapsed:5.1f} s: done {done}/{b.jobs} (accepted {acc}, rejected {rej}, archived {arc}) · "
                f"redeliveries {redeliveries} · deliveries {per} · {self._window_text()}")

    def _draw(self) -> None:
        b, a = self.book, self.args
        with b.lock:
            done, acc, rej = b.done(), len(b.accepted), len(b.rejected)
            arc = done - acc - rej
            rows = [(s.name, s.member_id[:8], s.deliveries, s.accepted, s.released, s.rejected, s.last)
                    for s in b.workers]
            hist = sorted(b.deliveries_by_count.items())
            recent = list(b.recent)
        w = self.window
        elapsed = time.monotonic() - self.start
        filled = int(20 * min(done / max(b.jobs, 1), 1.0))
        group = f"group {GROUP}: {w.get('state', '?')}, {w.get('members', '?')} members"
        lines = [
            f"{elapsed:5.1f} s [{'#' * filled}{'.' * (20 - filled)}] {done}/{b.jobs} jobs done: accepted {acc}, "
            f"rejected {rej}, archived {arc}",
            f"{group} · topic {TOPIC} (1 partition)",
            *self._window_parts(),
            "",
            *format_table(["CONSUMER", "MEMBER", "DELIVERIES", "ACCEPTED", "RELEASED", "REJECTED", "LAST"],
                          rows).splitlines(),
            "",
            "deliveries by delivery count: " + ("  ".join(f"#{c}: {n}" for c, n in hist) or "-"),
            f"latest failures (delivery limit {a.delivery_limit}):",
            *[f"  {r}" for r in recent],
        ]
        width = max(shutil.get_terminal_size((100, 24)).columns - 1, 20)  # no wrapping: the redraw counts lines
        text = "\n".join(line[:width] + "\x1b[K" for line in lines) + "\n"
        prefix = ANSI_UP.format(n=self._drawn_lines) if self._drawn_lines else ""
        self.out.write(prefix + text + ANSI_CLEAR_DOWN)
        self.out.flush()
        self._drawn_lines = len(lines)

    # -------------------------------------------------------------- summary

    def _summary(self, finished: bool, offsets: tuple[int, int],
                 wall: float) -> int:
        b, a = self.book, self.args
        accepted, rejected, archived = len(b.accepted), len(b.rejected), len(b.archived())
        total = accepted + rejected + archived
        start, lag = offsets
        both = b.accepted & b.rejected
        unconfirmed_archive = b.archived() - b.released_at_limit
        deliveries = sum(b.deliveries_by_count.values())
        adds_up = total == a.jobs and not both
        broker_ok = lag == 0 and start == a.jobs
        jobs_hist = Counter(b.max_delivery.values())
        out = self._say
        out("")
        out("== summary ==")
        out(f"jobs: produced={a.jobs} accepted={accepted} rejected={rejected} archived={archived}")
        out(f"accepted + rejected + archived = {accepted} + {rejected} + {archived} = {total} "
            f"{'=' if total == a.jobs else '!='} produced {a.jobs}: {'OK' if adds_up else 'MISMATCH'}")
        out(f"broker: share partition start offset {start}, end of topic {a.jobs}, lag {lag}: "
            f"{'OK' if broker_ok else 'NOT DRAINED'}")
        out(f"deliveries: {deliveries} ({len(b.max_delivery)} first deliveries + "
            f"{deliveries - len(b.max_delivery)} redeliveries)")
        for line in b.ack_errors:
            out(f"note: acknowledgement refused, the job was delivered again: {line}")
        if unconfirmed_archive:
            out(f"note: {len(unconfirmed_archive)} archived jobs reached the limit by lock expiry, not by a RELEASE")
        out("")
        out("per consumer:")
        rows = [(s.name, s.member_id[:8], s.deliveries, s.accepted, s.released, s.rejected, s.archived)
                for s in b.workers]
        totals = ("total", "", *(sum(r[i] for r in rows) for i in range(2, 7)))
        out(format_table(["CONSUMER", "MEMBER", "DELIVERIES", "ACCEPTED", "RELEASED", "REJECTED", "ARCHIVED"],
                         rows + [totals]))
        out("")
        out("delivery-count histogram (jobs by the deliveries they took):")
        biggest = max(jobs_hist.values(), default=1)
        out(format_table(["DELIVERIES", "JOBS", ""],
                         [(c, n, "#" * max(1, round(40 * n / biggest))) for c, n in sorted(jobs_hist.items())]))
        out("")
        out(f"wall time: {wall:.1f} s (produce {self.timings.get('produce', 0):.1f} s, "
            f"consume {self.timings.get('consume', 0):.1f} s)")
        problems = []
        if not finished:
            elapsed = time.monotonic() - self.start
            if elapsed >= a.timeout:
                problems.append(f"the demo did not finish within --timeout {a.timeout:g} s "
                                f"({total} of {a.jobs} jobs accounted for; share partition start offset "
                                f"{start}, lag {lag})")
            else:
                problems.append(f"the consumers stopped early ({total} of {a.jobs} jobs accounted for)")
        elif wall > a.timeout:
            problems.append(f"the demo took {wall:.1f} s, more than --timeout {a.timeout:g} s")
        if b.errors:
            problems.append(f"a consumer failed: {b.errors[0]}")
        if not adds_up:
            problems.append(f"accepted + rejected + archived = {total}, but {a.jobs} jobs were produced"
                            + (f" ({len(both)} both accepted and rejected)" if both else ""))
        if not broker_ok:
            problems.append(f"the share group's start offset is {start} with lag {lag}; expected {a.jobs} and 0")
        if b.duplicates:
            problems.append(f"{len(b.duplicates)} deliveries of jobs whose acknowledgement the broker had "
                            f"confirmed, e.g. {b.duplicates[0]}")
        if problems:
            print(f"Error: {problems[0]}", file=sys.stderr)
            return EXIT_ERROR
        return EXIT_OK


def _share_partition_view(server) -> dict[str, int]:
    """Runs on the broker's event loop: the demo group's share partition, from the broker's state."""
    from quafka.broker.core.record_state import RecordState

    for ctx in server.share_partitions.by_group.get(GROUP, ()):
        if ctx.topic.name == TOPIC and ctx.index == 0:
            share_partition = ctx.share_partition
            by_state: Counter = Counter()
            for r in share_partition.runs:
                by_state[r.state] += r.size
            return {"spso": share_partition.start_offset, "end": share_partition.end_offset,
                    "in_flight": share_partition.in_flight_count,
                    "acquired": by_state[RecordState.ACQUIRED],
                    "available": by_state[RecordState.AVAILABLE],
                    "done": by_state[RecordState.ACKNOWLEDGED] + by_state[RecordState.ARCHIVED]
                    + by_state[RecordState.ARCHIVING]}
    return {}
