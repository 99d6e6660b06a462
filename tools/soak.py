#!/usr/bin/env python3
"""Soak a `quafka broker` with real clients while killing it with SIGKILL and restarting it.

One broker child process on one data directory. Around it, threads of real clients run for the
whole soak, across every kill and restart:

- an idempotent producer (confluent-kafka `Producer`, enable.idempotence=true, acks=all) producing
  numbered records ("<n>") to a topic of --partitions partitions;
- share consumers in explicit acknowledgement mode, two of confluent-kafka's `ShareConsumer` and one
  of quafka's own `quafka.client.ShareConsumer`, which ACCEPT most records, RELEASE some and REJECT
  some (chosen by a hash of the seed, the record and its delivery count); now and then quafka's
  consumer sits on its records past the acquisition lock before acknowledging;
- a renewing consumer (quafka's ShareConsumer, RENEW of KIP-1222, one record at a time) that renews
  a record's lock a few times, each renewal confirmed, before ACCEPTing it.

Each cycle lets the broker run for a random time (--min-up .. --max-up seconds), SIGKILLs it, and
restarts it on the same directory. What the clients saw is recorded: which records the producer got
a delivery confirmation for (partition, offset), every delivery (consumer, partition, offset,
delivery count) and every acknowledgement the broker confirmed (commit_sync result without error).

Invariants (a violation fails the run, exit status 1):

1. no confirmed-produced record is lost: after each restart the high watermark covers every offset
   confirmed before the kill, and at the end a plain fetch of every partition finds every confirmed
   record at its offset (and the idempotent producer wrote no record twice);
2. a record whose ACCEPT or REJECT the broker confirmed is not delivered again afterwards with a
   higher delivery count, and no second acknowledgement of it is confirmed;
3. no delivery count exceeds the group's share.delivery.count.limit (--delivery-limit);
4. the share-partition start offset (Admin list_share_group_offsets) never moves backwards;
5. the broker never dies on its own, and logs no ERROR entry.

The seed (--seed, printed) fixes the schedule (uptimes, downtimes) and the acknowledgement choices;
thread timing is not replayable, so a replay re-runs the same schedule, not the same interleaving.
Every failure prints the seed and the command that replays it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import random
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import BrokerChild, print_distinct_errors, rmtree_quiet, scan_log  # noqa: E402

TOPIC = "soak-topic"
GROUP = "soak-share-group"
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
TYPE_NAMES = {ACCEPT: "ACCEPT", RELEASE: "RELEASE", REJECT: "REJECT", RENEW: "RENEW"}


# ----------------------------------------------------------------------------- what the clients saw


@dataclass
class Final:
    """A confirmed ACCEPT or REJECT."""

    at: float
    ack_type: int
    consumer: str
    delivery_count: int | None


@dataclass
class Ledger:
    """Everything the clients observed, and the invariant checks that can be made as it comes in."""

    delivery_limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    produced: int = 0
    produce_errors: Counter = field(default_factory=Counter)
    confirmed: dict[int, tuple[int, int]] = field(default_factory=dict)      # n -> (partition, offset)
    deliveries: int = 0
    redeliveries: int = 0
    deliveries_by_consumer: Counter = field(default_factory=Counter)
    acks_sent: Counter = field(default_factory=Counter)
    acks_confirmed: Counter = field(default_factory=Counter)
    acks_failed: Counter = field(default_factory=Counter)
    renewed: int = 0
    finals: dict[tuple[int, int], Final] = field(default_factory=dict)
    stale_after_final: int = 0     # delivered after a confirmed final ack, not a higher count (client-buffered)
    stale_samples: list = field(default_factory=list)
    finals_acked_again: int = 0    # confirmed ACCEPT/REJECT of an already-final record (Kafka skips acks below the SPSO)
    max_delivery_count: int = 0
    violations: list[str] = field(default_factory=list)
    client_errors: Counter = field(default_factory=Counter)
    history: defaultdict = field(default_factory=lambda: defaultdict(list))   # (p, o) -> events
    generation: int = 1            # which broker process is (or was last) running: 1, 2, ...
    t0: float = field(default_factory=time.monotonic)

    def violation(self, text: str, record: tuple[int, int] | None = None) -> None:
        if record is not None:
            text += "\n      history of the record (seconds since start, broker process, event):\n" + "\n".join(
                f"        {t:9.3f}  #{gen}  {event}" for t, gen, event in self.history[record])
        self.violations.append(text)
        print(f"VIOLATION: {text}", flush=True)

    def note(self, record: tuple[int, int], event: str) -> None:
        self.history[record].append((time.monotonic() - self.t0, self.generation, event))

    def on_produced(self, n: int, partition: int, offset: int) -> None:
        with self.lock:
            self.confirmed[n] = (partition, offset)

    def on_delivery(self, consumer: str, partition: int, offset: int, count: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            self.note((partition, offset), f"delivered to {consumer}, delivery count {count}")
            self.deliveries += 1
            self.deliveries_by_consumer[consumer] += 1
            if count is not None:
                self.max_delivery_count = max(self.max_delivery_count, count)
                if count > 1:
                    self.redeliveries += 1
                if count > self.delivery_limit:
                    self.violation(f"{consumer} got {partition}:{offset} with delivery count {count} "
                                   f"> share.delivery.count.limit {self.delivery_limit}", (partition, offset))
            final = self.finals.get((partition, offset))
            if final is not None and now > final.at:
                if count is not None and final.delivery_count is not None and count > final.delivery_count:
                    # a delivery count only grows by acquisition: this is a new acquisition after the final ack
                    self.violation(
                        f"{consumer} got {partition}:{offset} (delivery count {count}) after {final.consumer}'s "
                        f"{TYPE_NAMES[final.ack_type]} of delivery {final.delivery_count} was confirmed",
                        (partition, offset))
                else:
                    # a copy acquired before the final ack and handed out late by the client (its lock was lost
                    # in a restart or expired); told apart from a re-acquisition by its delivery count
                    self.stale_after_final += 1
                    if len(self.stale_samples) < 5:
                        self.stale_samples.append((partition, offset))

    def on_ack_result(self, consumer: str, partition: int, offset: int, count: int | None, ack_type: int,
                      confirmed: bool) -> None:
        now = time.monotonic()
        with self.lock:
            self.note((partition, offset), f"{consumer}'s {TYPE_NAMES[ack_type]} of delivery {count}: "
                                           f"{'confirmed' if confirmed else 'NOT confirmed'}")
            self.acks_sent[ack_type] += 1
            if not confirmed:
                self.acks_failed[ack_type] += 1
                return
            self.acks_confirmed[ack_type] += 1
            if ack_type == RENEW:
                self.renewed += 1
            if ack_type in (ACCEPT, REJECT):
                if (partition, offset) in self.finals:
                    # Kafka (SharePartition.acknowledge) skips an acknowledgement batch wholly below the
                    # share-partition start offset without an error, so a late acknowledgement of a record
                    # another member finished is "confirmed": counted, not a violation
                    self.finals_acked_again += 1
                else:
                    self.finals[(partition, offset)] = Final(now, ack_type, consumer, count)


def choose_ack(seed: int, value: bytes | None, count: int | None) -> int:
    """ACCEPT ~80 %, RELEASE ~10 %, REJECT ~10 %, fixed by (seed, record, delivery count)."""
    digest = hashlib.blake2b(b"%d|%s|%d" % (seed, value or b"", count or 0), digest_size=2).digest()
    roll = int.from_bytes(digest, "big") % 100
    return ACCEPT if roll < 80 else RELEASE if roll < 90 else REJECT


# ----------------------------------------------------------------------------- client threads


class Clients:
    def __init__(self, args: argparse.Namespace, bootstrap: str, ledger: Ledger) -> None:
        self.args = args
        self.bootstrap = bootstrap
        self.ledger = ledger
        self.stop = threading.Event()
        self.stop_producing = threading.Event()
        self.threads: list[threading.Thread] = []
        self.producer_fatal: list[str] = []

    def start(self) -> None:
        specs = [("producer", self.produce), ("confluent-1", self.consume_confluent), ("confluent-2", self.consume_confluent),
                 ("quafka-1", self.consume_quafka), ("quafka-renew", self.consume_renewing)]
        for name, target in specs:
            thread = threading.Thread(target=self.guard, args=(name, target), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def guard(self, name: str, target) -> None:
        try:
            target(name)
        except Exception as exc:  # a client thread must not die silently
            self.ledger.client_errors[f"{name} died: {type(exc).__name__}: {exc}"] += 1
            print(f"client thread {name} died: {exc!r}", flush=True)

    def join(self, timeout_s: float) -> None:
        self.stop.set()
        end = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.1, end - time.monotonic()))

    # ------------------------------------------------------------------ the idempotent producer
    def produce(self, name: str) -> None:
        from confluent_kafka import Producer

        ledger = self.ledger

        def make() -> Producer:
            return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 600_000, "reconnect.backoff.max.ms": 500,
                             "log_level": 0})

        producer = make()
        n = 0
        interval = 1.0 / self.args.rate * 10

        def on_delivery(err, msg) -> None:
            number = int(msg.value())
            if err is None:
                ledger.on_produced(number, msg.partition(), msg.offset())
            else:
                with ledger.lock:
                    ledger.produce_errors[err.name()] += 1
                if err.fatal():
                    self.producer_fatal.append(str(err))

        while not self.stop_producing.is_set():
            for _ in range(10):
                value = str(n).encode()
                try:
                    producer.produce(TOPIC, key=value, value=value, on_delivery=on_delivery)
                except BufferError:
                    break
                n += 1
                with ledger.lock:
                    ledger.produced = n
            producer.poll(0)
            if self.producer_fatal:
                # a fatal idempotence error (e.g. the broker lost the producer's state) ends this producer
                ledger.violation(f"the idempotent producer hit a fatal error: {self.producer_fatal[0]}")
                producer.flush(5)
                producer = make()
                self.producer_fatal.clear()
            self.stop_producing.wait(interval)
        remaining = producer.flush(self.args.drain_timeout)
        if remaining:
            ledger.client_errors[f"{remaining} records still unconfirmed at the end"] += 1

    # ------------------------------------------------------------------ confluent ShareConsumer
    def consume_confluent(self, name: str) -> None:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

        ledger, seed = self.ledger, self.args.seed
        ack_types = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE, REJECT: AcknowledgeType.REJECT}
        consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": name,
                                  "share.acknowledgement.mode": "explicit", "log_level": 0,
                                  "reconnect.backoff.max.ms": 500})
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                try:
                    messages = consumer.poll(0.5)
                except KafkaException as exc:
                    ledger.client_errors[f"{name} poll: {exc.args[0].name() if exc.args else exc}"] += 1
                    time.sleep(0.1)
                    continue
                pending = []
                for msg in messages:
                    if msg.error() is not None:
                        ledger.client_errors[f"{name} message error: {msg.error().name()}"] += 1
                        continue
                    count = msg.delivery_count()
                    ledger.on_delivery(name, msg.partition(), msg.offset(), count)
                    ack = choose_ack(seed, msg.value(), count)
                    try:
                        consumer.acknowledge(msg, ack_types[ack])
                    except Exception as exc:  # no longer in flight (session lost): not sent
                        ledger.client_errors[f"{name} acknowledge refused: {type(exc).__name__}"] += 1
                        continue
                    pending.append((msg.partition(), msg.offset(), count, ack))
                if not pending:
                    continue
                try:
                    results = consumer.commit_sync(10.0)
                except Exception as exc:
                    ledger.client_errors[f"{name} commit_sync: {type(exc).__name__}"] += 1
                    results = {}
                ok_partitions = {tp.partition for tp, exc in results.items() if exc is None}
                for partition, offset, count, ack in pending:
                    ledger.on_ack_result(name, partition, offset, count, ack, partition in ok_partitions)
        finally:
            try:
                consumer.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ quafka ShareConsumer
    def quafka_consumer(self, name: str, **extra):
        from quafka.client import ShareConsumer

        config = {"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": name,
                  "share.acknowledgement.mode": "explicit", "request.timeout.ms": 10_000,
                  "default.api.timeout.ms": 10_000, "retry.backoff.max.ms": 500}
        config.update(extra)
        consumer = ShareConsumer(config)
        consumer.subscribe([TOPIC])
        return consumer

    def consume_quafka(self, name: str) -> None:
        from quafka.client import AcknowledgeType, KafkaException

        ledger, seed, rng = self.ledger, self.args.seed, random.Random(f"{self.args.seed}:{name}")
        consumer = self.quafka_consumer(name)
        try:
            while not self.stop.is_set():
                try:
                    records = consumer.poll(0.5)
                except KafkaException as exc:
                    ledger.client_errors[f"{name} poll: {type(exc).__name__}"] += 1
                    time.sleep(0.1)
                    continue
                if not records:
                    continue
                pending = []
                for record in records:
                    ledger.on_delivery(name, record.partition, record.offset, record.delivery_count)
                    ack = choose_ack(seed, record.value, record.delivery_count)
                    try:
                        consumer.acknowledge(record, AcknowledgeType(ack))
                    except KafkaException as exc:
                        ledger.client_errors[f"{name} acknowledge refused: {type(exc).__name__}"] += 1
                        continue
                    pending.append((record.partition, record.offset, record.delivery_count, ack))
                if rng.random() < self.args.slow_ratio:   # hold past the lock: the broker must refuse the acks
                    self.stop.wait(self.args.lock_ms / 1000 + 1.0)
                results = self.commit(consumer, name)
                for partition, offset, count, ack in pending:
                    ledger.on_ack_result(name, partition, offset, count, ack,
                                         results.get(partition, "missing") is None)
        finally:
            self.close_quietly(consumer)

    def consume_renewing(self, name: str) -> None:
        from quafka.client import AcknowledgeType, KafkaException

        ledger, rng = self.ledger, random.Random(f"{self.args.seed}:{name}")
        consumer = self.quafka_consumer(name, **{"max.poll.records": 1, "share.acquire.mode": "record_limit"})
        try:
            while not self.stop.is_set():
                try:
                    records = consumer.poll(0.5)
                except KafkaException as exc:
                    ledger.client_errors[f"{name} poll: {type(exc).__name__}"] += 1
                    time.sleep(0.1)
                    continue
                for record in records:
                    p, o, count = record.partition, record.offset, record.delivery_count
                    ledger.on_delivery(name, p, o, count)
                    interval = self.args.lock_ms / 1000 / 4
                    for _ in range(rng.randint(1, 3)):   # renew a few times, each confirmed, then accept
                        if self.stop.wait(interval):
                            break
                        try:
                            consumer.acknowledge(record, AcknowledgeType.RENEW)
                        except KafkaException as exc:
                            ledger.client_errors[f"{name} acknowledge refused: {type(exc).__name__}"] += 1
                            break
                        renewed = self.commit(consumer, name).get(p, "missing") is None
                        ledger.on_ack_result(name, p, o, count, RENEW, renewed)
                        if not renewed:
                            break
                    try:
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                    except KafkaException as exc:
                        ledger.client_errors[f"{name} acknowledge refused: {type(exc).__name__}"] += 1
                        continue
                    ledger.on_ack_result(name, p, o, count, ACCEPT, self.commit(consumer, name).get(p, "missing") is None)
        finally:
            self.close_quietly(consumer)

    def commit(self, consumer, name: str) -> dict[int, object]:
        """commit_sync: {partition: None (confirmed) or the error}; {} when it failed as a whole."""
        try:
            return {tp.partition: exc for tp, exc in consumer.commit_sync(timeout=10.0).items()}
        except Exception as exc:
            self.ledger.client_errors[f"{name} commit_sync: {type(exc).__name__}"] += 1
            return {}

    @staticmethod
    def close_quietly(consumer) -> None:
        try:
            consumer.close(timeout=5.0)
        except Exception:
            pass


# ----------------------------------------------------------------------------- broker-side checks


class StartOffsets:
    """The share-partition start offsets seen so far; they must never move backwards."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.highest: dict[int, int] = {}
        self.reads = 0

    def check(self, admin, where: str) -> None:
        offsets = admin.list_share_group_offsets(GROUP, [TOPIC])
        self.reads += 1
        for (topic, partition), (start, _lag) in offsets.items():
            if start < 0:
                continue
            before = self.highest.get(partition, -1)
            if start < before:
                self.ledger.violation(f"share-partition start offset of {topic}-{partition} moved backwards: "
                                      f"{before} -> {start} ({where})")
            self.highest[partition] = max(before, start)


def check_high_watermarks(admin, ledger: Ledger, partitions: int, where: str) -> None:
    """Every offset confirmed so far is below the partition's high watermark."""
    with ledger.lock:
        top: dict[int, int] = {}
        for partition, offset in ledger.confirmed.values():
            top[partition] = max(top.get(partition, -1), offset)
    latest = admin.list_offsets({(TOPIC, p): "latest" for p in range(partitions)})
    for (_topic, partition), (hw, _ts) in latest.items():
        if top.get(partition, -1) >= hw:
            ledger.violation(f"{TOPIC}-{partition}: confirmed offset {top[partition]} is at or above the high "
                             f"watermark {hw} after a restart ({where})")


def verify_log(bootstrap: str, ledger: Ledger, partitions: int) -> dict[str, int]:
    """Read every partition from its start; find every confirmed record at its offset."""
    from quafka.client import Admin, PartitionReader

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        earliest = admin.list_offsets({(TOPIC, p): "earliest" for p in range(partitions)})
        latest = admin.list_offsets({(TOPIC, p): "latest" for p in range(partitions)})
    stored: dict[tuple[int, int], bytes | None] = {}
    seen: Counter = Counter()
    with PartitionReader({"bootstrap.servers": bootstrap, "request.timeout.ms": 30_000}) as reader:
        for p in range(partitions):
            start, end = earliest[(TOPIC, p)][0], latest[(TOPIC, p)][0]
            if end > start:
                for chunk in reader.read_chunks(TOPIC, p, start, end):
                    for record in chunk:
                        stored[(p, record.offset)] = record.value
                        seen[record.value] += 1
    with ledger.lock:
        confirmed = dict(ledger.confirmed)
    lost = [(n, where) for n, where in confirmed.items() if stored.get(where) != str(n).encode()]
    for n, (p, o) in lost[:20]:
        ledger.violation(f"confirmed record {n} (partition {p} offset {o}) is not in the log "
                         f"(found {stored.get((p, o))!r})")
    if len(lost) > 20:
        ledger.violation(f"... and {len(lost) - 20} more confirmed records lost")
    duplicates = [v for v, c in seen.items() if c > 1]
    if duplicates:
        ledger.violation(f"the idempotent producer's records are stored more than once: {len(duplicates)} values, "
                         f"e.g. {sorted(duplicates)[:5]}")
    return {"records_in_log": len(stored), "lost": len(lost), "duplicates": len(duplicates)}


# ----------------------------------------------------------------------------- main


def replay_command(args: argparse.Namespace) -> str:
    parts = [sys.executable, os.path.relpath(os.path.abspath(__file__)), "--seed", str(args.seed),
             "--cycles", str(args.cycles), "--min-up", str(args.min_up), "--max-up", str(args.max_up)]
    return " ".join(shlex.quote(p) for p in parts)


def soak(args: argparse.Namespace) -> int:
    from quafka.client import Admin

    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    rng = random.Random(args.seed)
    print(f"quafka soak: seed {args.seed}, {args.cycles} SIGKILL cycles, up {args.min_up}-{args.max_up} s each, "
          f"{args.partitions} partitions, delivery limit {args.delivery_limit}, lock {args.lock_ms} ms", flush=True)
    print(f"replay: {replay_command(args)}", flush=True)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    workdir = tempfile.mkdtemp(prefix="quafka-soak-")
    overrides = {"offsets.topic.num.partitions": "4", "share.coordinator.state.topic.num.partitions": "4",
                 "group.share.min.record.lock.duration.ms": "1000"}
    for item in args.broker_override:
        key, _, value = item.partition("=")
        overrides[key] = value
    broker = BrokerChild(os.path.join(workdir, "data"), os.path.join(workdir, "broker.log"), overrides=overrides)
    print(f"broker data and log in {workdir}", flush=True)
    ledger = Ledger(delivery_limit=args.delivery_limit)
    starts = StartOffsets(ledger)
    restart_s: list[float] = [broker.start()]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics({TOPIC: (args.partitions, 1)})
        admin.alter_configs("group", GROUP, set={"share.auto.offset.reset": "earliest",
                                                 "share.delivery.count.limit": str(args.delivery_limit),
                                                 "share.record.lock.duration.ms": str(args.lock_ms)})
    clients = Clients(args, broker.bootstrap, ledger)
    clients.start()
    t0 = time.monotonic()
    kills = 0
    crashed = None
    try:
        for cycle in range(1, args.cycles + 1):
            up = rng.uniform(args.min_up, args.max_up)
            end = time.monotonic() + up
            while time.monotonic() < end:
                time.sleep(min(0.5, max(0.0, end - time.monotonic())))
                if not broker.alive():
                    crashed = f"the broker died on its own in cycle {cycle} (exit status {broker.returncode})"
                    break
                if rng.random() < 0.3:   # a mid-cycle start-offset read, while clients work
                    try:
                        with Admin({"bootstrap.servers": broker.bootstrap, "request.timeout.ms": 3000}) as admin:
                            starts.check(admin, f"cycle {cycle}, running")
                    except Exception:
                        pass
            if crashed:
                ledger.violation(crashed)
                break
            broker.kill()
            kills += 1
            with ledger.lock:
                ledger.generation = -(kills + 1)     # negative: between processes (broker down)
            time.sleep(rng.uniform(0.0, args.max_down))
            restart_s.append(broker.start())
            with ledger.lock:
                ledger.generation = kills + 1
            try:
                with Admin({"bootstrap.servers": broker.bootstrap, "request.timeout.ms": 10_000}) as admin:
                    check_high_watermarks(admin, ledger, args.partitions, f"after kill {kills}")
                    starts.check(admin, f"after kill {kills}")
            except Exception as exc:
                ledger.client_errors[f"post-restart check: {type(exc).__name__}"] += 1
            with ledger.lock:
                line = (f"[{time.monotonic() - t0:7.1f}s] cycle {cycle}/{args.cycles}: up {up:.1f} s, restart "
                        f"{restart_s[-1]:.2f} s; produced {ledger.produced:,}, confirmed {len(ledger.confirmed):,}, "
                        f"deliveries {ledger.deliveries:,}, acks confirmed {sum(ledger.acks_confirmed.values()):,}, "
                        f"violations {len(ledger.violations)}")
            print(line, flush=True)
        # drain: stop producing, let the consumers finish what is left
        clients.stop_producing.set()
        drain_end = time.monotonic() + args.drain_timeout
        last = -1
        while time.monotonic() < drain_end and broker.alive():
            time.sleep(2.0)
            with ledger.lock:
                now = ledger.deliveries
            if now == last:
                break
            last = now
        clients.join(30)
        alive = broker.alive()
        if not alive and crashed is None:
            ledger.violation(f"the broker died on its own while draining (exit status {broker.returncode})")
        log_checks: dict[str, int] = {}
        if alive:
            log_checks = verify_log(broker.bootstrap, ledger, args.partitions)
            with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                starts.check(admin, "at the end")
                final_offsets = admin.list_share_group_offsets(GROUP, [TOPIC])
        else:
            final_offsets = {}
    finally:
        clients.stop.set()
        clients.stop_producing.set()
        broker.stop()
    duration = time.monotonic() - t0
    scan = scan_log(broker.read_log())
    if scan.errors:
        ledger.violation(f"the broker logged {len(scan.errors)} ERROR entries")
    summary = {
        "date": started_at.strftime("%Y-%m-%d %H:%M UTC"), "seed": args.seed, "cycles": args.cycles,
        "kills": kills, "duration_s": round(duration, 1), "max_restart_s": round(max(restart_s), 2),
        "mean_restart_s": round(sum(restart_s) / len(restart_s), 2),
        "records_produced": ledger.produced, "records_confirmed": len(ledger.confirmed),
        "produce_errors": dict(ledger.produce_errors), **log_checks,
        "deliveries": ledger.deliveries, "redeliveries": ledger.redeliveries,
        "max_delivery_count": ledger.max_delivery_count,
        "accepted": ledger.acks_confirmed[ACCEPT], "released": ledger.acks_confirmed[RELEASE],
        "rejected": ledger.acks_confirmed[REJECT], "renewed": ledger.acks_confirmed[RENEW],
        "acks_not_confirmed": sum(ledger.acks_failed.values()),
        "stale_deliveries_after_final_ack": ledger.stale_after_final,
        "final_acks_confirmed_again": ledger.finals_acked_again,
        "start_offset_reads": starts.reads,
        "final_start_offsets": {f"{t}-{p}": v[0] for (t, p), v in sorted(final_offsets.items())},
        "broker_error_log_entries": len(scan.errors),
        "violations": len(ledger.violations),
    }
    print("\n==== quafka soak summary ====")
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        print(f"  {key:<{width}}  {value}")
    print("  deliveries by consumer: " + ", ".join(f"{k} {v:,}" for k, v in sorted(ledger.deliveries_by_consumer.items())))
    if ledger.client_errors:
        print("  client-side errors (expected around kills): " + ", ".join(
            f"{k} x{v}" for k, v in ledger.client_errors.most_common(12)))
    if ledger.stale_samples:
        print("\ndeliveries after a confirmed ACCEPT/REJECT with no higher delivery count (client-held copies whose "
              "lock was lost, or an acknowledgement lost by the broker; first ones):")
        for record in ledger.stale_samples:
            print(f"  {record[0]}:{record[1]}")
            for t, gen, event in ledger.history[record]:
                print(f"    {t:9.3f}  #{gen}  {event}")
    if scan.errors:
        print("\ndistinct ERROR entries in the broker log:")
        print_distinct_errors(scan)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary | {"violation_list": ledger.violations[:100]}, f, indent=2)
    if ledger.violations:
        print(f"\nFAILED: {len(ledger.violations)} violation(s):")
        for v in ledger.violations[:30]:
            print(f"  - {v}")
        print(f"seed {args.seed}; replay: {replay_command(args)}")
        print(f"broker data and log kept in {workdir}")
        return 1
    print(f"\nOK: {kills} kills, invariant violations: 0. seed {args.seed}")
    if not args.keep:
        rmtree_quiet(workdir)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tools/soak.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python tools/soak.py                 # 100 cycles\n"
               "  python tools/soak.py --cycles 2 --seed 7\n  make soak CYCLES=100 SEED=7")
    p.add_argument("--cycles", type=int, default=100, help="SIGKILL + restart cycles (default 100)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--min-up", type=float, default=2.0, help="shortest broker uptime per cycle, s (default 2)")
    p.add_argument("--max-up", type=float, default=5.0, help="longest broker uptime per cycle, s (default 5)")
    p.add_argument("--max-down", type=float, default=0.5, help="longest pause between kill and restart, s (default 0.5)")
    p.add_argument("--partitions", type=int, default=2, help="partitions of the soak topic (default 2)")
    p.add_argument("--rate", type=float, default=200.0, help="records produced per second (default 200)")
    p.add_argument("--delivery-limit", type=int, default=5, help="the group's share.delivery.count.limit (default 5)")
    p.add_argument("--lock-ms", type=int, default=4000, help="the group's share.record.lock.duration.ms (default 4000)")
    p.add_argument("--slow-ratio", type=float, default=0.02,
                   help="share of quafka-1's polls whose acknowledgements wait past the lock (default 0.02)")
    p.add_argument("--drain-timeout", type=float, default=60.0,
                   help="after the last cycle, how long to let producer and consumers finish (default 60 s)")
    p.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                   help="extra broker config (repeatable)")
    p.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--keep", action="store_true", help="keep the broker's data directory and log")
    args = p.parse_args(argv)
    if args.cycles < 0 or args.min_up <= 0 or args.max_up < args.min_up:
        p.error("need --cycles >= 0 and 0 < --min-up <= --max-up")
    return args


def main(argv: list[str] | None = None) -> int:
    return soak(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
