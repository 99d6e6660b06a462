"""The worker's metrics exporter (quafka.framework.metrics): events published on a bus, the text
parsed back with prometheus_client. No broker."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quafka.framework.instrumentation import EventBus
from quafka.framework.metrics import CONTENT_TYPE, DURATION_BUCKETS_S, MetricsExporter
from quafka.framework.routing import Route

JOBS = Route("share", "workers", "jobs", object, {})
AUDIT = Route("consumer", "audit", "orders", object, {})


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of every sample in ``text``."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def value(parsed, name: str, **labels) -> float:
    return parsed[(name, frozenset(labels.items()))]


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def exporter(bus):
    gauges = {"workers/jobs": {"in_flight": 3, "workers": 4}}
    m = MetricsExporter(bus, [JOBS, AUDIT], lambda: gauges)
    m.gauge_values = gauges  # the tests change it
    yield m
    m.close()


def test_a_fresh_exporter_renders_every_series_at_zero(exporter):
    text = exporter.render()
    assert families(text) == {
        "quafka_framework_jobs": "counter",
        "quafka_framework_messages": "counter",
        "quafka_framework_job_duration_seconds": "histogram",
        "quafka_framework_job_failures": "counter",
        "quafka_framework_failures": "counter",
        "quafka_framework_renewals": "counter",
        "quafka_framework_backoffs": "counter",
        "quafka_framework_dead_letters_produced": "counter",
        "quafka_framework_rebalances": "counter",
        "quafka_framework_messages_in_flight": "gauge",
        "quafka_framework_workers": "gauge",
        "quafka_framework_route_info": "gauge",
    }
    parsed = samples(text)
    for route in ("workers/jobs", "audit/orders"):
        assert value(parsed, "quafka_framework_jobs_total", route=route, status="finished") == 0
        assert value(parsed, "quafka_framework_jobs_total", route=route, status="failed") == 0
        for outcome in ("accepted", "retried", "released", "rejected", "dead-lettered", "released-at-shutdown",
                        "lock-lost"):
            assert value(parsed, "quafka_framework_messages_total", route=route, outcome=outcome) == 0
        assert value(parsed, "quafka_framework_job_duration_seconds_count", route=route) == 0
        assert value(parsed, "quafka_framework_job_duration_seconds_sum", route=route) == 0
        assert value(parsed, "quafka_framework_renewals_total", route=route, result="ok") == 0
        assert value(parsed, "quafka_framework_renewals_total", route=route, result="failed") == 0
        for name in ("job_failures", "backoffs", "dead_letters_produced", "rebalances"):
            assert value(parsed, f"quafka_framework_{name}_total", route=route) == 0
    assert value(parsed, "quafka_framework_route_info", route="workers/jobs", group="workers", topic="jobs",
                 group_type="share") == 1
    assert value(parsed, "quafka_framework_route_info", route="audit/orders", group="audit", topic="orders",
                 group_type="consumer") == 1
    assert "# HELP quafka_framework_jobs_total " in text
    assert "# TYPE quafka_framework_job_duration_seconds histogram" in text


def test_counts_each_event_for_its_route(bus, exporter):
    for _ in range(3):
        bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.002)
    bus.publish("job.failed", route="workers/jobs", messages=[], duration_s=0.2, error=ValueError("x"), verdict="retry")
    for outcome, n in (("accepted", 5), ("released", 2), ("rejected", 1), ("dead-lettered", 4), ("retried", 3)):
        for _ in range(n):
            bus.publish("message.settled", route="workers/jobs", message=None, outcome=outcome)
    for _ in range(6):
        bus.publish("job.renewed", route="workers/jobs", messages=[], error=None)
    bus.publish("job.renew_failed", route="workers/jobs", messages=[], error=RuntimeError("lost"))
    bus.publish("job.backoff", route="workers/jobs", message=None, backoff_ms=100)
    bus.publish("job.backoff", route="workers/jobs", message=None, backoff_ms=200)
    bus.publish("dead_letter.produced", route="workers/jobs", message=None, topic="dlq")
    for _ in range(2):
        bus.publish("rebalance", route="audit/orders", assigned=[], revoked=[])
    bus.publish("job.finished", route="audit/orders", messages=[], duration_s=7.0)

    parsed = samples(exporter.render())
    jobs = "workers/jobs"
    assert value(parsed, "quafka_framework_jobs_total", route=jobs, status="finished") == 3
    assert value(parsed, "quafka_framework_jobs_total", route=jobs, status="failed") == 1
    assert value(parsed, "quafka_framework_job_failures_total", route=jobs) == 1
    assert {o: value(parsed, "quafka_framework_messages_total", route=jobs, outcome=o)
            for o in ("accepted", "released", "rejected", "dead-lettered", "retried")} == {
        "accepted": 5, "released": 2, "rejected": 1, "dead-lettered": 4, "retried": 3}
    assert value(parsed, "quafka_framework_renewals_total", route=jobs, result="ok") == 6
    assert value(parsed, "quafka_framework_renewals_total", route=jobs, result="failed") == 1
    assert value(parsed, "quafka_framework_backoffs_total", route=jobs) == 2
    assert value(parsed, "quafka_framework_dead_letters_produced_total", route=jobs) == 1
    assert value(parsed, "quafka_framework_rebalances_total", route=jobs) == 0
    # the other route's series are its own
    audit = "audit/orders"
    assert value(parsed, "quafka_framework_rebalances_total", route=audit) == 2
    assert value(parsed, "quafka_framework_jobs_total", route=audit, status="finished") == 1
    assert value(parsed, "quafka_framework_jobs_total", route=audit, status="failed") == 0
    assert value(parsed, "quafka_framework_job_duration_seconds_count", route=audit) == 1
    assert value(parsed, "quafka_framework_messages_total", route=audit, outcome="accepted") == 0


def test_job_durations_fill_a_cumulative_histogram(bus, exporter):
    durations = [0.0005, 0.001, 0.003, 0.05, 0.07, 0.7, 2.0, 45.0, 120.0]
    for d in durations[:-2]:
        bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=d)
    for d in durations[-2:]:
        bus.publish("job.failed", route="workers/jobs", messages=[], duration_s=d, error=None, verdict="reject")

    text = exporter.render()
    parsed = samples(text)
    buckets = {}
    for (name, labels), v in parsed.items():
        labels = dict(labels)
        if name == "quafka_framework_job_duration_seconds_bucket" and labels["route"] == "workers/jobs":
            buckets[float(labels["le"])] = v
    assert list(buckets) == [*DURATION_BUCKETS_S, float("inf")]
    assert buckets == {0.001: 2, 0.005: 3, 0.01: 3, 0.05: 4, 0.1: 5, 0.5: 5, 1.0: 6, 5.0: 7, 10.0: 7, 30.0: 7,
                       60.0: 8, float("inf"): 9}  # le is "<=": 0.001 and 0.05 fall in their own bucket
    assert value(parsed, "quafka_framework_job_duration_seconds_count", route="workers/jobs") == 9
    assert value(parsed, "quafka_framework_job_duration_seconds_sum", route="workers/jobs") == pytest.approx(
        sum(durations))
    assert 'quafka_framework_job_duration_seconds_bucket{route="workers/jobs",le="+Inf"} 9' in text
    assert 'quafka_framework_job_duration_seconds_bucket{route="workers/jobs",le="0.001"} 2' in text


def test_gauges_are_read_when_scraped(bus, exporter):
    parsed = samples(exporter.render())
    assert value(parsed, "quafka_framework_messages_in_flight", route="workers/jobs") == 3
    assert value(parsed, "quafka_framework_workers", route="workers/jobs") == 4
    # a route the callable does not mention reads 0
    assert value(parsed, "quafka_framework_messages_in_flight", route="audit/orders") == 0
    assert value(parsed, "quafka_framework_workers", route="audit/orders") == 0

    exporter.gauge_values["workers/jobs"] = {"in_flight": 0, "workers": 1}
    exporter.gauge_values["audit/orders"] = {"in_flight": 7, "workers": 2}
    parsed = samples(exporter.render())
    assert value(parsed, "quafka_framework_messages_in_flight", route="workers/jobs") == 0
    assert value(parsed, "quafka_framework_workers", route="workers/jobs") == 1
    assert value(parsed, "quafka_framework_messages_in_flight", route="audit/orders") == 7
    assert value(parsed, "quafka_framework_workers", route="audit/orders") == 2


def test_a_failing_gauge_callable_leaves_the_gauges_out_not_the_scrape(bus, caplog):
    def broken():
        raise RuntimeError("boom")

    m = MetricsExporter(bus, [JOBS], broken)
    try:
        bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.01)
        parsed = samples(m.render())
        assert value(parsed, "quafka_framework_jobs_total", route="workers/jobs", status="finished") == 1
        assert not any(name == "quafka_framework_workers" for name, _ in parsed)
        assert "reading the worker gauges failed" in caplog.text
    finally:
        m.close()


def test_label_values_are_escaped(bus):
    odd = Route("share", 'we"ird\\group', "line\nbreak", object, {})
    m = MetricsExporter(bus, [odd], lambda: {odd.name: {"in_flight": 1, "workers": 2}})
    try:
        bus.publish("job.finished", route=odd.name, messages=[], duration_s=0.01)
        bus.publish("message.settled", route=odd.name, message=None, outcome="accepted")
        text = m.render()
        assert 'route="we\\"ird\\\\group/line\\nbreak"' in text
        parsed = samples(text)
        assert value(parsed, "quafka_framework_jobs_total", route=odd.name, status="finished") == 1
        assert value(parsed, "quafka_framework_messages_total", route=odd.name, outcome="accepted") == 1
        assert value(parsed, "quafka_framework_workers", route=odd.name) == 2
        assert value(parsed, "quafka_framework_route_info", route=odd.name, group='we"ird\\group',
                     topic="line\nbreak", group_type="share") == 1
    finally:
        m.close()


def test_an_unknown_route_gets_series_on_its_first_event(bus, exporter):
    bus.publish("message.settled", route="other/topic", message=None, outcome="accepted")
    bus.publish("message.settled", route="other/topic", message=None, outcome="surprise")
    parsed = samples(exporter.render())
    assert value(parsed, "quafka_framework_messages_total", route="other/topic", outcome="accepted") == 1
    assert value(parsed, "quafka_framework_messages_total", route="other/topic", outcome="surprise") == 1
    assert value(parsed, "quafka_framework_jobs_total", route="other/topic", status="finished") == 0
    assert not any(name == "quafka_framework_route_info" and ("route", "other/topic") in labels
                   for name, labels in parsed)


def test_counting_is_exact_across_threads(bus, exporter):
    threads, per_thread = 8, 10_000
    start = threading.Barrier(threads)

    def publish(index: int) -> None:
        start.wait()
        route = "workers/jobs" if index % 2 == 0 else "audit/orders"
        for i in range(per_thread):
            bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.002)
            bus.publish("message.settled", route=route, message=None, outcome="accepted" if i % 2 else "released")
            bus.publish("job.renewed", route="workers/jobs", messages=[], error=None)

    workers = [threading.Thread(target=publish, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()

    parsed = samples(exporter.render())
    total = threads * per_thread
    assert value(parsed, "quafka_framework_jobs_total", route="workers/jobs", status="finished") == total
    assert value(parsed, "quafka_framework_job_duration_seconds_count", route="workers/jobs") == total
    assert value(parsed, "quafka_framework_job_duration_seconds_bucket", route="workers/jobs", le="0.005") == total
    assert value(parsed, "quafka_framework_job_duration_seconds_bucket", route="workers/jobs", le="0.001") == 0
    assert value(parsed, "quafka_framework_job_duration_seconds_sum", route="workers/jobs") == pytest.approx(
        total * 0.002)
    assert value(parsed, "quafka_framework_renewals_total", route="workers/jobs", result="ok") == total
    for route in ("workers/jobs", "audit/orders"):
        assert value(parsed, "quafka_framework_messages_total", route=route, outcome="accepted") == total // 4
        assert value(parsed, "quafka_framework_messages_total", route=route, outcome="released") == total // 4


def test_close_unsubscribes(bus):
    m = MetricsExporter(bus, [JOBS])
    for name in ("job.finished", "job.failed", "message.settled", "job.renewed", "job.renew_failed", "job.backoff",
                 "dead_letter.produced", "rebalance"):
        assert bus.wants(name), name
    bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.01)
    m.close()
    m.close()  # idempotent
    for name in ("job.finished", "job.failed", "message.settled", "job.renewed", "job.renew_failed", "job.backoff",
                 "dead_letter.produced", "rebalance"):
        assert not bus.wants(name), name
    bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.01)
    parsed = samples(m.render())
    assert value(parsed, "quafka_framework_jobs_total", route="workers/jobs", status="finished") == 1
    # no gauges callable: the gauges read 0
    assert value(parsed, "quafka_framework_workers", route="workers/jobs") == 0


def test_other_subscribers_are_left_alone(bus):
    seen = []
    bus.subscribe("job.finished", seen.append)
    m = MetricsExporter(bus, [JOBS])
    m.close()
    bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.01)
    assert len(seen) == 1


def test_serves_metrics_over_http(bus, exporter):
    exporter.serve(0)
    try:
        assert exporter.host == "127.0.0.1" and exporter.port > 0
        bus.publish("job.finished", route="workers/jobs", messages=[], duration_s=0.01)
        base = f"http://127.0.0.1:{exporter.port}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == CONTENT_TYPE
            body = response.read().decode()
        parsed = samples(body)
        assert value(parsed, "quafka_framework_jobs_total", route="workers/jobs", status="finished") == 1
        assert value(parsed, "quafka_framework_workers", route="workers/jobs") == 4
        with urllib.request.urlopen(f"{base}/metrics?x=1", timeout=5) as response:
            assert response.status == 200
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/other", timeout=5)
        assert info.value.code == 404
        info.value.close()
        with pytest.raises(RuntimeError, match="already served"):
            exporter.serve(0)
    finally:
        exporter.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=2)


def test_failures_are_counted_by_exception_class_and_outcome_with_the_classes_bounded(bus, exporter):
    from quafka.framework.metrics import ERROR_CLASSES_PER_ROUTE

    def failed(error_class, outcome):
        bus.publish("message.failed", route="workers/jobs", message=None, outcome=outcome, error_class=error_class,
                    error_message="m", error_id="x", attempt=1, max_attempts=3)
    for outcome in ("retried", "retried", "dead-lettered"):
        failed("ValueError", outcome)
    failed("myapp.errors.Timeout", "retried")
    for i in range(ERROR_CLASSES_PER_ROUTE + 5):  # a flood of classes does not flood the series
        failed(f"Generated{i}", "rejected")
    parsed = samples(exporter.render())
    labels = {"route": "workers/jobs"}
    assert value(parsed, "quafka_framework_failures_total", error_class="ValueError", outcome="retried", **labels) == 2
    assert value(parsed, "quafka_framework_failures_total", error_class="ValueError", outcome="dead-lettered",
                 **labels) == 1
    assert value(parsed, "quafka_framework_failures_total", error_class="myapp.errors.Timeout", outcome="retried",
                 **labels) == 1
    classes = {dict(k[1])["error_class"] for k in parsed if k[0] == "quafka_framework_failures_total"}
    assert len(classes) == ERROR_CLASSES_PER_ROUTE + 1 and "other" in classes
    assert value(parsed, "quafka_framework_failures_total", error_class="other", outcome="rejected", **labels) == 7
