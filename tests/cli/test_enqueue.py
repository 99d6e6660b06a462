"""`quafka enqueue --app module:app --topic T`: JSON lines on stdin become jobs through the app's
App.enqueue, run as a subprocess (real stdin, exit codes, stderr) against an embedded broker; the
jobs are read back with confluent-kafka's Consumer and decoded with the routes' deserializers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.dlq import headers_of, read_all

from quafka.client import Admin, NewTopic
from quafka.framework.delivery_controls import HEADER_DELIVER_AFTER_MS
from quafka.framework.settings import DESERIALIZERS

APP = '''
import os

from quafka.framework import App, Consumer


class Noop(Consumer):
    def consume_one(self, message):
        pass


app = App({"bootstrap.servers": os.environ["JOBS_BOOTSTRAP"]})
app.share_group("mailers").topic("mail", Noop, deserializer="json")
app.share_group("texters").topic("texts", Noop, deserializer="utf-8")
'''


# quafka imports kio, which imports hypothesis, which sets up its example database in the current
# directory on first use (~2.5 s in each new directory): the runs share one, so that each test's own
# directory does not pay it
HYPOTHESIS_DIR = Path(tempfile.gettempdir()) / "quafka-test-enqueue-hypothesis"


def enqueue(workdir, bootstrap, *args, stdin):
    """Run `quafka enqueue --app jobs_app:app ARGS` with ``stdin`` (text or bytes) in ``workdir``."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    run = subprocess.run([sys.executable, "-m", "quafka", "enqueue", "--app", "jobs_app:app", *args], input=data,
                         cwd=workdir, capture_output=True, timeout=60,
                         env={**os.environ, "JOBS_BOOTSTRAP": bootstrap,
                              "HYPOTHESIS_STORAGE_DIRECTORY": str(HYPOTHESIS_DIR)})
    return run.returncode, run.stdout.decode(), run.stderr.decode()


@pytest.fixture
def jobs(broker, tmp_path):
    """(the app's directory, bootstrap): topics mail (2 partitions, a JSON route), texts (a UTF-8
    route), audit (no route) and small (no route, max.message.bytes=300)."""
    (tmp_path / "jobs_app.py").write_text(APP)
    bootstrap = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic("mail", 2, 1), NewTopic("texts", 1, 1), NewTopic("audit", 1, 1),
                             NewTopic("small", 1, 1, {"max.message.bytes": "300"})])
    return tmp_path, bootstrap


def test_every_line_becomes_a_job_with_the_routes_serialization(jobs):
    workdir, bootstrap = jobs
    lines = [json.dumps({"id": i, "to": f"user-{i}@example.com"}) for i in range(1000)] + ['"hello"', "", "42"]
    code, out, err = enqueue(workdir, bootstrap, "--topic", "mail", stdin="\n".join(lines) + "\n")
    assert (code, out) == (0, "enqueued 1002 jobs to mail\n"), err
    assert "warning" not in err and "Error" not in err, err
    records = read_all(bootstrap, "mail", (0, 1), expect=1002)
    decode = DESERIALIZERS["json"]  # the route's deserializer reads back each job as it was given
    values = sorted((decode(m.value()) for m in records), key=json.dumps)
    expected = [{"id": i, "to": f"user-{i}@example.com"} for i in range(1000)] + ["hello", 42]
    assert values == sorted(expected, key=json.dumps)
    assert b'{"id":7,"to":"user-7@example.com"}' in {m.value() for m in records}  # compact JSON
    assert b'"hello"' in {m.value() for m in records}  # a string to a JSON route: JSON, read back as "hello"

    # a UTF-8 route gets a string as its text; --key-field: the key from each job (a number as its JSON text)
    code, out, err = enqueue(workdir, bootstrap, "--topic", "texts", "--key-field", "user",
                             stdin='{"user": "ann", "text": "hi"}\n{"user": 7, "text": "ho"}\n')
    assert (code, out) == (0, "enqueued 2 jobs to texts\n"), err
    records = read_all(bootstrap, "texts", expect=2)
    assert [(m.key(), m.value()) for m in records] == [(b"ann", b'{"user":"ann","text":"hi"}'),
                                                       (b"7", b'{"user":7,"text":"ho"}')]


def test_an_envelope_gives_key_headers_and_delay(jobs):
    workdir, bootstrap = jobs
    lines = ['{"value": {"to": "cy"}, "key": "cy", "headers": {"trace": "t-1"}, "delay_ms": 5000}',
             '{"value": "plain"}']
    code, out, err = enqueue(workdir, bootstrap, "--topic", "texts", "--envelope", "--delay-ms", "1000",
                             stdin="\n".join(lines))
    assert (code, out) == (0, "enqueued 2 jobs to texts\n"), err
    first, second = read_all(bootstrap, "texts", expect=2)
    assert (first.key(), first.value()) == (b"cy", b'{"to":"cy"}')
    assert headers_of(first) == {"trace": "t-1", HEADER_DELIVER_AFTER_MS: "5000"}
    assert (second.key(), second.value()) == (None, b"plain")
    assert headers_of(second) == {HEADER_DELIVER_AFTER_MS: "1000"}  # --delay-ms for a line without its own


def test_a_bad_line_stops_at_its_number_after_the_lines_before_it_are_enqueued(jobs):
    workdir, bootstrap = jobs
    code, out, err = enqueue(workdir, bootstrap, "--topic", "mail",
                             stdin='{"id": 1}\n{"id": 2}\n{"id": 3\n{"id": 4}\n')
    assert (code, out) == (1, "")
    assert err.rstrip("\n").splitlines()[-1] == (
        "Error: line 3: not JSON (Expecting ',' delimiter at column 9): '{\"id\": 3'; the 2 job(s) of the lines "
        "before it were enqueued, nothing from line 3 on")
    assert sorted(m.value() for m in read_all(bootstrap, "mail", (0, 1), expect=2)) == [b'{"id":1}', b'{"id":2}']

    for args, stdin, error in [
        (["--key-field", "user"], '{"user": "a"}\n\n{"name": "b"}\n',
         "Error: line 3: the job has no field 'user' (--key-field)"),
        (["--envelope"], '{"value": 1}\n{"value": 2, "priority": 9}\n',
         "Error: line 2: unknown envelope key(s) priority; an envelope takes value, key, headers, delay_ms, at_ms"),
        (["--envelope"], '{"value": 1, "delay_ms": -5}\n',
         'Error: line 1: "delay_ms" must be a number of milliseconds >= 0, got -5'),
        ([], b'{"id": 5}\n"\xff"\n', "Error: line 2: not UTF-8 (invalid start byte at byte 1)"),
    ]:
        code, out, err = enqueue(workdir, bootstrap, "--topic", "texts", *args, stdin=stdin)
        assert code == 1 and err.rstrip("\n").splitlines()[-1].startswith(error), err
    # the lines before the bad one were enqueued (none in the third run), nothing after it
    assert [m.value() for m in read_all(bootstrap, "texts", expect=3)] == [b'{"user":"a"}', b"1", b'{"id":5}']


def test_a_topic_no_route_reads_is_warned_about_and_delivery_errors_fail_the_command(jobs):
    workdir, bootstrap = jobs
    code, out, err = enqueue(workdir, bootstrap, "--topic", "audit", stdin='{"event": "login"}\n')
    assert (code, out) == (0, "enqueued 1 job to audit\n")
    assert ("warning: no route of jobs_app:app reads topic 'audit' (its routes: mailers/mail, texters/texts); the "
            "jobs will reach no worker of this app") in err
    assert [m.value() for m in read_all(bootstrap, "audit", expect=1)] == [b'{"event":"login"}']

    # the broker refuses a record over the topic's max.message.bytes: the command fails, naming why
    code, out, err = enqueue(workdir, bootstrap, "--topic", "small", stdin=json.dumps("x" * 1000) + "\n")
    assert (code, out) == (1, "")
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("Error: not every job reached small: enqueued jobs: 1 failed (job to small (key None): ")
    assert "Message size too large" in last and last.endswith("(of 1 read; the others were enqueued)")


@pytest.mark.parametrize("args, error", [
    (["--topic", "mail", "--key-field", "id", "--envelope"],
     "--key-field cannot be used with --envelope (give each line's \"key\")"),
    (["--topic", "mail", "--delay-ms", "-1"], "--delay-ms must be >= 0, got -1"),
    (["--topic", "mail", "--timeout-s", "0"], "--timeout-s must be > 0 seconds, got 0.0"),
    (["--topic", "mail"], "no bootstrap server reachable (tried 127.0.0.1:1)"),
    ([], "the following arguments are required: --topic"),
])
def test_options_are_checked_before_anything_is_read(tmp_path, args, error):
    (tmp_path / "jobs_app.py").write_text(APP)
    code, out, err = enqueue(tmp_path, "127.0.0.1:1", *args, stdin='{"id": 1}\n')
    assert (code, out) == (1, "") and err.startswith(f"Error: {error}"), err
    assert "Traceback" not in err


def test_an_app_module_that_raises_on_import_is_one_line(tmp_path):
    (tmp_path / "jobs_app.py").write_text("app = (\n")
    code, out, err = enqueue(tmp_path, "127.0.0.1:1", "--topic", "mail", stdin='{"id": 1}\n')
    assert (code, out) == (1, "") and err.startswith("Error: jobs_app:app: importing it raised SyntaxError: "), err
    assert "Traceback" not in err


def test_help_shows_the_input_format_and_examples(tmp_path):
    code, out, _ = enqueue(tmp_path, "127.0.0.1:1", "--help", stdin="")
    assert code == 0 and "--envelope" in out and "examples:" in out
    assert "the jobs of the lines before\n  it are enqueued, nothing from that line on" in out
