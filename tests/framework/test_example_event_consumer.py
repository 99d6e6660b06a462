"""examples/event_consumer.py against an embedded broker: its app (imported as `quafka worker
examples.event_consumer:app` would, with QUAFKA_BOOTSTRAP set) run in-process by a Worker. Three
customers' orders on a 3-partition topic, one flaky, one not JSON: every total is right, each
customer's orders were applied in order and once, the flaky one after the backoff, the malformed
record is in the dead-letter topic, and the group's offsets are at the log end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Producer
from support import wait_until
from support.dlq import read_topic

from quafka.client import Admin
from quafka.framework import Worker

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "event_consumer.py"
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}
CUSTOMERS = {"alice": 1000, "bob": 250, "carol": 4999}
ORDERS = 20
MALFORMED = b'{"customer": "carol", "seq": 21, "amount_cents": '


def load_example(monkeypatch, bootstrap: str):
    """The example module, imported afresh with QUAFKA_BOOTSTRAP pointing at ``bootstrap``."""
    monkeypatch.setenv("QUAFKA_BOOTSTRAP", bootstrap)
    spec = importlib.util.spec_from_file_location(f"event_consumer_{uuid.uuid4().hex[:8]}", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_event_consumer_keeps_per_customer_totals_in_order_and_dead_letters_malformed_json(make_broker, monkeypatch):
    bs = make_broker(config=FAST).bootstrap_servers
    example = load_example(monkeypatch, bs)
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({example.TOPIC: (3, 1)})
    producer = Producer({"bootstrap.servers": bs})
    for seq in range(1, ORDERS + 1):
        for customer, cents in CUSTOMERS.items():
            order = {"customer": customer, "seq": seq, "amount_cents": cents * seq}
            if customer == "bob" and seq == 7:
                order["flaky"] = True
            producer.produce(example.TOPIC, key=customer, value=json.dumps(order).encode())
    producer.produce(example.TOPIC, key="carol", value=MALFORMED)
    assert producer.flush(10) == 0
    total_records = ORDERS * len(CUSTOMERS) + 1

    events = []
    example.app.events.subscribe("message.settled", lambda e: events.append((e["message"], e["outcome"])))
    worker = Worker(example.app, handle_signals=False, log_interval_s=1, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: len(events) >= total_records + 1, 30, message="every order settled")  # +1: the backoff
    finally:
        worker.stop()
        assert worker.wait() == 0

    expected = {c: cents * ORDERS * (ORDERS + 1) // 2 for c, cents in CUSTOMERS.items()}
    assert example.LEDGER.totals() == expected
    assert example.LEDGER.out_of_order == []
    assert {c: row["orders"] for c, row in example.LEDGER.rows.items()} == dict.fromkeys(CUSTOMERS, ORDERS)
    flaky = [(m.delivery_attempt, outcome) for m, outcome in events if m.key == "bob" and m.value["seq"] == 7]
    assert flaky == [(1, "retried"), (2, "accepted")]
    assert [(m.raw_value, outcome) for m, outcome in events if outcome not in ("accepted", "retried")] == [
        (MALFORMED, "rejected")]  # it cannot be deserialized: rejected (its dead letter says why)
    letters = read_topic(bs, example.DLQ)
    assert [(r.key, r.value) for r in letters] == [(b"carol", MALFORMED)]
    headers = {name: value.decode() for name, value in letters[0].headers}
    assert headers["__dlq.errors.topic"] == example.TOPIC and headers["__dlq.errors.group"] == example.GROUP
    assert headers["__dlq.errors.message"] == "Offset rejected by client."
    assert headers["quafka.error.class"] == "json.decoder.JSONDecodeError" and headers["quafka.error.message"]
    assert headers["quafka.dlq.reason"] == "deserialize-failed"
    with Admin({"bootstrap.servers": bs}) as admin:
        offsets = admin.list_consumer_group_offsets(example.GROUP)
    assert sum(offset for (topic, _), (offset, _) in offsets.items() if topic == example.TOPIC) == total_records


def test_the_cli_loads_the_example_app():
    env = {**os.environ, "QUAFKA_BOOTSTRAP": "127.0.0.1:1", "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "quafka", "worker", "examples.event_consumer:app", "--list-routes"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "order-totals/orders" in done.stdout
