"""Durable share state (`__share_group_state`) across broker crashes, with confluent-kafka's
ShareConsumer in explicit mode (issue acceptance points 1 and 2).

1. `test_restart_mid_share_consuming_workload_keeps_acknowledged_state[sigkill|sigterm]`: 3,000
   records on two partitions; a consumer accepts, rejects and releases them by value; mid-way the
   broker is SIGKILLed (or stopped with SIGTERM) together with the consumer, restarted, and a new
   consumer finishes the work.
2. `test_crash_loop_keeps_share_state_invariants[seed]`: 20 SIGKILLs of the broker at seeded random
   points while an idempotent acks=all producer writes and a consumer consumes; then everything is
   drained.

The consumer runs in a child process (`_share_crash_child.py`) that is SIGKILLed right after the
broker, so that the durable state can be read right after each restart before any consumer
touches it: the state topic is read with a plain Consumer and replayed through a fresh
`ShareCoordinator` (what the broker itself does at start-up). The child reports every record it
is given (before acknowledging it) and every acknowledgement result the broker sends back (the
acknowledgement commit callback, for acks sent by commit_sync() and for acks piggybacked on a
ShareFetch alike).

What is checked, writing D_k for the durable state read after restart k (an offset is *terminal*
in D_k when it is below the start offset or in an ACKNOWLEDGED/ARCHIVED batch; otherwise its
durable delivery count is its AVAILABLE batch's count, 0 outside every batch):

(a) acknowledgements answered as successful are durable: an ACCEPT, a REJECT or a RELEASE at the
    delivery limit that the broker reported successful is terminal in every later D_k, and the
    record is never delivered again; a successful RELEASE of delivery n leaves a count >= n;
(b) a record is delivered again after restart k iff it is not terminal in D_k: terminal offsets
    are never delivered after restart k, every other one is (eventually);
(c) REJECTed records and records archived at the delivery limit never come back (part of (a)), and
    no delivery count exceeds the limit;
(d) delivery counts after a restart: an acquisition is not persisted (ACQUIRED is never stored, as
    in Kafka), only the release, lock expiry or acknowledgement that ends it is. So the first
    delivery of a record after restart k has delivery count exactly D_k count + 1. Since a record
    can only be acquired once the write that made it AVAILABLE again is durable, D_k count >= (the
    last count delivered before the restart) - 1, so the first count after the restart is >= the
    last count seen before it. It may equal it (the delivery that was in flight at the crash is
    repeated with the same count, "1 lower than pre-crash count + 1"); it is at most one more
    (a durable release of the last delivery), as nothing here expires a lock (30 s default lock;
    every cycle is shorter) and a killed consumer's deliveries were all seen by the application
    before it acknowledged any of them;
plus durable state only moves forward across restarts (the start offset never decreases, terminal
stays terminal, counts never decrease), at the end every record is terminal (the start offset is
at the log end offset), every delivered value matches the log, and (2) nothing the idempotent
acks=all producer had confirmed is lost or duplicated.

A randomized failure names its seed; add that seed to `CRASH_LOOP_SEEDS` to keep it as a
regression case (the seed fixes the kill schedule, not the exact interleaving with the broker).
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from support import wait_until
from support.share_client import create_topic

from quafka.broker.core.share_coordinator import ShareCoordinator
from quafka.protocol.coordinator_records import ShareStateKey, decode_share_state_record

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_share_crash_child.py")
_spec = importlib.util.spec_from_file_location("_share_crash_child", CHILD)
child_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child_module)
ACCEPT, RELEASE, REJECT = child_module.ACCEPT, child_module.RELEASE, child_module.REJECT

STATE_TOPIC = "__share_group_state"
STATE_PARTITIONS = 4
DELIVERY_LIMIT = 3
PARTITIONS = 2
ACKNOWLEDGED, ARCHIVING, ARCHIVED = 2, 3, 4
TERMINAL_STATES = (ACKNOWLEDGED, ARCHIVING, ARCHIVED)

# Short member sessions: a SIGKILLed consumer's member is restored with the group at restart and
# keeps its share of the partitions until its session times out (as in Kafka); 1.5 s keeps that
# short. The state topic gets few partitions so that reading it back is quick.
BROKER_OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "1500",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "250",
}
GROUP_CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "share.assignment.interval.ms": "0",
    "share.delivery.count.limit": str(DELIVERY_LIMIT),
}


# ----------------------------------------------------------------------------- the consumer child

class Ledger:
    """Everything the consumer children reported, in arrival order (one child runs at a time, and
    its output is read to the end before the next one starts, so `seq` orders all events)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.deliveries: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}  # (p, o) -> [(seq, cycle, dc, value)]
        self.acks: dict[tuple[int, int], list[tuple[int, int, int, int, bool]]] = {}  # -> [(seq, cycle, dc, type, ok)]
        self.unmatched: list[tuple[int, list, bool]] = []  # ack results for offsets the child had not acknowledged
        self.errors: list[tuple[int, str]] = []  # (cycle, message)
        self.failed_acks: list[tuple[int, str | None, list]] = []  # (cycle, error, results)
        self.delivered_in_cycle: dict[int, int] = {}
        self.terminal_ok: set[tuple[int, int]] = set()  # offsets with a successful terminal ack
        self.closed: set[int] = set()

    def add(self, cycle: int, obj: dict) -> None:
        with self.lock:
            self.seq += 1
            seq = self.seq
            if "d" in obj:
                for p, o, value, dc in obj["d"]:
                    self.deliveries.setdefault((p, o), []).append((seq, cycle, dc, value))
                self.delivered_in_cycle[cycle] = self.delivered_in_cycle.get(cycle, 0) + len(obj["d"])
            elif "r" in obj:
                if not obj["ok"]:
                    self.failed_acks.append((cycle, obj["err"], obj["r"]))
                for p, o, dc, t in obj["r"]:
                    if dc is None:
                        self.unmatched.append((cycle, [p, o], obj["ok"]))
                        continue
                    self.acks.setdefault((p, o), []).append((seq, cycle, dc, t, obj["ok"]))
                    if obj["ok"] and is_terminal_ack(t, dc):
                        self.terminal_ok.add((p, o))
            elif "e" in obj:
                self.errors.append((cycle, obj["e"]))
            elif obj.get("closed"):
                self.closed.add(cycle)


def is_terminal_ack(ack_type: int, delivery_count: int) -> bool:
    """ACCEPT and REJECT end a record; so does a RELEASE of its last permitted delivery (archived)."""
    return ack_type in (ACCEPT, REJECT) or (ack_type == RELEASE and delivery_count >= DELIVERY_LIMIT)


class ConsumerChild:
    def __init__(self, bootstrap: str, group: str, topic: str, cycle: int, ledger: Ledger, log_dir,
                 max_poll_records: int = 50, commit_every: int = 2) -> None:
        self.cycle = cycle
        self.ledger = ledger
        self.stderr_path = os.path.join(str(log_dir), f"consumer-{cycle}.stderr")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, bootstrap, group, topic, str(max_poll_records), str(commit_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, name=f"consumer-child-{cycle}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.ledger.add(self.cycle, json.loads(line))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._finish()

    def close(self, timeout_s: float = 30.0) -> None:
        """Ask the child to commit and close; fail if it does not."""
        self.proc.stdin.write(b"close\n")
        self.proc.stdin.flush()
        try:
            self.proc.wait(timeout_s)
        finally:
            self.kill()
        assert self.cycle in self.ledger.closed, f"consumer {self.cycle} did not close cleanly: {self.stderr_tail()}"

    def _finish(self) -> None:
        self._reader.join(10)
        self._stderr.close()
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def stderr_tail(self) -> str:
        with open(self.stderr_path, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")


# ----------------------------------------------------------------------------- durable state

@dataclass
class Durable:
    """The durable state of one share partition, as replayed from `__share_group_state`."""

    start_offset: int
    batches: tuple  # StateBatch(first_offset, last_offset, delivery_state, delivery_count), sorted

    def at(self, offset: int) -> tuple[bool, int]:
        """(terminal, durable delivery count) of one offset."""
        if offset < self.start_offset:
            return True, 0
        i = bisect.bisect_left([b.last_offset for b in self.batches], offset)
        if i < len(self.batches) and self.batches[i].first_offset <= offset:
            b = self.batches[i]
            return b.delivery_state in TERMINAL_STATES, b.delivery_count
        return False, 0

    def view(self, end: int) -> list[tuple[bool, int]]:
        out = [(o < self.start_offset, 0) for o in range(end)]
        for b in self.batches:
            for o in range(max(b.first_offset, self.start_offset), min(b.last_offset, end - 1) + 1):
                out[o] = (b.delivery_state in TERMINAL_STATES, b.delivery_count)
        return out


def read_topic(bootstrap: str, topic: str, partitions: list[int],
               timeout_s: float = 30.0) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    """Every record (offset, key, value) of the partitions, up to their high watermarks now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "check.crcs": True, "log_level": 3})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        out: dict[int, list] = {p: [] for p in partitions}
        todo = [p for p in partitions if ends[p] > 0]
        if todo:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        next_offset = {p: -1 for p in todo}
        deadline = time.monotonic() + timeout_s
        while any(next_offset[p] < ends[p] for p in todo):
            assert time.monotonic() < deadline, f"reading {topic}: at {next_offset}, high watermarks {ends}"
            for m in consumer.consume(num_messages=10_000, timeout=0.2):
                assert m.error() is None, f"reading {topic}: {m.error()}"
                if m.offset() < ends[m.partition()]:
                    out[m.partition()].append((m.offset(), m.key(), m.value()))
                next_offset[m.partition()] = m.offset() + 1
        return out
    finally:
        consumer.close()


def read_durable_state(bootstrap: str, group: str, topic_id: uuid.UUID) -> dict[int, Durable]:
    """The durable state of the group's share partitions of the topic, by replaying
    `__share_group_state` the way the broker loads it."""
    coordinator = ShareCoordinator(STATE_PARTITIONS)
    keys = {p: ShareStateKey(group, topic_id, p) for p in range(PARTITIONS)}
    state_partitions = sorted({coordinator.partition_for(k) for k in keys.values()})
    records = read_topic(bootstrap, STATE_TOPIC, state_partitions)
    for sp in state_partitions:
        coordinator.begin_loading(sp)
        for offset, key, value in records[sp]:
            if key is not None:
                coordinator.replay(sp, offset, decode_share_state_record(key, value))
        coordinator.finish_loading(sp)
    out = {}
    for p, key in keys.items():
        st = coordinator.state(key)
        if st is None:  # never initialised: share.auto.offset.reset=earliest, log start offset 0
            out[p] = Durable(0, ())
        else:
            out[p] = Durable(max(st.start_offset, 0), tuple(st.state_batches))
    return out


@dataclass
class Restart:
    seq: int  # ledger position at the restart: events after it happened after the restart
    cycle: int  # the consumer cycle that starts after this restart
    state: dict[int, Durable]


# ----------------------------------------------------------------------------- setup helpers

def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        assert future.result(10) is None


def producer_config(bootstrap: str, on_error) -> dict:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "batch.num.messages": 20, "message.timeout.ms": 120000, "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200, "error_cb": on_error, "log_level": 2}


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4()}", "log_level": 3})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def all_terminal(ledger: Ledger, restart: Restart, ends: dict[int, int]) -> bool:
    """Whether every record is terminal: durably so at the last restart, or by a successful ack since."""
    with ledger.lock:
        done = ledger.terminal_ok
        for p, end in ends.items():
            view = restart.state[p]
            for o in range(end):
                if (p, o) not in done and not view.at(o)[0]:
                    return False
    return True


def drain(ledger: Ledger, restart: Restart, ends: dict[int, int], child: ConsumerChild, timeout_s: float) -> str | None:
    """Wait until every record is terminal; None when it is, else why not (the checks then say which
    records are missing)."""
    try:
        wait_until(lambda: all_terminal(ledger, restart, ends) or child.proc.poll() is not None, timeout_s, 0.05,
                   message="every record terminal")
    except AssertionError as exc:
        return str(exc)
    if child.proc.poll() is not None:
        return f"the consumer exited: {child.stderr_tail()}"
    return None


# ----------------------------------------------------------------------------- the checks

def check_invariants(ledger: Ledger, restarts: list[Restart], final: dict[int, Durable], log_values: dict,
                     label: str) -> None:
    """Collect every violation of (a)-(d) and the rest (see the module doc); fail listing them."""
    problems: list[str] = []
    ends = {p: len(values) for p, values in log_values.items()}
    deliveries, acks = ledger.deliveries, ledger.acks

    def problem(msg: str) -> None:
        problems.append(msg)

    # the log: every produced value at its offset, delivered values match it
    for (p, o), ds in deliveries.items():
        if o >= ends[p]:
            problem(f"p{p}@{o}: delivered but beyond the log end {ends[p]}")
            continue
        for seq, cycle, dc, value in ds:
            if value != log_values[p][o]:
                problem(f"p{p}@{o}: delivered value {value} (cycle {cycle}) but the log has {log_values[p][o]}")
            if not 1 <= dc <= DELIVERY_LIMIT:
                problem(f"p{p}@{o}: delivery count {dc} (cycle {cycle}) outside [1, {DELIVERY_LIMIT}]")
        by_cycle: dict[int, list[int]] = {}
        for seq, cycle, dc, value in ds:
            by_cycle.setdefault(cycle, []).append(dc)
        for cycle, dcs in by_cycle.items():
            if any(b <= a for a, b in zip(dcs, dcs[1:])):
                problem(f"p{p}@{o}: delivery counts within cycle {cycle} not increasing: {dcs}")

    # (a) a successful terminal ack: never delivered again
    for (p, o), results in acks.items():
        for seq, cycle, dc, t, ok in results:
            if ok and is_terminal_ack(t, dc):
                later = [(c, d) for s, c, d, _v in deliveries.get((p, o), []) if s > seq]
                if later:
                    problem(f"p{p}@{o}: ack type {t} of delivery {dc} reported successful (cycle {cycle}), "
                            f"delivered again afterwards (cycle, count) {later}")

    # durability of each restart's state, and its monotonicity
    previous: dict[int, list] | None = None
    for r in restarts:
        views = {p: r.state[p].view(ends[p]) for p in range(PARTITIONS)}
        for (p, o), results in acks.items():
            if o >= ends[p]:
                continue
            terminal, count = views[p][o]
            for seq, cycle, dc, t, ok in results:
                if not ok or seq > r.seq:
                    continue
                if is_terminal_ack(t, dc) and not terminal:
                    problem(f"p{p}@{o}: ack type {t} of delivery {dc} reported successful (cycle {cycle}) but "
                            f"not terminal in the durable state after restart {r.cycle} (count {count})")
                if t == RELEASE and not terminal and count < dc:
                    problem(f"p{p}@{o}: RELEASE of delivery {dc} reported successful (cycle {cycle}) but the "
                            f"durable count after restart {r.cycle} is {count}")
        if previous is not None:
            for p in range(PARTITIONS):
                for o in range(ends[p]):
                    (t0, c0), (t1, c1) = previous[p][o], views[p][o]
                    if t0 and not t1:
                        problem(f"p{p}@{o}: terminal in the durable state before restart {r.cycle}, not after")
                    elif not t0 and not t1 and c1 < c0:
                        problem(f"p{p}@{o}: durable delivery count went from {c0} to {c1} at restart {r.cycle}")
        previous = views

        for p in range(PARTITIONS):
            for o in range(ends[p]):
                terminal, count = views[p][o]
                ds = deliveries.get((p, o), [])
                after = [d for d in ds if d[0] > r.seq]
                # (b) terminal: never delivered again; not terminal: delivered again
                if terminal and after:
                    problem(f"p{p}@{o}: terminal in the durable state after restart {r.cycle}, delivered "
                            f"afterwards (cycle, count) {[(c, d) for _s, c, d, _v in after]}")
                if not terminal and not after:
                    problem(f"p{p}@{o}: not terminal after restart {r.cycle} (durable count {count}) but never "
                            f"delivered afterwards")
                # (d) the first delivery in the cycle after the restart: durable count + 1, and at least
                # the last count seen before the restart, at most one more
                in_cycle = [d for d in after if d[1] == r.cycle]
                if in_cycle and not terminal:
                    first = in_cycle[0][2]
                    before = [d[2] for d in ds if d[0] <= r.seq]
                    last_before = max(before, default=0)
                    if first != count + 1:
                        problem(f"p{p}@{o}: first delivery after restart {r.cycle} has count {first}, durable "
                                f"count {count} (+1 expected); counts before: {before}")
                    if not last_before <= first <= last_before + 1:
                        problem(f"p{p}@{o}: first delivery after restart {r.cycle} has count {first}, the last "
                                f"before it had {last_before}")

    # the end: everything terminal
    for p in range(PARTITIONS):
        if final[p].start_offset != ends[p]:
            open_offsets = [o for o in range(ends[p]) if not final[p].at(o)[0]]
            problem(f"p{p}: final durable start offset {final[p].start_offset}, log end {ends[p]}; not terminal: "
                    f"{open_offsets[:20]}{'...' if len(open_offsets) > 20 else ''}; batches "
                    f"{final[p].batches[:10]}")
        never = [o for o in range(ends[p]) if (p, o) not in deliveries]
        if never:
            problem(f"p{p}: {len(never)} records never delivered: {never[:20]}")

    if ledger.unmatched:
        problem(f"ack results for offsets the consumer had not acknowledged: {ledger.unmatched[:10]}")
    if problems:
        shown = "\n  ".join(problems[:40])
        raise AssertionError(f"{label}: {len(problems)} violations:\n  {shown}")


# ----------------------------------------------------------------------------- 1. one restart

RECORDS = 3000


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_restart_mid_share_consuming_workload_keeps_acknowledged_state(tmp_path, how, broker_process):
    broker = broker_process(str(tmp_path / "data"), overrides=BROKER_OVERRIDES)
    bootstrap, topic, group = broker.bootstrap_servers, "crash-work", "sg-crash-work"
    topic_id = create_topic(bootstrap, topic, PARTITIONS)
    set_group_configs(bootstrap, group, GROUP_CONFIGS)

    fatal: list = []
    producer = Producer(producer_config(bootstrap, lambda err: err.fatal() and fatal.append(err)))
    failed: list = []
    for i in range(RECORDS):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and not failed and not fatal, (failed, fatal)

    ledger = Ledger()
    restarts: list[Restart] = []
    child = ConsumerChild(bootstrap, group, topic, 0, ledger, tmp_path)
    try:
        # mid-way: 40 % of the records acknowledged for good
        wait_until(lambda: len(ledger.terminal_ok) >= RECORDS * 2 // 5 or child.proc.poll() is not None, 60,
                   message="40% of the records terminally acknowledged")
        assert child.proc.poll() is None, f"consumer exited: {child.stderr_tail()}"
        if how == "sigkill":
            broker.kill()
        else:
            assert broker.stop() == 0, broker.read_log()[-3000:]
        child.kill()
        terminal_before = len(ledger.terminal_ok)
        broker.start()
        restarts.append(Restart(ledger.seq, 1, read_durable_state(bootstrap, group, topic_id)))

        child = ConsumerChild(bootstrap, group, topic, 1, ledger, tmp_path)
        ends = {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        drained = drain(ledger, restarts[-1], ends, child, 60)
        child.close()
    finally:
        child.kill()

    final = read_durable_state(bootstrap, group, topic_id)
    log = read_topic(bootstrap, topic, list(range(PARTITIONS)))
    log_values = {p: [int(v) for _o, _k, v in log[p]] for p in range(PARTITIONS)}
    assert [len(v) for v in log_values.values()] == [RECORDS // PARTITIONS] * PARTITIONS
    check_invariants(ledger, restarts, final, log_values, f"{how} restart")
    assert drained is None, drained
    # the restart really happened mid-way, and the second consumer had work left to do
    assert RECORDS * 2 // 5 <= terminal_before < RECORDS, terminal_before
    assert ledger.delivered_in_cycle.get(1, 0) > 0
    assert [f for f in ledger.failed_acks if f[0] == 1] == [], "acks failed after the restart"
    broker.stop()
