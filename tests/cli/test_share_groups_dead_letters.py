"""`quafka share-groups --dead-letters` and `--redrive` end to end against an embedded broker, on
dead letters written by hand with confluent-kafka's Producer (quafka's headers and Apache Kafka's,
which lack quafka.dlq.reason), checked by reading the target topics back with PartitionReader."""

from __future__ import annotations

import json

import pytest

from cli.helpers import cli
from support.dlq import DIED_AT, DLQ, letter, produce_messages, read_topic

from quafka.client import Admin
from quafka.protocol import dead_letter_headers as h


def redriven(records) -> list[tuple]:
    """(key, value, headers without the redrive ones, (dlq partition, dlq offset)) of redriven records."""
    out = []
    for r in records:
        marks = dict(r.headers)
        if h.HEADER_REDRIVE_OFFSET in marks:
            assert marks[h.HEADER_REDRIVE_TOPIC] == DLQ.encode()
            kept = [(n, v) for n, v in r.headers if not n.startswith("quafka.redrive.")]
            out.append((r.key, r.value, kept, (int(marks[h.HEADER_REDRIVE_PARTITION]),
                                               int(marks[h.HEADER_REDRIVE_OFFSET]))))
    return sorted(out, key=lambda x: x[3])


def table(text):
    """The rows of a Kafka-style table (a blank line, then whitespace-separated columns)."""
    assert text.startswith("\n"), repr(text)
    return [line.split() for line in text.strip("\n").split("\n\n")[0].splitlines()]


def summary(text):
    return text.rstrip("\n").rsplit("\n", 1)[-1]


@pytest.fixture
def dlq(broker):
    """Source topics orders (2 partitions, one header per record) and old (its records deleted), a
    DLQ of 2 partitions, and an empty retry topic."""
    bs = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({"orders": (2, 1), "old": (1, 1), DLQ: (2, 1), "retry": (1, 1)})
        produce_messages(bs, [("orders", p, f"k{p}{i}".encode(), f"o{p}{i}".encode(), [("trace", f"t{p}{i}".encode())])
                     for p in (0, 1) for i in range(3)])
        produce_messages(bs, [("old", 0, None, b"gone", [])] * 2)
        admin.delete_records({("old", 0): 2})
    produce_messages(bs, [
        letter(0, ("orders", 0, 0), count=1, message=h.MESSAGE_CLIENT_REJECT, reason=h.REASON_REJECTED),  # p0@0
        letter(0, ("orders", 0, 1), reason=h.REASON_RELEASED_AT_LIMIT, key=b"ck", value=b"copy"),  # p0@1
        letter(0, ("orders", 0, 2), group="other"),                                                 # p0@2
        letter(0, ("orders", 1, 2)),  # p0@3: Apache Kafka's delivery limit (no reason header)
        letter(1, ("orders", 1, 0), count=2, message=h.MESSAGE_CLIENT_REJECT),  # p1@0: Apache Kafka's reject
        (DLQ, 1, None, b"not a dead letter", []),                               # p1@1
        letter(1, ("old", 0, 0), reason=h.REASON_LOCK_EXPIRED_AT_LIMIT),        # p1@2: source deleted
    ])
    return bs


def test_dead_letters_table_json_topic_filter_and_the_group_config(dlq, capsys):
    sg = ["share-groups", "--bootstrap-server", dlq]
    code, out, err = cli(capsys, *sg, "--dead-letters", "--group", "g", "--from-dlq", DLQ)
    assert (code, err) == (0, "")
    died = "2023-11-14T22:13:20.123Z"
    # the broker's letters carry no error: ERROR-CLASS and ERROR are "-"
    assert table(out) == [
        ["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERY-COUNT", "REASON", "DIED-AT", "DLQ-PARTITION",
         "DLQ-OFFSET", "COPY", "ERROR-CLASS", "ERROR"],
        ["g", "old", "0", "0", "5", "lock-expired-at-limit", died, "1", "2", "no", "-", "-"],
        ["g", "orders", "0", "0", "1", "rejected", died, "0", "0", "no", "-", "-"],
        ["g", "orders", "0", "1", "5", "released-at-limit", died, "0", "1", "yes", "-", "-"],
        ["g", "orders", "1", "0", "2", "rejected", died, "1", "0", "no", "-", "-"],   # inferred from the message
        ["g", "orders", "1", "2", "5", "delivery-limit", died, "0", "3", "no", "-", "-"]]  # inferred too
    assert out.splitlines()[1].startswith("GROUP           TOPIC           PARTITION  OFFSET     DELIVERY-COUNT")

    code, out, _ = cli(capsys, *sg, "--dead-letters", "--group", "g", "--from-dlq", DLQ, "--topic", "orders",
                       "--output", "json")
    letters = json.loads(out)
    assert code == 0 and [(x["partition"], x["offset"], x["reason"]) for x in letters] == [
        (0, 0, "rejected"), (0, 1, "released-at-limit"), (1, 0, "rejected"), (1, 2, "delivery-limit")]
    assert letters[1] == {
        "group": "g", "topic": "orders", "partition": 0, "offset": 1, "delivery_count": 5,
        "reason": "released-at-limit", "message": h.MESSAGE_DELIVERY_COUNT_EXCEEDED, "died_at": died,
        "timestamp_ms": DIED_AT, "dlq_topic": DLQ, "dlq_partition": 0, "dlq_offset": 1, "copy": True,
        "key": "ck", "value": "copy", "error_class": None, "error_message": None, "error_traceback": None,
        "error_id": None, "route": None}
    assert letters[0]["copy"] is False and letters[0]["key"] is None

    # without --from-dlq: the group's errors.deadletterqueue.topic.name, or an error when it is unset
    assert cli(capsys, *sg, "--dead-letters", "--group", "g") == (
        1, "", "Error: Share group g has no errors.deadletterqueue.topic.name (no dead-letter queue topic); pass "
               "--from-dlq TOPIC\n")
    assert cli(capsys, *["configs", "--bootstrap-server", dlq], "--alter", "--entity-type", "groups",
               "--entity-name", "g", "--add-config", f"errors.deadletterqueue.topic.name={DLQ}")[0] == 0
    code, out, _ = cli(capsys, *sg, "--dead-letters", "--group", "g", "--topic", "old")
    assert code == 0 and table(out)[1:] == [
        ["g", "old", "0", "0", "5", "lock-expired-at-limit", died, "1", "2", "no", "-", "-"]]

    assert cli(capsys, *sg, "--dead-letters", "--group", "g", "--topic", "none") == (
        0, f"\nShare group 'g' has no dead letters of topic 'none' in topic '{DLQ}'.\n", "")
    assert cli(capsys, *sg, "--dead-letters", "--group", "g", "--topic", "none", "--output", "json")[1] == "[]\n"
    assert cli(capsys, *sg, "--dead-letters", "--group", "g", "--from-dlq", "nope") == (
        1, "", "Error: Topic 'nope' does not exist.\n")


def test_redrive_dry_run_to_another_topic_overlapping_ranges_and_all_once(dlq, capsys):
    redrive = ["share-groups", "--bootstrap-server", dlq, "--redrive", "--group", "g", "--from-dlq", DLQ]
    head = ["GROUP", "DLQ-PARTITION", "DLQ-OFFSET", "TOPIC", "PARTITION", "OFFSET", "TO-TOPIC", "PAYLOAD", "STATUS"]

    # a dry run shows the plan and sends nothing
    code, out, err = cli(capsys, *redrive, "--all", "--dry-run")
    assert (code, err) == (0, "")
    assert table(out) == [head,
                          ["g", "0", "0", "orders", "0", "0", "orders", "source", "would-send"],
                          ["g", "0", "1", "orders", "0", "1", "orders", "dlq-copy", "would-send"],
                          ["g", "0", "3", "orders", "1", "2", "orders", "source", "would-send"],
                          ["g", "1", "0", "orders", "1", "0", "orders", "source", "would-send"],
                          ["g", "1", "2", "old", "0", "0", "old", "source", "source-missing"]]
    assert summary(out) == (f"Dry run: 4 dead letter(s) of share group 'g' from '{DLQ}' would be redriven; "
                            f"0 already redriven and 1 whose source record is no longer in the log would be "
                            f"skipped. Nothing was sent.")
    assert redriven(read_topic(dlq, "orders")) == []

    # the letters at DLQ offset 1 (of every DLQ partition) to another topic: the copy, as it is
    code, out, _ = cli(capsys, *redrive, "--offsets", "1-1", "--to-topic", "retry", "--execute")
    assert code == 0 and table(out)[1:] == [["g", "0", "1", "orders", "0", "1", "retry", "dlq-copy", "sent"]]
    assert summary(out) == (f"Redrove 1 dead letter(s) of share group 'g' from '{DLQ}'; skipped 0 already "
                            f"redriven and 0 whose source record is no longer in the log.")
    assert redriven(read_topic(dlq, "retry")) == [(b"ck", b"copy", [], (0, 1))]

    # an overlapping range: offset 1 is not sent again; headers-only letters carry the original's headers
    code, out, _ = cli(capsys, *redrive, "--offsets", "0-1", "--execute")
    assert code == 0 and [row[-1] for row in table(out)[1:]] == ["sent", "already-redriven", "sent"]
    assert redriven(read_topic(dlq, "orders")) == [(b"k00", b"o00", [("trace", b"t00")], (0, 0)),
                                                   (b"k10", b"o10", [("trace", b"t10")], (1, 0))]

    # --all sends only what is left, and a repeat sends nothing
    code, out, _ = cli(capsys, *redrive, "--all", "--execute")
    assert code == 0 and [(row[2], row[-1]) for row in table(out)[1:]] == [
        ("0", "already-redriven"), ("1", "already-redriven"), ("3", "sent"), ("0", "already-redriven"),
        ("2", "source-missing")]
    code, out, _ = cli(capsys, *redrive, "--all", "--execute")
    assert code == 0 and summary(out).startswith("Redrove 0 dead letter(s)") and "skipped 5 already" in summary(out)
    assert [x[3] for x in redriven(read_topic(dlq, "orders"))] == [(0, 0), (0, 3), (1, 0)]
    assert len(read_topic(dlq, "retry")) == 1
    with Admin({"bootstrap.servers": dlq}) as admin:
        assert admin.list_consumer_group_offsets("quafka-redrive.g") == {(DLQ, 0): (4, ""), (DLQ, 1): (3, "")}


@pytest.mark.parametrize("options, error", [
    (["--dead-letters", "--redrive", "--group", "g"],
     "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets, "
     "--dead-letters, --redrive, --release, --archive."),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--all"], "Option --redrive takes the option: --execute or "
                                                                "--dry-run"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--all", "--dry-run", "--execute"],
     "Option --redrive only accepts one of --execute and --dry-run"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--execute"],
     "Option --redrive takes one of these options: --all, --offsets"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--all", "--offsets", "1-2", "--execute"],
     "Option --offsets can't be used with option --all"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--offsets", "5-2", "--execute"],
     "Invalid offset range '5-2': expected A-B with 0 <= A <= B (DLQ offsets, both included), e.g. 120-180"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--offsets", "--execute"],
     "Option --offsets of --redrive takes a range of DLQ offsets, e.g. --offsets 120-180"),
    (["--redrive", "--group", "g", "--all", "--dry-run", "--failing-window-s", "-1"],
     "Option --failing-window-s takes a number of seconds >= 0, got -1.0"),
    (["--dead-letters", "--group", "g", "--failing-window-s", "60"],
     "Option --failing-window-s can only be used with --redrive"),
    (["--redrive", "--from-dlq", "d", "--all", "--execute"], "Option --redrive takes the option: --group"),
    (["--dead-letters", "--group", "g", "--all"], "Option --all can only be used with --redrive"),
    (["--dead-letters", "--group", "g", "--execute"], "Option --execute can only be used with --reset-offsets, --redrive, --release or --archive"),
    (["--redrive", "--group", "g", "--from-dlq", "d", "--all", "--dry-run", "--output", "json"],
     "Option --output can only be used with --dead-letters or --describe --in-flight"),
    (["--describe", "--group", "g", "--from-dlq", "d"],
     "Option --from-dlq can only be used with --dead-letters or --redrive"),
    (["--describe", "--group", "g", "--offsets", "1-2"], "Option --describe does not take a value for --offsets"),
])
def test_dead_letter_option_errors(capsys, options, error):
    # the options are checked before any connection: no broker is needed
    expected = (1, "", f"Error: {error}\n")
    assert cli(capsys, "share-groups", "--bootstrap-server", "127.0.0.1:1", *options) == expected
