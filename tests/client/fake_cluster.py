"""A scripted three-node fake Kafka cluster at the transport layer, for share-consumer tests.

Every node is an asyncio server on loopback, run on the fake's own event loop thread, that decodes
requests with ``quafka.protocol.framing.decode_request`` and answers with kio's response classes
(``encode_response``). It implements just enough of a cluster for one share group on one topic:

- **ApiVersions** (v0-v3; a higher version gets the v0-format UNSUPPORTED_VERSION answer), advertising
  ``ADVERTISED`` (overridable per cluster). Requests for anything else are logged in
  ``unexpected`` and the connection is closed, as Kafka does for an unadvertised API.
- **Metadata v12**: the three brokers and the topic (topic id, partitions, leaders, leader epochs).
- **FindCoordinator v4-v6**: key type 0 names the group coordinator; other key types get INVALID_REQUEST.
- **ShareGroupHeartbeat v1**: the coordinator assigns every partition of the topic to every member
  subscribed to it; any other node answers NOT_COORDINATOR. Group state is cluster-wide (a new
  coordinator knows the members, as after a real coordinator failover).
- **ShareFetch v1-v2 / ShareAcknowledge v1-v2** with real share sessions per (node, group, member):
  epoch 0 opens (replacing), then each request must carry the next epoch (else
  INVALID_SHARE_SESSION_EPOCH), -1 closes and releases the member's records on that node; a TCP
  disconnect drops the connection's sessions and releases their records. Records are acquired
  whole batches at a time (stored v2 batches built with ``build_batch``), with delivery counts;
  acknowledgements are validated (shape, ownership) and applied atomically per partition; every
  acknowledgement the fake accepted is appended to ``accepted``.

Scriptable faults: ``move_coordinator(node)`` (the old coordinator answers NOT_COORDINATOR and
FindCoordinator names the new one), ``move_leader(partition, node)`` (the old leader answers
NOT_LEADER_OR_FOLLOWER with CurrentLeader and NodeEndpoints for fetches and acknowledgements of the
partition, Metadata names the new leader, the old leader's acquired records become available again
and the new leader serves the partition; with ``leader_hints=False`` the refusals name no leader),
``stop_node`` / ``start_node`` (same port), ``hang_node(node[, False])`` (requests are read but
not answered), ``freeze_metadata(node[, False])`` (its Metadata keeps the leaders of the moment),
``evict_sessions(node)`` (the node forgets its share
sessions, connections stay up), ``omit_partitions(node, partitions)`` (its ShareFetch and
ShareAcknowledge answers leave those partitions out, although it applied their acknowledgements:
a broker answering UNKNOWN_TOPIC_ID by omission, or a buggy one), ``unknown_ack_error(node, code)``
(its ShareFetch answers give every acknowledged partition an AcknowledgeErrorCode the client's
ErrorCode does not know: a response the client cannot make sense of).

Everything observed is logged: ``requests`` (one ``Req`` per request, in arrival order, with what
the fake answered), ``accepted`` (one ``Ack`` per accepted acknowledged offset), ``session_opens``,
``overlaps`` (a share-session request that arrived while another request of the same session was
still unanswered) and ``events`` (faults, with the request sequence number at the time).
The test thread reads these through the accessor methods, which copy under the fake's lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import itertools
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

from quafka.protocol.errors import ErrorCode
from quafka.protocol.framing import api_versions_fallback_response, decode_request, encode_response
from quafka.protocol.record_batch import build_batch

__all__ = ["ADVERTISED", "API_NAMES", "API_VERSIONS", "Ack", "FakeCluster", "FIND_COORDINATOR", "METADATA", "Req",
           "SHARE_ACKNOWLEDGE", "SHARE_FETCH", "SHARE_GROUP_HEARTBEAT"]

API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
API_NAMES = {API_VERSIONS: "ApiVersions", METADATA: "Metadata", FIND_COORDINATOR: "FindCoordinator",
             SHARE_GROUP_HEARTBEAT: "ShareGroupHeartbeat", SHARE_FETCH: "ShareFetch",
             SHARE_ACKNOWLEDGE: "ShareAcknowledge"}
#: api key -> (min, max) version the fake advertises (and serves).
ADVERTISED = {API_VERSIONS: (0, 3), METADATA: (12, 12), FIND_COORDINATOR: (4, 6),
              SHARE_GROUP_HEARTBEAT: (1, 1), SHARE_FETCH: (1, 2), SHARE_ACKNOWLEDGE: (1, 2)}
_MODULES = {API_VERSIONS: "api_versions", METADATA: "metadata", FIND_COORDINATOR: "find_coordinator",
            SHARE_GROUP_HEARTBEAT: "share_group_heartbeat", SHARE_FETCH: "share_fetch",
            SHARE_ACKNOWLEDGE: "share_acknowledge"}

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = "available", "acquired", "acknowledged", "archived"
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
INT32_MAX = 0x7FFFFFFF
NONE = int(ErrorCode.none)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _schema(api_key: int, version: int, kind: str = "response"):
    return importlib.import_module(f"kio.schema.{_MODULES[api_key]}.v{version}.{kind}")


@dataclasses.dataclass
class Req:
    """One request as the fake saw it, and what it answered (filled in when answered)."""

    seq: int
    node: int
    conn: int
    api_key: int
    version: int
    arrived: float
    done: float | None = None
    member: str | None = None
    epoch: int | None = None  # share-session epoch (ShareFetch/ShareAcknowledge) or member epoch (heartbeat)
    topics: tuple[int, ...] = ()  # partitions listed in Topics (ShareFetch) / acknowledged (ShareAcknowledge)
    forgotten: tuple[int, ...] = ()
    acks: dict[int, list[tuple[int, int, tuple[int, ...]]]] = dataclasses.field(default_factory=dict)
    renew: bool = False
    max_wait_ms: int | None = None
    error: int = NONE  # top-level error code answered
    partition_errors: dict[int, int] = dataclasses.field(default_factory=dict)  # fetch / ShareAcknowledge errors
    ack_errors: dict[int, int] = dataclasses.field(default_factory=dict)  # per partition, for requests with acks
    acquired: dict[int, list[tuple[int, int, int]]] = dataclasses.field(default_factory=dict)
    session_partitions: tuple[int, ...] = ()  # the session's partitions after this request
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    overlapped: bool = False

    @property
    def name(self) -> str:
        return API_NAMES.get(self.api_key, f"api{self.api_key}")

    def short(self) -> str:
        parts = [f"#{self.seq} node{self.node}/c{self.conn} {self.name} v{self.version}"]
        if self.epoch is not None:
            parts.append(f"epoch={self.epoch}")
        if self.topics:
            parts.append(f"topics={list(self.topics)}")
        if self.forgotten:
            parts.append(f"forgotten={list(self.forgotten)}")
        if self.acks:
            parts.append("acks={" + ", ".join(f"p{p}: {b}" for p, b in sorted(self.acks.items())) + "}")
        if self.error:
            parts.append(f"-> error {ErrorCode(self.error).name}")
        if self.partition_errors:
            parts.append("-> " + ", ".join(f"p{p} {ErrorCode(c).name}"
                                           for p, c in sorted(self.partition_errors.items())))
        if any(self.ack_errors.values()):
            parts.append("-> acks " + ", ".join(f"p{p} {ErrorCode(c).name}" for p, c in sorted(self.ack_errors.items())
                                                if c))
        if self.acquired:
            parts.append("-> acquired " + ", ".join(f"p{p} {r}" for p, r in sorted(self.acquired.items())))
        if self.info:
            parts.append(str(self.info))
        if self.overlapped:
            parts.append("OVERLAPPED")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Ack:
    """One acknowledged offset the fake accepted (applied to the partition's state)."""

    seq: int  # the request that carried it
    node: int
    leader_epoch: int  # the partition's leader epoch when it was applied (node was its leader)
    member: str
    partition: int
    offset: int
    type: int
    api_key: int


@dataclasses.dataclass
class _RecordState:
    state: str = AVAILABLE
    owner: tuple[str, int] | None = None  # (member, node) holding the acquisition lock
    delivery_count: int = 0
    lock_deadline: float = 0.0


@dataclasses.dataclass
class _Batch:
    base_offset: int
    count: int
    data: bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


@dataclasses.dataclass
class _Partition:
    index: int
    leader: int
    leader_epoch: int
    batches: list[_Batch] = dataclasses.field(default_factory=list)
    records: list[_RecordState] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Session:
    conn: int
    next_epoch: int
    partitions: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _Member:
    epoch: int
    subscribed: tuple[str, ...]
    assigned_epoch: int = -1  # the member epoch at which the assignment was last sent


class _Node:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.port = 0
        self.server: asyncio.AbstractServer | None = None
        self.conns: dict[int, tuple[asyncio.StreamWriter, list[asyncio.Task]]] = {}
        self.running = False
        self.hung = False  # requests are read (and logged) but not answered
        self.stale_leaders: dict[int, tuple[int, int]] | None = None  # Metadata answered from this view
        self.omitted: frozenset[int] = frozenset()  # partitions its share answers leave out
        self.unknown_ack_error: int | None = None  # AcknowledgeErrorCode its ShareFetch answers give


class FakeCluster:
    """``with FakeCluster(...) as fake:`` starts the nodes; see the module docstring."""

    def __init__(self, *, topic: str = "t", partitions: int = 3, leaders: dict[int, int] | None = None,
                 node_ids: tuple[int, ...] = (1, 2, 3), coordinator: int = 1, heartbeat_interval_ms: int = 100,
                 lock_duration_ms: int = 30_000, advertised: dict[int, tuple[int, int]] | None = None,
                 leader_hints: bool = True) -> None:
        self.topic = topic
        self.topic_id = uuid.uuid4()
        self.node_ids = tuple(node_ids)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.lock_duration_ms = lock_duration_ms
        self.advertised = dict(ADVERTISED if advertised is None else advertised)
        #: NOT_LEADER_OR_FOLLOWER answers name the new leader (CurrentLeader, NodeEndpoints); when
        #: False they carry CurrentLeader -1/-1 and no endpoints (the client must ask Metadata).
        self.leader_hints = leader_hints
        leaders = leaders or {p: self.node_ids[p % len(self.node_ids)] for p in range(partitions)}
        self._partitions = {p: _Partition(p, leaders[p], leader_epoch=5) for p in range(partitions)}
        self._coordinator = coordinator
        self._nodes = {n: _Node(n) for n in self.node_ids}
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._last_seq = 0
        self._conn_ids = itertools.count(1)
        self._sessions: dict[tuple[int, str, str], _Session] = {}
        self._in_flight: dict[tuple[int, str, str], list[int]] = defaultdict(list)
        self._members: dict[tuple[str, str], _Member] = {}
        self._group_epoch = 0
        self._requests: list[Req] = []
        self._accepted: list[Ack] = []
        self._session_opens: list[tuple[int, int, str, str]] = []  # (seq, node, group, member)
        self._overlaps: list[str] = []
        self._unexpected: list[str] = []
        self._events: list[tuple[int, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ================================================================== lifecycle (test thread)

    def start(self) -> "FakeCluster":
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-cluster", daemon=True)
        self._thread.start()
        ready.wait(5)
        for n in self.node_ids:
            self.start_node(n)
        return self

    def close(self) -> None:
        if self._loop is None:
            return
        for n in self.node_ids:
            if self._nodes[n].running:
                self.stop_node(n)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(5)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> "FakeCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, coro, timeout: float = 5.0):
        assert self._loop is not None, "the fake cluster is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start_node(self, node_id: int) -> None:
        """Start (or restart, on the same port) a node's server."""
        self._run(self._start_node(node_id))
        self._event(f"start node {node_id}")

    def stop_node(self, node_id: int) -> None:
        """Stop a node's server and drop its connections (their sessions go, records are released)."""
        self._run(self._stop_node(node_id))
        self._event(f"stop node {node_id}")

    async def _start_node(self, node_id: int) -> None:
        node = self._nodes[node_id]
        node.server = await asyncio.start_server(lambda r, w: self._serve(node, r, w), "127.0.0.1", node.port,
                                                 reuse_address=True)
        node.port = node.server.sockets[0].getsockname()[1]
        node.running = True

    async def _stop_node(self, node_id: int) -> None:
        node = self._nodes[node_id]
        node.running = False
        if node.server is not None:
            node.server.close()
        for writer, tasks in list(node.conns.values()):
            for task in tasks:
                task.cancel()
            writer.transport.abort()
        for writer, tasks in list(node.conns.values()):
            await asyncio.gather(*tasks, return_exceptions=True)
        node.conns.clear()
        if node.server is not None:
            await node.server.wait_closed()
            node.server = None

    # ================================================================== scripting (test thread)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self._nodes[n].port}" for n in self.node_ids)

    def port(self, node_id: int) -> int:
        return self._nodes[node_id].port

    def produce(self, partition: int, count: int, batch_size: int = 5) -> list[int]:
        """Append ``count`` records to the partition's log in batches of ``batch_size``; returns the
        offsets. Values are b"<partition>:<offset>", keys b"k<offset>"."""
        with self._lock:
            part = self._partitions[partition]
            offsets = []
            remaining = count
            while remaining > 0:
                n = min(batch_size, remaining)
                base = len(part.records)
                data = build_batch([(f"k{base + i}".encode(), f"{partition}:{base + i}".encode()) for i in range(n)],
                                   base_offset=base, base_timestamp=int(time.time() * 1000),
                                   partition_leader_epoch=part.leader_epoch)
                part.batches.append(_Batch(base, n, data))
                part.records.extend(_RecordState() for _ in range(n))
                offsets.extend(range(base, base + n))
                remaining -= n
            return offsets

    def move_coordinator(self, node_id: int) -> int:
        """From now on ``node_id`` coordinates the group; returns the request sequence number at the move."""
        with self._lock:
            old, self._coordinator = self._coordinator, node_id
            return self._event(f"coordinator {old} -> {node_id}")

    def move_leader(self, partition: int, node_id: int) -> int:
        """The partition's leadership moves to ``node_id`` (leader epoch + 1); the old leader's
        acquired records become available. Returns the request sequence number at the move."""
        with self._lock:
            part = self._partitions[partition]
            old = part.leader
            part.leader = node_id
            part.leader_epoch += 1
            for rec in part.records:
                if rec.state == ACQUIRED:
                    rec.state, rec.owner = AVAILABLE, None
            return self._event(f"leader of p{partition} {old} -> {node_id} (epoch {part.leader_epoch})")

    def hang_node(self, node_id: int, hung: bool = True) -> int:
        """The node keeps its connections but stops answering (``hung=False`` resumes, answering
        what is still queued). Returns the request sequence number at the change."""
        with self._lock:
            self._nodes[node_id].hung = hung
            return self._event(f"node {node_id} {'hangs' if hung else 'answers again'}")

    def freeze_metadata(self, node_id: int, frozen: bool = True) -> None:
        """The node's Metadata answers keep today's leaders and leader epochs (a lagging metadata
        cache) until unfrozen."""
        with self._lock:
            self._nodes[node_id].stale_leaders = (
                {p: (part.leader, part.leader_epoch) for p, part in self._partitions.items()} if frozen else None)
            self._event(f"node {node_id} metadata {'frozen' if frozen else 'live'}")

    def evict_sessions(self, node_id: int) -> int:
        """The node forgets its share sessions (their records are released) while connections stay
        up: the next request of an evicted session gets SHARE_SESSION_NOT_FOUND. Returns the
        request sequence number at the eviction."""
        with self._lock:
            for key in [k for k in self._sessions if k[0] == node_id]:
                self._close_session(node_id, key[1], key[2])
            return self._event(f"node {node_id} evicts its share sessions")

    def omit_partitions(self, node_id: int, partitions=()) -> int:
        """The node's ShareFetch and ShareAcknowledge answers leave ``partitions`` out (their
        acknowledgements are still applied); ``()`` ends it. Returns the request sequence number."""
        with self._lock:
            self._nodes[node_id].omitted = frozenset(partitions)
            return self._event(f"node {node_id} omits partitions {sorted(partitions)} from its share answers")

    def unknown_ack_error(self, node_id: int, code: int | None = 32000) -> int:
        """The node's ShareFetch answers give each partition that carried acknowledgements the
        AcknowledgeErrorCode ``code`` (one no ErrorCode knows; None ends it). Returns the request
        sequence number."""
        with self._lock:
            self._nodes[node_id].unknown_ack_error = code
            return self._event(f"node {node_id} answers acknowledgements with error code {code}")

    def _event(self, text: str) -> int:
        with self._lock:
            self._events.append((self._last_seq, text))
            return self._last_seq

    # ================================================================== observation (test thread)

    @property
    def coordinator(self) -> int:
        with self._lock:
            return self._coordinator

    def leader(self, partition: int) -> int:
        with self._lock:
            return self._partitions[partition].leader

    def leader_epoch(self, partition: int) -> int:
        with self._lock:
            return self._partitions[partition].leader_epoch

    def requests(self, api_key: int | None = None, node: int | None = None, after: int = 0) -> list[Req]:
        with self._lock:
            return [dataclasses.replace(r) for r in self._requests
                    if (api_key is None or r.api_key == api_key) and (node is None or r.node == node)
                    and r.seq > after]

    def share_requests(self, node: int | None = None, after: int = 0) -> list[Req]:
        return [r for r in self.requests(node=node, after=after) if r.api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE)]

    @property
    def accepted(self) -> list[Ack]:
        with self._lock:
            return list(self._accepted)

    def session_opens(self, node: int | None = None) -> list[tuple[int, int, str, str]]:
        with self._lock:
            return [s for s in self._session_opens if node is None or s[1] == node]

    def open_sessions(self) -> dict[tuple[int, str, str], set[int]]:
        """(node, group, member) -> the session's partitions, for sessions still open."""
        with self._lock:
            return {k: set(s.partitions) for k, s in self._sessions.items()}

    @property
    def overlaps(self) -> list[str]:
        with self._lock:
            return list(self._overlaps)

    @property
    def unexpected(self) -> list[str]:
        with self._lock:
            return list(self._unexpected)

    @property
    def events(self) -> list[tuple[int, str]]:
        with self._lock:
            return list(self._events)

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    def record_states(self, partition: int) -> list[str]:
        with self._lock:
            return [r.state for r in self._partitions[partition].records]

    def all_acknowledged(self) -> bool:
        with self._lock:
            return all(r.state == ACKNOWLEDGED for p in self._partitions.values() for r in p.records)

    def all_settled(self) -> bool:
        """Every record acknowledged or archived (nothing available or acquired)."""
        with self._lock:
            return all(r.state in (ACKNOWLEDGED, ARCHIVED) for p in self._partitions.values() for r in p.records)

    def not_acknowledged(self) -> dict[int, list[tuple[int, str]]]:
        with self._lock:
            out = {}
            for p, part in self._partitions.items():
                bad = [(o, r.state) for o, r in enumerate(part.records) if r.state != ACKNOWLEDGED]
                if bad:
                    out[p] = bad
            return out

    def members(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return {k: m.epoch for k, m in self._members.items()}

    def transcript(self, after: int = 0, share_only: bool = False) -> str:
        """The request log, one line per request (for assertion messages and bug reports)."""
        lines = []
        events = self.events
        for r in self.requests(after=after):
            for seq, text in events:
                if seq == r.seq - 1:
                    lines.append(f"  == {text}")
            if share_only and r.api_key not in (SHARE_FETCH, SHARE_ACKNOWLEDGE, SHARE_GROUP_HEARTBEAT):
                continue
            lines.append("  " + r.short())
        return "\n".join(lines)

    # ================================================================== serving (fake's loop)

    async def _serve(self, node: _Node, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._conn_ids)
        queue: asyncio.Queue = asyncio.Queue()
        worker = asyncio.get_running_loop().create_task(self._work(node, conn, queue, writer))
        node.conns[conn] = (writer, [worker, asyncio.current_task()])
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                try:
                    header, body = decode_request(frame)
                except Exception as exc:  # noqa: BLE001 - logged, connection closed
                    with self._lock:
                        self._unexpected.append(f"node {node.node_id}: undecodable request: {exc}")
                    break
                entry = self._arrive(node.node_id, conn, header, body)
                queue.put_nowait((header, body, entry))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            worker.cancel()
            try:
                await worker
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            writer.transport.abort()
            node.conns.pop(conn, None)
            while not queue.empty():  # never answered: no longer in flight
                self._answered(queue.get_nowait()[2])
            self._disconnected(node.node_id, conn)

    async def _work(self, node: _Node, conn: int, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            header, body, entry = await queue.get()
            try:
                while node.hung:  # a hung broker: the request waits (until the client gives up)
                    await asyncio.sleep(0.005)
                if header.request_api_key == API_VERSIONS and header.request_api_version > 3:
                    ranges = [(k, lo, hi) for k, (lo, hi) in sorted(self.advertised.items())]
                    data = api_versions_fallback_response(header.correlation_id, ranges)
                else:
                    response = await self._dispatch(node.node_id, conn, header, body, entry)
                    if response is None:  # unexpected request: close the connection, as Kafka does
                        writer.transport.abort()
                        return
                    data = encode_response(header.correlation_id, response)
                self._answered(entry)  # before the bytes leave: the client may send its next request at once
                writer.write(data)
                await writer.drain()
            finally:
                self._answered(entry)

    def _arrive(self, node: int, conn: int, header, body) -> Req:
        with self._lock:
            seq = next(self._seq)
            self._last_seq = seq
            entry = Req(seq, node, conn, header.request_api_key, header.request_api_version, time.monotonic())
            if entry.api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
                entry.member = body.member_id
                entry.epoch = body.share_session_epoch
                entry.topics = tuple(p.partition_index for t in body.topics for p in t.partitions)
                entry.acks = self._parse_acks(body)
                entry.renew = bool(getattr(body, "is_renew_ack", False))
                if entry.api_key == SHARE_FETCH:
                    entry.forgotten = tuple(p for t in body.forgotten_topics_data for p in t.partitions)
                    entry.max_wait_ms = int(body.max_wait.total_seconds() * 1000)
                key = (node, body.group_id, body.member_id)
                in_flight = self._in_flight[key]
                if in_flight:
                    entry.overlapped = True
                    self._overlaps.append(
                        f"node {node}: {entry.name} epoch {entry.epoch} (#{seq}) arrived while "
                        f"#{in_flight} of the same share session was unanswered")
                in_flight.append(seq)
            self._requests.append(entry)
            return entry

    def _answered(self, entry: Req) -> None:
        with self._lock:
            if entry.done is not None:
                return
            entry.done = time.monotonic()
            if entry.api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
                for key, seqs in self._in_flight.items():
                    if entry.seq in seqs:
                        seqs.remove(entry.seq)

    def _disconnected(self, node: int, conn: int) -> None:
        with self._lock:
            for key in [k for k, s in self._sessions.items() if k[0] == node and s.conn == conn]:
                del self._sessions[key]
                self._release_member(node, key[2])

    async def _dispatch(self, node: int, conn: int, header, body, entry: Req):
        api, version = header.request_api_key, header.request_api_version
        served = self.advertised.get(api)
        if served is None or not served[0] <= version <= served[1] or api not in _MODULES:
            with self._lock:
                self._unexpected.append(f"node {node}: {API_NAMES.get(api, api)} v{version} (not advertised)")
            return None
        if api == API_VERSIONS:
            return self._api_versions(version)
        if api == METADATA:
            return self._metadata(node, version, body, entry)
        if api == FIND_COORDINATOR:
            return self._find_coordinator(version, body, entry)
        if api == SHARE_GROUP_HEARTBEAT:
            return self._heartbeat(node, version, body, entry)
        if api == SHARE_FETCH:
            return await self._share_fetch(node, conn, version, body, entry)
        return self._share_acknowledge(node, version, body, entry)

    # ------------------------------------------------------------------ ApiVersions, Metadata, FindCoordinator

    def _api_versions(self, version: int):
        m = _schema(API_VERSIONS, version)
        keys = tuple(m.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                     for k, (lo, hi) in sorted(self.advertised.items()))
        values = dict(error_code=ErrorCode.none, api_keys=keys, throttle_time=_ms(0))
        fields = {f.name for f in dataclasses.fields(m.ApiVersionsResponse)}
        return m.ApiVersionsResponse(**{k: v for k, v in values.items() if k in fields})

    def _metadata(self, node: int, version: int, body, entry: Req):
        m = _schema(METADATA, version)
        with self._lock:
            view = self._nodes[node].stale_leaders or {p: (part.leader, part.leader_epoch)
                                                       for p, part in self._partitions.items()}
            brokers = tuple(m.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=self._nodes[n].port, rack=None)
                            for n in self.node_ids)
            wanted = None if body.topics is None else [(t.name, t.topic_id) for t in body.topics]
            entry.info["topics"] = None if wanted is None else [w[0] for w in wanted]
            topics = []
            for name, topic_id in ([(self.topic, self.topic_id)] if wanted is None else wanted):
                if name == self.topic or (name is None and topic_id == self.topic_id):
                    parts = tuple(m.MetadataResponsePartition(
                        error_code=ErrorCode.none, partition_index=p.index, leader_id=view[p.index][0],
                        leader_epoch=view[p.index][1], replica_nodes=tuple(self.node_ids),
                        isr_nodes=tuple(self.node_ids),
                        offline_replicas=()) for p in self._partitions.values())
                    topics.append(m.MetadataResponseTopic(error_code=ErrorCode.none, name=self.topic,
                                                          topic_id=self.topic_id, is_internal=False, partitions=parts))
                else:
                    topics.append(m.MetadataResponseTopic(error_code=ErrorCode.unknown_topic_or_partition, name=name,
                                                          topic_id=topic_id or uuid.UUID(int=0), is_internal=False,
                                                          partitions=()))
            return m.MetadataResponse(throttle_time=_ms(0), brokers=brokers, cluster_id="fake-cluster",
                                      controller_id=self.node_ids[0], topics=tuple(topics))

    def _find_coordinator(self, version: int, body, entry: Req):
        m = _schema(FIND_COORDINATOR, version)
        with self._lock:
            coordinator = self._coordinator
            entry.info["key_type"] = body.key_type
            entry.info["coordinator"] = coordinator
            out = []
            for key in body.coordinator_keys:
                if body.key_type != 0:
                    out.append(m.Coordinator(key=key, node_id=-1, host="", port=-1,
                                             error_code=ErrorCode.invalid_request,
                                             error_message="the fake only knows key type 0 (group)"))
                else:
                    out.append(m.Coordinator(key=key, node_id=coordinator, host="127.0.0.1",
                                             port=self._nodes[coordinator].port, error_code=ErrorCode.none,
                                             error_message=None))
            return m.FindCoordinatorResponse(throttle_time=_ms(0), coordinators=tuple(out))

    # ------------------------------------------------------------------ ShareGroupHeartbeat

    def _heartbeat(self, node: int, version: int, body, entry: Req):
        m = _schema(SHARE_GROUP_HEARTBEAT, version)
        entry.member = body.member_id
        entry.epoch = body.member_epoch
        entry.info["subscribed"] = body.subscribed_topic_names

        def answer(error=ErrorCode.none, epoch=0, assignment=None, message=None):
            entry.error = int(error)
            return m.ShareGroupHeartbeatResponse(
                throttle_time=_ms(0), error_code=error, error_message=message,
                member_id=body.member_id if error == ErrorCode.none else None, member_epoch=epoch,
                heartbeat_interval=_ms(self.heartbeat_interval_ms), assignment=assignment)

        with self._lock:
            if node != self._coordinator:
                return answer(ErrorCode.not_coordinator, message=f"node {node} does not coordinate the group")
            if not body.member_id or len(body.member_id) > 36:
                return answer(ErrorCode.invalid_request, message="MemberId must be 1 to 36 characters")
            key = (body.group_id, body.member_id)
            member = self._members.get(key)
            if body.member_epoch == -1:
                self._members.pop(key, None)
                if member is not None:
                    self._group_epoch += 1
                return answer(epoch=-1)
            if body.member_epoch == 0:
                if body.subscribed_topic_names is None:
                    return answer(ErrorCode.invalid_request, message="SubscribedTopicNames must be set to join")
                self._group_epoch += 1
                member = self._members[key] = _Member(self._group_epoch, tuple(body.subscribed_topic_names))
            else:
                if member is None:
                    return answer(ErrorCode.unknown_member_id, message="unknown member")
                if body.member_epoch > member.epoch:
                    return answer(ErrorCode.fenced_member_epoch, message=f"member epoch is {member.epoch}")
                if body.subscribed_topic_names is not None and \
                        tuple(body.subscribed_topic_names) != member.subscribed:
                    self._group_epoch += 1
                    member.subscribed = tuple(body.subscribed_topic_names)
                    member.epoch = self._group_epoch
            assignment = None
            if member.assigned_epoch != member.epoch or body.member_epoch != member.epoch:
                parts = tuple(sorted(self._partitions)) if self.topic in member.subscribed else ()
                topic_parts = (m.TopicPartitions(topic_id=self.topic_id, partitions=parts),) if parts else ()
                assignment = m.Assignment(topic_partitions=topic_parts)
                member.assigned_epoch = member.epoch
                entry.info["assigned"] = list(parts)
            return answer(epoch=member.epoch, assignment=assignment)

    # ------------------------------------------------------------------ share sessions

    def _session_step(self, node: int, body, entry: Req, api: int) -> tuple[int, _Session | None]:
        """Check and advance the request's share session; (error, session)."""
        key = (node, body.group_id, body.member_id)
        epoch = body.share_session_epoch
        if epoch == 0:
            if api == SHARE_ACKNOWLEDGE:
                return int(ErrorCode.invalid_share_session_epoch), None
            session = self._sessions[key] = _Session(entry.conn, next_epoch=1)
            self._session_opens.append((entry.seq, node, body.group_id, body.member_id))
            return NONE, session
        session = self._sessions.get(key)
        if session is None:
            return int(ErrorCode.share_session_not_found), None
        if epoch == -1:
            return NONE, session
        if epoch != session.next_epoch:
            entry.info["expected_epoch"] = session.next_epoch
            return int(ErrorCode.invalid_share_session_epoch), None
        session.next_epoch = 1 if epoch == INT32_MAX else epoch + 1
        return NONE, session

    def _close_session(self, node: int, group: str, member: str) -> None:
        self._sessions.pop((node, group, member), None)
        self._release_member(node, member)

    def _release_member(self, node: int, member: str) -> None:
        for part in self._partitions.values():
            for rec in part.records:
                if rec.state == ACQUIRED and rec.owner == (member, node):
                    rec.state, rec.owner = AVAILABLE, None

    @staticmethod
    def _parse_acks(body) -> dict[int, list[tuple[int, int, tuple[int, ...]]]]:
        acks: dict[int, list] = {}
        for topic in body.topics:
            for p in topic.partitions:
                if p.acknowledgement_batches:
                    acks.setdefault(p.partition_index, []).extend(
                        (b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches)
        return acks

    def _apply_acks(self, node: int, member: str, partition: int, batches, version: int, renew: bool,
                    entry: Req) -> int:
        part = self._partitions.get(partition)
        if part is None:
            return int(ErrorCode.unknown_topic_or_partition)
        if part.leader != node:
            return int(ErrorCode.not_leader_or_follower)
        previous = None
        max_type = 4 if version >= 2 else 3
        for first, last, types in batches:
            size = last - first + 1
            if first > last or first < 0 or (previous is not None and first <= previous) \
                    or not types or len(types) not in (1, size) \
                    or any(t < 0 or t > max_type or (t == RENEW and not renew) for t in types):
                return int(ErrorCode.invalid_request)
            previous = last
        now = time.monotonic()
        self._expire_locks(part, now)
        for first, last, _ in batches:
            for offset in range(first, last + 1):
                rec = part.records[offset] if offset < len(part.records) else None
                if rec is None or rec.state != ACQUIRED or rec.owner != (member, node):
                    return int(ErrorCode.invalid_record_state)
        for first, last, types in batches:
            for i, offset in enumerate(range(first, last + 1)):
                ack_type = types[0] if len(types) == 1 else types[i]
                rec = part.records[offset]
                if ack_type in (ACCEPT, GAP):
                    rec.state, rec.owner = ACKNOWLEDGED, None
                elif ack_type == RELEASE:
                    rec.state, rec.owner = AVAILABLE, None
                elif ack_type == REJECT:
                    rec.state, rec.owner = ARCHIVED, None
                else:  # RENEW
                    rec.lock_deadline = now + self.lock_duration_ms / 1000.0
                self._accepted.append(Ack(entry.seq, node, part.leader_epoch, member, partition, offset, ack_type,
                                          entry.api_key))
        return NONE

    def _expire_locks(self, part: _Partition, now: float) -> None:
        for rec in part.records:
            if rec.state == ACQUIRED and rec.lock_deadline < now:
                rec.state, rec.owner = AVAILABLE, None

    def _acquire(self, node: int, member: str, part: _Partition, max_records: int) -> tuple[bytes, list]:
        now = time.monotonic()
        self._expire_locks(part, now)
        chosen: list[bytes] = []
        offsets: list[int] = []
        for batch in part.batches:
            if len(offsets) >= max_records:
                break
            free = [o for o in range(batch.base_offset, batch.last_offset + 1) if part.records[o].state == AVAILABLE]
            if not free:
                continue
            for o in free:
                rec = part.records[o]
                rec.state, rec.owner = ACQUIRED, (member, node)
                rec.delivery_count += 1
                rec.lock_deadline = now + self.lock_duration_ms / 1000.0
            offsets.extend(free)
            chosen.append(batch.data)
        ranges: list[list[int]] = []
        for o in offsets:
            dc = part.records[o].delivery_count
            if ranges and ranges[-1][1] == o - 1 and ranges[-1][2] == dc:
                ranges[-1][1] = o
            else:
                ranges.append([o, o, dc])
        return b"".join(chosen), [tuple(r) for r in ranges]

    def _endpoint(self, module, node_id: int):
        return module.NodeEndpoint(node_id=node_id, host="127.0.0.1", port=self._nodes[node_id].port, rack=None)

    async def _share_fetch(self, node: int, conn: int, version: int, body, entry: Req):
        m = _schema(SHARE_FETCH, version)
        renew = entry.renew
        max_wait_ms = entry.max_wait_ms

        def top_level(error: int, message: str | None = None):
            entry.error = error
            return m.ShareFetchResponse(throttle_time=_ms(0), error_code=ErrorCode(error), error_message=message,
                                        acquisition_lock_timeout=_ms(self.lock_duration_ms), responses=(),
                                        node_endpoints=())

        with self._lock:
            acks = entry.acks
            if not body.group_id or not body.member_id or len(body.member_id) > 36:
                return top_level(int(ErrorCode.invalid_request), "GroupId and MemberId (1-36 chars) must be set")
            if renew and (body.max_bytes or body.min_bytes or body.max_records or max_wait_ms):
                return top_level(int(ErrorCode.invalid_request), "a renew ShareFetch needs zero fetch limits")
            if body.share_session_epoch == 0 and acks:
                return top_level(int(ErrorCode.invalid_request), "acknowledgements on the initial epoch")
            error, session = self._session_step(node, body, entry, SHARE_FETCH)
            if error:
                return top_level(error)
            assert session is not None
            closing = body.share_session_epoch == -1
            unknown: dict[int, int] = {}
            for t in body.topics:
                for p in t.partitions:
                    if t.topic_id != self.topic_id:
                        unknown[p.partition_index] = int(ErrorCode.unknown_topic_id)
                    elif p.partition_index not in self._partitions:
                        unknown[p.partition_index] = int(ErrorCode.unknown_topic_or_partition)
                    elif not closing:
                        session.partitions.add(p.partition_index)
            if not closing:
                for t in body.forgotten_topics_data:
                    session.partitions.difference_update(t.partitions)
            entry.ack_errors = {p: self._apply_acks(node, body.member_id, p, batches, version, renew, entry)
                                for p, batches in acks.items()}
            if closing:
                self._close_session(node, body.group_id, body.member_id)
            entry.session_partitions = tuple(sorted(session.partitions))
            session_key = (node, body.group_id, body.member_id)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000.0
        max_records = body.max_records if body.max_records > 0 else 500
        while True:
            with self._lock:
                errors = dict(unknown)
                fetched: dict[int, tuple[bytes, list]] = {}
                live = not closing and not renew and self._sessions.get(session_key) is session
                if live:
                    for p in sorted(session.partitions):
                        part = self._partitions[p]
                        if part.leader != node:
                            errors[p] = int(ErrorCode.not_leader_or_follower)
                            continue
                        remaining = max_records - sum(r[1] - r[0] + 1 for _, rs in fetched.values() for r in rs)
                        if remaining <= 0:
                            break
                        data, ranges = self._acquire(node, body.member_id, part, remaining)
                        if ranges:
                            fetched[p] = (data, ranges)
                if fetched or errors or not live or loop.time() >= deadline:
                    return self._fetch_response(m, node, entry, errors, fetched)
            await asyncio.sleep(0.005)

    def _fetch_response(self, m, node: int, entry: Req, errors: dict[int, int], fetched: dict):
        entry.partition_errors = {p: c for p, c in errors.items() if c}
        entry.acquired = {p: ranges for p, (_, ranges) in fetched.items()}
        endpoints: set[int] = set()
        parts = []
        omitted, unknown_ack_error = self._nodes[node].omitted, self._nodes[node].unknown_ack_error
        for p in sorted(set(errors) | set(fetched) | set(entry.ack_errors)):
            if p in omitted:
                entry.info.setdefault("omitted", []).append(p)
                continue
            part = self._partitions.get(p)
            leader = part.leader if part is not None else -1
            leader_epoch = part.leader_epoch if part is not None else -1
            error = errors.get(p, NONE)
            ack_error = entry.ack_errors.get(p, NONE)
            if unknown_ack_error is not None and p in entry.ack_errors:
                ack_error = unknown_ack_error
                entry.info["unknown_ack_error"] = unknown_ack_error
            if ErrorCode.not_leader_or_follower in (error, ack_error):
                if self.leader_hints:
                    endpoints.add(leader)
                else:
                    leader = leader_epoch = -1
            data, ranges = fetched.get(p, (b"", []))
            parts.append(m.PartitionData(
                partition_index=p, error_code=ErrorCode(error), error_message=None,
                acknowledge_error_code=ack_error, acknowledge_error_message=None,
                current_leader=m.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch),
                records=data, acquired_records=tuple(m.AcquiredRecords(first_offset=f, last_offset=last,
                                                                       delivery_count=dc) for f, last, dc in ranges)))
        responses = (m.ShareFetchableTopicResponse(topic_id=self.topic_id, partitions=tuple(parts)),) if parts else ()
        return m.ShareFetchResponse(throttle_time=_ms(0), error_code=ErrorCode.none, error_message=None,
                                    acquisition_lock_timeout=_ms(self.lock_duration_ms), responses=responses,
                                    node_endpoints=tuple(self._endpoint(m, n) for n in sorted(endpoints)))

    def _share_acknowledge(self, node: int, version: int, body, entry: Req):
        m = _schema(SHARE_ACKNOWLEDGE, version)
        renew = entry.renew

        def response(error: int = NONE, message: str | None = None, parts=(), endpoints=()):
            entry.error = error
            fields = {f.name for f in dataclasses.fields(m.ShareAcknowledgeResponse)}
            values = dict(throttle_time=_ms(0), error_code=ErrorCode(error), error_message=message,
                          acquisition_lock_timeout=_ms(self.lock_duration_ms),
                          responses=(m.ShareAcknowledgeTopicResponse(topic_id=self.topic_id, partitions=tuple(parts)),)
                          if parts else (), node_endpoints=tuple(endpoints))
            return m.ShareAcknowledgeResponse(**{k: v for k, v in values.items() if k in fields})

        with self._lock:
            acks = entry.acks
            if not body.group_id or not body.member_id or len(body.member_id) > 36:
                return response(int(ErrorCode.invalid_request), "GroupId and MemberId (1-36 chars) must be set")
            error, session = self._session_step(node, body, entry, SHARE_ACKNOWLEDGE)
            if error:
                return response(error)
            assert session is not None
            errors = {}
            for t in body.topics:
                for p in t.partitions:
                    if t.topic_id != self.topic_id:
                        errors[p.partition_index] = int(ErrorCode.unknown_topic_id)
            for p, batches in acks.items():
                if p not in errors:
                    errors[p] = self._apply_acks(node, body.member_id, p, batches, version, renew, entry)
            entry.ack_errors = dict(errors)
            entry.partition_errors = {p: c for p, c in errors.items() if c}
            if body.share_session_epoch == -1:
                self._close_session(node, body.group_id, body.member_id)
            entry.session_partitions = tuple(sorted(session.partitions))
            endpoints = set()
            parts = []
            for p in sorted(errors):
                if p in self._nodes[node].omitted:
                    entry.info.setdefault("omitted", []).append(p)
                    continue
                part = self._partitions.get(p)
                leader = part.leader if part is not None else -1
                leader_epoch = part.leader_epoch if part is not None else -1
                if errors[p] == ErrorCode.not_leader_or_follower:
                    if self.leader_hints:
                        endpoints.add(leader)
                    else:
                        leader = leader_epoch = -1
                parts.append(m.PartitionData(partition_index=p, error_code=ErrorCode(errors[p]), error_message=None,
                                             current_leader=m.LeaderIdAndEpoch(leader_id=leader,
                                                                               leader_epoch=leader_epoch)))
            return response(parts=parts, endpoints=[self._endpoint(m, n) for n in sorted(endpoints)])
