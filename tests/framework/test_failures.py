"""Failures made visible (framework/errors.py, dead_letters.py): the sanitiser, the rate-limited
failure log, distinct outcomes, dead letters that say why — exactly one per given-up job whether
or not the broker has a dead-letter queue — and exception text that cannot wedge or stop a worker
(a lone surrogate, a ``__str__`` that raises, a 5 MB message). Against a real broker over loopback
with confluent-kafka producing the dead letters; the broker's lock is 1 s."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from support import wait_until
from support.dlq import read_topic
from support.framework_jobs import BROKER_CONFIG, LOCK_MS, create_topic, produce, share_group_from_earliest

from quafka.client import Admin
from quafka.framework import App, Backoff, Consumer, Worker
from quafka.framework import errors as errors_module
from quafka.framework.errors import describe

FAST = Backoff(initial_ms=50, multiplier=1.0, max_ms=50)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class _BadStr(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class Failing(Consumer):
    """Raises what the value names: bad-size, surrogate, bad-str, huge (a 5 MB message); else done."""

    def consume_one(self, message):
        value = message.value
        if value.startswith(b"bad-size"):
            raise ValueError("bad size")
        if value.startswith(b"surrogate"):
            raise ValueError(b"caf\xe9 \xff".decode("utf-8", "surrogateescape"))
        if value.startswith(b"bad-str"):
            raise _BadStr()
        if value.startswith(b"huge"):
            raise ValueError("x" * 5_000_000)


def collect(app: App) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    lock = threading.Lock()

    def record(event):
        with lock:
            seen.append((event.name, dict(event)))
    app.events.subscribe("message.settled", record)
    app.events.subscribe("message.failed", record)
    return seen


def outcomes(seen, value: bytes) -> list[str]:
    return [e["outcome"] for name, e in list(seen) if name == "message.settled" and e["message"].value == value]


# ----------------------------------------------------------------------------- units


def test_describe_makes_any_exception_text_safe_and_bounded():
    surrogate = describe(ValueError(b"caf\xe9".decode("utf-8", "surrogateescape")))
    assert surrogate.message == "caf?" and surrogate.error_class == "ValueError"
    surrogate.message.encode("utf-8")  # what a header needs
    bad_str = describe(_BadStr())
    assert bad_str.message == "<str() raised RuntimeError>" and bad_str.error_class.endswith("test_failures._BadStr")
    huge = describe(ValueError("x" * 5_000_000))
    assert len(huge.message) < errors_module.MESSAGE_MAX_CHARS + 40 and huge.message.endswith("more characters]")
    try:
        raise KeyError("k")
    except KeyError as exc:
        traced = describe(exc)
    assert traced.traceback.startswith("Traceback (most recent call last)") and "KeyError: 'k'" in traced.traceback
    assert len(traced.error_id) == 12 and traced.error_id != huge.error_id


def test_the_failure_log_is_rate_limited_per_route_and_class_and_says_what_it_left_out(caplog, monkeypatch):
    from quafka.framework.messages import Message

    failures = errors_module.Failures()
    message = Message("jobs", 0, 7, 0, b"k", b"v", [], 1)
    info = describe(ValueError("bad size"))
    with caplog.at_level(logging.WARNING, logger="quafka.framework"):
        for _ in range(errors_module.LOG_BURST + 5):
            failures.record("g/jobs", message, info, "retried", 3)
        failures.record("g/jobs", message, describe(KeyError("other class")), "retried", 3)
        failures.record("g/other", message, info, "dead-lettered", 3)  # another route: its own budget
    lines = [r for r in caplog.records if "job failed" in r.getMessage()]
    assert len(lines) == errors_module.LOG_BURST + 2
    assert lines[0].levelno == logging.WARNING and lines[-1].levelno == logging.ERROR  # retried vs given up
    first = lines[0].getMessage()
    assert "route g/jobs: job failed on jobs-0@7, key b'k', attempt 1/3: ValueError: bad size -> retried" in first
    assert f"[error {info.error_id}]" in first
    monkeypatch.setattr(errors_module, "LOG_WINDOW_S", 0.0)  # the window has passed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="quafka.framework"):
        failures.record("g/jobs", message, info, "retried", 3)
    [line] = [r.getMessage() for r in caplog.records]
    assert "(5 similar failures of this route were not logged in the last 0 s)" in line
    assert len(failures.errors("g/jobs")) == errors_module.LOG_BURST + 7  # every one kept, logged or not
    assert failures.counts()["g/jobs"] == {"ValueError": errors_module.LOG_BURST + 6, "KeyError": 1}


# ----------------------------------------------------------------------------- against a broker


def share_route(broker, consumer, values, **settings):
    bs = broker.bootstrap_servers
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    produce(bs, topic, values)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, consumer, **{"lock_duration_ms": LOCK_MS, "backoff_margin_ms": 200,
                                                    "max_poll_records": 1, **settings})
    return app, f"{group}/{topic}", topic, group


@pytest.mark.parametrize("share_version", [2, 1], ids=["broker-dlq", "no-broker-dlq"])
def test_a_job_failing_every_attempt_is_logged_counted_and_dead_lettered_exactly_once(make_broker, caplog,
                                                                                       share_version):
    broker = make_broker(config=BROKER_CONFIG)
    bs = broker.bootstrap_servers
    if share_version == 1:
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.update_features({"share.version": 1}, upgrade_type="safe_downgrade")
    dlq = unique("dlq.jobs")
    app, route, topic, group = share_route(broker, Failing, [b"ok-1", b"bad-size", b"ok-2"], max_attempts=3,
                                           backoff=FAST, backoff_mode="pause", dead_letter_topic=dlq, concurrency=2)
    seen = collect(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10, metrics_port=0)
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        worker.start()
        try:
            wait_until(lambda: "dead-lettered" in outcomes(seen, b"bad-size"), 30, message="given up after 3 attempts")
            wait_until(lambda: sorted(v for n, e in list(seen) if n == "message.settled" and e["outcome"] == "accepted"
                                      for v in [e["message"].value]) == [b"ok-1", b"ok-2"], 20, message="the others")
            import urllib.request
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{worker._metrics.port}/metrics", timeout=5).read().decode()
        finally:
            worker.stop()
            assert worker.wait() == 0
    mode = worker.runtime.dead_letters.mode(worker.routes[0])
    assert mode == ("broker" if share_version == 2 else "produce")
    assert outcomes(seen, b"bad-size") == ["retried", "retried", "dead-lettered"]
    # the log: each attempt once, with its traceback; the last at ERROR
    lines = [r for r in caplog.records if "job failed" in r.getMessage() and "bad size" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING, logging.ERROR]
    for attempt, r in enumerate(lines, 1):
        text = r.getMessage()
        assert f"route {route}: job failed on {topic}-0@1, attempt {attempt}/3: ValueError: bad size" in text
        assert 'raise ValueError("bad size")' in text and "Traceback (most recent call last)" in text
    assert f"dead letter written to {dlq}" in lines[-1].getMessage()
    # the metrics: by class and outcome
    assert f'quafka_framework_failures_total{{route="{route}",error_class="ValueError",outcome="retried"}} 2' in metrics.splitlines()
    assert f'quafka_framework_failures_total{{route="{route}",error_class="ValueError",outcome="dead-lettered"}} 1' \
        in metrics.splitlines()
    # the summary
    assert worker.stats()[route]["dead-lettered"] == 1 and worker.stats()[route]["retried"] == 2
    summary = [r.getMessage() for r in caplog.records if "stopped after" in r.getMessage()]
    assert summary == [f"route {route}: stopped after 2 jobs done, 3 failed; messages: 2 accepted, 2 retried, "
                       f"0 rejected, 1 dead-lettered; failures by class: ValueError 3"]
    # the dead letter: once, with the payload and why
    with Admin({"bootstrap.servers": bs}) as admin:
        assert admin.list_share_group_offsets(group, [topic])[(topic, 0)][0] == 3
    [letter] = read_topic(bs, dlq)
    headers = {k: v.decode() for k, v in letter.headers}
    assert letter.value == b"bad-size"
    assert headers["quafka.error.class"] == "ValueError" and headers["quafka.error.message"] == "bad size"
    assert headers["quafka.dlq.reason"] == "max-attempts" and headers["quafka.error.attempts"] == "3"
    assert headers["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."
    assert 'raise ValueError("bad size")' in headers["quafka.error.traceback"]
    assert headers["quafka.error.id"] in lines[-1].getMessage()
    assert worker.errors(route)[-1].outcome == "dead-lettered"


def test_exception_text_that_cannot_be_encoded_or_sent_is_dead_lettered_once_and_the_worker_goes_on(make_broker,
                                                                                                      caplog):
    broker = make_broker(config=BROKER_CONFIG)
    dlq = unique("dlq.jobs")
    values = [b"surrogate", b"bad-str", b"huge", b"after"]
    app, route, topic, _ = share_route(broker, Failing, values, max_attempts=1, dead_letter_topic=dlq,
                                       dead_letter_mode="produce")
    seen = collect(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        worker.start()
        try:
            wait_until(lambda: all(outcomes(seen, v) for v in values), 60, message="every job settled")
        finally:
            worker.stop()
            assert worker.wait() == 0  # no worker thread died
    assert {v: outcomes(seen, v) for v in values} == {b"surrogate": ["dead-lettered"], b"bad-str": ["dead-lettered"],
                                                      b"huge": ["dead-lettered"], b"after": ["accepted"]}
    letters = {r.value: {k: v for k, v in r.headers} for r in read_topic(broker.bootstrap_servers, dlq)}
    assert sorted(letters) == [b"bad-str", b"huge", b"surrogate"]  # one each
    assert letters[b"surrogate"]["quafka.error.message"].decode() == "caf? ?"
    assert letters[b"bad-str"]["quafka.error.message"] == b"<str() raised RuntimeError>"
    huge = letters[b"huge"]["quafka.error.message"]
    assert len(huge) < 2100 and huge.endswith(b"more characters]")


class RaisesLarge(Consumer):
    """Fails with a traceback too large for the dead-letter topic's max.message.bytes."""

    def consume_one(self, message):
        raise ValueError("y" * 1500)


def test_a_dead_letter_too_large_for_its_topic_is_written_smaller_not_retried_forever(make_broker, caplog):
    broker = make_broker(config=BROKER_CONFIG)
    bs = broker.bootstrap_servers
    dlq = unique("dlq.small")
    create_topic(bs, dlq, configs={"max.message.bytes": "3000"})  # room for the minimal form, not the full
    app, route, topic, _ = share_route(broker, RaisesLarge, [b"p" * 500, b"q" * 2900], max_attempts=1,
                                       dead_letter_topic=dlq, dead_letter_mode="produce")
    seen = collect(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        worker.start()
        try:
            wait_until(lambda: len(outcomes(seen, b"p" * 500)) == 1 and len(outcomes(seen, b"q" * 2900)) == 1, 60,
                       message="both settled")
        finally:
            worker.stop()
            assert worker.wait() == 0
    letters = read_topic(bs, dlq)
    forms = sorted((len(r.value or b""), {k: v for k, v in r.headers}.get("quafka.error.traceback") is None)
                   for r in letters)
    # the 500-byte payload fits with the minimal headers; the 2,900-byte one only as headers
    assert forms == [(0, True), (500, True)]
    errors = [r.getMessage() for r in caplog.records if "in minimal form" in r.getMessage()
              or "in headers-only form" in r.getMessage()]
    assert len(errors) == 2


def test_a_group_delivery_limit_below_max_attempts_makes_the_worker_give_up_there_and_say_so(make_broker):
    """The group's share.delivery.count.limit 2 against the route's max_attempts 3: the broker gives
    the record up at delivery 2, so that is the worker's last attempt too — it writes the dead letter
    (with the error) and counts it, rather than release it for the broker to archive unseen."""
    broker = make_broker(config=BROKER_CONFIG)
    bs = broker.bootstrap_servers
    dlq = unique("dlq.jobs")
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group, **{"share.delivery.count.limit": "2"})
    produce(bs, topic, [b"bad-size"])
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, Failing, lock_duration_ms=LOCK_MS, backoff_margin_ms=200, max_poll_records=1,
                                 max_attempts=3, backoff=FAST, dead_letter_topic=dlq)
    seen = collect(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: outcomes(seen, b"bad-size")[-1:] == ["dead-lettered"], 30, message="given up")
    finally:
        worker.stop()
        assert worker.wait() == 0
    assert outcomes(seen, b"bad-size") == ["retried", "dead-lettered"]
    assert worker.stats()[f"{group}/{topic}"]["dead_lettered"] == 1
    [letter] = read_topic(bs, dlq)
    headers = {k: v.decode() for k, v in letter.headers}
    assert headers["quafka.error.attempts"] == "2" and headers["quafka.dlq.reason"] == "max-attempts"
    assert headers["quafka.error.class"] == "ValueError"
