"""`quafka broker` raises its soft open-file limit (RLIMIT_NOFILE) to the hard limit at start.

Every connection holds a descriptor, and the usual soft limit (1024) stopped the broker near a
thousand connections although the hard limit allows far more: beyond it the listener's accept
fails with EMFILE and new clients wait unanswered (found by benchmarks/load_churn.py's 10,000
idle connections). Apache Kafka's broker gets the raised limit from its JVM (HotSpot's MaxFDLimit,
on by default). The test starts the broker with a soft limit of 64, the hard limit unchanged, and
opens more connections than that: each must answer an ApiVersions request.
"""

from __future__ import annotations

import resource
import select
import socket
import struct
import subprocess
import sys
import time

INHERITED_SOFT = 64
CONNECTIONS = 200
DEADLINE_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api_versions_v0(correlation_id: int) -> bytes:
    # request header v1: api key 18, version 0, correlation id, null client id; an empty body
    return struct.pack(">ihhih", 10, 18, 0, correlation_id, -1)


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the broker did not listen on {port} within {DEADLINE_S} s")


def _answered(socks: list[socket.socket]) -> set[int]:
    """Indexes of the sockets whose ApiVersions response (correlation id = index) came back."""
    pending = {s.fileno(): (i, s, b"") for i, s in enumerate(socks)}
    answered: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN)
    while pending and time.monotonic() < deadline:
        for fd, _event in poller.poll(200):
            i, s, buf = pending[fd]
            try:
                data = s.recv(65536)
            except OSError:  # reset: the broker could not take the connection
                data = b""
            buf += data
            if not data or (len(buf) >= 8 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]):
                poller.unregister(fd)
                del pending[fd]
                if data and struct.unpack_from(">i", buf, 4)[0] == i:
                    answered.add(i)
            else:
                pending[fd] = (i, s, buf)
    return answered


def test_broker_serves_more_connections_than_the_soft_limit_it_started_with(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard >= 4 * CONNECTIONS, f"the hard limit {hard} is too low for the test"
    if soft < 2 * CONNECTIONS:  # the test's own sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * CONNECTIONS), hard))
    port = _free_port()

    def lower_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (INHERITED_SOFT, hard))

    proc = subprocess.Popen(
        [sys.executable, "-m", "quafka", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=lower_soft_limit)
    socks: list[socket.socket] = []
    try:
        _wait_listening(port, proc)
        for i in range(CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
            socks.append(s)
            try:
                s.sendall(_api_versions_v0(i))
            except OSError:  # reset: counted as unanswered below
                pass
        answered = _answered(socks)
        assert len(answered) == CONNECTIONS, (
            f"{len(answered)} of {CONNECTIONS} connections answered by a broker started with a soft open-file "
            f"limit of {INHERITED_SOFT}")
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    expected = "raised the open-file limit (RLIMIT_NOFILE) from 64 to"
    assert expected in stderr, stderr[-2000:]

