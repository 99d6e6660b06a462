"""One broker per data directory (Kafka's LogManager.lockLogDirs: a lock on `<log dir>/.lock`).

A second broker pointed at a running broker's directory refuses to start, naming the directory and
the process that holds it; after a SIGKILL of the holder a new broker starts on it at once (the
kernel drops a dead process's flock; the stale pid it left in the file does not matter); two
embedded brokers in one process are refused too; a memory broker takes no lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support import free_port, port_open, produce_batch, wait_until

from quafka import EmbeddedBroker
from quafka.broker import config as cfg
from quafka.broker.server.state import BrokerState
from quafka.broker.storage.dir_lock import LOCK_FILE, DirectoryLockedError, DirLock


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)


def read_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dir-lock-verify", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            assert m.error() is None, m.error()
            values.append(m.value())
    consumer.close()
    return values


def test_second_broker_process_on_a_locked_directory_exits_naming_directory_and_holder(tmp_path, broker_process):
    data = tmp_path / "data"
    first = broker_process(str(data))
    create_topic(first.bootstrap_servers, "still-mine")
    assert (data / LOCK_FILE).read_text().strip() == str(first.proc.pid)
    second_port = free_port()  # another port: the refusal must come from the lock, not from a bind
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "quafka", "broker", "--override", f"log.dirs={data}",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{second_port}"],
        capture_output=True, text=True, timeout=60)
    elapsed_s = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert "Failed to acquire lock on file .lock in" in result.stderr
    assert str(data) in result.stderr
    assert f"process {first.proc.pid} (" in result.stderr  # the holder, with its command line
    assert "quafka broker" in result.stderr
    assert elapsed_s < 30  # it stops at the lock; nothing is read or recovered
    assert not port_open(second_port)
    # the holder goes on serving, and still holds the directory
    assert produce_batch(first.bootstrap_servers, "still-mine", 3) == 0
    assert (data / LOCK_FILE).read_text().strip() == str(first.proc.pid)
    assert first.stop() == 0


def test_after_sigkill_of_the_holder_a_new_broker_starts_at_once_with_the_data(tmp_path, broker_process):
    data = tmp_path / "data"
    first = broker_process(str(data))
    create_topic(first.bootstrap_servers, "kept")
    base = produce_batch(first.bootstrap_servers, "kept", 5, tag="a")
    assert base == 0
    killed_pid = first.proc.pid
    first.kill()
    assert (data / LOCK_FILE).read_text().strip() == str(killed_pid)  # a stale pid stays behind
    # BrokerProcess.start polls the port (no sleep); it fails if the broker exits instead
    second = broker_process(str(data))
    assert (data / LOCK_FILE).read_text().strip() == str(second.proc.pid)
    assert read_values(second.bootstrap_servers, "kept", 5) == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert produce_batch(second.bootstrap_servers, "kept", 1) == 5
    assert second.stop() == 0


def test_an_embedded_broker_on_a_directory_another_embedded_broker_holds_is_refused(tmp_path):
    data = str(tmp_path / "data")
    with EmbeddedBroker(data) as first:
        create_topic(first.bootstrap_servers, "t")
        produce_batch(first.bootstrap_servers, "t", 2)
        with pytest.raises(DirectoryLockedError) as refused:
            EmbeddedBroker(data).start()
        message = str(refused.value)
        assert os.path.abspath(data) in message and f"this process (pid {os.getpid()})" in message
        assert refused.value.holder_pid == os.getpid()
        assert produce_batch(first.bootstrap_servers, "t", 1) == 2  # the holder is untouched
    # stopping the first released the lock
    with EmbeddedBroker(data) as again:
        assert produce_batch(again.bootstrap_servers, "t", 1) == 3


def test_a_refused_start_leaves_no_lock_behind(tmp_path):
    """The broker that failed to start must not keep the directory (nor half-take it)."""
    data = str(tmp_path / "data")
    outsider = DirLock(data).acquire()  # as another process would hold it
    try:
        with pytest.raises(DirectoryLockedError):
            EmbeddedBroker(data).start()
    finally:
        outsider.release()
    with EmbeddedBroker(data) as broker:
        create_topic(broker.bootstrap_servers, "t")
        assert produce_batch(broker.bootstrap_servers, "t", 1) == 0


def test_a_memory_broker_takes_no_lock(tmp_path):
    data = str(tmp_path / "data")
    config = cfg.BrokerConfig.from_props({"log.dirs": data, "listeners": "PLAINTEXT://127.0.0.1:0"})
    holder = DirLock(data).acquire()
    try:
        states = [BrokerState(config, memory=True, clock_ms=lambda: 0) for _ in range(2)]
        for state in states:
            state.load()  # no DirectoryLockedError although the directory is locked
        for state in states:
            state.close()
    finally:
        holder.release()
    assert sorted(os.listdir(data)) == [LOCK_FILE]  # only the outsider's file: nothing written


def test_lock_is_released_on_close_and_can_be_retaken_in_the_same_process(tmp_path):
    data = str(tmp_path / "data")
    config = cfg.BrokerConfig.from_props({"log.dirs": data, "listeners": "PLAINTEXT://127.0.0.1:0"})
    state = BrokerState(config, memory=False, clock_ms=lambda: 0)
    state.load()
    with pytest.raises(DirectoryLockedError):
        DirLock(data).acquire()
    state.close()
    lock = wait_until(lambda: DirLock(data).acquire(), 5, message="the lock to be free")
    lock.release()
