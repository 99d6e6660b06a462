"""Shared by tools/fuzz.py and tools/soak.py: a `quafka broker` child process and its log.

Not a library: the two tools import it by file location (``tools/`` is on ``sys.path`` when a tool
runs as a script).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _bench import free_port, port_open  # noqa: E402  (one implementation for tools/ and benchmarks/)


class BrokerChild:
    """`python -m quafka broker` on 127.0.0.1:<port> and one data directory; stderr/stdout to a log file.

    The port is chosen once, so a restarted broker listens where the clients already connect.
    """

    def __init__(self, data_dir: str, log_path: str, *, port: int | None = None,
                 overrides: dict[str, str] | None = None, log_level: str = "INFO") -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> float:
        """Start the broker and wait until its port accepts connections; returns the seconds it took."""
        args = [sys.executable, "-m", "quafka", "broker", "--log-level", self.log_level,
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        self._log = open(self.log_path, "ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.starts += 1
        deadline = started + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited with status {self.proc.returncode} while starting; "
                                   f"see {self.log_path}")
            if port_open(self.port):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the broker did not listen on port {self.port} within {timeout_s:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.02)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL (a crash, as far as the broker can tell) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit within timeout_s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._close_log()
        return self.returncode

    def _close_log(self) -> None:
        if self._log is not None and not self._log.closed:
            self._log.close()

    def read_log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


# ----------------------------------------------------------------------------- broker log scanning

_LINE_START = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_HEX_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
_PEER = re.compile(r"from (127\.0\.0\.1|[\d.]+|\[?[0-9a-f:]+\]?):(\d+)")


@dataclass
class LoggedError:
    """One ERROR/CRITICAL entry of the broker's log, with its traceback if it has one."""

    message: str
    traceback: str = ""

    @property
    def peer_port(self) -> int | None:
        match = _PEER.search(self.message)
        return int(match.group(2)) if match else None

    @property
    def signature(self) -> str:
        """What makes two entries 'the same bug': the innermost frame and the exception line."""
        lines = [ln for ln in self.traceback.splitlines() if ln.strip()]
        if not lines:
            return _HEX_ADDRESS.sub("0x?", re.sub(r"\d+", "N", self.message.split("] ", 1)[-1]))
        files = [ln.strip() for ln in lines if ln.lstrip().startswith('File "')]
        return (files[-1] if files else "") + " | " + _HEX_ADDRESS.sub("0x?", lines[-1].strip())


@dataclass
class LogScan:
    errors: list[LoggedError] = field(default_factory=list)
    internal_errors: int = 0        # "closing connection ... after an internal error"
    closes_logged: int = 0          # broker-initiated closes it logged (WARNING/INFO "closing connection")

    def distinct(self) -> list[tuple[int, LoggedError]]:
        """(count, first example) per signature, most frequent first."""
        counts: Counter[str] = Counter()
        first: dict[str, LoggedError] = {}
        for entry in self.errors:
            counts[entry.signature] += 1
            first.setdefault(entry.signature, entry)
        return [(n, first[sig]) for sig, n in counts.most_common()]


def scan_log(text: str) -> LogScan:
    """Every ERROR/CRITICAL entry (with the traceback lines that follow it) of a broker log."""
    scan = LogScan()
    current: LoggedError | None = None
    for line in text.splitlines():
        match = _LINE_START.match(line)
        if match:
            current = None
            level = match.group(1)
            if "closing connection from" in line:
                if "after an internal error" in line:
                    scan.internal_errors += 1
                else:
                    scan.closes_logged += 1
            if level in ("ERROR", "CRITICAL"):
                current = LoggedError(line)
                scan.errors.append(current)
        elif current is not None:
            current.traceback += line + "\n"
    return scan


def print_distinct_errors(scan: LogScan, out=sys.stdout, limit: int = 20) -> None:
    for count, entry in scan.distinct()[:limit]:
        print(f"--- {count}x: {entry.message}", file=out)
        if entry.traceback:
            print(entry.traceback.rstrip(), file=out)


def rmtree_quiet(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        print(f"note: could not remove {path}", file=sys.stderr)
