"""What the benchmark scripts share: machine and process CPU time from /proc, free ports,
confluent-kafka admin calls, stopping worker processes, the machine description of a report, the
--update-docs section writer, and the common ending of a script's main (interrupts, problems).
Imported as `_bench` (each script puts benchmarks/ on sys.path)."""

from __future__ import annotations

import os
import platform
import re
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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
    """CPU time all processes on the machine spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


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


def finish(problems: list[str], elapsed_s: float) -> int:
    """The end of a script's main: the total time, then any problems on stderr (exit status 1)."""
    print(f"total time {elapsed_s:.0f} s")
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0
