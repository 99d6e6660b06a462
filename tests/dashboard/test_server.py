"""The dashboard served over loopback HTTP (uvicorn): live updates over server-sent events shared by
every viewer of a page (one sampler for five streams, gone when they leave), the broker process
serving it and still stopping with status 0 on SIGTERM with a stream open, and the standalone
dashboard against a broker without quafka's extension APIs (as Apache Kafka) saying which panels
need a quafka broker."""

from __future__ import annotations

import socket
import time
import urllib.request

from dashboard.conftest import GROUP, TOPIC, Dash, Scenario
from support import free_port, wait_until

from quafka import EmbeddedBroker
from quafka.dashboard.server import DashboardThread
from quafka.dashboard.settings import DashboardSettings


def open_stream(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


def read_until(sock: socket.socket, needle: bytes, timeout_s: float = 10.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout_s
    while needle not in data:
        assert time.monotonic() < deadline, f"no {needle!r} in {data[:2000]!r}"
        chunk = sock.recv(65536)
        assert chunk, f"the stream ended before {needle!r}: {data[:2000]!r}"
        data += chunk
    return data


def test_five_viewers_of_a_page_share_one_sampler_that_stops_when_they_leave(scenario):
    settings = DashboardSettings({"bootstrap.servers": scenario.bootstrap}, listen="http://127.0.0.1:0")
    with DashboardThread(settings) as dashboard:
        port = dashboard.server.port
        hub = dashboard.server.hub
        path = f"/events?page=share-group&group={GROUP}"
        streams = [open_stream(port, path) for _ in range(5)]
        try:
            first = [read_until(s, b"event: sample") for s in streams]
            head, _, body = first[0].partition(b"\r\n\r\n")
            assert b"200 OK" in head and b"text/event-stream" in head and b"content-security-policy" in head.lower()
            assert b"event: members\ndata: <section id=\"members\"" in body
            assert hub.sampler_count == 1 and hub.subscribers(f"share-group?group={GROUP}") == 5
        finally:
            for s in streams:
                s.close()
        wait_until(lambda: hub.sampler_count == 0, 10, message="the sampler to stop once every viewer left")


def test_the_broker_serves_the_dashboard_and_sigterm_with_a_stream_open_exits_0(tmp_path, broker_process):
    port = free_port()
    dead_worker = "http://127.0.0.1:1/metrics"  # quafka.dashboard.worker.metrics.urls reaches the workers page
    broker = broker_process(str(tmp_path / "data"), overrides={"quafka.dashboard.listener": f"http://127.0.0.1:{port}",
                                                               "quafka.dashboard.worker.metrics.urls": dead_worker})
    wait_until(lambda: f"dashboard: http://127.0.0.1:{port}/" in broker.read_log(), 10, message="the URL logged")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/workers", timeout=10) as answer:
        workers = answer.read().decode()
    assert f'data-url="{dead_worker}"' in workers and f"scraping {dead_worker} failed" in workers
    stream = open_stream(port, "/events?page=overview")
    try:
        body = read_until(stream, b"event: sample")
        assert b'event: broker\ndata: <section id="broker"' in body and b'data-quafka="true"' in body
        started = time.monotonic()
        assert broker.stop() == 0, broker.read_log()
        assert time.monotonic() - started < 10
    finally:
        stream.close()
    assert "Traceback" not in broker.read_log()


def test_against_a_broker_without_the_extension_the_quafka_panels_say_why(tmp_path):
    """quafka.api.extension.enable=false: the broker behaves as Apache Kafka toward clients."""
    with EmbeddedBroker(config={"quafka.api.extension.enable": "false"}) as broker:
        s = Scenario(broker).setup()
        try:
            dash = Dash(broker.bootstrap_servers, actions_enabled=True)
            overview = dash.get("/").text
            page = dash.get(f"/share-group?group={GROUP}&topic={TOPIC}&partition=0&offset=3").text
            action = dash.get(f"/actions/in-flight?group={GROUP}&topic={TOPIC}&partition=0&first=3&last=3"
                              "&action=release").text
        finally:
            s.close()
    assert 'data-quafka="false"' in overview and "need a quafka broker" in overview
    assert 'data-lag="' in page and 'class="member"' in page  # what Kafka's APIs give is there
    for text in (page, action):
        assert 'data-kind="needs-quafka"' in text and "needs a quafka broker" in text
    assert 'id="strip"' not in page


def test_a_dashboard_port_in_use_stops_the_broker_with_the_reason_and_how_to_turn_it_off(tmp_path):
    import subprocess
    import sys

    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "quafka", "broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
             "--override", f"log.dirs={tmp_path / 'data'}", "--override",
             f"quafka.dashboard.listener=http://127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
    finally:
        taken.close()
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"cannot start the dashboard on http://127.0.0.1:{port}" in done.stderr
    assert "`make run DASHBOARD=`" in done.stderr and "Traceback" not in done.stderr
