"""What the benchmark scripts share: machine and process CPU time from /proc, free ports,
confluent-kafka admin calls, stopping worker processes, the machine description of a report, the
--update-docs section writer, and the common parts of a script's main (its argument parser and
--quick/--profile/--doc options, the broker run with its clean-up, printing the result blocks,
the ending with interrupts and problems). Imported as `_bench` (each script puts benchmarks/ on
sys.path)."""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC_PATH = REPO / "docs" / "benchmarks.md"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class CpuPerRecord:
    """CPU per record and CPU share of a measurement's result (a dataclass with `records`,
    `broker_cpu_s`, `client_cpu_s`, `other_cpu_s` and the measurement window `window_s`)."""

    records: int
    broker_cpu_s: float
    client_cpu_s: float
    other_cpu_s: float
    window_s: float

    @property
    def broker_us_per_record(self) -> float:
        return self.broker_cpu_s / self.records * 1e6 if self.records else float("nan")

    @property
    def broker_cpu_pct(self) -> float:
        return self.broker_cpu_s / self.window_s * 100 if self.window_s > 0 else float("nan")

    @property
    def client_us_per_record(self) -> float:
        return self.client_cpu_s / self.records * 1e6 if self.records else float("nan")

    @property
    def other_cpu_pct(self) -> float:
        return self.other_cpu_s / self.window_s * 100 if self.window_s > 0 else float("nan")


def machine_busy_seconds() -> float:
    """CPU time all processes on the machine spent busy (all cores), steal included, from /proc/stat."""
    busy, steal = machine_times()
    return busy + steal


def machine_times() -> tuple[float, float]:
    """Machine-wide seconds from /proc/stat: (busy, steal). busy is user+nice+system+irq+softirq
    (a softirq tick is also charged to the task it interrupted, so process times include the
    loopback TCP work done in their context); steal is time the hypervisor gave to other guests,
    charged to no task."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


def process_cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            # polling a port in the ephemeral range can connect a socket to itself (TCP
            # simultaneous open): that is no listener
            return s.getsockname() != s.getpeername()
    except OSError:
        return False


def admin_client(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(admin, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def delete_topic(admin, name: str) -> None:
    try:
        admin.delete_topics([name])[name].result(30)
    except Exception as exc:  # disk space only; a failure does not invalidate the numbers
        print(f"  (could not delete topic {name}: {exc})", file=sys.stderr)


def worker_reports(out, n: int, by: float, failed: str) -> list:
    """The payloads of the next `n` ("kind", payload) reports spawned workers put on `out`, waiting
    until monotonic time `by` at most (then queue.Empty); an ("error", message) report raises
    RuntimeError(f"{failed}: {message}")."""
    payloads = []
    while len(payloads) < n:
        kind, payload = out.get(timeout=max(0.1, by - time.monotonic()))
        if kind == "error":
            raise RuntimeError(f"{failed}: {payload}")
        payloads.append(payload)
    return payloads


def produce_round_robin(conf: dict, topic: str, records: int, partitions: int, value: bytes,
                        deadline_s: float) -> float:
    """Produce `records` keyless copies of `value` with one confluent Producer built from `conf`,
    record i to partition i mod `partitions` (every partition gets the same count); seconds taken.
    A full client queue is served (delivery reports) until there is room; a delivery that fails or
    a queue still full at `deadline_s` raises RuntimeError."""
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer({**conf, "on_delivery": lambda err, _msg: err is not None and failed.append(str(err))})
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
                if time.monotonic() - t0 > deadline_s:
                    raise RuntimeError(f"producing to {topic}: the producer queue stayed full") from None
    if producer.flush(max(1.0, deadline_s - (time.monotonic() - t0))) or failed:
        raise RuntimeError(f"producing to {topic} failed: {failed[:3]} ({len(failed)} failed or unsent)")
    return time.monotonic() - t0


def stop_procs(procs) -> None:
    for p in procs:
        p.join(0 if not p.is_alive() else 5)
        if p.is_alive():
            p.terminate()
            p.join(5)


def machine_info() -> dict[str, str]:
    import confluent_kafka

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {
        "CPUs (nproc)": str(len(os.sched_getaffinity(0))),
        "CPU model": model,
        "Kernel": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "confluent-kafka / librdkafka": f"{getattr(confluent_kafka, '__version__', None) or confluent_kafka.version()}"
                                        f" / {confluent_kafka.libversion()[0]}",
        "quafka commit": commit,
    }


def replace_marked_section(text: str, path: Path, begin_mark: str, end_mark: str) -> None:
    """Replace the text between `begin_mark` and `end_mark` in `path` (append it when they are
    absent); the benchmark scripts' --update-docs."""
    old = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin_mark) + r".*?" + re.escape(end_mark) + r"\n?", re.S)
    if pattern.search(old):
        new = pattern.sub(lambda _m: text, old, count=1)
    else:
        new = old.rstrip("\n") + ("\n\n" if old.strip() else "") + text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def _raise_interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> None:
    """SIGTERM stops a run as Ctrl-C does, so that its broker and workers are cleaned up."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def arg_parser(doc: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """A script's parser: the first paragraph of its docstring as the description, kept as written."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0], epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_quick_profile_args(ap: argparse.ArgumentParser, profile_help: str, profile_unit: str, doc_help: str) -> None:
    """--quick, --profile/--no-profile, --profile-records, --profile-out and --doc of a script whose
    full run profiles the broker and writes DOC_PATH, and whose --quick run does neither;
    `resolve_quick_profile_args` fills in their defaults."""
    ap.add_argument("--quick", action="store_true", help="small counts, no profile, do not write the doc")
    ap.add_argument("--profile", dest="profile", action="store_true", default=None,
                    help=f"also {profile_help} (default: on for a full run, off with --quick)")
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--profile-records", type=int, default=None,
                    help=f"records per profiled {profile_unit} (default: the same as --records)")
    ap.add_argument("--profile-out", metavar="FILE", default=None, help="keep the broker's cProfile stats here")
    ap.add_argument("--doc", default=None,
                    help=f"{doc_help} (default {DOC_PATH.relative_to(REPO)}; "
                         "--quick writes nothing unless --doc is given)")


def resolve_quick_profile_args(args: argparse.Namespace, records: int) -> Path | None:
    """The defaults of `add_quick_profile_args`'s options; returns the doc to write (None: none)."""
    if args.profile is None:
        args.profile = not args.quick
    args.profile_records = args.profile_records or records
    return Path(args.doc) if args.doc else (None if args.quick else DOC_PATH)


class BrokerRun:
    """A benchmark's broker (`make_broker(work_dir)`: one with start(), stop(), proc, bootstrap and
    data_dir) in a fresh temporary directory. `start()` makes SIGTERM unwind like Ctrl-C, starts
    the broker and opens an admin client, `run.admin`; `close()` (in the `finally` of the `try` that
    calls `start()`) drops the admin client first (no "connection refused" noise), then stops the
    broker and removes the directory. Use `run.admin` rather than a local copy, so that `stop()`
    and `close()` really drop the client."""

    def __init__(self, make_broker, prefix: str) -> None:
        self.work_dir = tempfile.mkdtemp(prefix=prefix)
        self.broker = make_broker(self.work_dir)
        self.admin = None

    def start(self) -> "BrokerRun":
        interrupt_on_sigterm()
        self.broker.start()
        print(f"broker pid {self.broker.proc.pid} on {self.broker.bootstrap}, data in {self.broker.data_dir}",
              flush=True)
        self.admin = admin_client(self.broker.bootstrap)
        return self

    def stop(self) -> None:
        """Drop the admin client and stop the broker (the directory stays until `close()`)."""
        self.admin = None
        self.broker.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def interrupted() -> int:
    """The exit status of a run that Ctrl-C or SIGTERM stopped."""
    print("interrupted", file=sys.stderr)
    return 130


def markdown_grid(head: list[str], rows: list[list[str]], first_left: bool = True) -> str:
    """A markdown table of strings: numbers right-aligned, the first column left-aligned unless
    `first_left` is False."""
    align = ["---" if i == 0 and first_left else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_grid(head: list[str], rows: list[list[str]], rule: bool = True, first_left: bool = True) -> str:
    """The same table for the terminal: columns padded to their widest cell, two spaces apart,
    with a line of dashes under the header when `rule`."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 and first_left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(head)] + ([fmt(["-" * w for w in widths])] if rule else []) + [fmt(r) for r in rows])


def print_blocks(*blocks: str | None) -> None:
    """Print each block after a blank line; None is left out."""
    for block in blocks:
        if block is not None:
            print()
            print(block)


def finish(problems: list[str], elapsed_s: float) -> int:
    """The end of a script's main: the total time, then any problems on stderr (exit status 1)."""
    print(f"total time {elapsed_s:.0f} s")
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0
