"""The processes of benchmarks/load_churn.py: the canary (a confluent-kafka producer sending a
stamped record every 10 ms, a confluent-kafka ShareConsumer accepting each record) and the load's
workers (idle connections, quafka AsyncShareConsumers, raw KIP-848 consumer-group members, a
Fetch client that never reads, slowloris connections), each a top-level function run in a spawned
process; plus the parent's small helpers (/proc readings, the RSS sampler). Imported as
`_load_clients` (load_churn.py puts benchmarks/ on sys.path)."""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import resource
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass

CANARY_TOPIC, CANARY_GROUP = "canary", "canary-group"
CANARY_INTERVAL_S = 0.010
LOAD_NICE = 10
MIB = 1024 * 1024


# ----------------------------------------------------------------------------- small helpers

def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def proc_status_kb(pid: int, key: str) -> int:
    """A `kB` field of /proc/PID/status (VmRSS, VmHWM), 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_nofile(pid: int) -> str:
    """The soft/hard 'Max open files' of a process, from /proc/PID/limits."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    parts = line.split()
                    return f"{parts[3]}/{parts[4]}"
    except OSError:
        pass
    return "?"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scaled(n: int, scale: float, least: int = 1) -> int:
    return max(least, int(round(n * scale)))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class RssSampler(threading.Thread):
    """Samples the broker's VmRSS every 100 ms: (monotonic time, kB)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            kb = proc_status_kb(self.pid, "VmRSS")
            if kb:
                self.samples.append((time.monotonic(), kb))
            self.stopped.wait(0.1)

    def now_kb(self) -> int:
        return proc_status_kb(self.pid, "VmRSS")

    def peak_kb(self, t0: float, t1: float) -> int:
        return max((kb for t, kb in self.samples if t0 <= t <= t1), default=0)


def _quiet_logger():
    import logging

    logger = logging.getLogger("load-churn-librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def _load_process_setup() -> None:
    """A load worker: nice 10 (the canary and the broker first) and every descriptor it may open."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, LOAD_NICE)  # absolute: the parent may run at --priority
    except OSError:
        pass
    raise_nofile()


# ----------------------------------------------------------------------------- canary (spawned)

def canary_producer(bootstrap: str, topic: str, stop, out) -> None:
    """One stamped record (seq 8 bytes, time_ns 8 bytes) every 10 ms until `stop`; reports
    ("produced", [(seq, offset)], failures)."""
    try:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "logger": _quiet_logger()})
        delivered: list[tuple[int, int]] = []
        failures: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                delivered.append((int.from_bytes(msg.value()[:8], "big"), msg.offset()))

        out.put(("ready", None))
        seq = 0
        due = time.monotonic()
        while not stop.is_set():
            producer.produce(topic, value=seq.to_bytes(8, "big") + time.time_ns().to_bytes(8, "big"),
                             on_delivery=on_delivery)
            seq += 1
            due += CANARY_INTERVAL_S
            producer.poll(0)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # not poll(wait): poll returns at the first delivery report
        left = producer.flush(30)
        out.put(("produced", (delivered, failures + [f"{left} records not delivered at the end"] * bool(left))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"canary producer: {type(exc).__name__}: {exc}"))


def canary_consumer(bootstrap: str, topic: str, group: str, drain, target, out) -> None:
    """A confluent ShareConsumer, explicit ACCEPT per record, until `drain` is set and `target`
    offsets have been accepted (or 60 s after `drain`); reports latencies (send ns, µs) and the
    data check's inputs."""
    try:
        from confluent_kafka import ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit", "logger": _quiet_logger()})
        accepted: Counter = Counter()
        mine: Counter = Counter()  # ACCEPTed, not yet confirmed by the callback
        failed_acks: list[str] = []

        def on_commit(offsets, exc) -> None:
            for _tp, offs in offsets.items():
                ours = [o for o in offs if mine[o]]
                for o in ours:
                    mine[o] -= 1
                if exc is None:
                    accepted.update(ours)
                else:
                    failed_acks.append(f"{len(offs)} offsets: {exc}")

        consumer.set_acknowledgement_commit_callback(on_commit)
        consumer.subscribe([topic])
        out.put(("ready", None))
        latencies: list[tuple[int, int]] = []
        received: Counter = Counter()
        after_accept = 0
        errors: list[str] = []
        give_up = None
        while True:
            msgs = consumer.poll(0.05)
            now_ns = time.time_ns()
            for m in msgs:
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                value, off = m.value(), m.offset()
                sent = int.from_bytes(value[8:16], "big")
                if not received[off]:
                    latencies.append((sent, (now_ns - sent) // 1000))
                    if len(latencies) == 1:
                        out.put(("warm", None))
                if accepted[off]:
                    after_accept += 1
                received[off] += 1
                mine[off] += 1
                consumer.acknowledge(m)
            if drain.is_set():
                give_up = give_up or time.monotonic() + 60
                if (target.value >= 0 and len(accepted) >= target.value) or time.monotonic() > give_up:
                    break
        consumer.commit_sync(30)
        consumer.close()
        out.put(("consumed", dict(latencies=latencies, received=dict(received), accepted=dict(accepted),
                                  after_accept=after_accept, failed_acks=failed_acks, errors=errors[:5])))
    except BaseException as exc:  # noqa: BLE001
        out.put(("error", f"canary consumer: {type(exc).__name__}: {exc}"))


class Canary:
    """The canary's two processes; `start()` waits for the first record to come through."""

    def __init__(self, ctx, bootstrap: str) -> None:
        self.ctx = ctx
        self.stop, self.drain, self.target = ctx.Event(), ctx.Event(), ctx.Value("q", -1)
        self.pout, self.cout = ctx.Queue(), ctx.Queue()
        self.producer = ctx.Process(target=canary_producer, args=(bootstrap, CANARY_TOPIC, self.stop, self.pout),
                                    daemon=True)
        self.consumer = ctx.Process(target=canary_consumer,
                                    args=(bootstrap, CANARY_TOPIC, CANARY_GROUP, self.drain, self.target, self.cout),
                                    daemon=True)

    def start(self) -> None:
        self.consumer.start()
        _expect(self.cout, "ready", 60)
        self.producer.start()
        _expect(self.pout, "ready", 60)
        _expect(self.cout, "warm", 60)

    def finish(self) -> "CanaryResult":
        self.stop.set()
        delivered, failures = _expect(self.pout, "produced", 60)
        self.target.value = len(delivered)
        self.drain.set()
        consumed = _expect(self.cout, "consumed", 120)
        for p in (self.producer, self.consumer):
            p.join(10)
        return CanaryResult(delivered, failures, consumed)

    def kill(self) -> None:
        for p in (self.producer, self.consumer):
            if p.is_alive():
                p.terminate()
            p.join(5)


def _expect(q, kind: str, timeout_s: float):
    got, payload = q.get(timeout=timeout_s)
    if got == "error":
        raise RuntimeError(payload)
    if got != kind:
        raise RuntimeError(f"expected {kind!r}, got {got!r}")
    return payload


@dataclass
class CanaryResult:
    delivered: list[tuple[int, int]]
    failures: list[str]
    consumed: dict

    def latencies_ms(self, t0_ns: int, t1_ns: int) -> list[float]:
        return [lat / 1000 for sent, lat in self.consumed["latencies"] if t0_ns <= sent < t1_ns]

    def problems(self) -> list[str]:
        out = [f"canary: {f}" for f in self.failures[:3]]
        accepted = self.consumed["accepted"]
        offsets = {off for _seq, off in self.delivered}
        missing = offsets - set(accepted)
        if missing:
            out.append(f"canary: {len(missing)} of {len(offsets)} produced records never accepted "
                       f"(first {sorted(missing)[:5]})")
        twice = [off for off, n in accepted.items() if n > 1]
        if twice:
            out.append(f"canary: {len(twice)} records accepted more than once (first {sorted(twice)[:5]})")
        if self.consumed["after_accept"]:
            out.append(f"canary: {self.consumed['after_accept']} records delivered again after being accepted")
        out += [f"canary: record error: {x}" for x in self.consumed["errors"][:3]]
        return out

    def notes(self) -> list[str]:
        extra = set(self.consumed["received"]) - {off for _seq, off in self.delivered}
        # a produce that timed out on the client may still have been written: not a loss
        notes = [f"canary: {len(extra)} records received whose produce the producer reported as failed"] if extra else []
        # a failed ACCEPT (e.g. INVALID_RECORD_STATE: the lock expired first) is no loss as long as
        # the record comes again and is accepted then; problems() checks that
        return notes + [f"canary: acknowledgement failed (the records came again): {x}"
                        for x in self.consumed["failed_acks"][:3]]

    def redelivered(self) -> int:
        return sum(n - 1 for n in self.consumed["received"].values() if n > 1)


# ----------------------------------------------------------------------------- load workers (spawned)

def run_worker(fn, args, go, out) -> None:
    """A spawned load worker: nice, raised fd limit, the client imported; reports "ready", waits
    for `go`, then runs `fn(*args, out)` (a coroutine function)."""
    _load_process_setup()
    try:
        importlib.import_module("quafka.client")  # imported before the load starts

        out.put(("ready", None))
        go.wait()
        asyncio.run(fn(*args, out))
    except BaseException as exc:  # noqa: BLE001
        import traceback

        out.put(("error", f"{fn.__name__}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


async def _wait_event(event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.05)


async def idle_connections_worker(host: str, port: int, count: int, release, out) -> None:
    """`count` connections, each negotiating ApiVersions v3 (quafka's client transport), then idle."""
    from quafka.client._transport import BrokerConnection

    conns: list = []
    sem = asyncio.Semaphore(200)
    failures: list[str] = []

    async def one() -> None:
        async with sem:
            conn = BrokerConnection(host, port, client_id="idle", request_timeout=60)
            try:
                await conn.connect()
                conns.append(conn)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(f"{type(exc).__name__}: {exc}")

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(count)))
    out.put(("connected", dict(connected=len(conns), failed=len(failures), first_failures=failures[:3],
                               seconds=time.monotonic() - t0)))
    await _wait_event(release)
    alive = sum(1 for c in conns if c.connected)
    for i in range(0, len(conns), 500):
        await asyncio.gather(*(c.close() for c in conns[i:i + 500]))
    out.put(("closed", dict(alive_at_release=alive)))


async def share_members_worker(index: int, bootstrap: str, assignments: list[tuple[str, str]], leave, out) -> None:
    """One quafka AsyncShareConsumer per (group, topic) in `assignments`, explicit ACCEPT of every
    record, until `leave`; then every consumer closes (commits, leaves the group). Reports what was
    received and accepted, per (topic, partition, offset)."""
    from quafka.client import AsyncShareConsumer

    accepted: Counter = Counter()
    received: Counter = Counter()
    failed_acks: list[str] = []
    errors: list[str] = []
    after_accept = [0]
    consumers = []
    acked: list[Counter] = []
    failed_count = [0]
    released = [0]
    accepted_by: dict = {}  # (topic, partition, offset) -> [(consumer, stage)] of its accepting callbacks
    stage = ["running"]
    for n, (group, topic) in enumerate(assignments):
        c = AsyncShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "load",
                                "share.acknowledgement.mode": "explicit"})

        mine: Counter = Counter()  # what this consumer ACCEPTed and no callback has confirmed yet
        acked.append(mine)

        def on_commit(offsets, exc, n=n, mine=mine) -> None:
            # the callback reports every acknowledgement type: also records the client acquired
            # and released without delivering them (a fetch answered after its partition was
            # revoked, or at close); only the offsets this consumer ACCEPTed count as accepted
            for tp, offs in offsets.items():
                keys = [(tp.topic, tp.partition, o) for o in offs]
                ours = [k for k in keys if mine[k]]
                for k in ours:
                    mine[k] -= 1
                released[0] += len(keys) - len(ours)
                if exc is None:
                    accepted.update(ours)
                    for k in ours:
                        accepted_by.setdefault(k, []).append((f"{index}.{n}", stage[0]))
                else:
                    failed_count[0] += 1
                    failed_acks.append(f"{tp.topic}-{tp.partition}: {len(offs)} offsets: {exc}")

        c.set_acknowledgement_commit_callback(on_commit)
        c.subscribe([topic])
        consumers.append(c)
    stopping = asyncio.Event()

    async def member(c, mine) -> None:
        while not stopping.is_set():
            try:
                records = await c.poll(0.2)
            except Exception as exc:  # noqa: BLE001 - reported
                errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
                continue
            for r in records:
                key = (r.topic, r.partition, r.offset)
                if accepted[key]:
                    after_accept[0] += 1
                received[key] += 1
                mine[key] += 1
                c.acknowledge(r)

    tasks = [asyncio.ensure_future(member(c, mine)) for c, mine in zip(consumers, acked)]
    out.put(("started", len(consumers)))
    last = -1
    while not leave.is_set():
        await asyncio.sleep(0.1)
        if len(accepted) != last:
            last = len(accepted)
            out.put(("accepted", (index, last)))
    stopping.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    stage[0] = "closing"
    t0 = time.monotonic()
    closed = await asyncio.gather(*(c.close(30) for c in consumers), return_exceptions=True)
    close_errors = [repr(x) for x in closed if isinstance(x, BaseException)]
    twice = {k: v for k, v in accepted_by.items() if len(v) > 1}
    out.put(("done", dict(received=dict(received), accepted=dict(accepted), after_accept=after_accept[0],
                          accepted_twice=dict(list(twice.items())[:3]), released=released[0],
                          unconfirmed=sum(sum(m.values()) for m in acked),
                          failed_acks=failed_acks[:5], errors=(errors + close_errors)[:5],
                          error_count=len(errors) + len(close_errors), failed_ack_count=failed_count[0],
                          close_s=time.monotonic() - t0)))


# -- KIP-848 members: the raw protocol over quafka's client transport

CONSUMER_GROUP_HEARTBEAT = 68


class CgMember:
    """One KIP-848 consumer-group member: ConsumerGroupHeartbeat on its own connection, the member
    id chosen by the client (v1), reconciling at once (what it is assigned it owns, and says so in
    the next heartbeat), heartbeating at the interval the coordinator gives."""

    def __init__(self, host: str, port: int, group: str, topic: str) -> None:
        from quafka.client._transport import BrokerConnection

        self.conn = BrokerConnection(host, port, client_id="cg-load", request_timeout=60)
        self.group, self.topic = group, topic
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict = {}           # topic id -> tuple of partitions
        self.reported: dict | None = None
        self.interval_s = 5.0
        self.errors: Counter = Counter()
        self.heartbeats = 0
        self.leaving = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def _beat(self, epoch: int) -> None:
        values = {"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
                  "instance_id": None, "rack_id": None, "server_assignor": None,
                  "subscribed_topic_regex": None}
        if epoch == 0:
            values.update(rebalance_timeout=_td_ms(60000), subscribed_topic_names=(self.topic,), topic_partitions=())
        else:
            values.update(rebalance_timeout=_td_ms(-1), subscribed_topic_names=None,
                          topic_partitions=None if self.reported == self.owned else
                          tuple({"topic_id": t, "partitions": p} for t, p in self.owned.items()))
        sent = dict(self.owned)
        resp = await self.conn.call(CONSUMER_GROUP_HEARTBEAT, values, min_version=1, max_version=1)
        self.heartbeats += 1
        if resp.error_code != 0:
            self.errors[str(resp.error_code)] += 1
            if epoch != -1:
                self.epoch, self.owned, self.reported = 0, {}, None  # fenced or unknown: rejoin
            return
        if epoch == -1:
            return
        self.reported = sent
        self.epoch = resp.member_epoch
        self.interval_s = resp.heartbeat_interval.total_seconds() or 5.0
        if resp.assignment is not None:
            self.owned = {tp.topic_id: tuple(sorted(tp.partitions)) for tp in resp.assignment.topic_partitions}

    async def run(self) -> None:
        await self.conn.connect()
        while not self.leaving.is_set():
            try:
                await self._beat(self.epoch)
            except Exception as exc:  # noqa: BLE001 - counted
                self.errors[type(exc).__name__] += 1
                await asyncio.sleep(1)
                continue
            wait = 0 if self.reported != self.owned else self.interval_s
            try:
                await asyncio.wait_for(self.leaving.wait(), wait)
            except asyncio.TimeoutError:
                pass
        try:
            await self._beat(-1)
        except Exception as exc:  # noqa: BLE001
            self.errors[f"leave {type(exc).__name__}"] += 1
        await self.conn.close()


def _td_ms(ms: int):
    import datetime

    return datetime.timedelta(milliseconds=ms)


def _groups_consistent(members: list[CgMember], partitions: int) -> tuple[int, list[str]]:
    """(groups whose live members own every partition exactly once, descriptions of the others)."""
    by_group: dict[str, list[CgMember]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m)
    ok, bad = 0, []
    for group, ms in by_group.items():
        owned = Counter(p for m in ms for ps in m.owned.values() for p in ps)
        if set(owned) == set(range(partitions)) and all(n == 1 for n in owned.values()) \
                and all(m.reported == m.owned for m in ms):
            ok += 1
        else:
            bad.append(f"{group}: {len(owned)} of {partitions} partitions owned, "
                       f"{sum(1 for n in owned.values() if n > 1)} owned twice")
    return ok, bad


async def consumer_groups_worker(host: str, port: int, groups: list[str], members_per_group: int, topic: str,
                                 partitions: int, churn_s: float, churn_fraction: float, seed: int, leave,
                                 out) -> None:
    """Join every member, report when every group is consistent; churn for `churn_s`; report
    when consistent again; leave on `leave`."""
    rng = random.Random(seed)
    members: list[CgMember] = []
    errors: Counter = Counter()

    def add(group: str) -> CgMember:
        m = CgMember(host, port, group, topic)
        m.task = asyncio.ensure_future(m.run())
        members.append(m)
        return m

    async def settle(what: str, deadline_s: float = 120.0) -> None:
        t0 = time.monotonic()
        while True:
            ok, bad = _groups_consistent(members, partitions)
            if ok == len(groups) or time.monotonic() - t0 > deadline_s:
                out.put((what, dict(seconds=time.monotonic() - t0, consistent=ok, inconsistent=bad[:5])))
                return
            await asyncio.sleep(0.2)

    for i, group in enumerate(groups):
        for _ in range(members_per_group):
            add(group)
        if i % 10 == 9:
            await asyncio.sleep(0)  # let the connections start
    await settle("joined")
    left = 0
    t_end = time.monotonic() + churn_s
    while time.monotonic() < t_end:
        leaving = rng.sample(members, max(1, int(len(members) * churn_fraction)))
        for m in leaving:
            m.leaving.set()
        done = await asyncio.gather(*(m.task for m in leaving), return_exceptions=True)
        errors.update(type(x).__name__ for x in done if isinstance(x, BaseException))
        for m in leaving:
            errors.update(m.errors)
            members.remove(m)
            add(m.group)
        left += len(leaving)
        await asyncio.sleep(1.0)
    out.put(("churned", dict(replaced=left)))
    await settle("settled")
    await _wait_event(leave)
    for m in members:
        m.leaving.set()
    done = await asyncio.gather(*(m.task for m in members), return_exceptions=True)
    errors.update(type(x).__name__ for x in done if isinstance(x, BaseException))
    for m in members:
        errors.update(m.errors)
    out.put(("done", dict(heartbeats=sum(m.heartbeats for m in members), errors=dict(errors))))


async def stalled_reader_worker(host: str, port: int, topic: str, seconds: float, out) -> None:
    """Fetch requests for offset 0 (max_bytes 50 MiB) every 50 ms for `seconds`, never reading."""
    from quafka.client._transport import BrokerConnection
    from quafka.client._wire import WireConnection, build_entity, request_class
    from quafka.client.reader import fetch_values

    meta_conn = await BrokerConnection(host, port, client_id="stalled-meta").connect()
    version = meta_conn.version_for(1, 13)
    meta = await meta_conn.call(3, {"topics": [{"name": topic, "topic_id": None}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False}, min_version=12)
    topic_id = meta.topics[0].topic_id
    await meta_conn.close()
    wire = WireConnection("stalled-reader")
    request = build_entity(request_class(1, version), fetch_values(
        topic, topic_id, 0, 0, max_wait_ms=0, max_bytes=50 * MIB, partition_max_bytes=50 * MIB))
    sock = socket.create_connection((host, port))
    sock.setblocking(False)
    pending = b""
    sent_requests = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not pending:
            _cid, pending = wire.send(request)
            sent_requests += 1
        try:
            n = sock.send(pending)
            pending = pending[n:]
        except BlockingIOError:
            pass
        await asyncio.sleep(0.05)
    out.put(("stalled", dict(requests=sent_requests, seconds=time.monotonic() - t0)))
    sock.close()
    out.put(("done", None))


async def slowloris_worker(host: str, port: int, count: int, seconds: float, out) -> None:
    """`count` connections each announce a 100 MB request and then send one byte a second."""
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, port))
        s.sendall(struct.pack(">i", 100 * 1000 * 1000))
        socks.append(s)
    t0 = time.monotonic()
    sent = closed = 0
    out.put(("started", count))
    while time.monotonic() - t0 < seconds:
        for s in list(socks):
            try:
                s.send(b"\0")
                sent += 1
            except OSError:
                closed += 1
                socks.remove(s)
        await asyncio.sleep(1.0)
    for s in socks:
        s.close()
    out.put(("done", dict(bytes_sent=sent, closed_by_broker=closed, seconds=time.monotonic() - t0)))
