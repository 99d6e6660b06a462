"""An event consumer on a consumer group: per-customer running totals of orders, kept in order,
with retry and backoff on a transient failure and a dead-letter topic (quafka.framework).

Each order is a JSON object on the topic ``orders``, keyed by customer (so that all of a
customer's orders are in one partition, in the order they were placed)::

    key: "alice"   value: {"customer": "alice", "seq": 3, "amount_cents": 1250}

The consumer adds each order to its customer's running total in the ``Ledger`` (which stands in for
the database the totals live in). A consumer group keeps each partition's records in order (one
member, on one worker thread, per partition), so a customer's orders are applied in ``seq``
order; the ledger ignores an order it has already applied (``seq`` not above the customer's last),
so a redelivery after a crash or a rebalance does not count it twice.

- An order with ``"flaky": true`` fails on its first delivery (the ledger is "unavailable": a
  transient error). The route backs off (500 ms, then 1 s, ...), pauses that partition only, and
  tries the order again; the customer's later orders wait behind it, the other partitions go on.
- A record that is not valid JSON cannot be deserialized: the worker writes it to the
  dead-letter topic ``dlq.orders`` (with Kafka's ``__dlq.errors.*`` headers and the parse error
  in ``quafka.dlq.error``) and the partition moves on. So does an order that still fails after
  ``max_attempts`` (5) deliveries.

Run it (``QUAFKA_BOOTSTRAP`` defaults to 127.0.0.1:9092):

    quafka topics --bootstrap-server 127.0.0.1:9092 --create --topic orders --partitions 3
    python examples/event_consumer.py --produce-sample      # a few orders, one flaky, one malformed
    QUAFKA_BOOTSTRAP=127.0.0.1:9092 quafka worker examples.event_consumer:app

(``python examples/event_consumer.py`` runs the worker too.) Each applied order is logged with the
customer's new total; the totals are logged again at shutdown (SIGINT/SIGTERM).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading

from quafka.framework import App, Backoff, Consumer

TOPIC = "orders"
GROUP = "order-totals"
DLQ = "dlq.orders"
log = logging.getLogger("event_consumer")


class LedgerUnavailable(Exception):
    """A transient failure: the store did not answer in time. Retried after a backoff."""


class Ledger:
    """Per customer: the total in cents, the number of orders and the last ``seq`` applied.
    Shared by the worker threads of the process (each customer's orders come on one of them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[str, dict[str, int]] = {}
        self.out_of_order: list[tuple[str, int, int]] = []  # (customer, seq, expected): never, with a consumer group

    def apply(self, customer: str, seq: int, amount_cents: int) -> dict[str, int] | None:
        """Add the order; None when it was applied before (a redelivery)."""
        with self._lock:
            row = self.rows.setdefault(customer, {"total_cents": 0, "orders": 0, "last_seq": 0})
            if seq <= row["last_seq"]:
                return None
            if seq != row["last_seq"] + 1:
                self.out_of_order.append((customer, seq, row["last_seq"] + 1))
            row["total_cents"] += amount_cents
            row["orders"] += 1
            row["last_seq"] = seq
            return dict(row)

    def totals(self) -> dict[str, int]:
        with self._lock:
            return {customer: row["total_cents"] for customer, row in self.rows.items()}


LEDGER = Ledger()


class OrderTotals(Consumer):
    def consume_one(self, message):
        order = message.value  # parsed by the route's json deserializer
        if order.get("flaky") and message.delivery_attempt == 1:
            raise LedgerUnavailable(f"order {order['customer']}#{order['seq']}: the ledger timed out")
        row = LEDGER.apply(order["customer"], int(order["seq"]), int(order["amount_cents"]))
        if row is None:
            log.info("%s#%s: already applied (redelivered)", order["customer"], order["seq"])
        else:
            log.info("%s#%s: +%.2f, total %.2f over %d orders", order["customer"], order["seq"],
                     order["amount_cents"] / 100, row["total_cents"] / 100, row["orders"])
        # returning marks the order consumed; its offset is committed after the batch

    def revoked(self, partitions):
        log.info("partitions %s moved to another member", partitions)

    def shutdown(self):
        log.info("totals: %s", {c: f"{cents / 100:.2f}" for c, cents in sorted(LEDGER.totals().items())})


app = App({"bootstrap.servers": os.environ.get("QUAFKA_BOOTSTRAP", "127.0.0.1:9092")}, name="event-consumer")
app.consumer_group(GROUP).topic(
    TOPIC, OrderTotals,
    concurrency=2,                     # two members: each partition's orders on one of them, in order
    key_deserializer="utf-8",
    deserializer="json",               # not JSON → dead-lettered without a retry
    auto_offset_reset="earliest",      # a new group starts from the first order
    max_poll_records=100,
    backoff=Backoff(initial_ms=500, multiplier=2.0, max_ms=10_000),
    max_attempts=5,
    dead_letter_topic=DLQ,
)


def produce_sample(bootstrap: str, topic: str = TOPIC) -> None:
    """A few orders for three customers: one flaky, and one record that is not JSON."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for seq in range(1, 6):
        for customer, cents in (("alice", 1000), ("bob", 250), ("carol", 4999)):
            order = {"customer": customer, "seq": seq, "amount_cents": cents * seq}
            if customer == "bob" and seq == 3:
                order["flaky"] = True
            producer.produce(topic, key=customer, value=json.dumps(order).encode())
    producer.produce(topic, key="carol", value=b"{'customer': 'carol', oops")
    producer.flush(10)


if __name__ == "__main__":
    from quafka.framework import Worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if sys.argv[1:] == ["--produce-sample"]:
        produce_sample(app.kafka["bootstrap.servers"])
    else:
        sys.exit(Worker(app).run())
