"""`quafka demo` (issue 6, acceptance 3): it exits 0 and its summary accounts for every job."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from quafka.cli import demo
from quafka.cli.main import main

HANG_GUARD_S = 120

TOTALS = re.compile(r"^jobs: produced=(\d+) accepted=(\d+) rejected=(\d+) archived=(\d+)$", re.M)
CONSUMER_ROW = re.compile(r"^(consumer-\d+)\s+[0-9a-f]{8}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", re.M)
TOTAL_ROW = re.compile(r"^total\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", re.M)
DELIVERIES = re.compile(r"^deliveries: (\d+) \((\d+) first deliveries \+ (\d+) redeliveries\)$", re.M)
HISTOGRAM = re.compile(r"^delivery-count histogram.*\nDELIVERIES JOBS\n((?:\d+\s+\d+\s+#+\n)+)", re.M)
PROGRESS = re.compile(r"^progress\s+[\d.]+ s: done (\d+)/(\d+) \(accepted (\d+), rejected (\d+), archived (\d+)\) "
                      r"· redeliveries \d+ · deliveries ((?:consumer-\d+=\d+ ?)+) · in-flight window: (.*)$", re.M)


def parse_summary(out: str) -> dict:
    totals = TOTALS.search(out)
    assert totals, out
    produced, accepted, rejected, archived = map(int, totals.groups())
    consumers = {m.group(1): tuple(map(int, m.groups()[1:])) for m in CONSUMER_ROW.finditer(out.split("== summary ==")[1])}
    total_row = TOTAL_ROW.search(out)
    deliveries = DELIVERIES.search(out)
    histogram = HISTOGRAM.search(out)
    assert consumers and total_row and deliveries and histogram, out
    hist = {int(line.split()[0]): int(line.split()[1]) for line in histogram.group(1).splitlines()}
    return {"produced": produced, "accepted": accepted, "rejected": rejected, "archived": archived,
            "consumers": consumers, "total_row": tuple(map(int, total_row.groups())),
            "deliveries": tuple(map(int, deliveries.groups())), "histogram": hist}


def check_accounting(s: dict, jobs: int, consumers: int, limit: int) -> None:
    assert s["produced"] == jobs
    assert s["accepted"] + s["rejected"] + s["archived"] == s["produced"]
    assert len(s["consumers"]) == consumers
    rows = list(s["consumers"].values())
    sums = tuple(sum(r[i] for r in rows) for i in range(5))  # deliveries, accepted, released, rejected, archived
    assert sums == s["total_row"]
    deliveries, accepted, released, rejected, archived = sums
    assert (accepted, rejected, archived) == (s["accepted"], s["rejected"], s["archived"])
    assert deliveries == s["deliveries"][0] == accepted + released + rejected
    assert s["deliveries"][1] == jobs and s["deliveries"][2] == deliveries - jobs
    assert sum(s["histogram"].values()) == jobs          # every job once, by the deliveries it took
    assert max(s["histogram"]) <= limit
    assert sum(c * n for c, n in s["histogram"].items()) == deliveries


def test_demo_subprocess_accounts_for_every_job():
    proc = subprocess.run([sys.executable, "-m", "quafka", "demo"], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # not a terminal: plain lines, no ANSI redraw
    s = parse_summary(out)
    check_accounting(s, jobs=3000, consumers=4, limit=4)
    assert s["accepted"] > 0 and s["rejected"] > 0 and s["archived"] > 0
    assert all(row[0] > 0 for row in s["consumers"].values())  # more consumers than partitions, all working
    assert re.search(r"^broker: share partition start offset 3000, "
                     r"end of topic 3000, lag 0: OK$", out, re.M), out
    assert re.search(r"^wall time: [\d.]+ s", out, re.M)
    # the web dashboard of the demo's broker was served while it ran, its URL printed
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/ \(read-only", out, re.M), out


def test_demo_in_process_plain_progress_lines(capsys):
    assert main(["demo", "--jobs", "400", "--consumers", "3", "--seed", "7", "--delivery-limit", "3",
                 "--work-ms", "1", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    progress = [m.groups() for m in PROGRESS.finditer(out)]
    assert len(progress) >= 2, out
    done = [int(p[0]) for p in progress]
    assert done == sorted(done) and all(int(p[1]) == 400 for p in progress)
    for d, _, acc, rej, arc, per, _window in progress:
        assert int(acc) + int(rej) + int(arc) == int(d)
        assert len(per.split()) == 3
    assert "lag 0 (Admin)" in progress[-1][6]  # the window drained before the demo stopped
    assert "in flight" in out and "(broker)" in out  # the window's end and in-flight count were shown
    s = parse_summary(out)
    check_accounting(s, jobs=400, consumers=3, limit=3)
    # the seeded rule decides the fate of the poison jobs: exactly they are rejected
    assert s["rejected"] == sum(demo.job_kind(7, j) == "poison" for j in range(400))


def test_demo_timeout_is_one_error_line(capsys):
    # 50 ms per delivery: 200 jobs need over 2.5 s of work, far more than the 2 s allowed
    assert main(["demo", "--jobs", "200", "--work-ms", "50", "--timeout", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [captured.err.strip()]
    assert captured.err.startswith("Error: the demo did not finish within --timeout 2 s (")
    assert "MISMATCH" in captured.out or "NOT DRAINED" in captured.out


def test_seeded_rule_is_deterministic():
    fates = [[demo.outcome(42, j, d) for d in range(1, 5)] for j in range(2000)]
    assert fates == [[demo.outcome(42, j, d) for d in range(1, 5)] for j in range(2000)]
    assert fates != [[demo.outcome(43, j, d) for d in range(1, 5)] for j in range(2000)]
    kinds = [demo.job_kind(42, j) for j in range(2000)]
    for j, kind in enumerate(kinds):
        if kind == "poison":
            assert fates[j] == ["reject"] * 4
        elif kind == "ok":
            assert fates[j] == ["accept"] * 4
    assert {"poison", "flaky", "ok"} == set(kinds)
    assert any(f == ["release"] * 4 for f in fates)  # some flaky jobs fail every time: archived at the limit


def test_demo_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "quafka demo --jobs 10000 --consumers 8" in out
    for option in ("--jobs", "--consumers", "--seed", "--timeout", "--delivery-limit"):
        assert option in out
