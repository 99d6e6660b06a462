#!/usr/bin/env python3
"""Fuzz a running `quafka broker` with random and mutated Kafka request frames.

The tool starts `quafka broker` as a child process (a temporary data directory, a free port),
asks it which APIs and versions it serves (ApiVersions), and then sends --frames request frames
over several connections at once:

- valid requests for every advertised (API, version), built with kio's encoders from values that
  target a fuzz topic and a fuzz share group (Produce, Fetch, ShareGroupHeartbeat, ShareFetch,
  ShareAcknowledge, the share-group admin APIs, configs, topics, ...);
- the same requests with random field values, and mutated: bit flips, byte edits, insertions,
  truncation, random bytes appended, an int/length/varint field (found by tracing the encoder's
  writes) set to -1, 0, huge or unterminated values, the API key or version in the header swapped,
  unknown tagged fields added, a size prefix that lies (short, long, negative, huge);
- frames of (API, version) pairs the broker does not advertise (the share-state APIs 83-87 among
  them), unknown API keys, and purely random bytes;
- stateful share sessions: a member joins the fuzz share group, opens a share session, acquires
  records, then sends ShareFetch/ShareAcknowledge with random (sometimes nonsensical)
  acknowledgement batches, RENEW included, sometimes mutated.

A "canary" child process meanwhile produces a record, fetches it back and consumes it through a
real share group (quafka's ShareConsumer, explicit ACCEPT) on its own connections, every
--canary-interval seconds; every round must finish within --deadline seconds.

The run FAILS (exit status 1) when the broker process dies, when a canary round misses its deadline
or fails, when a fuzz connection gets neither an answer nor a close within the time the request may
be held plus --deadline, when the broker logs an internal error or any other ERROR entry (each
distinct traceback is printed), or when a response does not decode. A connection that the broker
closes after bad input is the expected reaction: the fuzzer reopens it and carries on.

Each connection's frames come from a random generator seeded with (--seed, connection number); the
seed is printed at the start and with every failure, together with a command that replays the run.
`--send HEX` sends one frame (hex, without its size prefix) to a fresh broker and shows what
happened: the way to turn a reported frame into a regression test.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import random
import shlex
import signal
import struct
import sys
import tempfile
import time
import uuid
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _fuzz_frames import (  # noqa: E402
    ABANDON,
    API_VERSIONS,
    CANARY_GROUP,
    CANARY_TOPIC,
    DEFAULT_FRAMES,
    FUZZ_GROUP,
    FUZZ_PARTITIONS,
    FUZZ_TOPIC,
    PRODUCE,
    REPLY,
    SESSION_GROUP,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
    Case,
    CaseFactory,
    Findings,
    World,
    decode_response,
    request_header,
    sized,
)
from _harness import BrokerChild, print_distinct_errors, rmtree_quiet, scan_log  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.index import api_key_map  # noqa: E402
from kio.serial._introspect import classify_field  # noqa: E402


# ----------------------------------------------------------------------------- the run


@dataclass
class Stats:
    frames: int = 0
    cases: Counter = field(default_factory=Counter)
    connections: int = 0
    closed_by_broker: int = 0           # the broker closed (EOF/reset) a connection we had not closed
    closed_after_decodable: int = 0     # ... after a request it could decode (a handler refused it)
    responses: int = 0
    abandoned: int = 0                  # long polls we hung up on
    share_sessions: int = 0
    share_acquired: int = 0
    share_join_errors: Counter = field(default_factory=Counter)
    canary_rounds: int = 0
    canary_max_s: float = 0.0
    canary_failures: int = 0


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.port = writer.get_extra_info("sockname")[1]
        self.sent: list[str] = []        # hex of every frame written on it (for reproducers)

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


class Fuzzer:
    def __init__(self, args: argparse.Namespace, broker: BrokerChild, world: World) -> None:
        self.args = args
        self.broker = broker
        self.world = world
        self.stats = Stats()
        self.findings = Findings()
        self.stop = asyncio.Event()
        self.history: OrderedDict[int, list[str]] = OrderedDict()   # local port -> frames sent (closed conns)
        self.live: dict[int, Conn] = {}
        self.started = time.monotonic()
        self.factories: list[CaseFactory] = []

    # ------------------------------------------------------------------ connections
    async def connect(self) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.broker.port, limit=1 << 26)
        conn = Conn(reader, writer)
        self.live[conn.port] = conn
        self.stats.connections += 1
        return conn

    def retire(self, conn: Conn) -> None:
        conn.close()
        self.live.pop(conn.port, None)
        self.history[conn.port] = conn.sent
        self.history.move_to_end(conn.port)
        while len(self.history) > 20_000:
            self.history.popitem(last=False)

    async def read_frame(self, conn: Conn, timeout: float) -> bytes | None:
        """One response frame; None when the broker closed the connection."""
        try:
            head = await asyncio.wait_for(conn.reader.readexactly(4), timeout)
            size = struct.unpack(">i", head)[0]
            if size < 4 or size > 1 << 26:
                raise ValueError(f"response size {size}")
            return await asyncio.wait_for(conn.reader.readexactly(size), timeout)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    def check_response(self, request: bytes, response: bytes) -> None:
        key, version, correlation_id = struct.unpack_from(">hhi", request)
        try:
            got, _ = decode_response(key, version, response)
            if got != correlation_id:
                raise ValueError(f"correlation id {got}, expected {correlation_id}")
        except Exception as exc:
            self.findings.bad_responses.append(
                f"{api_key_map.get(key, key)} v{version}: {type(exc).__name__}: {exc}; request {request.hex()} "
                f"response {response[:400].hex()}")

    # ------------------------------------------------------------------ one worker = one connection at a time
    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.args.seed}:{index}")
        factory = CaseFactory(rng, self.world, self.findings, self.args.long_poll_cap)
        self.factories.append(factory)
        conn: Conn | None = None
        try:
            while not self.stop.is_set() and self.stats.frames < self.args.frames:
                kind = factory.next_kind()
                if kind == "share_session":
                    if conn is not None:
                        self.retire(conn)
                        conn = None
                    await self.share_session(rng, factory)
                    continue
                case = factory.make(kind)
                if case is None:
                    continue
                if conn is None:
                    conn = await self.connect()
                conn = await self.run_case(conn, case)
        except Exception as exc:  # the broker gone, or a bug of the fuzzer itself
            if not self.stop.is_set():
                if not self.broker.alive():
                    self.findings.failures.append(f"the broker process died (exit status {self.broker.returncode})")
                else:
                    self.findings.failures.append(f"worker {index} stopped: {type(exc).__name__}: {exc}")
                self.stop.set()
        finally:
            if conn is not None:
                self.retire(conn)

    async def run_case(self, conn: Conn, case: Case) -> Conn | None:
        """Write the case and check the reaction; returns the connection if it is still usable."""
        stats = self.stats
        stats.frames += case.frames
        stats.cases[case.kind] += 1
        conn.sent.append(case.wire.hex())
        try:
            conn.writer.write(case.wire)
            await conn.writer.drain()
        except ConnectionError:
            stats.closed_by_broker += 1
            self.retire(conn)
            return None
        deadline = self.args.deadline
        if case.expect == ABANDON:
            stats.abandoned += 1
            await asyncio.sleep(0.01)   # let a few bytes of it reach the broker, then hang up
            self.retire(conn)
            return None
        if case.expect == REPLY:
            try:
                response = await self.read_frame(conn, case.hold_s + deadline)
            except ValueError as exc:
                self.findings.bad_responses.append(f"{exc}; request {case.request.hex()}")
                self.retire(conn)
                return None
            except asyncio.TimeoutError as exc:
                self.stalled(conn, case, f"no response within {case.hold_s + deadline:.1f} s ({exc!r})")
                self.retire(conn)
                return None
            if response is None:
                stats.closed_by_broker += 1
                stats.closed_after_decodable += 1
                self.retire(conn)
                return None
            stats.responses += 1
            self.check_response(case.request, response)
            return conn
        # CLOSE: half-close, the broker must answer what it can and close
        try:
            if conn.writer.can_write_eof():
                conn.writer.write_eof()
        except (ConnectionError, OSError):
            pass
        end = time.monotonic() + deadline
        while True:
            try:
                response = await self.read_frame(conn, max(0.05, end - time.monotonic()))
            except (asyncio.TimeoutError, ValueError) as exc:
                self.stalled(conn, case, f"the broker neither closed nor answered within {deadline:.1f} s ({exc!r})")
                break
            if response is None:
                stats.closed_by_broker += 1
                break
            stats.responses += 1
            if case.strict:
                self.findings.served_undecodable.append(f"{case.describe()} -> response {response[:200].hex()}")
        self.retire(conn)
        return None

    def stalled(self, conn: Conn, case: Case, why: str) -> None:
        self.findings.stalled.append(f"{why}: connection :{conn.port} frames {conn.sent[-3:]}")

    # ------------------------------------------------------------------ stateful share sessions
    async def share_session(self, rng: random.Random, factory: CaseFactory) -> None:
        """Join the session share group, open a share session, acquire, then acknowledge at random
        (ShareFetch with piggybacked acknowledgements, ShareAcknowledge, RENEW), sometimes mutated."""
        stats = self.stats
        stats.share_sessions += 1
        stats.cases["share_session"] += 1
        conn: Conn | None = await self.connect()
        world = self.world
        member_id = str(uuid.UUID(int=rng.getrandbits(128)))
        version = rng.randint(*world.advertised[SHARE_FETCH])
        ack_version = rng.randint(*world.advertised[SHARE_ACKNOWLEDGE])
        hb_cls = load_request_schema(SHARE_GROUP_HEARTBEAT, world.advertised[SHARE_GROUP_HEARTBEAT][1])
        sf_cls = load_request_schema(SHARE_FETCH, version)
        sa_cls = load_request_schema(SHARE_ACKNOWLEDGE, ack_version)

        async def call(body: Any) -> Any | None:
            """Send a valid request; its decoded response, or None (the connection is gone)."""
            nonlocal conn
            if conn is None:
                conn = await self.connect()
            frame = factory.encode(body)[0]
            stats.frames += 1
            conn.sent.append(sized(frame).hex())
            try:
                conn.writer.write(sized(frame))
                await conn.writer.drain()
                response = await self.read_frame(conn, body_hold(body) + self.args.deadline)
            except ConnectionError:
                response = None
            except asyncio.TimeoutError:
                self.findings.stalled.append(f"share session: no response to {frame.hex()} "
                                             f"(connection :{conn.port}, frames {conn.sent[-3:]})")
                response = None
            if response is None:
                stats.closed_by_broker += 1
                stats.closed_after_decodable += 1
                self.retire(conn)
                conn = None
                return None
            stats.responses += 1
            self.check_response(frame, response)
            try:
                return decode_response(type(body).__api_key__, type(body).__version__, response)[1]
            except Exception:
                return None

        joined = False
        try:
            if rng.random() < 0.5:   # keep records flowing into the fuzz topic
                produce_version = world.advertised[PRODUCE][1]
                body = factory.sane.entity(load_request_schema(PRODUCE, produce_version), PRODUCE)
                if await call(body) is None:
                    return
            hb = await call(hb_cls(group_id=SESSION_GROUP, member_id=member_id, member_epoch=0, rack_id=None,
                                   subscribed_topic_names=(FUZZ_TOPIC,)))
            if hb is None:
                return
            if hb.error_code != ErrorCode.none:
                stats.share_join_errors[hb.error_code.name] += 1
                return
            joined = True
            epoch = 0
            acquired: list[tuple[int, int, int]] = []   # (partition, first, last)
            for step in range(rng.randint(2, 10)):
                acks = self.random_acks(rng, acquired, renew_ok=version >= 2) if epoch > 0 else {}
                renew = any(4 in t for batches in acks.values() for _f, _l, t in batches)
                final = step > 0 and rng.random() < 0.1
                wire_epoch = -1 if final else epoch
                if epoch > 0 and rng.random() < 0.35:
                    body = _build(sa_cls, group_id=SESSION_GROUP, member_id=member_id, share_session_epoch=wire_epoch,
                                  is_renew_ack=renew, topics=self.ack_topics(sa_cls, acks))
                else:
                    body = _build(sf_cls, group_id=SESSION_GROUP, member_id=member_id, share_session_epoch=wire_epoch,
                                  max_wait=datetime.timedelta(milliseconds=rng.choice((0, 0, 10, 100))),
                                  min_bytes=1, max_bytes=rng.choice((1, 1 << 16, 1 << 20)),
                                  max_records=rng.choice((1, 5, 50, 500)), batch_size=rng.choice((1, 10, 500)),
                                  share_acquire_mode=rng.choice((0, 1)), is_renew_ack=renew,
                                  topics=self.fetch_topics(sf_cls, list(range(FUZZ_PARTITIONS)) if epoch == 0 else [],
                                                           acks),
                                  forgotten_topics_data=())
                if rng.random() < 0.12:   # mutate this one: the broker closes (or serves) it, the session ends
                    frame = bytearray(factory.encode(body)[0])
                    for _ in range(rng.randint(1, 3)):
                        frame[rng.randrange(len(frame))] = rng.randrange(256)
                    case = factory.expect("share_session_mutated", bytes(frame))
                    if case is not None:
                        await self.run_case(conn, case)
                        conn = None
                    return
                response = await call(body)
                if response is None:
                    return
                epoch = -1 if final else epoch + 1
                acquired = self.note_share_response(response)
                if final:
                    return
        finally:
            if joined:   # leave (on a new connection if this one is gone), so the group stays small
                await call(hb_cls(group_id=SESSION_GROUP, member_id=member_id, member_epoch=-1, rack_id=None,
                                  subscribed_topic_names=None))
            if conn is not None:
                self.retire(conn)

    def random_acks(self, rng: random.Random, acquired: list[tuple[int, int, int]],
                    renew_ok: bool) -> dict[int, list[tuple[int, int, tuple[int, ...]]]]:
        """Acknowledgement batches per partition: mostly over acquired ranges, sometimes nonsense."""
        types = (1, 1, 1, 2, 3, 0) + ((4, 4) if renew_ok else ())
        acks: dict[int, list[tuple[int, int, tuple[int, ...]]]] = {}
        for partition, first, last in acquired:
            if rng.random() < 0.2:
                continue
            lo = rng.randint(first, last)
            hi = rng.randint(lo, last)
            if rng.random() < 0.5:
                ack_types: tuple[int, ...] = (rng.choice(types),)
            else:
                ack_types = tuple(rng.choice(types) for _ in range(hi - lo + 1))
            acks.setdefault(partition, []).append((lo, hi, ack_types))
        if rng.random() < 0.25:   # nonsense: reversed, out of range, overlapping, bad types, wrong length
            partition = rng.randrange(FUZZ_PARTITIONS + 1)
            first = rng.choice((-1, 0, 5, 10**6, 2**63 - 1))
            last = min(2**63 - 1, first + rng.choice((-3, 0, 1, 100)))
            bad_types = rng.choice(((5,), (-1,), (127,), (), (1, 2), tuple(range(5))))
            acks.setdefault(partition, []).append((first, last, bad_types))
            if acks[partition] and rng.random() < 0.5:
                acks[partition].append(acks[partition][0])   # duplicate / overlapping batch
        for batches in acks.values():
            batches.sort(key=lambda b: b[0]) if rng.random() < 0.8 else rng.shuffle(batches)
        return acks

    def fetch_topics(self, cls: type, partitions: list[int], acks: dict) -> tuple:
        parts = sorted(set(partitions) | set(acks))
        if not parts:
            return ()
        return (_nested(cls, "topics", topic_id=self.world.fuzz_topic_id, partitions=tuple(
            _nested(_item(cls, "topics"), "partitions", partition_index=p, acknowledgement_batches=tuple(
                _nested(_item(_item(cls, "topics"), "partitions"), "acknowledgement_batches",
                        first_offset=f, last_offset=l, acknowledge_types=t) for f, l, t in acks.get(p, ())))
            for p in parts)),)

    def ack_topics(self, cls: type, acks: dict) -> tuple:
        if not acks:
            return ()
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        return (topic_cls(topic_id=self.world.fuzz_topic_id, partitions=tuple(
            part_cls(partition_index=p, acknowledgement_batches=tuple(
                _item(part_cls, "acknowledgement_batches")(first_offset=f, last_offset=l, acknowledge_types=t)
                for f, l, t in batches)) for p, batches in sorted(acks.items()))),)

    def note_share_response(self, response: Any) -> list[tuple[int, int, int]]:
        out = []
        for topic in getattr(response, "responses", ()) or ():
            for part in topic.partitions:
                for rec in getattr(part, "acquired_records", ()) or ():
                    out.append((part.partition_index, rec.first_offset, rec.last_offset))
                    self.stats.share_acquired += rec.last_offset - rec.first_offset + 1
        return out

    # ------------------------------------------------------------------ monitors
    async def watch_broker(self) -> None:
        while not self.stop.is_set():
            if not self.broker.alive():
                self.findings.failures.append(f"the broker process died (exit status {self.broker.returncode})")
                self.stop.set()
                return
            await asyncio.sleep(0.2)

    async def tail_log(self) -> None:
        """Follow the broker log; map each internal error's peer port to the frames of that connection."""
        pos = 0
        pending: deque[tuple[float, int, str]] = deque()
        while True:
            try:
                with open(self.broker.log_path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            if chunk:
                cut = chunk.rfind(b"\n") + 1
                pos += cut
                for line in chunk[:cut].decode(errors="replace").splitlines():
                    if "after an internal error" in line:
                        scan = scan_log(line)
                        port = scan.errors[0].peer_port if scan.errors else None
                        if port is not None:
                            pending.append((time.monotonic() + 1.0, port, line))
            now = time.monotonic()
            while pending and pending[0][0] <= now:
                _, port, line = pending.popleft()
                conn = self.live.get(port)
                frames = conn.sent if conn is not None else self.history.get(port, [])
                self.findings.internal_error_frames.append(
                    f"{line}\n    frames written on that connection (hex, size prefix included): {frames[-4:]}")
            if self.stop.is_set() and not pending and not chunk:
                return
            await asyncio.sleep(0.3)

    async def canary(self) -> None:
        """Run the canary child; read its JSON lines; every round must finish within the deadline."""
        args = self.args
        proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.abspath(__file__), "canary", "--bootstrap", self.broker.bootstrap,
            "--interval", str(args.canary_interval), "--deadline", str(args.deadline),
            stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.PIPE)
        self.canary_proc = proc
        warm = False
        try:
            while True:
                timeout = (60.0 if not warm else args.deadline * 2 + args.canary_interval + 5)
                try:
                    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
                except asyncio.TimeoutError:
                    if not self.stop.is_set():
                        self.findings.failures.append(f"the canary reported nothing for {timeout:.0f} s (stall)")
                        self.stop.set()
                    return
                if not line:
                    if not self.stop.is_set():
                        self.findings.failures.append("the canary process exited")
                        self.stop.set()
                    return
                report = json.loads(line)
                if not warm:
                    warm = True
                    if not report["ok"]:
                        self.findings.failures.append(f"the canary's first round failed: {report}")
                        self.stop.set()
                        return
                    self.canary_ready.set()
                    continue
                self.stats.canary_rounds += 1
                self.stats.canary_max_s = max(self.stats.canary_max_s, report["latency_s"])
                if not report["ok"] or report["latency_s"] > args.deadline:
                    self.stats.canary_failures += 1
                    self.findings.failures.append(
                        f"canary round {report['round']} {'failed' if not report['ok'] else 'was late'}: "
                        f"{report['latency_s']:.2f} s, steps {report['steps']}, error {report.get('error')}")
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()

    async def progress(self) -> None:
        last = (time.monotonic(), 0)
        while not self.stop.is_set():
            await asyncio.sleep(self.args.progress_interval)
            now, frames = time.monotonic(), self.stats.frames
            rate = (frames - last[1]) / max(1e-9, now - last[0])
            last = (now, frames)
            s = self.stats
            print(f"[{now - self.started:7.1f}s] frames {frames:,}/{self.args.frames:,} ({rate:,.0f}/s)  "
                  f"responses {s.responses:,}  closed by broker {s.closed_by_broker:,}  abandoned {s.abandoned:,}  "
                  f"share sessions {s.share_sessions:,}  canary rounds {s.canary_rounds} "
                  f"(max {s.canary_max_s:.2f} s)  internal errors {len(self.findings.internal_error_frames)}",
                  flush=True)

    async def run(self) -> None:
        self.canary_ready = asyncio.Event()
        canary = asyncio.create_task(self.canary())
        watch = asyncio.create_task(self.watch_broker())
        tail = asyncio.create_task(self.tail_log())
        ready = asyncio.create_task(self.canary_ready.wait())
        await asyncio.wait({ready, canary, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not self.canary_ready.is_set():
            self.stop.set()
        else:
            print(f"canary warm; fuzzing with {self.args.connections} connections", flush=True)
            self.started = time.monotonic()
            progress = asyncio.create_task(self.progress())
            workers = [asyncio.create_task(self.worker(i)) for i in range(self.args.connections)]
            done_or_stopped = asyncio.create_task(self.stop.wait())
            pending = set(workers)
            while pending and not self.stop.is_set():
                _, pending = await asyncio.wait(pending | {done_or_stopped}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(done_or_stopped)
            self.elapsed = time.monotonic() - self.started
            done_or_stopped.cancel()
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            progress.cancel()
            # let the canary finish one more round after the last frame, then stop
            if not self.stop.is_set():
                rounds = self.stats.canary_rounds
                deadline = time.monotonic() + self.args.deadline * 2 + self.args.canary_interval + 5
                while self.stats.canary_rounds == rounds and time.monotonic() < deadline and not canary.done():
                    await asyncio.sleep(0.1)
        self.stop.set()
        proc = getattr(self, "canary_proc", None)
        if not canary.done() and proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.gather(canary, watch, return_exceptions=True)
        await asyncio.wait_for(tail, 10)


def body_hold(body: Any) -> float:
    wait = getattr(body, "max_wait", None)
    return wait.total_seconds() if isinstance(wait, datetime.timedelta) else 0.0


def _item(cls: type, name: str) -> type:
    """The entity class of the array (or struct) field `name` of `cls`."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            shape = classify_field(f)
            return shape.type_
    raise KeyError(name)


def _nested(cls: type, name: str, **values: Any) -> Any:
    return _build(_item(cls, name), **values)


def _build(cls: type, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


# ----------------------------------------------------------------------------- setup


def setup_world(bootstrap: str) -> World:
    """Topics, group configs and a few records; the broker's advertised versions."""
    from confluent_kafka import Producer

    from quafka.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        ids = admin.create_topics({FUZZ_TOPIC: (FUZZ_PARTITIONS, 1), CANARY_TOPIC: (1, 1)})
        admin.alter_configs("group", FUZZ_GROUP, set={"share.auto.offset.reset": "earliest"})
        admin.alter_configs("group", SESSION_GROUP, set={"share.auto.offset.reset": "earliest"})
        admin.alter_configs("group", CANARY_GROUP, set={"share.auto.offset.reset": "earliest"})
        broker_configs = admin.describe_configs("broker", "1")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(300):
        producer.produce(FUZZ_TOPIC, value=b"seed-%d" % i, partition=i % FUZZ_PARTITIONS)
    producer.flush(30)
    advertised = api_versions(bootstrap)
    return World(advertised=advertised, fuzz_topic_id=ids[FUZZ_TOPIC], canary_topic_id=ids[CANARY_TOPIC],
                 max_request_bytes=int(broker_configs.get("socket.request.max.bytes", 104857600)))


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    import socket

    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(sized(request_header(API_VERSIONS, 0, 1, False)))
        size = struct.unpack(">i", _recv(sock, 4))[0]
        _, body = decode_response(API_VERSIONS, 0, _recv(sock, size))
    return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


def _recv(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


# ----------------------------------------------------------------------------- the canary child


def canary_main(args: argparse.Namespace) -> int:
    """Produce one record, fetch it back, consume it through a share group; one JSON line per round."""
    from confluent_kafka import Producer

    from quafka.client import AcknowledgeType, PartitionReader, ShareConsumer

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    parent = os.getppid()
    timeout_ms = int(args.deadline * 2000)
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": timeout_ms, "log_level": 3})
    reader = PartitionReader({"bootstrap.servers": args.bootstrap, "request.timeout.ms": timeout_ms})
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": CANARY_GROUP,
                              "share.acknowledgement.mode": "explicit", "fetch.max.wait.ms": 100,
                              "request.timeout.ms": timeout_ms})
    consumer.subscribe([CANARY_TOPIC])
    round_no = 0
    try:
        while not stopping and os.getppid() == parent:
            steps: dict[str, float] = {}
            error = None
            started = time.monotonic()
            value = f"canary-{round_no}".encode()
            try:
                t = time.monotonic()
                delivered: list = []
                producer.produce(CANARY_TOPIC, value=value, partition=0,
                                 on_delivery=lambda err, msg: delivered.append((err, msg)))
                producer.flush(args.deadline * 2)
                steps["produce"] = time.monotonic() - t
                if not delivered or delivered[0][0] is not None:
                    raise RuntimeError(f"produce not confirmed: {delivered[0][0] if delivered else 'no callback'}")
                offset = delivered[0][1].offset()
                t = time.monotonic()
                fetched = [r.value for r in reader.read(CANARY_TOPIC, 0, offset, offset + 1)]
                steps["fetch"] = time.monotonic() - t
                if fetched != [value]:
                    raise RuntimeError(f"fetch at offset {offset} returned {fetched!r}")
                t = time.monotonic()
                seen = False
                limit = time.monotonic() + (60.0 if round_no == 0 else args.deadline * 2)
                while not seen and time.monotonic() < limit:
                    records = consumer.poll(0.2)
                    for record in records:
                        seen = seen or record.value == value
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                    if records:
                        for tp, exc in consumer.commit_sync(timeout=args.deadline * 2).items():
                            if exc is not None:
                                raise RuntimeError(f"share acknowledgement failed for {tp}: {exc}")
                steps["share"] = time.monotonic() - t
                if not seen:
                    raise RuntimeError(f"share consumer did not receive offset {offset}")
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            latency = time.monotonic() - started
            print(json.dumps({"round": round_no, "ok": error is None, "latency_s": round(latency, 4),
                              "steps": {k: round(v, 4) for k, v in steps.items()}, "error": error}), flush=True)
            round_no += 1
            end = time.monotonic() + args.interval
            while time.monotonic() < end and not stopping:
                time.sleep(0.05)
    finally:
        try:
            consumer.close(timeout=5)
        except Exception:
            pass
        reader.close()
    return 0


# ----------------------------------------------------------------------------- main


def replay_command(args: argparse.Namespace) -> str:
    parts = [sys.executable, os.path.relpath(os.path.abspath(__file__)), "--seed", str(args.seed),
             "--frames", str(args.frames), "--connections", str(args.connections)]
    return " ".join(shlex.quote(p) for p in parts)


def start_broker(args: argparse.Namespace) -> tuple[BrokerChild, str]:
    workdir = tempfile.mkdtemp(prefix="quafka-fuzz-")
    overrides = {"auto.create.topics.enable": "false", "offsets.topic.num.partitions": "4",
                 "share.coordinator.state.topic.num.partitions": "4"}
    for item in args.broker_override:
        key, _, value = item.partition("=")
        overrides[key] = value
    broker = BrokerChild(os.path.join(workdir, "data"), os.path.join(workdir, "broker.log"),
                         overrides=overrides, log_level=args.broker_log_level)
    broker.start()
    return broker, workdir


def send_one(args: argparse.Namespace) -> int:
    """--send HEX: one frame to a fresh broker; print the reaction and any logged error."""
    broker, workdir = start_broker(args)
    try:
        setup_world(broker.bootstrap)
        import socket

        frame = bytes.fromhex(args.send)
        wire = frame if args.send_raw else sized(frame)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=args.deadline + 5) as sock:
            sock.sendall(wire)
            try:
                sock.shutdown(socket.SHUT_WR)
                data = b""
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                print(f"broker answered {len(data)} bytes, then closed: {data[:400].hex()}")
            except socket.timeout:
                print("no close within the deadline (stall?)")
        time.sleep(0.5)
        print("broker alive:", broker.alive())
        scan = scan_log(broker.read_log())
        print(f"internal errors logged: {scan.internal_errors}, ERROR entries: {len(scan.errors)}")
        print_distinct_errors(scan)
        return 1 if scan.errors or not broker.alive() else 0
    finally:
        broker.stop()
        if not args.keep:
            rmtree_quiet(workdir)


def fuzz_main(args: argparse.Namespace) -> int:
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    print(f"quafka fuzz: seed {args.seed}, {args.frames:,} frames, {args.connections} connections, "
          f"deadline {args.deadline} s", flush=True)
    print(f"replay: {replay_command(args)}", flush=True)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    broker, workdir = start_broker(args)
    print(f"broker pid {broker.proc.pid} on {broker.bootstrap}, data and log in {workdir}", flush=True)
    fuzzer = None
    try:
        world = setup_world(broker.bootstrap)
        print("advertised: " + ", ".join(f"{api_key_map.get(k, k)} v{lo}-{hi}"
                                         for k, (lo, hi) in sorted(world.advertised.items())), flush=True)
        fuzzer = Fuzzer(args, broker, world)
        asyncio.run(fuzzer.run())
        alive = broker.alive()
    finally:
        if fuzzer is None:
            broker.kill()
    exit_status = broker.stop() if alive else broker.returncode
    scan = scan_log(broker.read_log())
    stats, findings = fuzzer.stats, fuzzer.findings
    elapsed = getattr(fuzzer, "elapsed", 0.0) or 1e-9
    defused = sum(f.defused for f in fuzzer.factories)
    failures = list(findings.failures)
    if findings.stalled:
        failures.append(f"{len(findings.stalled)} fuzz connection(s) stalled")
    if findings.bad_responses:
        failures.append(f"{len(findings.bad_responses)} response(s) did not decode")
    if scan.errors:
        failures.append(f"the broker logged {len(scan.errors)} ERROR entr{'y' if len(scan.errors) == 1 else 'ies'} "
                        f"({scan.internal_errors} internal error(s) closing a connection)")
    if findings.decoder_bugs:
        failures.append(f"quafka's request decoder raised unexpected exceptions {len(findings.decoder_bugs)} time(s)")
    if findings.served_undecodable:
        failures.append(f"{len(findings.served_undecodable)} frame(s) quafka cannot decode were answered")
    if not alive:
        failures.append(f"the broker is not running at the end (exit status {broker.returncode})")
    summary = {
        "date": started_at.strftime("%Y-%m-%d %H:%M UTC"), "seed": args.seed, "frames": stats.frames,
        "seconds": round(elapsed, 1), "frames_per_s": round(stats.frames / elapsed),
        "connections": stats.connections, "closed_by_broker": stats.closed_by_broker,
        "closed_after_decodable_request": stats.closed_after_decodable, "responses": stats.responses,
        "abandoned_long_polls": stats.abandoned, "defused": defused, "share_sessions": stats.share_sessions,
        "share_records_acquired": stats.share_acquired,
        "share_join_errors": dict(stats.share_join_errors), "canary_rounds": stats.canary_rounds,
        "canary_max_latency_s": round(stats.canary_max_s, 3), "internal_errors": scan.internal_errors,
        "error_log_entries": len(scan.errors), "broker_exit_status": exit_status,
        "stalled_connections": len(findings.stalled), "bad_responses": len(findings.bad_responses),
        "violations": len(failures), "cases": dict(sorted(stats.cases.items())),
    }
    print("\n==== quafka fuzz summary ====")
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if key != "cases":
            print(f"  {key:<{width}}  {value}")
    print("  cases: " + ", ".join(f"{k} {v:,}" for k, v in summary["cases"].items()))
    for title, items in (("stalled connections", findings.stalled), ("undecodable responses", findings.bad_responses),
                         ("decoder exceptions", findings.decoder_bugs),
                         ("undecodable frames that were answered", findings.served_undecodable),
                         ("internal errors, with the frames of their connection", findings.internal_error_frames)):
        if items:
            print(f"\n{title} ({len(items)}; first 10):")
            for item in items[:10]:
                print("  " + item)
    if scan.errors:
        print("\ndistinct ERROR entries in the broker log (count, first occurrence, traceback):")
        print_distinct_errors(scan)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary | {"failures": failures}, f, indent=2)
    if failures:
        print("\nFAILED:")
        for failure in failures:
            print(f"  - {failure}")
        print(f"seed {args.seed}; replay: {replay_command(args)}")
        print(f"broker log kept at {broker.log_path}")
        return 1
    print(f"\nOK: no crash, no stall, no internal error (violations: 0). seed {args.seed}")
    if not args.keep:
        rmtree_quiet(workdir)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["canary"]:
        p = argparse.ArgumentParser(prog="fuzz.py canary", description="(internal) the canary client")
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--interval", type=float, default=0.5)
        p.add_argument("--deadline", type=float, default=5.0)
        args = p.parse_args(argv[1:])
        args.mode = "canary"
        return args
    p = argparse.ArgumentParser(
        prog="tools/fuzz.py",
        description=__doc__,
        epilog="examples:\n  python tools/fuzz.py --frames 1000000\n  python tools/fuzz.py --seed 1234 --frames 20000"
               "\n  python tools/fuzz.py --send 0012000000000001000b717561666b612d66757a7a   # one frame, hex"
               "\n  make fuzz FRAMES=1000000",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=DEFAULT_FRAMES, help=f"request frames to send (default {DEFAULT_FRAMES:,})")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--connections", type=int, default=8, help="concurrent fuzzing connections (default 8)")
    p.add_argument("--deadline", type=float, default=5.0,
                   help="seconds within which every canary round, and every answer beyond a request's own "
                        "long-poll wait, must arrive (default 5)")
    p.add_argument("--canary-interval", type=float, default=0.5, help="pause between canary rounds (default 0.5 s)")
    p.add_argument("--long-poll-cap", type=float, default=1.0,
                   help="Fetch/ShareFetch frames that may be held longer than this are sent and hung up on "
                        "(default 1 s)")
    p.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress lines (default 10)")
    p.add_argument("--broker-log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                   help="extra broker config (repeatable); the fuzzer sets auto.create.topics.enable=false "
                        "so that mutated topic names do not pile up topics")
    p.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--keep", action="store_true", help="keep the broker's data directory and log")
    p.add_argument("--send", metavar="HEX", help="send this one frame (hex, no size prefix) to a fresh broker and "
                                                   "report what happened")
    p.add_argument("--send-raw", action="store_true", help="with --send: the hex already includes the size prefix")
    args = p.parse_args(argv)
    args.mode = "send" if args.send else "fuzz"
    if args.frames < 1 or args.connections < 1:
        p.error("--frames and --connections must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.mode == "canary":
        return canary_main(args)
    if args.mode == "send":
        return send_one(args)
    return fuzz_main(args)


if __name__ == "__main__":
    sys.exit(main())
