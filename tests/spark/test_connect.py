"""format("quafka") from a Spark Connect client (issue 32): docs/spark.md's pipeline — a batch read,
a share-group stream whose foreachBatch writes every micro-batch through the sink — run by
tests/spark/connect_client.py (a Connect client in a subprocess) against the Connect server of the
`spark_connect` fixture (pyspark's own server, tests/support/spark_connect.py). The broker is this
process's EmbeddedBroker, reached over loopback TCP by the server's Python workers."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from support import process_running, wait_until
from support.readers import read_to_end

from quafka.client import Admin

pytestmark = pytest.mark.spark

CLIENT = Path(__file__).resolve().parent / "connect_client.py"
N = 2000
STREAM_DEADLINE_S = 150  # the stream took 53 s on this 2-core machine at load 9 (other Spark test runs)
PER_TRIGGER = 1000  # so the stream takes at least 2 micro-batches


class Client:
    """connect_client.py as a subprocess; its JSON lines arrive on a queue (a thread reads them)."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CLIENT), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # end of output: the client exited

    def next(self, key: str, timeout_s: float) -> dict:
        """The next JSON line, which must hold `key` (an "error" line fails the test)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the Connect client said nothing with {key!r} in {timeout_s} s; "
                                     f"stderr:\n{self.tail()}") from None
            if line is None:
                raise AssertionError(f"the Connect client exited ({self.proc.wait(10)}) before {key!r}; "
                                     f"stderr:\n{self.tail()}")
            if not line.startswith("{"):
                continue  # pyspark may print to stdout too
            message = json.loads(line)
            if key in message:
                return message
            if "error" in message:
                raise AssertionError(f"the Connect client failed: {message['error']}\nstderr:\n{self.tail()}")

    def tail(self) -> str:
        return "".join(self.stderr[-60:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def produce(bootstrap: str, topic: str, n: int) -> set[tuple[str, str]]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    return {(f"k{i}", f"v{i}") for i in range(n)}


def drained(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    """Every partition's share-group start offset at its end and nothing in flight."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        state = admin.list_share_group_offsets(group, [topic])
    return all(state.get((topic, p)) == (end, 0) for p, end in ends.items())


def test_connect_client_runs_batch_read_share_group_stream_and_sink(spark_connect, bootstrap, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"cin-{suffix}", f"cout-{suffix}", f"cg-{suffix}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({source: (2, 1), sink: (1, 1)})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest",
                                             "share.assignment.interval.ms": "0"})
    expected = produce(bootstrap, source, N)
    ends = {0: N // 2, 1: N - N // 2}

    started = time.monotonic()
    client = Client(["--remote", spark_connect.url, "--bootstrap", bootstrap, "--input", source,
                     "--output", sink, "--group", group, "--checkpoint", str(tmp_path / "ckpt"),
                     "--max-records-per-trigger", str(PER_TRIGGER), "--register",
                     "--timeout", str(STREAM_DEADLINE_S + 60)])
    try:
        assert client.next("registered", 30)["registered"] == "quafka"
        registered = time.monotonic()
        batch = client.next("batch", 120)["batch"]
        batch_read = time.monotonic()
        assert len(batch) == N, f"the batch read counted {len(batch)} of {N}"
        assert {tuple(r) for r in batch} == expected
        client.next("started", 30)
        stream_started = time.monotonic()

        deadline = time.monotonic() + STREAM_DEADLINE_S
        out: list = []
        while not (len(out) >= N and drained(bootstrap, group, source, ends)):
            assert client.proc.poll() is None, f"the Connect client exited early; stderr:\n{client.tail()}"
            assert time.monotonic() < deadline, (
                f"after {STREAM_DEADLINE_S} s the output topic holds {len(out)} of {N} records "
                f"(drained: {drained(bootstrap, group, source, ends)})")
            time.sleep(0.5)
            out = read_to_end(bootstrap, sink, timeout_s=10)
        streamed = time.monotonic()
        # the server's processes carry its mark (what its teardown checks): the JVM, Python
        # workers, and the query's runner, which must end with the query
        server = spark_connect.server_processes()
        assert spark_connect.proc.pid in {p.pid for p in server}
        runners = [p.pid for p in server if "python_streaming_source_runner" in p.cmdline]
        assert runners, [p.cmdline[:120] for p in server]
        client.proc.stdin.write("stop\n")
        client.proc.stdin.flush()
        stopped = client.next("stopped", 30)
        assert client.proc.wait(30) == 0, client.tail()
        wait_until(lambda: not any(process_running(pid) for pid in runners), 30,
                   message=f"the query's runner {runners} to end with query.stop()")
    finally:
        client.stop()
    ended = time.monotonic()

    written = Counter((m.key().decode(), m.value().decode()) for m in out)
    assert set(written) == expected, f"missing {len(expected - set(written))}, unexpected {set(written) - expected}"
    assert stopped["input_rows"] >= N and stopped["batches"] >= N // PER_TRIGGER
    duplicates = sum(c - 1 for c in written.values())
    print(f"Connect pipeline, {N} records: client up and registered {registered - started:.1f} s, batch read "
          f"{batch_read - registered:.1f} s, stream started {stream_started - batch_read:.1f} s, every record in "
          f"the output and the group drained {streamed - stream_started:.1f} s ({stopped['batches']} micro-batches, "
          f"{stopped['input_rows']} input rows, {duplicates} duplicates), stopped {ended - streamed:.1f} s")


def test_connect_client_without_quafka_reads_through_the_servers_lookup(spark_connect, bootstrap):
    """docs/spark.md: quafka is optional on a Connect client — the server finds format("quafka")
    through pyspark_quafka in its own Python; here the client cannot import quafka at all."""
    topic = f"cplain-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (2, 1)})
    expected = produce(bootstrap, topic, 100)
    client = Client(["--remote", spark_connect.url, "--bootstrap", bootstrap, "--input", topic,
                     "--output", "unused", "--group", "unused", "--checkpoint", "unused",
                     "--without-quafka", "--batch-only"])
    try:
        assert client.next("without_quafka", 30)["without_quafka"] is True
        batch = client.next("batch", 120)["batch"]
        assert client.proc.wait(30) == 0, client.tail()
    finally:
        client.stop()
    assert len(batch) == 100 and {tuple(r) for r in batch} == expected
