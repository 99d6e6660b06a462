"""`quafka console-share-consumer` and `quafka console-producer` end to end against a broker:
output formats, exit codes, --reject / --release acknowledgements, signals, line parsing."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from cli.helpers import make_topic
from support import produce_batch, set_group_configs, wait_until

from quafka.cli.main import main
from quafka.client import Admin, PartitionReader


def share_group(bootstrap: str, group: str, **extra: str) -> None:
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                         "share.assignment.interval.ms": "0", **extra})


def start_offset(bootstrap: str, group: str, topic: str) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.list_share_group_offsets(group, [topic])[(topic, 0)][0]


def consume(capsys, bootstrap: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["console-share-consumer", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    return code, out, err


def quafka(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quafka", *args], capture_output=True, text=True, timeout=60,
                          **kwargs)


# ----------------------------------------------------------------------------- console-share-consumer

def test_reject_archives_what_it_consumes(bootstrap, capsys):
    make_topic(bootstrap, "rej")
    share_group(bootstrap, "rej-g")
    produce_batch(bootstrap, "rej", 5)

    proc = quafka("console-share-consumer", "--bootstrap-server", bootstrap, "--topic", "rej", "--group", "rej-g",
                  "--reject", "--max-messages", "5", "--formatter-property", "print.offset=true")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"Offset:{i}\tv{i}" for i in range(5)]
    assert "Processed a total of 5 messages" in proc.stderr

    assert start_offset(bootstrap, "rej-g", "rej") == 5  # all five archived: the start moved past them
    code, out, err = consume(capsys, bootstrap, "--topic", "rej", "--group", "rej-g", "--timeout-ms", "500")
    assert (code, out) == (0, "")
    assert "Processed a total of 0 messages" in err


def test_release_redelivers_until_the_delivery_limit(bootstrap, capsys):
    make_topic(bootstrap, "rel")
    share_group(bootstrap, "rel-g", **{"share.delivery.count.limit": "2"})
    produce_batch(bootstrap, "rel", 3)

    code, out, err = consume(capsys, bootstrap, "--topic", "rel", "--group", "rel-g", "--release", "--timeout-ms",
                             "1000", "--property", "print.offset=true", "--property", "print.delivery=true")
    assert code == 0
    lines = out.splitlines()
    assert sorted(lines) == sorted(f"Offset:{i}\tDelivery:{d}\tv{i}" for i in range(3) for d in (1, 2))
    assert lines.index("Offset:0\tDelivery:1\tv0") < lines.index("Offset:0\tDelivery:2\tv0")
    assert "Processed a total of 6 messages" in err
    # after the second delivery the limit archived them: nothing is left for the group
    assert start_offset(bootstrap, "rel-g", "rel") == 3


def test_default_message_formatter_fields_and_separators(bootstrap, capsys, tmp_path):
    make_topic(bootstrap, "fmt")
    share_group(bootstrap, "fmt-g")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("fmt", key=None, value=b"first", headers=[("h1", b"v1"), ("h2", None)], timestamp=1234)
    producer.produce("fmt", key=b"k", value=None, timestamp=1235)
    producer.flush(10)
    config = tmp_path / "formatter.properties"
    config.write_text("print.timestamp=true\nprint.partition=true\nprint.key=true\nkey.separator=|\n")

    code, out, err = consume(capsys, bootstrap, "--topic", "fmt", "--group", "fmt-g", "--max-messages", "2",
                             "--formatter-config", str(config), "--formatter-property", "print.offset=true",
                             "--formatter-property", "print.delivery=true", "--formatter-property", "print.epoch=true",
                             "--formatter-property", "print.headers=true",
                             "--formatter-property", "null.literal=<null>", "--formatter-property",
                             "headers.separator=;", "--formatter-property", "line.separator=#\n")
    assert code == 0, err
    assert out == ("CreateTime:1234|Partition:0|Offset:0|Delivery:1|Epoch:0|h1:v1;h2:<null>|<null>|first#\n"
                   "CreateTime:1235|Partition:0|Offset:1|Delivery:1|Epoch:0|NO_HEADERS|k|<null>#\n")
    assert "Processed a total of 2 messages" in err

    # print.value=false and nothing else: the key alone, and no separator after it
    produce_batch(bootstrap, "fmt", 1)
    code, out, _ = consume(capsys, bootstrap, "--topic", "fmt", "--group", "fmt-g", "--max-messages", "1",
                           "--property", "print.value=false", "--property", "print.key=true")
    assert (code, out) == (0, "null\n")


def test_reject_message_on_error(bootstrap, capsys):
    make_topic(bootstrap, "deser")
    share_group(bootstrap, "deser-g")
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in (b"\x00\x00\x00\x07", b"bad", b"\xff\xff\xff\xff"):
        producer.produce("deser", value=value)
    producer.flush(10)

    # without --reject-message-on-error the bad record stops the tool (exit 1, one-line error)
    code, out, err = consume(capsys, bootstrap, "--topic", "deser", "--group", "deser-g", "--timeout-ms", "1000",
                             "--value-deserializer", "org.apache.kafka.common.serialization.IntegerDeserializer")
    assert code == 1
    assert out == "7\n"
    assert "Error: cannot format the message at deser-0 offset 1: Size of data received by IntegerDeserializer " \
           "is not 4" in err
    assert "Processed a total of 2 messages" in err

    code, out, err = consume(capsys, bootstrap, "--topic", "deser", "--group", "deser-g", "--timeout-ms", "1000",
                             "--reject-message-on-error", "--value-deserializer", "IntegerDeserializer")
    assert code == 0
    assert "Error processing message, rejecting this message: Size of data received by IntegerDeserializer" in err
    assert out == "-1\n"
    assert start_offset(bootstrap, "deser-g", "deser") == 3


def test_option_errors_exit_1(bootstrap, capsys):
    code, _, err = consume(capsys, bootstrap, "--group", "g")
    assert code == 1 and err.strip() == "Error: --topic is a required argument"
    code, _, err = consume(capsys, bootstrap, "--topic", "t", "--group", "a", "--command-property", "group.id=b")
    assert code == 1
    assert "do not match. Detected group ids: 'a', 'b'" in err
    code, _, err = consume(capsys, bootstrap, "--topic", "t", "--consumer-property", "no.such.key=1")
    assert code == 1 and err.startswith("Error: ") and "no.such.key" in err
    with pytest.raises(SystemExit) as exc:
        main(["console-share-consumer", "--topic", "t", "--reject", "--release"])
    assert exc.value.code == 1  # Kafka's tools exit 1 on a bad option, argparse would exit 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_closes_the_consumer(bootstrap, signum):
    topic, group = f"sig{signum}", f"sig{signum}-g"
    make_topic(bootstrap, topic)
    share_group(bootstrap, group)
    produce_batch(bootstrap, topic, 2)
    proc = subprocess.Popen([sys.executable, "-m", "quafka", "console-share-consumer", "--bootstrap-server", bootstrap,
                             "--topic", topic, "--group", group],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "v0\n"  # consuming: the member has joined
        assert proc.stdout.readline() == "v1\n"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert "Processed a total of 2 messages" in err
    assert "Traceback" not in err
    with Admin({"bootstrap.servers": bootstrap}) as admin:  # closed: it left the group, its records were accepted
        assert wait_until(lambda: not admin.describe_share_groups([group])[group].members, 5, 0.05)
        assert admin.list_share_group_offsets(group, [topic])[(topic, 0)][0] == 2


# ----------------------------------------------------------------------------- console-producer

def test_console_producer_parse_key_and_headers_round_trip(bootstrap):
    make_topic(bootstrap, "prod")
    lines = "h1:v1,h2:v2\tk1\tvalue one\nNULL\tNULL\tvalue two\nh:NULL\tk3\tNULL\r\n"
    proc = quafka("console-producer", "--bootstrap-server", bootstrap, "--topic", "prod",
                  "--property", "parse.key=true", "--reader-property", "parse.headers=true",
                  "--property", "null.marker=NULL", "--producer-property", "acks=1", input=lines)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # no prompt when stdin is not a terminal
    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        records = list(reader.read("prod", 0, 0))
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"k1", b"value one", [("h1", b"v1"), ("h2", b"v2")]),
        (None, b"value two", []),
        (b"k3", None, [("h", None)]),
    ]


def test_console_producer_separators_sync_and_parse_errors(bootstrap, capsys, monkeypatch, tmp_path):
    make_topic(bootstrap, "prod2")
    config = tmp_path / "reader.properties"
    config.write_text("parse.key=true\nkey.separator=::\nparse.headers=true\nheaders.delimiter=|\n"
                      "headers.separator=;\nheaders.key.separator==\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a=1;b=2|key::val::ue\nx=|k2::v2\n"))
    code = main(["console-producer", "--bootstrap-server", bootstrap, "--topic", "prod2", "--sync",
                 "--reader-config", str(config), "--command-property", "linger.ms=0"])
    assert code == 0, capsys.readouterr().err

    monkeypatch.setattr(sys, "stdin", io.StringIO("plain\nno separator here\n"))
    capsys.readouterr()
    code = main(["console-producer", "--bootstrap-server", bootstrap, "--topic", "prod2", "--property",
                 "parse.key=true", "--property", "key.separator=:"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == "Error: No key separator found on line number 1: 'plain'"

    monkeypatch.setattr(sys, "stdin", io.StringIO("plain\n"))
    code = main(["console-producer", "--bootstrap-server", bootstrap, "--topic", "prod2", "--property",
                 "headers.separator=,", "--property", "headers.key.separator=,"])
    assert code == 1
    assert "headers.separator and headers.key.separator may not be equal" in capsys.readouterr().err

    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        records = [(r.key, r.value, r.headers) for r in reader.read("prod2", 0, 0)]
    assert records == [(b"key", b"val::ue", [("a", b"1"), ("b", b"2")]), (b"k2", b"v2", [("x", b"")])]


def test_console_producer_help_has_examples():
    proc = quafka("console-producer", "--help")
    assert proc.returncode == 0
    assert re.search(r"examples:\n\s+echo \"hello\" \| quafka console-producer --topic orders", proc.stdout)
