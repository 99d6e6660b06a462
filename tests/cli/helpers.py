"""What the CLI tests share: the tools in-process or as a subprocess, and topics."""

from __future__ import annotations

import subprocess
import sys

from quafka.cli.main import main
from quafka.client import Admin


def cli(capsys, *args):
    """Run `quafka ARGS` in-process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_quafka(*args, timeout=30):
    """Run `python -m quafka ARGS` as a subprocess."""
    return subprocess.run([sys.executable, "-m", "quafka", *args], capture_output=True, text=True, timeout=timeout)


def make_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (partitions, 1)})
