"""Pure parts of the dashboard: SSE framing (no payload can add a field of its own), the vendored
files' hashes, the Prometheus text parser of the workers page (and the page over a real HTTP
scrape), the settings' validation, and the CSRF token."""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
from importlib import resources

import pytest

from dashboard.conftest import Dash

from quafka.dashboard.csrf import Csrf
from quafka.dashboard.settings import DashboardSettings, SettingsError, parse_listen
from quafka.dashboard.sse import frame
from quafka.dashboard.workers import parse_exposition


def parse_event_stream(data: bytes) -> list[tuple[str, str]]:
    """The events a browser's EventSource sees (the HTML standard's parsing of text/event-stream:
    lines end at CRLF, LF or CR; a blank line dispatches; data lines are joined with LF)."""
    events, name, lines = [], "message", []
    for line in re.split(r"\r\n|\r|\n", data.decode()):
        if line == "":
            if lines:
                events.append((name, "\n".join(lines)))
            name, lines = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                lines.append(value)
    return events


@pytest.mark.parametrize("payload", ["plain", "a\rb", "a\nb", "a\r\nb", "x\r\revent: evil\rdata: <script>\r\r",
                                     "\n\nevent: evil\n\ndata: x\n", "id: 9\r\nretry: 1\r\n\r\nevent: evil"])
def test_sse_framing_cannot_be_broken_by_line_breaks_in_the_data(payload):
    events = parse_event_stream(frame("members", payload) + frame("sample", "7"))
    assert [name for name, _ in events] == ["members", "sample"]
    assert events[0][1] == "\n".join(re.split(r"\r\n|\r|\n", payload))  # every line kept, as LF
    with pytest.raises(ValueError):
        frame("bad name\nevent: x", "data")


def test_vendored_files_match_vendored_md():
    vendor = resources.files("quafka.dashboard") / "static" / "vendor"
    table = (vendor / "VENDORED.md").read_text()
    rows = re.findall(r"^\| (\S+) \| (\S+) \| (\S+) \| (\S+) \| ([0-9a-f]{64}) \|$", table, re.M)
    assert len(rows) == 3
    for name, version, licence, path, sha in rows:
        data = (vendor / path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha, f"{path} differs from its recorded sha256"
        assert f"-{version}/" in path and licence == "MIT"


EXPOSITION = """# HELP quafka_framework_jobs_total Jobs.
# TYPE quafka_framework_jobs_total counter
quafka_framework_jobs_total{route="g/jobs",status="finished"} 12
quafka_framework_jobs_total{route="g/jobs",status="failed"} 3
quafka_framework_failures_total{route="g/jobs",error_class="<b>Boom</b>",outcome="retried"} 2
quafka_framework_failures_total{route="g/jobs",error_class="a\\"q\\\\b",outcome="rejected"} 1
quafka_framework_messages_total{route="g/jobs",outcome="accepted"} 12
quafka_framework_workers{route="g/jobs"} 4
quafka_framework_messages_in_flight{route="g/jobs"} 1
quafka_framework_route_info{route="g/jobs",group="g",topic="jobs",group_type="share"} 1
"""


def test_prometheus_text_parser():
    samples = list(parse_exposition(EXPOSITION))
    assert samples[0] == ("quafka_framework_jobs_total", {"route": "g/jobs", "status": "finished"}, 12.0)
    assert ("quafka_framework_failures_total", {"route": "g/jobs", "error_class": 'a"q\\b', "outcome": "rejected"},
            1.0) in samples
    with pytest.raises(ValueError, match="line 1"):
        list(parse_exposition("not a sample line at all {"))


def test_workers_page_scrapes_a_metrics_url_and_escapes_what_it_shows(scenario):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        page = Dash(scenario.bootstrap, worker_metrics_urls=(url, "http://127.0.0.1:1/metrics")).get("/workers").text
    finally:
        server.shutdown()
        thread.join()
    assert 'data-route="g/jobs" data-workers="4" data-in-flight="1" data-finished="12" data-failed="3"' in page
    assert "&lt;b&gt;Boom&lt;/b&gt;" in page and "<b>Boom" not in page
    assert 'data-url="http://127.0.0.1:1/metrics"' in page and "scraping http://127.0.0.1:1/metrics failed" in page


@pytest.mark.parametrize("kwargs, problem", [
    ({"listen": "ftp://127.0.0.1:80"}, "scheme must be http"),
    ({"listen": "http://:80"}, "a host is required"),
    ({"listen": "http://127.0.0.1:99999"}, "between 0 and 65535"),
    ({"max_rows": 20_000}, "max_rows must be <= 10000"),
    ({"group_cadence_s": 0}, "group_cadence_s must be > 0"),
    ({"worker_metrics_urls": ("localhost:9300",)}, "is not an http(s)://"),
])
def test_settings_refuse_what_cannot_work(kwargs, problem):
    with pytest.raises(SettingsError, match=re.escape(problem)):
        DashboardSettings({"bootstrap.servers": "127.0.0.1:9092"}, **kwargs)
    assert parse_listen("http://[::1]:0") == ("::1", 0)


def test_csrf_token_is_bound_to_its_nonce_and_secret():
    a, b = Csrf(), Csrf()
    nonce = a.new_nonce()
    token = a.token_for(nonce)
    own = "http://127.0.0.1:8080"
    assert a.refusal({}, {"quafka_csrf": nonce}, token, own) is None
    assert a.refusal({}, {"quafka_csrf": a.new_nonce()}, token, own) is not None  # another nonce
    assert b.refusal({}, {"quafka_csrf": nonce}, token, own) is not None  # another process's secret
    assert a.refusal({"sec-fetch-site": "same-site"}, {"quafka_csrf": nonce}, token, own) is not None
    assert a.refusal({"origin": "null"}, {"quafka_csrf": nonce}, token, own) is not None
