"""`quafka perf consumer` (Kafka's kafka-consumer-perf-test.sh) against a real embedded broker: the
header and the values line, exactly N records consumed through a classic consumer group, --include,
--from-latest, the detailed stats, the timeout warning, and the option and fail-fast errors."""

from __future__ import annotations

import datetime
import re
import socket
import subprocess
import sys
import time

import pytest
from cli.helpers import make_topic
from support import produce_batch

from quafka import EmbeddedBroker
from quafka.cli.main import main
from quafka.cli.perf_consumer import CONSUMER_DETAILED_HEADER, CONSUMER_HEADER

pytestmark = pytest.mark.timeout(120)

HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
          "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
F4 = r"(?:-?\d+\.\d{4}|Infinity|NaN)"
ROW = re.compile(rf"^({DATE}), ({DATE}), (\d+\.\d{{4}}), ({F4}), (\d+), ({F4}), (\d+), (-?\d+), ({F4}), ({F4})$")


@pytest.fixture(scope="module")
def bootstrap():
    """One broker for the module, without the 3 s initial rebalance delay (each test its own group)."""
    with EmbeddedBroker(config={"group.initial.rebalance.delay.ms": 0}) as broker:
        yield broker.bootstrap_servers


def run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["perf", "consumer", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_header_matches_kafka():
    assert CONSUMER_HEADER == HEADER
    assert CONSUMER_DETAILED_HEADER == HEADER.replace("start.time, end.time", "time, threadId")


def test_consumes_exactly_n_records_subprocess(bootstrap):
    make_topic(bootstrap, "pc", partitions=2)
    for partition in (0, 1):
        produce_batch(bootstrap, "pc", 150, partition=partition, tag="value-")
    proc = subprocess.run([sys.executable, "-m", "quafka", "perf", "consumer", "--bootstrap-server", bootstrap,
                           "--topic", "pc", "--num-records", "200", "--group", "pc-g", "--timeout", "10000"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == HEADER
    assert len(lines) == 2, lines
    row = ROW.match(lines[1])
    assert row, lines[1]
    assert int(row[5]) == 200  # exactly N of the 300 records
    # the 200 values are between 200 of the shortest ("value-0") and 200 of the longest ("value-149")
    least_mb, most_mb = 200 * len("value-0") / 2**20, 200 * len("value-149") / 2**20
    mb = float(row[3])
    assert least_mb - 5e-5 <= mb <= most_mb + 5e-5  # printed to 4 decimals
    # Kafka's ConsumerPerformance: elapsed = end - start; fetch time = elapsed - rebalance (join) time;
    # every rate is its amount over its time
    start, end = (datetime.datetime.strptime(row[i], "%Y-%m-%d %H:%M:%S:%f") for i in (1, 2))
    elapsed_ms = round((end - start).total_seconds() * 1000)
    rebalance_ms, fetch_ms = int(row[7]), int(row[8])
    assert 0 < rebalance_ms < elapsed_ms < 60_000  # joining the group takes time, and precedes the fetches
    assert fetch_ms == elapsed_ms - rebalance_ms > 0
    elapsed_s, fetch_s = elapsed_ms / 1000, fetch_ms / 1000
    assert least_mb / elapsed_s - 5e-5 <= float(row[4]) <= most_mb / elapsed_s + 5e-5  # MB.sec
    assert float(row[6]) == pytest.approx(200 / elapsed_s, abs=5e-5)  # nMsg.sec
    assert least_mb / fetch_s - 5e-5 <= float(row[9]) <= most_mb / fetch_s + 5e-5  # fetch.MB.sec
    assert float(row[10]) == pytest.approx(200 / fetch_s, abs=5e-5)  # fetch.nMsg.sec
    assert float(row[4]) > 0 and float(row[9]) > 0


def test_in_process_defaults_from_latest_and_date_format(bootstrap, capsys):
    make_topic(bootstrap, "pc-latest")
    produce_batch(bootstrap, "pc-latest", 50, tag="x")
    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--topic", "pc-latest", "--num-records", "50")
    assert code == 0, err
    assert int(ROW.match(out.strip().splitlines()[-1])[5]) == 50

    # a new group at latest sees none of the 50 records: the timeout ends it (exit 0, Kafka's warning)
    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--topic", "pc-latest", "--messages", "10",
                         "--group", "pc-latest-g", "--from-latest", "--timeout", "1500", "--hide-header",
                         "--date-format", "yyyy'T'HH")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "Warning: --messages is deprecated. Use --num-records instead."
    assert lines[1] == ("WARNING: Exiting before consuming the expected number of records: timeout (1500 ms) "
                        "exceeded. You can use the --timeout option to increase the timeout.")
    assert re.fullmatch(r"\d{4}T\d\d, \d{4}T\d\d, 0\.0000, 0\.0000, 0, 0\.0000, \d+, \d+, \S+, \S+", lines[2]), lines[2]
    assert len(lines) == 3


def test_include_matches_whole_topic_names(bootstrap, capsys):
    for topic in ("inc-a", "inc-b", "inc-ab"):
        make_topic(bootstrap, topic)
    produce_batch(bootstrap, "inc-a", 10)
    produce_batch(bootstrap, "inc-b", 20)
    produce_batch(bootstrap, "inc-ab", 1000)  # 'inc-.' must not match it
    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--include", "inc-.", "--num-records", "1000",
                         "--group", "inc-g", "--timeout", "2000")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == HEADER
    assert lines[1].startswith("WARNING: Exiting before consuming")
    assert int(ROW.match(lines[2])[5]) == 30


def test_detailed_stats(bootstrap, capsys):
    make_topic(bootstrap, "pc-detail")
    produce_batch(bootstrap, "pc-detail", 100)
    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--topic", "pc-detail", "--num-records", "101",
                         "--group", "pc-detail-g", "--show-detailed-stats", "--reporting-interval", "1",
                         "--timeout", "1200")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == CONSUMER_DETAILED_HEADER
    progress = [line for line in lines[1:] if not line.startswith("WARNING")]
    assert progress, out
    for line in progress:  # time, 0, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch n/s
        assert re.fullmatch(rf"{DATE}, 0, \d+\.\d{{4}}, {F4}, \d+, {F4}, \d+, -?\d+, {F4}, {F4}", line), line
    assert lines[-1].startswith("WARNING: Exiting before consuming")  # 100 of 101; no final values line


def test_fail_fast_dead_bootstrap_and_missing_topic(bootstrap, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    code, out, err = run(capsys, "--bootstrap-server", dead, "--topic", "t", "--num-records", "1")
    assert code == 1
    assert time.monotonic() - started < 5
    assert err.startswith("Error: no bootstrap server reachable") and len(err.strip().splitlines()) == 1
    assert out == ""

    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--topic", "nope", "--num-records", "1")
    assert code == 1
    assert err.startswith("Error: Topic 'nope' does not exist") and len(err.strip().splitlines()) == 1
    assert out == ""


@pytest.mark.parametrize("args, message", [
    (["--num-records", "1"], "Exactly one of the following arguments is required: --topic, --include"),
    (["--topic", "t", "--include", "t", "--num-records", "1"],
     "Exactly one of the following arguments is required: --topic, --include"),
    (["--topic", "t"], "Exactly one of the following arguments is required: --messages, --num-records"),
    (["--topic", "t", "--num-records", "1", "--messages", "1"],
     "Exactly one of the following arguments is required: --messages, --num-records"),
    (["--topic", "t", "--num-records", "1", "--reporting-interval", "0"], "Reporting interval must be greater than 0."),
    (["--topic", "t", "--num-records", "1", "--reporting-interval", "-5"], "did not match pattern"),
    (["--topic", "t", "--num-records", "1", "--date-format", "yyyy-bb"], "Illegal pattern character 'b'"),
    (["--topic", "t", "--num-records", "1", "--command-config", "a", "--consumer.config", "b"],
     "Option \"[consumer.config]\" can't be used with option \"[command-config]\""),
    (["--topic", "t", "--num-records", "1", "--command-property", "client.id"], "expected KEY=VALUE"),
    (["--topic", "t", "--num-records", "1", "--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_option_errors(capsys, args, message):
    capsys.readouterr()
    try:
        code = main(["perf", "consumer", *args])
    except SystemExit as exc:  # argparse errors: Kafka's one line and exit code 1
        code = exc.code
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("Error: ") and message in err and len(err.strip().splitlines()) == 1


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["perf", "consumer", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--bootstrap-server", "--topic", "--include", "--group", "--num-records", "--messages", "--timeout",
                   "--fetch-size", "--from-latest", "--show-detailed-stats", "--reporting-interval", "--hide-header",
                   "--date-format", "--command-property", "--command-config", "--consumer.config", "--print-metrics"):
        assert option in out
    assert HEADER in out
    with pytest.raises(SystemExit):
        main(["perf", "--help"])
    assert "consumer" in capsys.readouterr().out


def test_print_metrics_and_commits_on_close(bootstrap, capsys):
    make_topic(bootstrap, "pc-metrics")
    produce_batch(bootstrap, "pc-metrics", 40)
    code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--topic", "pc-metrics", "--num-records", "40",
                         "--group", "pc-metrics-g", "--print-metrics", "--command-property", "client.id=pm")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert int(ROW.match(lines[1])[5]) == 40
    assert lines[3].startswith("Metric Name") and lines[3].endswith("Value")
    assert any(re.fullmatch(r"consumer-metrics:rxmsgs:\{client-id=pm\} +: 40\.000", line) for line in lines), out
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # auto-commit on close, as Kafka's tool
    request = ConsumerGroupTopicPartitions("pc-metrics-g", [TopicPartition("pc-metrics", 0)])
    answer = admin.list_consumer_group_offsets([request])["pc-metrics-g"].result(30)
    assert [tp.offset for tp in answer.topic_partitions] == [40]
