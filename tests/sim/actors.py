"""Simulated clients: idempotent producers, share consumers and an admin, each on its own
connection, building real requests with kio (quafka.client._wire.build_entity) and reading the
decoded responses as a client would. What they are told goes to the oracle.
"""

from __future__ import annotations

import base64
import datetime
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quafka.client._wire import build_entity, request_class
from quafka.protocol.record_batch import CONTROL_FLAG, LOG_OVERHEAD, build_batch, iter_headers, iter_records

from .oracle import ACCEPT, ACK_NAMES, RELEASE, REJECT, RENEW, Violation
from .world import SimConnection

if TYPE_CHECKING:
    from .runner import Simulation

# error codes (ints: kio's and quafka's ErrorCode enums compare by value)
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_MEMBER_ID = 25
TOPIC_ALREADY_EXISTS = 36
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123

GROUP_RESOURCE = 32
INT32_MAX = 2**31 - 1


def req(api_key: int, version: int, **values: Any):
    return build_entity(request_class(api_key, version), values)


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def td_ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


def decode_records(data: bytes | None) -> list[tuple[int, bytes | None, int, int]]:
    """(offset, value, producer id, sequence) of every data record in `data`."""
    out = []
    if not data:
        return out
    view = memoryview(data)
    for pos, header in iter_headers(data):
        if header.attributes & CONTROL_FLAG:
            continue
        for rec in iter_records(view[pos:pos + header.batch_length + LOG_OVERHEAD]):
            seq = header.base_sequence + (rec.offset - header.base_offset) if header.base_sequence >= 0 else -1
            out.append((rec.offset, rec.value, header.producer_id, seq))
    return out


def next_session_epoch(epoch: int) -> int:
    if epoch == -1:
        return 0
    return 1 if epoch >= INT32_MAX else epoch + 1


class Actor:
    kind = "actor"

    def __init__(self, sim: "Simulation", name: str) -> None:
        self.sim = sim
        self.world = sim.world
        self.oracle = sim.oracle
        self.rng = sim.world.rng
        self.name = name
        self.conn: SimConnection | None = None
        self.conn_gen = 0
        self.answered_at_ms: int | None = None

    @property
    def busy(self) -> bool:
        return self.conn is not None and self.conn.busy

    def connection(self) -> SimConnection:
        if self.conn is None or not self.conn.usable:
            if self.conn is not None:
                self.on_connection_lost()
            self.conn = SimConnection(self.world, self.name)
        return self.conn

    def on_connection_lost(self) -> None:
        self.conn_gen += 1

    def send(self, entity, handler, what: str) -> None:
        conn = self.connection()
        self.world.event(f"{self.name} -> {what}")
        conn.what = what
        conn.submit(entity, lambda response, failure, now_ms: self._answer(handler, response, failure, now_ms, what))

    def _answer(self, handler, response, failure, now_ms, what) -> None:
        self.answered_at_ms = now_ms  # events about this answer carry the time it arrived
        if failure is not None:
            self.world.event(f"{self.name} <- {what.split(' ', 1)[0]}: {failure}", now_ms)
        try:
            handler(response, failure, now_ms)
        finally:
            self.answered_at_ms = None

    def event(self, text: str) -> None:
        self.world.event(text, self.answered_at_ms)


# ----------------------------------------------------------------------------- producer


@dataclass
class Batch:
    topic_id: uuid.UUID
    partition: int
    seq: int
    values: list[bytes]
    pid: int
    epoch: int
    attempts: int = 0


class Producer(Actor):
    """An idempotent producer (acks=-1): one batch in flight, retried with the same producer id and
    sequence until answered, as Kafka's idempotent producer does."""

    kind = "producer"

    def __init__(self, sim: "Simulation", name: str) -> None:
        super().__init__(sim, name)
        self.pid = -1
        self.epoch = -1
        self.seqs: dict[tuple[uuid.UUID, int], int] = {}
        self.pending: Batch | None = None
        self.counter = 0

    def act(self) -> None:
        if self.pid < 0:
            self.send(req(22, 4, transactional_id=None, transaction_timeout=ms(60000), producer_id=-1,
                          producer_epoch=-1), self._on_init, "InitProducerId")
            return
        batch = self.pending
        if batch is None:
            topics = [t for t in self.oracle.topics.values() if t.name not in self.oracle.uncertain_topics]
            if not topics:
                return
            topic = self.rng.choice(sorted(topics, key=lambda t: t.name))
            partition = self.rng.randrange(topic.partitions)
            seq = self.seqs.get((topic.topic_id, partition), 0)
            n = self.rng.choice((1, 1, 2, 3, 5))
            values = []
            for i in range(n):
                self.counter += 1
                values.append(f"{self.name}/{self.pid}/{seq + i}/{self.counter}".encode())
            batch = self.pending = Batch(topic.topic_id, partition, seq, values, self.pid, self.epoch)
        batch.attempts += 1
        data = build_batch([(None, v) for v in batch.values], base_timestamp=self.world.wall_ms(),
                           producer_id=batch.pid, producer_epoch=batch.epoch, base_sequence=batch.seq)
        entity = req(0, 13, transactional_id=None, acks=-1, timeout=ms(30000), topic_data=[
            {"topic_id": batch.topic_id, "partition_data": [{"index": batch.partition, "records": data}]}])
        self.send(entity, self._on_produce,
                  f"Produce {self.oracle.topic_name(batch.topic_id)}-{batch.partition} pid {batch.pid} seq {batch.seq} "
                  f"x{len(batch.values)}{' (retry)' if batch.attempts > 1 else ''}")

    def _on_init(self, response, failure, now_ms) -> None:
        if response is None or response.error_code != NONE:
            return
        self.pid, self.epoch = response.producer_id, response.producer_epoch
        self.seqs.clear()
        self.event(f"{self.name} <- InitProducerId pid {self.pid}")

    def _on_produce(self, response, failure, now_ms) -> None:
        batch = self.pending
        if response is None or batch is None:
            return  # outcome unknown: retried as it is
        part = response.responses[0].partition_responses[0]
        error = int(part.error_code)
        where = f"{self.oracle.topic_name(batch.topic_id)}-{batch.partition} pid {batch.pid} seq {batch.seq}"
        self.event(f"{self.name} <- Produce {where}: error {error} base offset {part.base_offset}")
        if error == NONE:
            self.oracle.on_produce_acked(batch.topic_id, batch.partition, part.base_offset, batch.values,
                                         batch.pid, batch.seq)
            self.seqs[(batch.topic_id, batch.partition)] = batch.seq + len(batch.values)
            self.pending = None
        elif error in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION):
            self.pending = None  # the topic is gone
        elif error in (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH):
            if batch.seq > 0 and batch.topic_id in self.oracle.topics:
                raise Violation("idempotence-refused",
                                f"{self.name}: retry of {where} refused with error {error}, but the batch before "
                                f"it (sequence {batch.seq - 1}) was acknowledged: the broker lost its producer state")
            self.pending = None
            self.pid = -1  # start over with a new producer id
        # anything else (KAFKA_STORAGE_ERROR, ...): outcome unknown, retried


# ----------------------------------------------------------------------------- share consumer


class Consumer(Actor):
    """A share-group member: heartbeats, a share session, ShareFetch with piggy-backed
    acknowledgements, ShareAcknowledge (and RENEW), abandoning records, dropping its connection."""

    kind = "consumer"

    def __init__(self, sim: "Simulation", name: str, group: str, topics: list[str], version: int) -> None:
        super().__init__(sim, name)
        self.group = group
        self.topics = topics
        self.version = version
        self.member_id = base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()
        self.member_epoch = 0
        self.joined = False
        self.assignment: dict[uuid.UUID, list[int]] = {}
        self.hb_interval_ms = 5000
        self.next_hb_ms = 0
        self.session_epoch = 0
        self.session_parts: set[tuple[uuid.UUID, int]] = set()
        self.held: dict[tuple[uuid.UUID, int], dict[int, tuple[int, int]]] = {}  # -> offset -> (count, deadline)
        self.lock_ms = 0
        self.rejoin_at_step = 0
        self.draining = False

    # -- bookkeeping
    def on_connection_lost(self) -> None:
        """The broker closes a dropped connection's share sessions and releases their records."""
        super().on_connection_lost()
        self._session_gone()

    def _session_gone(self) -> None:
        self.conn_gen += 1
        self.session_epoch = 0
        self.session_parts = set()
        self.held.clear()
        self.oracle.on_released_all(self.name)

    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())

    def _purge_expired(self, now_ms: int) -> None:
        for key, offsets in list(self.held.items()):
            for offset, (count, deadline) in list(offsets.items()):
                if now_ms >= deadline:
                    del offsets[offset]
                    self.oracle.on_abandoned(self.group, key[0], key[1], offset, self.name)
            if not offsets:
                del self.held[key]

    def paused(self) -> bool:
        return self.group in self.sim.paused_groups

    # -- choosing what to do
    def act(self) -> None:
        rng = self.rng
        now = self.world.now_ms()
        self._purge_expired(now)
        if self.paused():
            if self.joined:
                self.heartbeat(leave=True)
            elif self.session_epoch > 0 and rng.random() < 0.5:
                self.acknowledge(close=True)
            return
        if not self.joined:
            if self.world.step >= self.rejoin_at_step:
                self.heartbeat()
            return
        if now >= self.next_hb_ms and (self.draining or rng.random() < 0.92):
            self.heartbeat()
            return
        if self.draining:
            self.fetch(accept_all=True)
            return
        held = self.held_count()
        choice = rng.random()
        if held and choice < 0.14:
            self.acknowledge()
        elif held and choice < 0.19 and self.version >= 2:
            self.acknowledge(renew=True)
        elif held and choice < 0.23:
            self.abandon()
        elif choice < 0.25:
            self.world.event(f"{self.name} drops its connection (holding {held})")
            if self.conn is not None:
                self.conn.drop()
            self.conn = None
            self.on_connection_lost()
        elif choice < 0.27 and self.session_epoch > 0:
            self.acknowledge(close=True)
        elif choice < 0.28:
            self.heartbeat(leave=True)
            self.rejoin_at_step = self.world.step + rng.randint(3, 40)
        else:
            self.fetch()

    # -- heartbeats
    def heartbeat(self, leave: bool = False) -> None:
        epoch = -1 if leave else (self.member_epoch if self.joined else 0)
        topics = list(self.topics) if epoch == 0 or self.rng.random() < 0.1 else None
        entity = req(76, 1, group_id=self.group, member_id=self.member_id, member_epoch=epoch, rack_id=None,
                     subscribed_topic_names=topics)
        self.send(entity, lambda r, f, now: self._on_heartbeat(r, f, now, epoch),
                  f"ShareGroupHeartbeat {self.group} epoch {epoch}")

    def _on_heartbeat(self, response, failure, now_ms, sent_epoch) -> None:
        if response is None:
            return
        error = int(response.error_code)
        if error == NONE:
            if sent_epoch == -1:
                self.joined = False
                self.member_epoch = 0
                self.assignment = {}
                self.event(f"{self.name} <- left {self.group}")
                return
            self.joined = True
            self.member_epoch = response.member_epoch
            self.hb_interval_ms = max(td_ms(response.heartbeat_interval), 100)
            self.next_hb_ms = now_ms + self.hb_interval_ms
            if response.assignment is not None:
                self.assignment = {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}
            self.event(f"{self.name} <- heartbeat epoch {self.member_epoch} assignment "
                             f"{ {self.oracle.topic_name(t): ps for t, ps in self.assignment.items()} }")
        elif error in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.joined = False
            self.member_epoch = 0
            self.event(f"{self.name} <- heartbeat error {error}: rejoin")
        else:
            self.event(f"{self.name} <- heartbeat error {error}")

    # -- acknowledgements
    def _choose_acks(self, accept_all: bool = False, renew: bool = False) -> dict[tuple, list[tuple[int, int]]]:
        rng = self.rng
        chosen: dict[tuple, list[tuple[int, int]]] = {}
        share = 1.0 if accept_all else rng.choice((0.3, 0.6, 1.0))
        for key in sorted(self.held, key=lambda k: (str(k[0]), k[1])):
            items = []
            for offset in sorted(self.held[key]):
                if rng.random() >= share:
                    continue
                if accept_all:
                    ack_type = ACCEPT
                elif renew:
                    ack_type = RENEW if rng.random() < 0.8 else ACCEPT
                else:
                    x = rng.random()
                    ack_type = ACCEPT if x < 0.55 else RELEASE if x < 0.8 else REJECT
                items.append((offset, ack_type))
            if items:
                chosen[key] = items
        return chosen

    def _ack_batches(self, items: list[tuple[int, int]]) -> list[dict]:
        batches: list[dict] = []
        run: list[tuple[int, int]] = []

        def flush():
            if not run:
                return
            types = [t for _, t in run]
            if len(set(types)) == 1:
                batches.append({"first_offset": run[0][0], "last_offset": run[-1][0], "acknowledge_types": (types[0],)})
            elif self.rng.random() < 0.5:
                batches.append({"first_offset": run[0][0], "last_offset": run[-1][0], "acknowledge_types": tuple(types)})
            else:
                start = 0
                for i in range(1, len(run) + 1):
                    if i == len(run) or run[i][1] != run[start][1]:
                        batches.append({"first_offset": run[start][0], "last_offset": run[i - 1][0],
                                        "acknowledge_types": (run[start][1],)})
                        start = i
            run.clear()

        for offset, ack_type in items:
            if run and offset != run[-1][0] + 1:
                flush()
            run.append((offset, ack_type))
        flush()
        return batches

    def _describe_acks(self, acks: dict) -> str:
        parts = []
        for (tid, p), items in acks.items():
            counts: dict[str, int] = {}
            for _o, t in items:
                counts[ACK_NAMES[t]] = counts.get(ACK_NAMES[t], 0) + 1
            parts.append(f"{self.oracle.topic_name(tid)}-{p}:" + "/".join(f"{k}x{v}" for k, v in sorted(counts.items()))
                         + f"@{items[0][0]}..{items[-1][0]}")
        return " ".join(parts)

    def _apply_ack_result(self, key: tuple, items: list[tuple[int, int]], error: int, now_ms: int,
                          sent_seq: int) -> None:
        tid, partition = key
        held = self.held.get(key, {})
        if error == NONE:
            self.oracle.on_acked(self.group, self.name, tid, partition, items, now_ms, sent_seq)
            for offset, ack_type in items:
                if ack_type == RENEW:
                    if offset in held:
                        held[offset] = (held[offset][0], now_ms + self.oracle.groups[self.group].lock_ms)
                else:
                    held.pop(offset, None)
        else:
            for offset, _t in items:  # not applied: we no longer count on holding these
                if offset in held:
                    del held[offset]
                    self.oracle.on_abandoned(self.group, tid, partition, offset, self.name)
        if key in self.held and not self.held[key]:
            del self.held[key]

    def _acks_sent(self, acks: dict) -> int:
        seq = self.oracle.seq
        for (tid, p), items in acks.items():
            seq = self.oracle.on_ack_sent(self.group, self.name, tid, p, [o for o, _t in items])
        return seq

    def _forget_sent_acks(self, acks: dict) -> None:
        """The request's outcome is unknown: the acknowledged records are no longer ours."""
        for key, items in acks.items():
            held = self.held.get(key, {})
            for offset, _t in items:
                if held.pop(offset, None) is not None:
                    self.oracle.on_abandoned(self.group, key[0], key[1], offset, self.name)

    def acknowledge(self, renew: bool = False, close: bool = False) -> None:
        acks = {} if close and self.rng.random() < 0.5 else self._choose_acks(renew=renew)
        if not acks and not close:
            return
        epoch = -1 if close else self.session_epoch
        if epoch == 0:
            return  # no session: acknowledgements need one
        version = 2 if renew else self.version
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), items in acks.items():
            topics.setdefault(tid, []).append({"partition_index": p, "acknowledgement_batches": self._ack_batches(items)})
        entity = req(79, version, group_id=self.group, member_id=self.member_id, share_session_epoch=epoch,
                     is_renew_ack=renew, topics=[{"topic_id": t, "partitions": ps} for t, ps in topics.items()])
        sent_seq = self._acks_sent(acks)
        if close:
            self.oracle.on_release_all_sent(self.name)
        what = f"ShareAcknowledge v{version} epoch {epoch}{' renew' if renew else ''}{' close' if close else ''} " \
               f"{self._describe_acks(acks)}"
        self.send(entity, lambda r, f, now: self._on_acknowledge(r, f, now, acks, epoch, sent_seq), what)

    def _on_acknowledge(self, response, failure, now_ms, acks, epoch, sent_seq) -> None:
        if response is None:
            self._forget_sent_acks(acks)
            return
        error = int(response.error_code)
        results = {(t.topic_id, p.partition_index): int(p.error_code) for t in response.responses for p in t.partitions}
        self.event(f"{self.name} <- ShareAcknowledge error {error} partitions "
                         f"{ {f'{self.oracle.topic_name(k[0])}-{k[1]}': v for k, v in results.items()} }")
        if error != NONE:
            self._forget_sent_acks(acks)
            if error in (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH):
                self._session_gone()
            return
        for key, items in acks.items():
            self._apply_ack_result(key, items, results.get(key, NONE), now_ms, sent_seq)
        if epoch == -1:
            self._session_gone()  # the session ended: what it held is released
        else:
            self.session_epoch = next_session_epoch(epoch)

    def drop_while_fetching(self) -> None:
        """The client goes away (restarts) while its ShareFetch is parked at the broker."""
        self.world.event(f"{self.name} drops its connection while its {self.conn.what.split(' ', 1)[0]} is in flight "
                         f"(holding {self.held_count()})")
        self.conn.drop()
        self.conn = None
        self.on_connection_lost()

    def abandon(self) -> None:
        keys = sorted(self.held, key=lambda k: (str(k[0]), k[1]))
        key = self.rng.choice(keys)
        offsets = sorted(self.held[key])
        chosen = offsets[:self.rng.randint(1, len(offsets))]
        for offset in chosen:
            del self.held[key][offset]
            self.oracle.on_abandoned(self.group, key[0], key[1], offset, self.name)
        if not self.held[key]:
            del self.held[key]
        self.world.event(f"{self.name} abandons {self.oracle.topic_name(key[0])}-{key[1]} offsets "
                         f"{chosen[0]}..{chosen[-1]} ({len(chosen)}): their locks will expire")

    # -- fetching
    def fetch(self, accept_all: bool = False) -> None:
        rng = self.rng
        epoch = self.session_epoch
        assigned = {(t, p) for t, ps in self.assignment.items() for p in ps}
        if epoch == 0:
            listed = sorted(assigned, key=lambda k: (str(k[0]), k[1]))
            forgotten: list = []
        else:
            listed = sorted(assigned - self.session_parts, key=lambda k: (str(k[0]), k[1]))
            forgotten = sorted(self.session_parts - assigned, key=lambda k: (str(k[0]), k[1]))
        acks = {}
        if epoch > 0 and (accept_all or rng.random() < 0.5):
            acks = self._choose_acks(accept_all=accept_all)
        if epoch == 0 and not listed:
            return
        topics: dict[uuid.UUID, list[dict]] = {}
        for key in listed:
            topics.setdefault(key[0], []).append({"partition_index": key[1], "partition_max_bytes": 0,
                                                  "acknowledgement_batches": ()})
        for key, items in acks.items():
            parts = topics.setdefault(key[0], [])
            entry = next((e for e in parts if e["partition_index"] == key[1]), None)
            if entry is None:
                entry = {"partition_index": key[1], "partition_max_bytes": 0}
                parts.append(entry)
            entry["acknowledgement_batches"] = self._ack_batches(items)
        forgotten_topics: dict[uuid.UUID, list[int]] = {}
        for t, p in forgotten:
            forgotten_topics.setdefault(t, []).append(p)
        max_wait = 0 if accept_all else rng.choice((0, 0, 50, 200, 500))
        max_records = rng.choice((1, 3, 10, 50, 500))
        mode = 1 if self.version >= 2 and rng.random() < 0.25 else 0
        entity = req(78, self.version, group_id=self.group, member_id=self.member_id, share_session_epoch=epoch,
                     max_wait=ms(max_wait), min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                     share_acquire_mode=mode, is_renew_ack=False,
                     topics=[{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                     forgotten_topics_data=[{"topic_id": t, "partitions": tuple(ps)} for t, ps in forgotten_topics.items()])
        what = f"ShareFetch v{self.version} epoch {epoch} +{len(listed)} -{len(forgotten)} max_records {max_records} " \
               f"wait {max_wait}{' record_limit' if mode else ''} {self._describe_acks(acks)}"
        sent = (epoch, listed, forgotten, acks, self.oracle.groups[self.group].config_gen, self._acks_sent(acks))
        self.send(entity, lambda r, f, now: self._on_fetch(r, f, now, sent), what)

    def _on_fetch(self, response, failure, now_ms, sent) -> None:
        epoch, listed, forgotten, acks, config_gen, sent_seq = sent
        if response is None:
            self._forget_sent_acks(acks)
            lost = getattr(failure, "response", None)
            if lost is not None and int(lost.error_code) == NONE:
                # the broker answered, the client dropped the connection before reading it: those
                # deliveries were made (counted, as in Kafka), nobody received them
                for t in lost.responses:
                    for p in t.partitions:
                        for a in p.acquired_records:
                            for offset in range(a.first_offset, a.last_offset + 1):
                                self.oracle.on_delivery_unread(self.group, t.topic_id, p.partition_index, offset,
                                                               a.delivery_count)
            return
        error = int(response.error_code)
        if error != NONE:
            self.event(f"{self.name} <- ShareFetch error {error}")
            self._forget_sent_acks(acks)
            if error in (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH):
                self._session_gone()
            return
        self.session_epoch = next_session_epoch(epoch)
        if epoch == 0:
            self.session_parts = set(listed)
        else:
            self.session_parts.update(listed)
            self.session_parts.difference_update(forgotten)
        lock_ms = td_ms(response.acquisition_lock_timeout)
        self.lock_ms = lock_ms
        summary = []
        for t in response.responses:
            for p in t.partitions:
                key = (t.topic_id, p.partition_index)
                if key in acks:
                    self._apply_ack_result(key, acks[key], int(p.acknowledge_error_code), now_ms, sent_seq)
                ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
                if not ranges:
                    if int(p.error_code) or key in acks:
                        summary.append(f"{self.oracle.topic_name(key[0])}-{key[1]} err {int(p.error_code)} "
                                       f"ack_err {int(p.acknowledge_error_code)}")
                    continue
                records = {o: v for o, v, _pid, _seq in decode_records(p.records)}
                held = self.held.setdefault(key, {})
                summary.append(f"{self.oracle.topic_name(key[0])}-{key[1]} " + ",".join(
                    f"{a}-{b}#{c}" for a, b, c in ranges))
                for first, last, count in ranges:
                    for offset in range(first, last + 1):
                        self.oracle.on_delivered(self.group, self.name, self.conn_gen, key[0], key[1], offset, count,
                                                 now_ms, lock_ms, config_gen)
                        self.oracle.on_delivered_value(key[0], key[1], offset, records.get(offset, None),
                                                       offset in records, self.group)
                        held[offset] = (count, now_ms + lock_ms)
                        self.sim.deliveries += 1
        self.event(f"{self.name} <- ShareFetch lock {lock_ms} ms: {'; '.join(summary) or 'nothing'}")


# ----------------------------------------------------------------------------- admin


class Admin(Actor):
    kind = "admin"

    def __init__(self, sim: "Simulation", name: str = "admin") -> None:
        super().__init__(sim, name)
        self.to_create: dict[str, int] = {}  # deleted topics to create again

    def settle(self) -> None:
        """Drain: only finish topic work (resolve unknown outcomes, create deleted topics again)."""
        if self.oracle.uncertain_topics:
            self.metadata()
        elif self.to_create:
            name = sorted(self.to_create)[0]
            self.create_topic(name, self.to_create[name])

    def act(self) -> None:
        rng = self.rng
        sim = self.sim
        if self.oracle.uncertain_topics:
            self.metadata()
            return
        if self.to_create and rng.random() < 0.5:
            name = sorted(self.to_create)[0]
            self.create_topic(name, self.to_create[name])
            return
        x = rng.random()
        groups = sorted(self.oracle.groups)
        if x < 0.35:
            self.describe_offsets(rng.choice(groups))
        elif x < 0.5:
            self.alter_group_config(rng.choice(groups))
        elif x < 0.62:
            ready = [g for g in sorted(sim.paused_groups) if sim.group_empty(g)]
            if ready:
                g = rng.choice(ready)
                if rng.random() < 0.65:
                    self.alter_offsets(g)
                else:
                    self.delete_offsets(g)
            elif not sim.paused_groups:
                g = rng.choice(groups)
                sim.paused_groups[g] = self.world.step + rng.randint(10, 60)
                self.world.event(f"admin pauses group {g} (its consumers leave) until step {sim.paused_groups[g]}")
        elif x < 0.68:
            topics = sorted(t.name for t in self.oracle.topics.values())
            if topics and len(self.to_create) == 0:
                self.delete_topic(rng.choice(topics))
        else:
            self.metadata()

    # -- metadata
    def metadata(self, check: bool = False) -> None:
        self.send(req(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                  lambda r, f, now: self.on_metadata(r, check), "Metadata")

    def on_metadata(self, response, check: bool = False) -> dict | None:
        if response is None:
            return None
        listed = {t.name: (t.topic_id, len(t.partitions)) for t in response.topics
                  if int(t.error_code) == NONE and not t.name.startswith("__")}
        oracle = self.oracle
        for name in sorted(oracle.uncertain_topics):
            known = [t for t in oracle.topics.values() if t.name == name]
            got = listed.get(name)
            for t in known:
                if got is None or got[0] != t.topic_id:
                    oracle.on_topic_deleted(t.topic_id)
            if got is not None and got[0] not in oracle.topics:
                oracle.on_topic_created(name, got[0], got[1])
                self.to_create.pop(name, None)
            elif got is None:
                self.to_create.setdefault(name, self.sim.topic_partitions[name])
            oracle.uncertain_topics.discard(name)
            self.event(f"admin resolves topic {name}: {got}")
        if check:
            oracle.check_metadata(listed)
        return listed

    # -- topics
    def create_topic(self, name: str, partitions: int) -> None:
        entity = req(19, 7, topics=[{"name": name, "num_partitions": partitions, "replication_factor": -1,
                                     "assignments": (), "configs": ()}], timeout=ms(30000), validate_only=False)
        self.oracle.uncertain_topics.add(name)  # it may exist before we hear back
        self.send(entity, lambda r, f, now: self._on_create(r, name, partitions), f"CreateTopics {name} x{partitions}")

    def _on_create(self, response, name: str, partitions: int) -> None:
        if response is None:
            self.oracle.uncertain_topics.add(name)
            return
        t = response.topics[0]
        error = int(t.error_code)
        self.event(f"admin <- CreateTopics {name}: error {error} id {t.topic_id}")
        if error == NONE:
            self.oracle.on_topic_created(name, t.topic_id, partitions)
            self.oracle.uncertain_topics.discard(name)
            self.to_create.pop(name, None)
        elif error == TOPIC_ALREADY_EXISTS:
            self.oracle.uncertain_topics.add(name)
        else:
            self.oracle.uncertain_topics.add(name)

    def delete_topic(self, name: str) -> None:
        entity = req(20, 6, topics=[{"name": name, "topic_id": None}], timeout=ms(30000))
        self.oracle.uncertain_topics.add(name)  # it may be gone before we hear back
        self.sim.groups_ledger.on_topic_gone(name)
        self.send(entity, lambda r, f, now: self._on_delete(r, name), f"DeleteTopics {name}")

    def _on_delete(self, response, name: str) -> None:
        if response is None:
            self.oracle.uncertain_topics.add(name)
            return
        r = response.responses[0]
        error = int(r.error_code)
        self.event(f"admin <- DeleteTopics {name}: error {error}")
        if error == NONE:
            for t in [t for t in self.oracle.topics.values() if t.name == name]:
                self.oracle.on_topic_deleted(t.topic_id)
            self.oracle.uncertain_topics.discard(name)
            self.to_create[name] = self.sim.topic_partitions[name]
        else:
            self.oracle.uncertain_topics.add(name)

    # -- share-group offsets
    def _group_topics(self, group: str) -> list[tuple[str, uuid.UUID, int]]:
        subscribed = self.oracle.groups[group].topics
        return sorted((t.name, t.topic_id, t.partitions) for t in self.oracle.topics.values() if t.name in subscribed)

    def describe_offsets(self, group: str) -> None:
        topics = self._group_topics(group)
        if not topics:
            return
        entity = req(90, 1, groups=[{"group_id": group, "topics": [
            {"topic_name": name, "partitions": tuple(range(n))} for name, _tid, n in topics]}])
        self.send(entity, lambda r, f, now: self.on_describe_offsets(r, group, now), f"DescribeShareGroupOffsets {group}")

    def on_describe_offsets(self, response, group: str, now_ms: int, log_ends: dict | None = None) -> None:
        """`log_ends`: (topic id, partition) -> high watermark of a full Fetch just before (checks)."""
        if response is None:
            return
        g = response.groups[0]
        if int(g.error_code) != NONE:
            self.event(f"admin <- DescribeShareGroupOffsets {group}: error {int(g.error_code)}")
            return
        shown = []
        for t in g.topics:
            tid = next((x.topic_id for x in self.oracle.topics.values() if x.name == t.topic_name), None)
            if tid is None or (t.topic_id and t.topic_id != tid):
                continue
            for p in t.partitions:
                if int(p.error_code) != NONE:
                    continue
                shown.append(f"{t.topic_name}-{p.partition_index}@{p.start_offset}")
                self.oracle.on_start_offset(group, tid, p.partition_index, p.start_offset, now_ms)
                end = (log_ends or {}).get((tid, p.partition_index))
                if end is not None and p.start_offset > end:
                    self.oracle._fail("start-offset-beyond-log-end",  # noqa: SLF001
                                      f"{group} {t.topic_name}-{p.partition_index}: start offset {p.start_offset} is "
                                      f"beyond the log end {end}: records produced there will never be delivered")
        self.event(f"admin <- DescribeShareGroupOffsets {group}: {' '.join(shown)}")

    def alter_offsets(self, group: str) -> None:
        topics = self._group_topics(group)
        if not topics:
            return
        name, tid, n = self.rng.choice(topics)
        topic = self.oracle.topics[tid]
        chosen = sorted(self.rng.sample(range(n), self.rng.randint(1, n)))
        offsets = {}
        for p in chosen:
            end = max(topic.acked[p], default=-1) + 1
            offsets[p] = self.rng.choice((0, end, self.rng.randint(0, end)))
        entity = req(91, 0, group_id=group, topics=[{"topic_name": name, "partitions": [
            {"partition_index": p, "start_offset": o} for p, o in offsets.items()]}])
        for p in offsets:  # it may take effect before we hear back
            self.oracle.on_reset(group, tid, p, None)
        self.send(entity, lambda r, f, now: self._on_alter(r, group, tid, offsets),
                  f"AlterShareGroupOffsets {group} {name} {offsets}")

    def _on_alter(self, response, group: str, tid: uuid.UUID, offsets: dict[int, int]) -> None:
        if response is None:
            for p in offsets:
                self.oracle.on_reset(group, tid, p, None)
            return
        error = int(response.error_code)
        results = {p.partition_index: int(p.error_code) for t in response.responses for p in t.partitions}
        self.event(f"admin <- AlterShareGroupOffsets {group}: error {error} {results}")
        if error == NONE:
            for p, offset in offsets.items():
                if results.get(p) == NONE:
                    self.oracle.on_reset(group, tid, p, offset)
            self.sim.paused_groups.pop(group, None)

    def delete_offsets(self, group: str) -> None:
        topics = self._group_topics(group)
        if not topics:
            return
        name, tid, n = self.rng.choice(topics)
        entity = req(92, 0, group_id=group, topics=[{"topic_name": name}])
        for p in range(n):
            self.oracle.on_reset(group, tid, p, None)
        self.send(entity, lambda r, f, now: self._on_delete_offsets(r, group, tid, n),
                  f"DeleteShareGroupOffsets {group} {name}")

    def _on_delete_offsets(self, response, group: str, tid: uuid.UUID, n: int) -> None:
        if response is None:
            for p in range(n):
                self.oracle.on_reset(group, tid, p, None)
            return
        error = int(response.error_code)
        results = [int(t.error_code) for t in response.responses]
        self.event(f"admin <- DeleteShareGroupOffsets {group}: error {error} {results}")
        if error == NONE and all(e == NONE for e in results):
            for p in range(n):
                self.oracle.on_reset(group, tid, p, 0)  # share.auto.offset.reset=earliest: from the start again
            self.sim.paused_groups.pop(group, None)
        elif error == NONE:
            for p in range(n):
                self.oracle.on_reset(group, tid, p, None)

    # -- group configs
    def group_config_entity(self, group: str, lock_ms: int, limit: int, extra: list[tuple[str, str]] = ()):
        configs = [("share.record.lock.duration.ms", str(lock_ms)), ("share.delivery.count.limit", str(limit)),
                   ("share.auto.offset.reset", "earliest"), *extra]
        return req(44, 1, resources=[{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in configs]}], validate_only=False), dict(configs)

    def alter_group_config(self, group: str) -> None:
        lock_ms = self.rng.choice(self.sim.lock_choices)
        limit = self.rng.choice((2, 3, 4, 5))
        entity, configs = self.group_config_entity(group, lock_ms, limit)
        # the broker may apply it before we hear back: from now on either value may be in force
        self.oracle.on_group_config(group, lock_ms, limit, certain=False)
        for key in configs:
            self.oracle.groups[group].configs_acked.pop(key, None)
        self.send(entity, lambda r, f, now: self.on_group_config(r, group, lock_ms, limit, configs),
                  f"IncrementalAlterConfigs group {group} lock {lock_ms} limit {limit}")

    def on_group_config(self, response, group: str, lock_ms: int, limit: int, configs: dict) -> bool:
        model = self.oracle.groups[group]
        ok = response is not None and all(int(r.error_code) == NONE for r in response.responses)
        self.event(f"admin <- IncrementalAlterConfigs {group}: {'ok' if ok else 'failed or unknown'}")
        if ok:
            self.oracle.on_group_config(group, lock_ms, limit, certain=True)
            model.configs_acked.update(configs)
        else:
            self.oracle.on_group_config(group, lock_ms, limit, certain=False)
            for key in configs:
                model.configs_acked.pop(key, None)
        return ok
