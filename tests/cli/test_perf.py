"""`quafka perf producer` and `quafka perf share-consumer` against a broker: Kafka's output lines
parsed, counts checked, fractional throttling, option errors."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from cli.helpers import make_topic
from support import produce_batch, set_group_configs

from quafka.cli.main import main
from quafka.cli.perf import java_date_format
from quafka.client import Admin, PartitionReader

FINAL = re.compile(r"^(\d+) records sent, (\d+\.\d{6}) records/sec \((\d+\.\d\d) MB/sec\), (\d+\.\d\d) ms avg latency, "
                   r"(\d+\.\d\d) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")
HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms"
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
ROW = re.compile(rf"^({DATE}), ({DATE}), (\d+\.\d{{4}}), (\d+\.\d{{4}}), (\d+\.\d{{4}}), (\d+), (\d+)$")


def run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["perf", *args])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- perf producer

def test_producer_fractional_throughput_subprocess(bootstrap):
    make_topic(bootstrap, "slow")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quafka", "perf", "producer", "--bootstrap-server", bootstrap,
                           "--topic", "slow", "--num-records", "2", "--payload-monotonic", "--throughput", "0.5"],
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    match = FINAL.match(proc.stdout.strip())
    assert match, proc.stdout
    assert int(match[1]) == 2
    assert float(match[2]) < 1.5  # 2 records over about 2 s
    assert elapsed >= 1.9  # 0.5 records/s: the second record waits 2 s
    latencies = [int(match[i]) for i in range(6, 10)]
    assert latencies == sorted(latencies) and latencies[-1] <= float(match[5])
    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        assert [r.value for r in reader.read("slow", 0, 0)] == [b"0", b"1"]


def test_producer_unthrottled_record_size_and_props(bootstrap, capsys):
    make_topic(bootstrap, "fast", partitions=2)
    code, out, err = run(capsys, "producer", "--bootstrap-server", bootstrap, "--topic", "fast",
                         "--num-records", "2000",
                         "--record-size", "100", "--throughput", "-1", "--producer-props", "acks=1", "linger.ms=2")
    assert code == 0, err
    match = FINAL.match(out.strip().splitlines()[-1])
    assert match, out
    assert int(match[1]) == 2000
    records_per_s, mb_per_s = float(match[2]), float(match[3])
    assert mb_per_s == pytest.approx(records_per_s * 100 / 2**20, abs=0.01)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        ends = admin.list_offsets({("fast", p): "latest" for p in (0, 1)})
    assert sum(offset for offset, _ in ends.values()) == 2000
    # librdkafka's sticky partitioner may put every record on one partition: read one that has them
    # (reading [0, 5) of an empty partition long-polls until records arrive).
    partition = max((0, 1), key=lambda p: ends[("fast", p)][0])
    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        values = [r.value for r in reader.read("fast", partition, 0, 5)]
    assert len(values) == 5
    assert all(len(v) == 100 and re.fullmatch(rb"[A-Z]+", v) for v in values)


def test_producer_warmup_prints_steady_state_line(bootstrap, capsys):
    make_topic(bootstrap, "warm")
    code, out, _ = run(capsys, "producer", "--bootstrap-server", bootstrap, "--topic", "warm", "--num-records", "50",
                       "--payload-monotonic", "--throughput", "-1", "--warmup-records", "10",
                       "--command-property", "acks=1")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "Warmup first 10 records. Steady state results will print after the complete test summary."
    assert lines[1].startswith("50 records sent, ")
    assert lines[2].startswith("40 steady state records sent, ")


@pytest.mark.parametrize("args, message", [
    (["--num-records", "5", "--throughput", "1"],
     "exactly one of --record-size, --payload-file and --payload-monotonic"),
    (["--num-records", "5", "--throughput", "0", "--payload-monotonic"], "--throughput must be positive"),
    (["--num-records", "0", "--throughput", "1", "--payload-monotonic"], "--num-records should be greater than zero"),
    (["--num-records", "5", "--throughput", "1", "--record-size", "10", "--producer-props", "acks"],
     "Invalid property: acks"),
    (["--throughput", "1", "--payload-monotonic"], "argument --num-records is required"),
])
def test_producer_option_errors(capsys, args, message):
    code, out, err = run(capsys, "producer", "--topic", "t", *args)
    assert code == 1
    assert err.startswith("Error: ") and message in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- perf share-consumer

def test_share_consumer_columns_and_counts_subprocess(bootstrap):
    make_topic(bootstrap, "sc", partitions=2)
    set_group_configs(bootstrap, "perf-share-consumer", {"share.auto.offset.reset": "earliest",
                                                         "share.assignment.interval.ms": "0"})
    for partition in (0, 1):
        produce_batch(bootstrap, "sc", 150, partition=partition, tag="value-")
    size = 2 * sum(len(f"value-{i}") for i in range(150))

    proc = subprocess.run([sys.executable, "-m", "quafka", "perf", "share-consumer", "--bootstrap-server", bootstrap,
                           "--topic", "sc", "--num-records", "300", "--threads", "2", "--show-consumer-stats",
                           "--timeout", "5000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == HEADER
    per_consumer = [line for line in lines if line.startswith("Share consumer ")]
    assert [line.split(" consumption metrics- ")[0] for line in per_consumer] == \
        ["Share consumer 1", "Share consumer 2"]
    assert sum(int(ROW.match(line.split("- ", 1)[1])[6]) for line in per_consumer) == 300
    total = ROW.match(lines[-1])
    assert total, lines[-1]
    assert int(total[6]) == 300
    assert float(total[3]) == pytest.approx(size / 2**20, abs=1e-4)
    fetch_ms = int(total[7])
    assert float(total[5]) == pytest.approx(300 / (fetch_ms / 1000), rel=0.01)
    assert not any(line.startswith("WARNING") for line in lines)
    with Admin({"bootstrap.servers": bootstrap}) as admin:  # consumed records were accepted
        offsets = admin.list_share_group_offsets("perf-share-consumer", ["sc"])
    assert offsets == {("sc", 0): (150, 0), ("sc", 1): (150, 0)}


def test_share_consumer_timeout_warning_hide_header_and_date_format(bootstrap, capsys):
    make_topic(bootstrap, "sc-empty")
    code, out, err = run(capsys, "share-consumer", "--bootstrap-server", bootstrap, "--topic", "sc-empty",
                         "--messages", "10", "--group", "sc-empty-g", "--timeout", "300", "--hide-header",
                         "--date-format", "yyyy'T'HH")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "Warning: --messages is deprecated. Use --num-records instead."
    assert lines[1] == ("WARNING: Exiting before consuming the expected number of records: timeout (300 ms) exceeded. "
                        "You can use the --timeout option to increase the timeout.")
    assert re.fullmatch(r"\d{4}T\d\d, \d{4}T\d\d, 0\.0000, 0\.0000, 0\.0000, 0, \d+", lines[2])
    assert len(lines) == 3

    code, _, err = run(capsys, "share-consumer", "--topic", "x")
    assert code == 1 and "Exactly one of the following arguments is required: --messages, --num-records" in err
    code, _, err = run(capsys, "share-consumer", "--topic", "x", "--num-records", "1", "--date-format", "yyyy-bb")
    assert code == 1 and "Illegal pattern character 'b'" in err


def test_java_date_format():
    ms = int(time.mktime((2024, 3, 5, 7, 8, 9, 0, 0, -1)) * 1000) + 42
    assert java_date_format("yyyy-MM-dd HH:mm:ss:SSS", ms) == "2024-03-05 07:08:09:042"
    assert java_date_format("dd/MM/yy h 'o''clock' a", ms) == "05/03/24 7 o'clock AM"
    assert java_date_format("MMM d", ms) == "Mar 5"
