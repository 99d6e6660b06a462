"""`quafka worker`'s arguments: refused with one line and exit status 1 before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("args", "error"), [
    (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
    (["--processes", "0"], "--processes must be >= 1, got 0"),
    (["--log-interval", "0"], "--log-interval must be > 0 seconds, got 0.0"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout must be >= 0 seconds, got -1.0"),
    (["--include-routes", "nothing/*"], "['nothing/*'] match no route"),
])
def test_bad_arguments_are_refused(args, error):
    run = subprocess.run([sys.executable, "-m", "quafka", "worker", "examples.job_processor:app", *args],
                         cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "QUAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert run.returncode == 1 and error in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_an_app_that_is_not_an_app_is_refused():
    run = subprocess.run([sys.executable, "-m", "quafka", "worker", "examples.job_processor:LOCK_MS"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "examples.job_processor.LOCK_MS is not a quafka.framework.App (got int)" in run.stderr
