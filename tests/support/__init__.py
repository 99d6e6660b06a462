"""Shared test helpers: polling with deadlines, free ports, a broker in a subprocess, the processes
below a process (Linux /proc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable


def wait_until(condition: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.01,
               message: str = "condition") -> object:
    """Poll `condition` until it returns a truthy value; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            # polling a port in the ephemeral range can connect a socket to itself (TCP
            # simultaneous open): that is no listener
            return s.getsockname() != s.getpeername()
    except OSError:
        return False


class BrokerProcess:
    """`quafka broker` in a child process, for SIGKILL and graceful-restart tests."""

    def __init__(self, data_dir: str, port: int | None = None, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(os.path.dirname(os.path.abspath(data_dir)), f"broker-{self.port}.log")

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> "BrokerProcess":
        args = [sys.executable, "-m", "quafka", "broker",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or port_open(self.port), timeout_s,
                   message=f"broker on port {self.port}")
        if self.proc.poll() is not None:
            raise AssertionError(f"broker exited with {self.proc.returncode}: {self.read_log()}")
        return self

    def read_log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def ensure_stopped(self) -> None:
        """Kill the broker if it still runs (test teardown after a failure)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if getattr(self, "_log", None) is not None and not self._log.closed:
            self._log.close()

    def stop(self, timeout_s: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout_s)
        self._log.close()
        return self.proc.returncode


# ----------------------------------------------------------------------------- processes (Linux /proc)

@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    state: str  # "Z": exited, not yet reaped
    cmdline: str


def process_info(pid: int) -> ProcessInfo | None:
    """The process `pid` from /proc (Linux), or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name in (...) may hold spaces
    return ProcessInfo(pid, int(fields[1]), fields[0], cmdline)


def processes() -> list[ProcessInfo]:
    found = (process_info(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [p for p in found if p is not None]


def process_running(pid: int) -> bool:
    """`pid` exists and has not exited (a zombie has)."""
    info = process_info(pid)
    return info is not None and info.state != "Z"


def descendants(pid: int, table: list[ProcessInfo] | None = None) -> list[ProcessInfo]:
    """The running processes below `pid` in the parent chain (children, their children, ...)."""
    table = processes() if table is None else table
    children: dict[int, list[ProcessInfo]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return [p for p in out if p.state != "Z"]


def environ_has(pid: int, name: str, value: str) -> bool:
    """Whether process `pid` was started with `name=value` in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{name}={value}".encode() in f.read().split(b"\0")
    except OSError:  # gone, or another user's
        return False


# ----------------------------------------------------------------------------- raw kio requests

class RawClient:
    """A blocking one-connection Kafka client for raw kio requests (tests only)."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0, client_id: str = "quafka-tests", *,
                 source_host: str | None = None) -> None:
        """`source_host`: the local address to connect from (any 127.x.y.z reaches a loopback broker)."""
        host, port = bootstrap.rsplit(":", 1)
        source = (source_host, 0) if source_host is not None else None
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s, source_address=source)
        self.correlation_id = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(len(frame).to_bytes(4, "big") + frame)

    def recv_frame(self) -> bytes:
        size = int.from_bytes(self._recv_exactly(4), "big")
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def encode(self, request) -> bytes:
        import io

        from kio.serial import entity_writer

        self.correlation_id += 1
        header_cls = request.__header_schema__
        fields = dict(request_api_key=request.__api_key__, request_api_version=request.__version__,
                      correlation_id=self.correlation_id, client_id=self.client_id)
        header = header_cls(**{k: v for k, v in fields.items() if k in header_cls.__dataclass_fields__})
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        return buf.getvalue()

    def request(self, request):
        """Send a kio request entity, return the decoded kio response entity."""
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        self.send_frame(self.encode(request))
        frame = self.recv_frame()
        resp_cls = load_response_schema(request.__api_key__, request.__version__)
        header, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation_id
        body, _ = entity_reader(resp_cls)(frame, used)
        return body


# ----------------------------------------------------------------------------- small share-group helpers

def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Group configs through confluent's AdminClient (IncrementalAlterConfigs, GROUP resource, SET)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        assert future.result(timeout=10) is None
    del admin  # librdkafka handles are closed when collected


def produce_batch(bootstrap: str, topic: str, count: int, *, partition: int = 0, timestamp_ms: int | None = None,
                  tag: str = "v") -> int:
    """Produce `count` records as ONE producer batch (a raw Produce v9, acks=-1); returns its base offset."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from quafka.broker.server.clock import wall_clock_ms
    from quafka.protocol.record_batch import build_batch

    records = build_batch([(None, f"{tag}{i}".encode()) for i in range(count)],
                          base_timestamp=wall_clock_ms() if timestamp_ms is None else timestamp_ms)
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))
    with RawClient(bootstrap) as raw:
        resp = raw.request(request)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, resp
    return part.base_offset
