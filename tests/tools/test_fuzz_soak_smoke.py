"""Smoke tests of the outside-CI tools (docs/testing.md): `tools/fuzz.py` and `tools/soak.py` run at a
tiny size and report no violated invariant. The long runs are `make fuzz` and `make soak`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")

pytestmark = pytest.mark.xdist_group("tools-smoke")


def run_tool(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


def test_fuzz_at_a_tiny_size_finds_no_crash_stall_or_internal_error(tmp_path):
    report = tmp_path / "fuzz.json"
    done = run_tool([os.path.join(TOOLS, "fuzz.py"), "--frames", "2000", "--seed", "1", "--connections", "4",
                     "--json", str(report)], timeout_s=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "violations: 0" in done.stdout
    summary = json.loads(report.read_text())
    assert summary["violations"] == 0 and summary["failures"] == []
    assert summary["frames"] >= 2000
    assert summary["internal_errors"] == 0 and summary["error_log_entries"] == 0
    assert summary["canary_rounds"] >= 1 and summary["canary_max_latency_s"] < 5
    assert summary["closed_by_broker"] > 0 and summary["responses"] > 0   # bad frames closed, good ones served


def test_soak_of_two_sigkill_cycles_keeps_every_invariant(tmp_path):
    report = tmp_path / "soak.json"
    done = run_tool([os.path.join(TOOLS, "soak.py"), "--cycles", "2", "--seed", "1", "--min-up", "2",
                     "--max-up", "3", "--drain-timeout", "10", "--json", str(report)], timeout_s=180)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "invariant violations: 0" in done.stdout
    summary = json.loads(report.read_text())
    assert summary["violations"] == 0 and summary["kills"] == 2
    assert summary["records_confirmed"] > 0 and summary["lost"] == 0 and summary["duplicates"] == 0
    assert summary["deliveries"] > 0
