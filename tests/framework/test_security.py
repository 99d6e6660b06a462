"""A quafka.framework worker against a SASL_SSL listener: the App's connection settings carry the
security keys (the Java client's names: sasl.jaas.config, ssl.truststore.*) next to
bootstrap.servers, and every client of the worker uses them: the share consumer that fetches the
jobs, the Admin that points the group at its dead-letter topic, and the confluent-kafka producer
that writes the dead letter. The jobs are accepted or rejected as over PLAINTEXT."""

from __future__ import annotations

import threading
import time

from support import wait_until
from support.dlq import read_topic
from support.framework_jobs import BROKER_CONFIG, LOCK_MS, Jobs
from support.secure_broker import SCRAM_PASSWORD, SCRAM_USER, secure_broker

from quafka.client import Admin, librdkafka_security_config
from quafka.framework import App, Backoff, Worker


def _kafka(broker) -> dict:
    return {
        "bootstrap.servers": broker.listener_address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";',
        "ssl.truststore.location": broker.ca_file,
        "ssl.truststore.type": "PEM",
    }


def test_a_worker_processes_jobs_from_a_sasl_ssl_listener(tmp_path):
    from confluent_kafka import Producer

    topic, group, dlq = "secure-jobs", "secure-workers", "dlq.secure-jobs"
    with secure_broker(tmp_path, **BROKER_CONFIG) as broker:
        kafka = _kafka(broker)
        with Admin(kafka) as admin:
            admin.create_topics({topic: (1, 1)})
            admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest"})
        producer = Producer(librdkafka_security_config(kafka))
        for value in (b"a", b"poison", b"b"):
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        authenticated_before = broker.server.metrics.sasl.get(("SASL_SSL", "successful-authentication"), 0)

        app = App(kafka)
        app.share_group(group).topic(topic, Jobs, max_poll_records=1, lock_duration_ms=LOCK_MS,
                                     backoff_margin_ms=200, backoff=Backoff(300, 1.0, 300), dead_letter_topic=dlq)
        settled: list[tuple[bytes, str]] = []
        lock = threading.Lock()

        def record(event):
            with lock:
                settled.append((event["message"].value, event["outcome"]))

        app.events.subscribe("message.settled", record)
        worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
        worker.start()
        started = time.monotonic()
        try:
            wait_until(lambda: len(settled) == 3, 30, message="three settlements")
        finally:
            worker.stop()
            assert worker.wait() == 0
        assert time.monotonic() - started < 30
        assert sorted(settled) == [(b"a", "accepted"), (b"b", "accepted"), (b"poison", "rejected")]
        with Admin(kafka) as admin:
            assert admin.describe_configs("group", group)["errors.deadletterqueue.topic.name"] == dlq
            assert admin.list_share_group_offsets(group, [topic])[(topic, 0)][0] == 3
        [letter] = read_topic(broker.listener_address("PLAINTEXT"), dlq)
        assert letter.value == b"poison"
        # the worker's clients authenticated on the SASL_SSL listener (share consumer, Admin, producer)
        assert broker.server.metrics.sasl.get(("SASL_SSL", "successful-authentication"), 0) - authenticated_before >= 3
