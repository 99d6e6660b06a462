"""The first loop of a new user (issue 15, acceptance 2): produce, then consume with a new share
group. Share groups start at `latest` (Kafka's default, kept), so the records already there are not
delivered; the share-consumer tools say so in one line and how to start from the beginning, and
following that line delivers every record."""

from __future__ import annotations

from confluent_kafka import Producer

from quafka.cli.main import main
from support.share_client import create_topic


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, f"job-{i}".encode())
    assert producer.flush(10) == 0


def _run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_first_loop_prints_the_hint_and_following_it_delivers_every_record(broker, capsys):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "first-loop", partitions=2)
    _produce(bootstrap, "first-loop", 6)
    consumer = ["console-share-consumer", "--bootstrap-server", bootstrap, "--topic", "first-loop",
                "--group", "newbie", "--timeout-ms", "1500"]

    code, out, err = _run(capsys, *consumer)
    assert code == 0 and out == ""
    hints = [line for line in err.splitlines() if line.startswith("Note: share group 'newbie'")]
    assert len(hints) == 1, err
    assert "the 6 record(s) already in it will not be delivered" in hints[0]
    assert "share.auto.offset.reset=earliest" in hints[0] and "--reset-offsets" in hints[0]

    # the group has now started both partitions at latest: the config alone changes nothing (Kafka's
    # rule), the reset the hint names does
    command = hints[0].split("first run: ", 1)[1].split(" (once", 1)[0]
    assert _run(capsys, *command.split()[1:])[0] == 0  # quafka configs ... earliest
    reset = hints[0].split("move it with: ", 1)[1].rstrip(")")
    assert _run(capsys, *reset.split()[1:])[0] == 0  # quafka share-groups --reset-offsets ... --execute
    code, out, err = _run(capsys, *consumer, "--max-messages", "6")
    assert code == 0 and sorted(out.split()) == sorted(f"job-{i}" for i in range(6)), (out, err)
    assert "Note:" not in err  # nothing left to warn about


def test_no_hint_for_a_group_set_to_earliest_or_an_empty_topic(broker, capsys):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "hintless")
    base = ["console-share-consumer", "--bootstrap-server", bootstrap, "--topic", "hintless", "--timeout-ms", "500"]
    assert "Note:" not in _run(capsys, *base, "--group", "empty-topic")[2]  # nothing to miss
    _produce(bootstrap, "hintless", 3)
    assert _run(capsys, "configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "groups",
                "--entity-name", "early", "--add-config", "share.auto.offset.reset=earliest")[0] == 0
    code, out, err = _run(capsys, *base, "--group", "early", "--max-messages", "3")
    assert code == 0 and len(out.split()) == 3 and "Note:" not in err


def test_perf_share_consumer_prints_the_hint_too(broker, capsys):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "perf-first")
    _produce(bootstrap, "perf-first", 4)
    code, _out, err = _run(capsys, "perf", "share-consumer", "--bootstrap-server", bootstrap, "--topic", "perf-first",
                           "--group", "perf-newbie", "--num-records", "4", "--timeout", "1000")
    assert "Note: share group 'perf-newbie'" in err and "the 4 record(s)" in err, err
