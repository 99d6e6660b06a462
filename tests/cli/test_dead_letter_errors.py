"""Dead letters that say why (issue 26): `quafka share-groups --dead-letters` shows the exception
class and message of a letter the worker framework wrote (its `quafka.error.*` headers), and
`--redrive` finds the group's DLQ topic by itself, leaves the `quafka.error.*` headers behind,
and warns when the workers were failing lately on the exception of the letters it redrives.

The letters are produced by hand with confluent-kafka's Producer, with the headers the
framework's worker writes (Kafka's six, `quafka.dlq.reason` max-attempts, the `quafka.error.*`
ones and the source record's own headers), and timestamps set on produce: a letter "12 s old" is
one stamped 12 s before the test runs the tool."""

from __future__ import annotations

import json
import re
import time

import pytest

from cli.helpers import cli
from support.dlq import DIED_AT, DLQ, letter, produce_messages, read_topic

from quafka.client import Admin
from quafka.client.dead_letters import DLQ_TOPIC_CONFIG, HEADER_ERROR
from quafka.protocol import dead_letter_headers as h

LONG_MESSAGE = ("card 4242 declined by the acquirer:\n  code 05 (do not honour), retry after the customer calls "
                "the bank")
TRACEBACK = 'Traceback (most recent call last):\n  File "app.py", line 7, in consume_one\nValueError: bad size'
MINUTE_MS = 60_000


def framework_letter(dlq_partition, source, error_class, message, *, timestamp_ms, key=b"k", value=b"v",
                     headers=(), error_id="e-1"):
    """A dead letter as the worker framework writes it: copy of the job, why it died, and the
    job's own headers after the dead-letter ones."""
    topic, partition, offset = source
    errors = ((h.HEADER_ERROR_CLASS, error_class), (h.HEADER_ERROR_MESSAGE, message),
              (h.HEADER_ERROR_TRACEBACK, TRACEBACK), (h.HEADER_ERROR_ATTEMPTS, "3"),
              (h.HEADER_ERROR_ROUTE, f"g/{topic}"), (h.HEADER_ERROR_HOST, "worker-1"),
              (h.HEADER_ERROR_PID, "4242"), (h.HEADER_ERROR_ID, error_id))
    written = h.dead_letter_headers(topic, partition, offset, "g", 3, h.MESSAGE_DELIVERY_COUNT_EXCEEDED,
                                    reason=h.REASON_MAX_ATTEMPTS, extra=errors)
    return (DLQ, dlq_partition, key, value, written + list(headers), timestamp_ms)


def redrive_marks(dlq_offset):
    """The headers `--redrive` put on a record it produced from the letter at DLQ offset ``dlq_offset``."""
    return [(h.HEADER_REDRIVE_TOPIC, DLQ.encode()), (h.HEADER_REDRIVE_PARTITION, b"0"),
            (h.HEADER_REDRIVE_OFFSET, str(dlq_offset).encode())]


def rows(out):
    """The table's lines after its header (the ERROR column holds spaces: lines, not split cells)."""
    assert out.startswith("\n"), repr(out)
    return out.strip("\n").split("\n\n")[0].splitlines()


@pytest.fixture
def topics(broker):
    bs = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({"orders": (1, 1), DLQ: (1, 1)})
    return bs


def test_the_listing_shows_the_error_class_and_message(topics, capsys):
    produce_messages(topics, [
        framework_letter(0, ("orders", 0, 0), "myapp.errors.PaymentDeclined", LONG_MESSAGE, timestamp_ms=DIED_AT),
        (DLQ, 0, None, None, h.dead_letter_headers("orders", 0, 1, "g", 3, h.MESSAGE_DELIVERY_COUNT_EXCEEDED,
                                                   reason=h.REASON_MAX_ATTEMPTS,
                                                   extra=((HEADER_ERROR, "ValueError: bad size"),)), DIED_AT),
        letter(0, ("orders", 0, 2), message=h.MESSAGE_CLIENT_REJECT, reason=h.REASON_REJECTED),
    ])
    sg = ["share-groups", "--bootstrap-server", topics, "--dead-letters", "--group", "g", "--from-dlq", DLQ]
    code, out, err = cli(capsys, *sg)
    assert (code, err) == (0, "")
    header, framework, legacy, broker_written = rows(out)
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERY-COUNT", "REASON", "DIED-AT",
                              "DLQ-PARTITION", "DLQ-OFFSET", "COPY", "ERROR-CLASS", "ERROR"]
    # the message on one line, cut to 60 characters
    assert framework.split()[5] == "max-attempts"
    shown = "card 4242 declined by the acquirer: code 05 (do not honou..."
    assert len(shown) == 60 and framework.endswith(f" myapp.errors.PaymentDeclined {shown}")
    assert legacy.endswith(" ValueError                   bad size")  # a letter of an older worker
    assert broker_written.split()[-2:] == ["-", "-"]  # the broker never sees the exception

    code, out, _ = cli(capsys, *sg, "--output", "json")
    by_offset = {x["offset"]: x for x in json.loads(out)}
    assert code == 0
    assert {k: by_offset[0][k] for k in ("reason", "error_class", "error_message", "error_traceback", "error_id",
                                         "route")} == {
        "reason": "max-attempts", "error_class": "myapp.errors.PaymentDeclined", "error_message": LONG_MESSAGE,
        "error_traceback": TRACEBACK, "error_id": "e-1", "route": "g/orders"}
    assert (by_offset[1]["error_class"], by_offset[1]["error_message"]) == ("ValueError", "bad size")
    assert (by_offset[2]["error_class"], by_offset[2]["error_message"], by_offset[2]["error_traceback"]) == (
        None, None, None)


def test_redrive_finds_the_dlq_in_the_group_config_and_leaves_the_error_headers_behind(topics, capsys):
    produce_messages(topics, [framework_letter(0, ("orders", 0, 0), "ValueError", "bad size", timestamp_ms=DIED_AT,
                                               key=b"job-1", value=b'{"size": -1}', headers=[("trace", b"t-1")])])
    redrive = ["share-groups", "--bootstrap-server", topics, "--redrive", "--group", "g", "--all", "--execute"]
    assert cli(capsys, *redrive) == (1, "", "Error: Share group g has no errors.deadletterqueue.topic.name (no "
                                            "dead-letter queue topic); pass --from-dlq TOPIC\n")
    assert read_topic(topics, "orders") == []

    with Admin({"bootstrap.servers": topics}) as admin:
        admin.alter_configs("group", "g", set={DLQ_TOPIC_CONFIG: DLQ})
    code, out, err = cli(capsys, *redrive)
    assert (code, err) == (0, "")  # a letter of long ago: no warning
    assert out.rstrip().endswith(f"Redrove 1 dead letter(s) of share group 'g' from '{DLQ}'; skipped 0 already "
                                 f"redriven and 0 whose source record is no longer in the log.")
    [record] = read_topic(topics, "orders")
    assert (record.key, record.value) == (b"job-1", b'{"size": -1}')
    assert list(record.headers) == [("trace", b"t-1")] + redrive_marks(0)  # no quafka.error.*, no __dlq.errors.*


def test_redrive_warns_when_the_workers_still_fail_on_the_same_exception(topics, capsys):
    now_ms = int(time.time() * 1000)
    produce_messages(topics, [
        framework_letter(0, ("orders", 0, 0), "ValueError", "bad size", timestamp_ms=now_ms - 60 * MINUTE_MS),  # @0
        framework_letter(0, ("orders", 0, 1), "KeyError", "'size'", timestamp_ms=now_ms - 60 * MINUTE_MS),      # @1
        framework_letter(0, ("orders", 0, 2), "ValueError", "bad size", timestamp_ms=now_ms - 50_000),          # @2
        framework_letter(0, ("orders", 0, 3), "ValueError", "bad size", timestamp_ms=now_ms - 12_000),          # @3
        # a job redriven from @0 earlier that died again (its letter carries the redriven record's headers)
        framework_letter(0, ("orders", 0, 4), "ValueError", "bad size", timestamp_ms=now_ms - 30_000,
                         headers=redrive_marks(0)),                                                              # @4
        # the same for TimeoutError, but two hours ago
        framework_letter(0, ("orders", 0, 5), "TimeoutError", "store", timestamp_ms=now_ms - 120 * MINUTE_MS,
                         headers=redrive_marks(9)),                                                              # @5
    ])
    redrive = ["share-groups", "--bootstrap-server", topics, "--redrive", "--group", "g", "--from-dlq", DLQ]

    # only KeyError letters of an hour ago: nothing to warn about
    code, out, err = cli(capsys, *redrive, "--offsets", "1", "--dry-run")
    assert (code, err) == (0, "") and "would-send" in out

    # the old ValueError letter: the workers failed on ValueError 12 s ago, and on a redriven job 30 s ago
    code, out, err = cli(capsys, *redrive, "--offsets", "0", "--execute")
    tail = "the workers are probably still failing on it — the redriven jobs may die again"
    found = re.fullmatch(rf"warning: 1 job redriven earlier died again with ValueError \(the newest (\d+) s ago\)\n"
                         rf"warning: 3 dead letters of group g with ValueError were written in the last 5 min \(the "
                         rf"newest (\d+) s ago\); {tail}\n", err)
    assert found, err
    # 30 s and 12 s old when produced; the tool ran a little later (seconds on a busy machine)
    assert 30 <= int(found.group(1)) < 60 and 12 <= int(found.group(2)) < 42, err
    assert code == 0 and "Redrove 1 dead letter(s)" in out  # a warning: the redrive goes on
    assert [r.headers[-1] for r in read_topic(topics, "orders")] == [(h.HEADER_REDRIVE_OFFSET, b"0")]

    # the window is an option: 10 s is too short to see the letters of 12 s ago; 0 turns the check off
    for window in ("10", "0"):
        code, out, err = cli(capsys, *redrive, "--offsets", "2-3", "--dry-run", "--failing-window-s", window)
        assert (code, err) == (0, "") and out.count("would-send") == 2

    # letters being redriven that had died again after an earlier redrive, long ago: a softer warning
    code, out, err = cli(capsys, *redrive, "--offsets", "5", "--dry-run")
    assert code == 0 and re.fullmatch(r"warning: 1 job redriven earlier died again with TimeoutError \(the newest "
                                      r"2 h ago\); make sure the workers no longer fail on it before "
                                      r"redriving them once more\n", err), err
