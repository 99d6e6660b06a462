#!/usr/bin/env python3
"""Log compaction at a million updates, across a SIGKILL in the middle of a cleaning
(docs/benchmarks.md, "Log compaction"; issue 31, acceptance 9).

A `python -m quafka broker` child process and one topic with cleanup.policy=compact, one
partition, segment.bytes 1 MiB (the least quafka accepts), segment.ms --segment-ms and
delete.retention.ms --delete-retention-ms. confluent-kafka's Producer (idempotent, acks=all)
writes --updates updates over --keys keys: update i goes to key `i % keys` and its value carries
(key, i), so the latest value of each key is known; the last update of every 100th key (1% of
the keys) is a tombstone. A record of a key outside the set (`__roll__`), written once segment.ms
has passed, rolls the last segment so that every update can be cleaned.

1. The broker runs with `log.cleaner.enable=false` while the topic is written: the log before
   cleaning is measured whole.
2. It is stopped (SIGTERM) and started with the cleaner on (`log.cleaner.backoff.ms`
   --backoff-ms, `log.cleaner.min.cleanable.ratio` 0.01): its first round cleans the whole log,
   one 1 MiB segment per group. When that round is copying the segment at --kill-at of the log
   (a `<base>.log.cleaned` or `.swap` file with that base offset or a later one: groups before it
   have been swapped in, the rest not), the broker is SIGKILLed.
3. Started again: the `.cleaned` file is removed at start-up, the cleaning starts over and runs to
   its end (the `cleaner-offset-checkpoint` reaches the `__roll__` record). A Consumer reads the
   whole topic: exactly one record per key, the latest value of each live key, a tombstone for
   each deleted key (delete.retention.ms has not passed since the cleaning that stamped it).
4. After delete.retention.ms, one more update of every live key and another roll make the
   cleaner run again: the tombstones are gone, every live key has its newest value.

The script exits non-zero if a check fails. Reported: the log size before cleaning, at the kill
and after each cleaning, each round's time, bytes and MB/s (from the cleaner's log line; its
metrics give the totals), the records read back.

    .venv/bin/python benchmarks/compaction.py                 # prints
    .venv/bin/python benchmarks/compaction.py --update-docs   # and rewrites its section
    .venv/bin/python benchmarks/compaction.py --quick         # 100,000 updates, 60 s retention
"""

from __future__ import annotations

import glob
import os
import re
import signal
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    BrokerRun,
    arg_parser,
    finish,
    free_port,
    interrupted,
    machine_info,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    text_grid,
)
from produce_fetch import Broker  # noqa: E402

TOPIC = "compacted"
ROLL_KEY = b"__roll__"
MiB = 1048576
BEGIN, END = "<!-- compaction:begin -->", "<!-- compaction:end -->"
ROUND_LINE = re.compile(r"^\[(?P<at>[^\]]+)\] INFO quafka\.log_cleaner: cleaned " + TOPIC + r"-0: dirty offsets "
                        r"\[(?P<start>\d+), (?P<end>\d+)\) mapped \((?P<keys>\d+) keys\), (?P<groups>\d+) segment "
                        r"group\(s\) rewritten, (?P<read>\d+) -> (?P<written>\d+) bytes, (?P<kept>[\d.]+)% of "
                        r"(?P<records>\d+) records kept, in (?P<ms>\d+) ms$", re.M)


def key_of(k: int) -> bytes:
    return b"k%05d" % k


def value_of(k: int, seq: int, size: int) -> bytes:
    head = b"%05d:%09d:" % (k, seq)
    return head + b"v" * max(0, size - len(head))


def parse_value(value: bytes) -> tuple[int, int]:
    k, seq, _ = value.split(b":", 2)
    return int(k), int(seq)


class Workload:
    """What was written, and so what a reader must find."""

    def __init__(self, updates: int, keys: int, value_bytes: int) -> None:
        self.updates, self.keys, self.value_bytes = updates, keys, value_bytes
        self.deleted = set(range(0, keys, 100))  # 1% of the keys: their last update is a tombstone
        self.latest: dict[int, int] = {}  # key -> sequence of its last update
        self.next_seq = 0

    def first_pass(self):
        """(key, value or None) of the --updates updates."""
        last_of = {k: k + self.keys * ((self.updates - 1 - k) // self.keys) for k in range(min(self.keys, self.updates))}
        for i in range(self.updates):
            k = i % self.keys
            self.latest[k] = i
            if k in self.deleted and i == last_of[k]:
                yield key_of(k), None
            else:
                yield key_of(k), value_of(k, i, self.value_bytes)
        self.next_seq = self.updates

    def second_pass(self):
        """One more update of every live key."""
        for k in range(self.keys):
            if k in self.deleted:
                continue
            seq = self.next_seq
            self.next_seq += 1
            self.latest[k] = seq
            yield key_of(k), value_of(k, seq, self.value_bytes)

    def check(self, records: list[tuple[int, bytes, bytes | None]], tombstones_expected: bool) -> list[str]:
        """Problems with what a reader found (empty: all is well)."""
        problems = []
        seen: dict[int, list[bytes | None]] = {}
        for _, key, value in records:
            if key == ROLL_KEY:
                continue
            if key is None or not re.fullmatch(rb"k\d{5}", key):
                problems.append(f"unexpected key {key!r}")
                continue
            seen.setdefault(int(key[1:]), []).append(value)
        doubles = [k for k, values in seen.items() if len(values) > 1]
        if doubles:
            problems.append(f"{len(doubles)} keys have more than one record (e.g. key {doubles[0]}: "
                            f"{len(seen[doubles[0]])})")
        live = [k for k in self.latest if k not in self.deleted]
        missing = [k for k in live if k not in seen]
        if missing:
            problems.append(f"{len(missing)} live keys lost (e.g. {missing[:5]})")
        wrong = []
        for k in live:
            values = seen.get(k)
            if not values:
                continue
            value = values[-1]
            if value is None or parse_value(value) != (k, self.latest[k]):
                wrong.append((k, self.latest[k], value[:16] if value else value))
        if wrong:
            problems.append(f"{len(wrong)} live keys without their latest value (key, expected seq, found): {wrong[:3]}")
        tombstones = [k for k in self.deleted if k in seen]
        if tombstones_expected:
            if len(tombstones) != len(self.deleted) or any(seen[k][-1] is not None for k in tombstones):
                problems.append(f"{len(tombstones)} of {len(self.deleted)} deleted keys read back, "
                                f"{sum(1 for k in tombstones if seen[k][-1] is None)} of them as tombstones; "
                                f"expected every tombstone (delete.retention.ms has not passed)")
        elif tombstones:
            problems.append(f"{len(tombstones)} deleted keys still read back after delete.retention.ms "
                            f"(e.g. key {tombstones[0]}: {seen[tombstones[0]][-1]!r})")
        return problems


class CompactionBroker(Broker):
    def __init__(self, work_dir: str) -> None:
        super().__init__(work_dir)
        self.metrics_port = free_port()

    def configure(self, cleaner: bool, backoff_ms: int) -> None:
        self.overrides = [f"metrics.listener=http://127.0.0.1:{self.metrics_port}",
                          f"log.cleaner.enable={'true' if cleaner else 'false'}",
                          f"log.cleaner.backoff.ms={backoff_ms}", "log.cleaner.min.cleanable.ratio=0.01"]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.stop()  # closes the log file

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        if match is None:
            raise RuntimeError(f"no {name} in the broker's metrics")
        return float(match.group(1))

    def log_text(self, start: int = 0) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    def log_size(self) -> int:
        return os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0

    @property
    def partition_dir(self) -> str:
        return os.path.join(self.data_dir, f"{TOPIC}-0")

    def segment_bytes(self) -> tuple[int, int]:
        """(bytes of the partition's .log files, how many)."""
        paths = glob.glob(os.path.join(self.partition_dir, "*.log"))
        return sum(os.path.getsize(p) for p in paths), len(paths)

    def segment_bases(self) -> list[int]:
        return sorted(int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(self.partition_dir, "*.log")))

    def in_progress(self) -> list[str]:
        """The cleaning's files: `.cleaned` (being copied) and `.swap` (being swapped in)."""
        try:
            return sorted(n for n in os.listdir(self.partition_dir) if n.endswith((".cleaned", ".swap")))
        except FileNotFoundError:
            return []

    def checkpoint(self) -> int | None:
        """The topic's offset in cleaner-offset-checkpoint (None: not there)."""
        try:
            with open(os.path.join(self.data_dir, "cleaner-offset-checkpoint"), encoding="utf-8") as f:
                for line in f.read().splitlines()[2:]:
                    topic, partition, offset = line.rsplit(" ", 2)
                    if topic == TOPIC and partition == "0":
                        return int(offset)
        except (FileNotFoundError, ValueError):
            pass
        return None


def produce(bootstrap: str, items, deadline_s: float) -> tuple[int, int]:
    """Write (key, value) items to partition 0; (records, offset of the last)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "compression.type": "none", "log_level": 3})
    errors: list = []
    last = [-1]

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            last[0] = max(last[0], msg.offset())

    n = 0
    for key, value in items:
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    if producer.flush(deadline_s) or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return n, last[0]


def roll(broker: CompactionBroker, segment_ms: int, deadline_s: float) -> int:
    """Write the `__roll__` record once segment.ms has passed since the last append: it rolls the
    segment holding the updates and starts the active one. Its offset."""
    time.sleep(segment_ms / 1000 + 0.2)
    _, offset = produce(broker.bootstrap, [(ROLL_KEY, b"roll")], deadline_s)
    bases = broker.segment_bases()
    if bases[-1] != offset:
        raise RuntimeError(f"the roll record at {offset} did not start a segment (segments start at {bases[-5:]})")
    return offset


def read_all(bootstrap: str, deadline_s: float) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record of the topic, from its start to its end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compaction-reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    out = []
    try:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise RuntimeError(f"reading {TOPIC}: {msg.error()}")
                out.append((msg.offset(), msg.key(), msg.value()))
        raise RuntimeError(f"no end of {TOPIC} within {deadline_s} s ({len(out)} records read)")
    finally:
        consumer.close()


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(poll_s)
    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s")


def rounds_in(text: str) -> list[dict]:
    return [{k: (float(v) if k in ("kept", "ms") else v if k == "at" else int(v)) for k, v in m.groupdict().items()}
            for m in ROUND_LINE.finditer(text)]


def measure(args) -> tuple[dict, list[str]]:
    from confluent_kafka.admin import NewTopic

    work = Workload(args.updates, args.keys, args.value_bytes)
    problems: list[str] = []
    res: dict = {"updates": args.updates, "keys": args.keys, "deleted": len(work.deleted)}
    run = BrokerRun(CompactionBroker, "quafka-compaction-")
    broker: CompactionBroker = run.broker
    try:
        # 1. written with the cleaner off
        broker.configure(cleaner=False, backoff_ms=args.backoff_ms)
        run.start()
        configs = {"cleanup.policy": "compact", "segment.bytes": str(MiB), "segment.ms": str(args.segment_ms),
                   "delete.retention.ms": str(args.delete_retention_ms)}
        run.admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(30)
        t = time.monotonic()
        n, _ = produce(broker.bootstrap, work.first_pass(), args.deadline)
        res["produce_s"] = time.monotonic() - t
        res["roll_offset"] = roll(broker, args.segment_ms, args.deadline)
        res["before_bytes"], res["before_segments"] = broker.segment_bytes()
        print(f"wrote {n:,} updates in {res['produce_s']:.1f} s; log {res['before_bytes'] / 1e6:.1f} MB in "
              f"{res['before_segments']} segments", flush=True)
        run.stop()

        # 2. the cleaner on; SIGKILL in the middle of its first round
        broker.configure(cleaner=True, backoff_ms=args.backoff_ms)
        bases = broker.segment_bases()
        kill_base = bases[min(len(bases) - 2, int(len(bases) * args.kill_at))]
        started = time.time()
        broker.start()
        res["first_round_wall_start"] = started

        def copying_late_segment() -> list[str] | None:
            if broker.checkpoint() is not None:
                raise RuntimeError("the cleaning round ended before the kill (lower --kill-at)")
            names = broker.in_progress()
            late = [n for n in names if int(n.split(".")[0]) >= kill_base]
            return names if late else None

        seen = wait_for(copying_late_segment, args.deadline, "a cleaning in progress", poll_s=0.005)
        res["kill_after_s"] = time.time() - started
        broker.kill()
        res["kill_files"] = seen
        res["kill_bytes"], res["kill_segments"] = broker.segment_bytes()
        res["kill_base"] = kill_base
        left = broker.in_progress()
        print(f"SIGKILL {res['kill_after_s']:.1f} s after the start, seen: {', '.join(seen)}; on disk after: "
              f"{', '.join(left) or 'nothing of the cleaning'}; log {res['kill_bytes'] / 1e6:.1f} MB in "
              f"{res['kill_segments']} segments", flush=True)
        if not left:
            problems.append("the kill left no .cleaned/.swap file: it did not land in the middle of a cleaning")

        # 3. restarted: the cleaning starts over and finishes
        log_mark = broker.log_size()
        restarted = time.time()
        broker.start()
        wait_for(lambda: (broker.checkpoint() or -1) >= res["roll_offset"], args.deadline,
                 "the restarted broker's cleaning to reach the roll record")
        res["clean_done_wall"] = time.time()
        rounds = rounds_in(broker.log_text(log_mark))
        res["rounds_after_restart"] = rounds
        res["after_bytes"], res["after_segments"] = broker.segment_bytes()
        if any(name.endswith((".cleaned", ".swap")) for name in os.listdir(broker.partition_dir)):
            problems.append(f"cleaning files left after the restart's round: {broker.in_progress()}")
        t = time.monotonic()
        records = read_all(broker.bootstrap, args.deadline)
        res["read_s"] = time.monotonic() - t
        res["read_wall"] = time.time()
        res["read_records"] = len(records)
        res["read_tombstones"] = sum(1 for _, _, v in records if v is None)
        res["read_gaps"] = records[-1][0] + 1 - len(records) if records else 0
        found = work.check(records, tombstones_expected=True)
        problems += [f"after the restart's cleaning: {p}" for p in found]
        # the earliest possible delete horizon: the killed round's start + delete.retention.ms
        if res["read_wall"] >= started + args.delete_retention_ms / 1000:
            problems.append("the read after the restart came after delete.retention.ms from the first round's start: "
                            "the tombstone check is inconclusive (raise --delete-retention-ms)")
        print(f"restart {res['clean_done_wall'] - restarted:.1f} s to the end of cleaning; log "
              f"{res['after_bytes'] / 1e6:.2f} MB in {res['after_segments']} segments; read "
              f"{len(records):,} records ({res['read_tombstones']} tombstones): "
              f"{'OK' if not found else '; '.join(found)}", flush=True)

        # 4. past delete.retention.ms: one more update of the live keys, another roll, another round
        horizon = res["clean_done_wall"] + args.delete_retention_ms / 1000
        if time.time() < horizon:
            print(f"waiting {horizon - time.time():.0f} s for delete.retention.ms to pass", flush=True)
            time.sleep(max(0.0, horizon - time.time()) + 1)
        log_mark2 = broker.log_size()
        produce(broker.bootstrap, work.second_pass(), args.deadline)
        res["roll2_offset"] = roll(broker, args.segment_ms, args.deadline)
        wait_for(lambda: (broker.checkpoint() or -1) >= res["roll2_offset"], args.deadline,
                 "the cleaning after delete.retention.ms")
        res["rounds_after_retention"] = rounds_in(broker.log_text(log_mark2))
        res["final_bytes"], res["final_segments"] = broker.segment_bytes()
        records = read_all(broker.bootstrap, args.deadline)
        res["final_records"] = len(records)
        res["final_tombstones"] = sum(1 for _, _, v in records if v is None)
        found = work.check(records, tombstones_expected=False)
        problems += [f"after delete.retention.ms: {p}" for p in found]
        res["metric_rounds"] = broker.metric("kafka_log_logcleaner_rounds_total")
        res["metric_read"] = broker.metric("kafka_log_logcleaner_bytes_read_total")
        res["metric_written"] = broker.metric("kafka_log_logcleaner_bytes_written_total")
        print(f"after delete.retention.ms: log {res['final_bytes'] / 1e6:.2f} MB; read {len(records):,} records "
              f"({res['final_tombstones']} tombstones): {'OK' if not found else '; '.join(found)}", flush=True)
        return res, problems
    finally:
        run.close()


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def round_cells(label: str, r: dict) -> list[str]:
    s = r["ms"] / 1000
    return [label, f"[{r['start']:,}, {r['end']:,})", f"{r['keys']:,}", f"{r['groups']}", f"{r['records']:,}",
            f"{r['read'] / 1e6:.1f} MB → {r['written'] / 1e6:.2f} MB", f"{s:.1f} s",
            f"{r['read'] / 1e6 / s:.1f} MB/s" if s > 0 else "-", f"{r['records'] / s:,.0f}/s" if s > 0 else "-"]


ROUND_HEAD = ["cleaning round", "dirty offsets mapped", "keys", "groups", "records read", "bytes read → written",
              "time", "read MB/s", "records/s"]
SIZE_HEAD = ["log", "size", "segments", "records read back", "tombstones read back"]


def tables(res: dict) -> tuple[list[list[str]], list[list[str]]]:
    rounds = [round_cells("after the SIGKILL (the whole log)" if i == 0 else "after the SIGKILL, next", r)
              for i, r in enumerate(res["rounds_after_restart"])]
    rounds += [round_cells(f"after delete.retention.ms ({i + 1})", r) for i, r in enumerate(res["rounds_after_retention"])]
    sizes = [
        ["written, before cleaning", f"{res['before_bytes'] / 1e6:.1f} MB", f"{res['before_segments']}",
         f"{res['updates']:,} written + 1 roll", f"{res['deleted']} written"],
        ["at the SIGKILL (mid-round)", f"{res['kill_bytes'] / 1e6:.1f} MB", f"{res['kill_segments']}", "", ""],
        ["after the restart's cleaning", f"{res['after_bytes'] / 1e6:.2f} MB", f"{res['after_segments']}",
         f"{res['read_records']:,}", f"{res['read_tombstones']}"],
        ["after delete.retention.ms and one more update per live key", f"{res['final_bytes'] / 1e6:.2f} MB",
         f"{res['final_segments']}", f"{res['final_records']:,}", f"{res['final_tombstones']}"],
    ]
    return rounds, sizes


def section(res: dict, args, elapsed_s: float, load: str, problems: list[str]) -> str:
    info = machine_info()
    rounds, sizes = tables(res)
    verdict = ("Every check passed: after the restart exactly one record per key, the latest value of each of the "
               f"{res['keys'] - res['deleted']:,} live keys and a tombstone for each of the {res['deleted']} deleted "
               "ones; after delete.retention.ms no tombstone and the newest value of every live key."
               if not problems else "**Checks failed:** " + "; ".join(problems))
    return (
        f"{BEGIN}\n\n"
        f"Measured by `benchmarks/compaction.py` ({info['CPU model']}, {info['CPUs (nproc)']} CPUs, quafka "
        f"{info['quafka commit']}, confluent-kafka {info['confluent-kafka / librdkafka']}; {elapsed_s:.0f} s; load "
        f"average {load} (1/5/15 min) at the end, the machine shared with other agents' work). "
        f"{res['updates']:,} updates over {res['keys']:,} keys ({args.value_bytes} B values carrying key and "
        f"sequence, idempotent producer, acks=all, written in {res['produce_s']:.0f} s), the last update of "
        f"{res['deleted']} keys a tombstone; topic `segment.bytes` 1 MiB, `segment.ms` {args.segment_ms}, "
        f"`delete.retention.ms` {args.delete_retention_ms}; broker `log.cleaner.backoff.ms` {args.backoff_ms}, "
        f"`log.cleaner.min.cleanable.ratio` 0.01, everything else default (one cleaner thread, no throttle). "
        f"Written with the cleaner off; then the broker started with it on and was SIGKILLed "
        f"{res['kill_after_s']:.1f} s later, during its first round, with {', '.join(res['kill_files'])} on disk "
        f"(`.cleaned`: the group starting at that offset being copied; `.swap`: being swapped in; the groups before "
        f"it swapped in, the rest not); restarted, its cleaning started over from the log start and ran to the "
        f"end.\n\n"
        + markdown_grid(SIZE_HEAD, sizes) + "\n\n"
        + markdown_grid(ROUND_HEAD, rounds) + "\n\n"
        f"{verdict} Round times and bytes come from the cleaner's log line (its metrics over the restarted "
        f"broker: {res['metric_rounds']:.0f} rounds, {res['metric_read'] / 1e6:.1f} MB read, "
        f"{res['metric_written'] / 1e6:.2f} MB written); the first round after the restart also maps the dirty range "
        f"(reads it once more) before it copies, which its time includes. The read back after the restart took "
        f"{res['read_s']:.1f} s across {res['read_gaps']:,} removed offsets.\n\n{END}\n")


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__, epilog=__doc__)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--segment-ms", type=int, default=5000, help="the topic's segment.ms")
    parser.add_argument("--delete-retention-ms", type=int, default=None,
                        help="the topic's delete.retention.ms (default 180000; 60000 with --quick)")
    parser.add_argument("--backoff-ms", type=int, default=1000, help="the broker's log.cleaner.backoff.ms")
    parser.add_argument("--kill-at", type=float, default=0.5,
                        help="SIGKILL when the first round copies the segment at this share of the log")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds any one step may take")
    parser.add_argument("--quick", action="store_true", help="100,000 updates (does not write the doc)")
    parser.add_argument("--update-docs", action="store_true", help="rewrite this section of docs/benchmarks.md")
    parser.add_argument("--doc", default=str(DOC_PATH), help="the file --update-docs rewrites")
    args = parser.parse_args(argv)
    if args.quick:
        args.updates = 100_000
    if args.delete_retention_ms is None:
        args.delete_retention_ms = 60_000 if args.quick else 180_000
    started = time.monotonic()
    try:
        res, problems = measure(args)
    except KeyboardInterrupt:
        return interrupted()
    elapsed = time.monotonic() - started
    load = load_average()
    rounds, sizes = tables(res)
    print_blocks(text_grid(SIZE_HEAD, sizes), text_grid(ROUND_HEAD, rounds), f"load average {load}")
    if args.update_docs and not args.quick:
        replace_marked_section(section(res, args, elapsed, load, problems), Path(args.doc), BEGIN, END)
        print(f"wrote the compaction section of {args.doc}")
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
