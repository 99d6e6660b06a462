"""The simulated world: the seeded random source, the fault injector, broker incarnations, and the
connections between simulated clients and the broker (no sockets).

A `SimConnection` is what a client holds: it encodes kio request entities with the client's
`WireConnection`, and the broker side serves the frame as `connection.serve_connection` does —
`peek_header`, the registry's `HandlerSpec`, `decode_request`, `spec.handler(ctx, body)` with a
`RequestContext` whose `connection` identifies this connection (share sessions attach to it),
`encode_response` — then the client decodes the bytes with its `WireConnection`. One request is in
flight per connection (Kafka serves a connection's requests in order). When the client drops the
connection, `server.on_connection_closed` runs once the request in flight (if any) is done, as
serve_connection's `finally` does. A handler that raises closes the connection, as it does there.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import random
from dataclasses import dataclass, fields
from typing import Any, Callable

from quafka.broker.server.connection import RequestContext
from quafka.broker.server.session import ClientSession
from quafka.client._wire import WireConnection
from quafka.protocol.framing import decode_request, encode_response, peek_header
from quafka.broker.core.transaction_state import TransactionState
from quafka.protocol.record_batch import LOG_OVERHEAD, iter_records
from quafka.protocol.transaction_log_records import TRANSACTION_STATE_TOPIC, decode_transaction_log_record

from .disk import SimCrash, SimDisk, SimLog, torn_copy


# ----------------------------------------------------------------------------- faults


@dataclass
class FaultProfile:
    """Per-seed fault probabilities (per step for `crash_between_steps`, else per storage call)."""

    flush_on: bool = False  # log.flush.interval.messages=1 (else Kafka's default: never by count)
    crash_between_steps: float = 0.0
    clean_restart: float = 0.0
    append_error: float = 0.0
    crash_before_append: float = 0.0
    crash_after_append: float = 0.0
    torn_append: float = 0.0
    fsync_error: float = 0.0
    crash_in_fsync: float = 0.0
    meta_error: float = 0.0
    crash_before_meta: float = 0.0
    crash_after_meta: float = 0.0
    create_log_error: float = 0.0
    power_share: float = 0.0  # the share of crashes that are power losses (flush_on only)

    @classmethod
    def random(cls, rng: random.Random, intensity: float = 1.0, unsafe_power: bool = False) -> "FaultProfile":
        """`unsafe_power`: power losses with flush off too (Kafka's default: acknowledged records
        may then be lost; the simulator reports what breaks)."""
        flush_on = rng.random() < 0.35
        k = intensity * rng.choice((0.5, 1.0, 2.0))
        return cls(
            flush_on=flush_on,
            crash_between_steps=0.012 * k,
            clean_restart=0.002 * k,
            append_error=0.0015 * k,
            crash_before_append=0.002 * k,
            crash_after_append=0.004 * k,
            torn_append=0.002 * k,
            fsync_error=0.002 * k if flush_on else 0.0,
            crash_in_fsync=0.003 * k if flush_on else 0.0,
            meta_error=0.01 * k,
            crash_before_meta=0.02 * k,
            crash_after_meta=0.03 * k,
            create_log_error=0.005 * k,
            power_share=0.5 if flush_on or unsafe_power else 0.0,
        )

    def describe(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                         else f"{f.name}={getattr(self, f.name)}" for f in fields(self))


class Faults:
    """Decides, at each storage effect, whether it fails or the broker crashes there."""

    def __init__(self, world: "World", profile: FaultProfile) -> None:
        self.world = world
        self.profile = profile
        self.rng = world.rng
        self.enabled = False
        self.counts: collections.Counter[str] = collections.Counter()

    def _roll(self, name: str) -> bool:
        p = getattr(self.profile, name)
        if not self.enabled or p <= 0.0 or self.rng.random() >= p:
            return False
        self.counts[name] += 1
        return True

    def before_append(self, inc: "Incarnation", log: SimLog, buf, batches) -> None:
        where = f"append to {log.topic}-{log.partition} at offset {log.log_end_offset}"
        if self._roll("append_error"):
            code = self.rng.choice((errno.ENOSPC, errno.EIO))
            self.world.event(f"FAULT {errno.errorcode[code]} on {where}")
            raise OSError(code, f"simulated {errno.errorcode[code]} on {where}")
        if self._roll("crash_before_append"):
            inc.crash(f"before {where}")
        if self._roll("torn_append"):
            inc.crash(f"in the middle of {where} (torn)", torn=(log, torn_copy(log, buf, batches, self.rng)))

    def after_append(self, inc: "Incarnation", log: SimLog) -> None:
        if self._roll("crash_after_append"):
            inc.crash(f"after append to {log.topic}-{log.partition} (end {log.log_end_offset}), before the answer")

    def at_fsync(self, inc: "Incarnation", log: SimLog) -> bool:
        where = f"fsync of {log.topic}-{log.partition} (flushed {log.flushed_offset}, end {log.log_end_offset})"
        if self._roll("crash_in_fsync"):
            inc.crash(f"during {where}")
        if self._roll("fsync_error"):
            self.world.event(f"FAULT EIO on {where}")
            return True
        return False

    def at_cleaner_swap(self, inc: "Incarnation", log: SimLog, base_offsets, *, swapped: bool) -> None:
        """A crash in the middle of a log cleaning, at one group's swap. Drawn only when a cleaner
        round swaps (so seeds without compaction draw as before), at 25 times crash_after_append:
        a seed sees a few dozen swaps at most."""
        p = min(0.2, 25 * self.profile.crash_after_append)
        if not self.enabled or p <= 0.0 or self.rng.random() >= p:
            return
        name = "crash_after_cleaner_swap" if swapped else "crash_before_cleaner_swap"
        self.counts[name] += 1
        inc.crash(f"{'after' if swapped else 'before'} the log cleaner's swap of segments {list(base_offsets)} "
                  f"of {log.topic}-{log.partition}")

    def at_txn_step(self, inc: "Incarnation", log: SimLog, buf, batches, *, after: bool) -> None:
        """A crash at a step of a transaction: before or after an append to `__transaction_state`
        (a transition's record) or of a COMMIT/ABORT marker. The steps of EndTxn — the
        PrepareCommit/PrepareAbort record (before it is durable; durable, EndTxn not answered), each
        partition's marker (so between the markers of two partitions too), the
        CompleteCommit/CompleteAbort record — draw at 5 times crash_after_append (at most 0.05): a
        seed has a few dozen transactions. The other records (Ongoing, Empty, tombstones) get only
        the crashes of every append. Drawn only at those appends, so seeds without transactions
        draw as before."""
        if log.topic == TRANSACTION_STATE_TOPIC:
            states = _txn_states(buf, batches)
            end_step = any(s.startswith(("Prepare", "Complete")) for s in states)
            what = "+".join(states) + " record(s)"
        elif any(h.is_control for _, h in batches):
            end_step = True
            what = "a marker"
        else:
            return
        if not end_step:
            return  # Ongoing, Empty, tombstones: the crashes of every append are enough
        p = min(0.05, 5 * self.profile.crash_after_append)
        if not self.enabled or p <= 0.0 or self.rng.random() >= p:
            return
        when = "after" if after else "before"
        self.counts[f"crash_{when}_txn_{'marker' if what == 'a marker' else 'record'}"] += 1
        self.world.stats[f"txn crash {when} {what}"] += 1
        inc.crash(f"{when} the append of {what} to {log.topic}-{log.partition} (end {log.log_end_offset})")

    def before_meta_commit(self, inc: "Incarnation", records: list[dict]) -> None:
        what = ",".join(str(r.get("type")) for r in records)
        if self._roll("meta_error"):
            self.world.event(f"FAULT EIO on metadata commit ({what})")
            raise OSError(errno.EIO, f"simulated EIO on metadata journal write ({what})")
        if self._roll("crash_before_meta"):
            inc.crash(f"before metadata commit ({what})")

    def after_meta_commit(self, inc: "Incarnation", records: list[dict]) -> None:
        if self._roll("crash_after_meta"):
            what = ",".join(str(r.get("type")) for r in records)
            inc.crash(f"after metadata commit ({what}), before it is applied and answered")

    def at_create_log(self, inc: "Incarnation") -> None:
        if self._roll("create_log_error"):
            self.world.event("FAULT ENOSPC creating a partition log")
            raise OSError(errno.ENOSPC, "simulated ENOSPC creating a partition log")


# ----------------------------------------------------------------------------- incarnations


class Incarnation:
    """One run of the broker process, from start to crash or stop."""

    def __init__(self, world: "World", number: int) -> None:
        self.world = world
        self.number = number
        self.alive = True
        self.faults = world.faults
        self.server: Any = None
        self.store: Any = None  # SimLogStore
        self.crash_reason: str | None = None

    def check_alive(self) -> None:
        if not self.alive:
            raise SimCrash("the broker process is gone")

    def crash(self, where: str, *, torn: tuple | None = None, power: bool | None = None) -> None:
        """Crash here: keep what the disk would keep, then stop this incarnation dead."""
        if self.alive:
            self.world.crash_now(self, where, torn=torn, power=power)
        raise SimCrash(where)


class World:
    def __init__(self, seed: int, trace_len: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.disk = SimDisk(cluster_id=f"sim-{seed:08x}-cluster"[:22])
        self.profile = FaultProfile()
        self.faults = Faults(self, self.profile)
        self.inc: Incarnation | None = None
        self.incarnations = 0
        self.completions: collections.deque = collections.deque()  # (seq, on_done, response, failure, ms)
        self.completion_seq = 0  # answers are numbered in the order they arrive
        self.trace: collections.deque[str] = collections.deque(maxlen=trace_len)
        self.trace_digest = 0
        self.events = 0
        self.step = -1
        self.stats: collections.Counter[str] = collections.Counter()
        self.anomalies: list[str] = []
        self.consumers_by_name: dict[str, Any] = {}
        self.full_trace: list[str] | None = None
        self.next_peer = 0

    # -- time and trace
    def now_ms(self) -> int:
        return self.loop.now_ms()  # type: ignore[union-attr]

    def event(self, text: str, at_ms: int | None = None) -> None:
        line = f"[step {self.step} t={(self.now_ms() if at_ms is None else at_ms) / 1000.0:.3f}s] {text}"
        self.trace.append(line)
        if self.full_trace is not None:
            self.full_trace.append(line)
        self.events += 1
        # a cheap order-sensitive digest of the whole trace (determinism checks)
        self.trace_digest = (self.trace_digest * 1000003 + _stable_hash(line)) & 0xFFFFFFFFFFFFFFFF

    # -- crashes
    def crash_now(self, inc: Incarnation, where: str, *, torn: tuple | None = None, power: bool | None = None) -> None:
        if power is None:
            power = self.profile.power_share > 0 and self.rng.random() < self.profile.power_share
        counts = inc.store.capture(self.disk, power=power, rng=self.rng, torn=torn)
        inc.alive = False
        inc.crash_reason = where
        kind = "power loss" if power else "process crash"
        self.stats["crashes"] += 1
        self.stats["crash: " + kind] += 1
        self.stats["lost unflushed batches"] += counts["lost_batches"]
        self.stats["torn tails"] += counts["torn_tails"]
        self.event(f"CRASH ({kind}) {where}; lost {counts['lost_batches']} unflushed batch(es), "
                   f"{counts['torn_tails']} torn tail(s)")


def _txn_states(buf, batches) -> list[str]:
    """The states of the `__transaction_state` records in an append (a tombstone: "tombstone")."""
    out = []
    view = memoryview(bytes(buf))
    for pos, header in batches:
        for rec in iter_records(view[pos:pos + header.batch_length + LOG_OVERHEAD]):
            try:
                value = decode_transaction_log_record(rec.key, rec.value).value
            except Exception:  # noqa: BLE001 - a torn or foreign record: named as such
                out.append("undecodable")
                continue
            out.append("tombstone" if value is None else TransactionState.from_id(value.transaction_status).state_name)
    return out


def _stable_hash(text: str) -> int:
    h = 1469598103934665603
    for b in text.encode():
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


# ----------------------------------------------------------------------------- connections


class LostAnswer(str):
    """A failure: the client dropped its connection after the broker had answered the request in
    flight; `response` is that answer (decoded), which the client never read."""

    response: Any = None


class SimConnection:
    """One client connection to the current broker incarnation."""

    def __init__(self, world: World, client_id: str) -> None:
        self.world = world
        self.inc = world.inc
        self.wire = WireConnection(client_id)
        self.token = object()  # RequestContext.connection: what the broker's share sessions attach to
        world.next_peer += 1
        self.peer = f"10.0.{world.next_peer // 250}.{world.next_peer % 250}:{40000 + world.next_peer % 20000}"
        self.closed = False
        self.answered_before_drop = False  # drop() came after the request in flight had been answered
        self.task: asyncio.Task | None = None
        self.sent_at_ms = 0
        self.what = ""
        self.answer_seq = 0  # number of the last answer `call` returned

    @property
    def usable(self) -> bool:
        return not self.closed and self.inc is self.world.inc and self.inc is not None and self.inc.alive

    @property
    def busy(self) -> bool:
        return self.task is not None

    def submit(self, entity, on_done: Callable[[Any, str | None], None] | None = None, *, direct=None) -> None:
        """Send a request; `on_done(response, failure)` runs from the driver when it completes
        (response None and a reason when the connection was lost or closed); `direct` instead runs
        from the completion itself."""
        assert self.task is None and self.usable
        self.sent_at_ms = self.world.now_ms()
        self.what = type(entity).__name__
        _correlation_id, data = self.wire.send(entity)
        server = self.inc.server
        self.task = self.world.loop.create_task(self._serve(server, bytes(data[4:])))
        self.task.add_done_callback(lambda task: self._done(task, on_done, direct))

    async def call(self, entity) -> Any:
        """Send and wait for the answer (None when the connection is lost)."""
        fut = self.world.loop.create_future()

        def done(response, failure):
            if not fut.done():
                fut.set_result(response)

        self.submit(entity, direct=done)
        return await fut

    async def _serve(self, server, frame: bytes):
        api_key, api_version, correlation_id = peek_header(frame)
        spec = server.registry.get(api_key)
        if spec is None or not spec.min_version <= api_version <= spec.max_version:
            raise ConnectionAbortedError(f"API key {api_key} v{api_version} not served")
        header, body = decode_request(frame)
        ctx = RequestContext(server=server, peer=self.peer, api_key=api_key, api_version=api_version,
                             correlation_id=correlation_id, client_id=getattr(header, "client_id", None),
                             header=header, connection=self.token, session=ClientSession())
        response = await spec.handler(ctx, body)
        if response is None:
            return None
        if not isinstance(response, (bytes, bytearray)):
            response = encode_response(correlation_id, response)
        return bytes(response)

    def _done(self, task: asyncio.Task, on_done, direct) -> None:
        self.task = None
        inc = self.inc
        now_ms = self.world.now_ms()
        if task.cancelled() or not inc.alive:
            self.closed = True
            self._complete(on_done, direct, None, "connection lost (broker crashed)", now_ms)
            return
        exc = task.exception()
        if exc is not None:
            self.world.note_handler_exception(exc)
            self.closed = True
            self._broker_side_closed()
            self._complete(on_done, direct, None, f"connection closed by the broker ({type(exc).__name__}: {exc})",
                           now_ms)
            return
        if self.closed:  # the client dropped it meanwhile: the answer goes nowhere
            self._broker_side_closed()
            failure = LostAnswer("connection dropped by the client")
            data = task.result()
            if data is not None and self.answered_before_drop:
                # the broker had answered before the drop: sent, never read (the oracle counts its
                # deliveries); an answer finished after the drop was told to the broker counts nothing
                responses = self.wire.receive_bytes(data)
                failure.response = responses[0][1] if len(responses) == 1 else None
            self._complete(on_done, direct, None, failure, now_ms)
            return
        data = task.result()
        if data is None:
            self._complete(on_done, direct, None, "no response", now_ms)
            return
        responses = self.wire.receive_bytes(data)
        assert len(responses) == 1, responses
        self._complete(on_done, direct, responses[0][1], None, now_ms)

    def _complete(self, on_done, direct, response, failure, now_ms) -> None:
        world = self.world
        world.completion_seq += 1
        if direct is not None:
            self.answer_seq = world.completion_seq
            direct(response, failure)
        else:
            world.completions.append((world.completion_seq, on_done, response, failure, now_ms))

    def _broker_side_closed(self) -> None:
        if self.inc.alive and self.inc is self.world.inc:
            try:
                self.inc.server.on_connection_closed(self.token)
            except SimCrash:
                pass

    def drop(self) -> None:
        """The client closes the connection: the broker notices at once, even with a request in
        flight (BrokerConnection._disconnected), and sweeps once more when that request is done."""
        if self.closed:
            return
        self.closed = True
        self.answered_before_drop = self.task is not None and self.task.done()
        self._broker_side_closed()
