"""What the clients were told, and the invariants that must hold of it.

The oracle knows only what a client could know: which produces were acknowledged (and the offsets
they got), which acknowledgements were answered with success, what each ShareFetch delivered
(offset, delivery count, to whom, at what time), which admin operations succeeded. A broker crash
is an event it sees (the connection drops). Every check raises `Violation` with the name of the
invariant:

- ``acked-record-lost``: a record whose produce was acknowledged is missing from a full Fetch
  (after a restart, and at the end);
- ``duplicate-record``: an idempotent producer's batch (producer id, sequence) is stored twice;
- ``idempotence-refused``: the broker refused the retry of a batch whose predecessor it
  acknowledged (it forgot the producer's sequence);
- ``redelivered-after-ack``: a record whose ACCEPT or REJECT was acknowledged (or whose RELEASE at
  the delivery limit was, which archives it) is delivered again to the group;
- ``delivery-count-limit``: a record is delivered with a count above the group's limit;
- ``delivery-count-regressed``: within one broker incarnation a record's delivery count did not
  grow between two deliveries (acquisitions are not persisted, so across a crash it may repeat);
- ``archived-returned``: a record abandoned at the delivery limit, whose lock expired with no crash
  since, is delivered again;
- ``locked-record-redelivered``: a record is delivered to another consumer while its lock (as the
  broker announced: AcquisitionLockTimeoutMs, renewals) still holds and its holder kept its session;
- ``start-offset-backwards``: DescribeShareGroupOffsets shows a start offset below one it showed
  before, with no admin reset in between (this includes "state replayed after a crash differs from
  what was answered before it");
- ``share-state-lost``: a share partition that had state answers "no state" without a reset;
- ``start-offset-passed-locked``: the start offset moved past a record still validly locked;
- ``topic-lost`` / ``topic-resurrected`` / ``config-lost``: metadata answered before a crash is
  different after it;
- ``record-never-delivered``: at the end, after draining, an acknowledged record at or above the
  group's start was never delivered to a group subscribed to its topic (the value delivered at its
  offset must be its own: an unacknowledged record cut by a power loss may have been there);
- ``start-offset-beyond-log-end``: a share partition's start offset above its log's high watermark;
- ``delivery-count-skipped``: a delivery count more than one above the last one a client
  received, in one incarnation.

Consumer groups' invariants are in members.py, the DLQ's in dead_letters.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
ACK_NAMES = {0: "GAP", 1: "ACCEPT", 2: "RELEASE", 3: "REJECT", 4: "RENEW"}
# Invariants of issue 28's fixes still in progress: counted (Result.pending) instead of failing the
# run, unless named in Simulation(pending_checks=...) / `--check NAME`. Move one out once its fix is in.
PENDING: dict[str, str] = {}  # invariant -> the finding it waits for (none at present)
LOCK_SLACK_MS = 5  # the client sees the answer at the virtual time the broker acquired; leave a little


class Violation(Exception):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message


@dataclass
class Hold:
    consumer: str
    count: int
    deadline_ms: int
    incarnation: int
    conn_gen: int  # the holder's connection generation when delivered
    config_gen: int
    limit: int  # the group's delivery limit when delivered
    acking: bool = False  # the holder sent an acknowledgement for it, not answered yet
    seq: int = 0  # the oracle's event number when this delivery was seen


@dataclass
class PartModel:
    finished: dict[int, str] = field(default_factory=dict)  # offset -> how (accepted, rejected, archived)
    holds: dict[int, Hold] = field(default_factory=dict)
    last_count: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (count, incarnation)
    expired_at_limit: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # -> (deadline, incarnation, config gen)
    delivered: dict[int, bytes | None] = field(default_factory=dict)  # offset -> the value delivered there
    base: int | None = 0  # the group starts here (earliest); None: unknown (drain check off)
    min_start: int | None = None  # the highest start offset described since the last reset
    resets: int = 0  # admin resets (sent or answered) since the start

    def reset(self, start: int | None) -> None:
        self.resets += 1
        self.finished.clear()
        self.holds.clear()
        self.last_count.clear()
        self.expired_at_limit.clear()
        self.delivered.clear()
        self.base = start
        self.min_start = None


@dataclass
class GroupModel:
    name: str
    topics: list[str]
    lock_ms: int
    limit: int
    max_limit: int
    config_gen: int = 0
    lock_uncertain: bool = False
    config_changes: list[tuple[int, int]] = field(default_factory=list)  # (virtual ms, new config gen)
    parts: dict[tuple[uuid.UUID, int], PartModel] = field(default_factory=dict)
    configs_acked: dict[str, str] = field(default_factory=dict)

    def part(self, topic_id: uuid.UUID, partition: int) -> PartModel:
        key = (topic_id, partition)
        model = self.parts.get(key)
        if model is None:
            model = self.parts[key] = PartModel()
        return model


@dataclass
class TopicModel:
    name: str
    topic_id: uuid.UUID
    partitions: int
    acked: list[dict[int, tuple[bytes, int, int]]] = field(default_factory=list)  # offset -> (value, pid, seq)


class Oracle:
    def __init__(self, world) -> None:
        self.world = world
        self.topics: dict[uuid.UUID, TopicModel] = {}  # live topics by id (as acknowledged)
        self.deleted_ids: set[uuid.UUID] = set()
        self.uncertain_topics: set[str] = set()  # names whose create/delete outcome is unknown
        self.groups: dict[str, GroupModel] = {}
        self.incarnation = 0
        self.acked_records = 0
        self.seq = 0  # numbers deliveries and acknowledgements sent, in the order the clients saw them
        self.topic_hooks: list = []  # on_topic_created(name), on_topic_gone(name): consumer groups' ledger
        self.pending_checks: frozenset[str] = frozenset()  # PENDING invariants to enforce (else counted)
        self.pending_seen: dict[str, str] = {}  # PENDING invariant -> its first violation (not enforced)

    # ------------------------------------------------------------------ helpers
    def _fail(self, invariant: str, message: str) -> None:
        if invariant in PENDING and invariant not in self.pending_checks:
            self.pending_seen.setdefault(invariant, f"step {self.world.step}: {message}")
            self.world.stats["pending: " + invariant] += 1
            return
        raise Violation(invariant, message)

    def topic_name(self, topic_id: uuid.UUID) -> str:
        t = self.topics.get(topic_id)
        return t.name if t else str(topic_id)[:8]

    # ------------------------------------------------------------------ crashes
    def on_restart(self) -> None:
        self.incarnation += 1

    # ------------------------------------------------------------------ topics
    def on_topic_created(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        self.topics[topic_id] = TopicModel(name, topic_id, partitions, [{} for _ in range(partitions)])
        self.uncertain_topics.discard(name)
        for hook in self.topic_hooks:
            hook.on_topic_created(name)

    def on_topic_deleted(self, topic_id: uuid.UUID) -> None:
        gone = self.topics.pop(topic_id, None)
        if gone is not None:
            for hook in self.topic_hooks:
                hook.on_topic_gone(gone.name)
        self.deleted_ids.add(topic_id)
        for group in self.groups.values():
            for key in [k for k in group.parts if k[0] == topic_id]:
                del group.parts[key]

    def check_metadata(self, listed: dict[str, tuple[uuid.UUID, int]]) -> None:
        """After a restart: every topic created (answered) and not deleted is there, unchanged."""
        for topic in self.topics.values():
            if topic.name in self.uncertain_topics:
                continue
            got = listed.get(topic.name)
            if got is None or got[0] != topic.topic_id:
                self._fail("topic-lost", f"topic {topic.name} ({topic.topic_id}) was created, answered, not deleted; "
                                         f"metadata now shows {got}")
            if got[1] != topic.partitions:
                self._fail("topic-lost", f"topic {topic.name} had {topic.partitions} partitions, now {got[1]}")
        for name, (topic_id, _n) in listed.items():
            if topic_id in self.deleted_ids and name not in self.uncertain_topics:
                self._fail("topic-resurrected", f"topic {name} ({topic_id}) was deleted (answered) but is back")

    # ------------------------------------------------------------------ produce
    def on_produce_acked(self, topic_id: uuid.UUID, partition: int, base_offset: int, values: list[bytes],
                         pid: int, seq: int) -> None:
        topic = self.topics.get(topic_id)
        if topic is None:
            return
        acked = topic.acked[partition]
        for i, value in enumerate(values):
            offset = base_offset + i
            prior = acked.get(offset)
            if prior is not None and prior[0] != value:
                self._fail("acked-record-lost", f"{topic.name}-{partition} offset {offset} was acknowledged for "
                                                f"{prior[0]!r}, now acknowledged again for {value!r}")
            acked[offset] = (value, pid, seq + i)
            self.acked_records += 1
            for group in self.groups.values():
                part = group.parts.get((topic_id, partition))
                if part is not None and offset in part.delivered and part.delivered[offset] != value:
                    # an unacknowledged record delivered here was lost (power loss); this one replaced it
                    part.delivered.pop(offset)
                    part.finished.pop(offset, None)
                    part.holds.pop(offset, None)
                    part.last_count.pop(offset, None)
                    part.expired_at_limit.pop(offset, None)

    def check_log(self, topic_id: uuid.UUID, partition: int, records: dict[int, tuple[bytes, int, int]]) -> None:
        """A full Fetch of the partition: every acknowledged record is there at its offset, and no
        (producer id, sequence) is stored twice."""
        topic = self.topics.get(topic_id)
        if topic is None:
            return
        for offset, (value, _pid, _seq) in sorted(topic.acked[partition].items()):
            got = records.get(offset)
            if got is None or got[0] != value:
                self._fail("acked-record-lost", f"{topic.name}-{partition} offset {offset}: produce of {value!r} was "
                                                f"acknowledged, a full Fetch finds {got[0] if got else None!r}")
        seen: dict[tuple[int, int], int] = {}
        for offset, (_value, pid, seq) in sorted(records.items()):
            if pid < 0 or seq < 0:
                continue
            if (pid, seq) in seen:
                self._fail("duplicate-record", f"{topic.name}-{partition}: producer {pid} sequence {seq} is stored at "
                                               f"offsets {seen[(pid, seq)]} and {offset}")
            seen[(pid, seq)] = offset

    # ------------------------------------------------------------------ groups
    def add_group(self, name: str, topics: list[str], lock_ms: int, limit: int) -> GroupModel:
        group = self.groups[name] = GroupModel(name, topics, lock_ms, limit, limit)
        return group

    def on_group_config(self, name: str, lock_ms: int | None, limit: int | None, *, certain: bool) -> None:
        group = self.groups[name]
        group.config_gen += 1
        group.config_changes.append((self.world.now_ms(), group.config_gen))
        if limit is not None:
            group.max_limit = max(group.max_limit, limit)
            # uncertain: the old or the new limit; infer archiving only at the higher one
            group.limit = limit if certain else max(group.limit, limit)
        if lock_ms is not None:
            group.lock_ms = lock_ms if certain else min(group.lock_ms, lock_ms)
        group.lock_uncertain = not certain

    def on_delivered(self, group_name: str, consumer: str, conn_gen: int, topic_id: uuid.UUID, partition: int,
                     offset: int, count: int, now_ms: int, lock_ms: int, config_gen: int) -> None:
        """`config_gen`: the group's config generation when the ShareFetch was sent (a config change
        while it was parked makes the lock it reports uncertain)."""
        group = self.groups[group_name]
        if topic_id not in self.topics:
            return
        part = group.part(topic_id, partition)
        where = f"{group_name} {self.topic_name(topic_id)}-{partition} offset {offset}"
        if count < 1 or count > group.max_limit:
            self._fail("delivery-count-limit", f"{where} delivered to {consumer} with delivery count {count}; "
                                               f"the group's limit is {group.limit} (highest ever {group.max_limit})")
        how = part.finished.get(offset)
        if how is not None:
            self._fail("redelivered-after-ack", f"{where} delivered to {consumer} (count {count}) after it was {how}")
        expired = part.expired_at_limit.get(offset)
        if expired is not None and expired[1] == self.incarnation and now_ms > expired[0] + LOCK_SLACK_MS \
                and not any(gen > expired[2] and at <= expired[0] + LOCK_SLACK_MS for at, gen in group.config_changes):
            self._fail("archived-returned", f"{where} delivered to {consumer} (count {count}); it was abandoned at the "
                                            f"delivery limit and its lock expired at {expired[0]} with no crash since")
        hold = part.holds.get(offset)
        if hold is not None and self._hold_valid(group, hold) and now_ms < hold.deadline_ms - LOCK_SLACK_MS:
            self._fail("locked-record-redelivered",
                       f"{where} delivered to {consumer} (count {count}) at {now_ms} while {hold.consumer} holds its "
                       f"lock until {hold.deadline_ms} (delivered with count {hold.count})")
        last = part.last_count.get(offset)
        if last is not None and last[1] == self.incarnation and count <= last[0]:
            self._fail("delivery-count-regressed", f"{where} delivered to {consumer} with count {count}; "
                                                   f"it was delivered before with count {last[0]} (same incarnation)")
        if last is not None and last[1] == self.incarnation and count > last[0] + 1:
            self._fail("delivery-count-skipped", f"{where} delivered to {consumer} with count {count}; the last "
                                                 f"delivery any client received had count {last[0]} (same "
                                                 f"incarnation): a delivery nobody received was counted")
        part.last_count[offset] = (count, self.incarnation)
        part.expired_at_limit.pop(offset, None)
        part.delivered[offset] = None  # the value follows (on_delivered_value)
        self.seq += 1
        part.holds[offset] = Hold(consumer, count, now_ms + lock_ms, self.incarnation, conn_gen,
                                  config_gen if config_gen == group.config_gen else -1, group.limit, seq=self.seq)

    def on_delivery_unread(self, group_name: str, topic_id: uuid.UUID, partition: int, offset: int,
                           count: int) -> None:
        """The broker answered a ShareFetch with this delivery, but the client dropped its connection
        before reading the answer: the delivery was made (its count is the last one), nobody holds it."""
        part = self.groups[group_name].part(topic_id, partition)
        last = part.last_count.get(offset)
        if last is None or last[1] != self.incarnation or count > last[0]:
            part.last_count[offset] = (count, self.incarnation)

    def on_delivered_value(self, topic_id: uuid.UUID, partition: int, offset: int, value: bytes | None,
                           present: bool, group_name: str | None = None) -> None:
        """The record the ShareFetch returned for an acquired offset is the one produced there."""
        topic = self.topics.get(topic_id)
        if topic is None:
            return
        if group_name is not None:
            self.groups[group_name].part(topic_id, partition).delivered[offset] = value
        where = f"{topic.name}-{partition} offset {offset}"
        if not present:
            self._fail("acquired-without-record", f"{where} was acquired but the returned batches do not hold it")
        acked = topic.acked[partition].get(offset)
        if acked is not None and acked[0] != value:
            self._fail("wrong-record-delivered", f"{where}: delivered {value!r}, the produce acknowledged there was "
                                                 f"{acked[0]!r}")

    def _hold_valid(self, group: GroupModel, hold: Hold) -> bool:
        consumer = self.world.consumers_by_name.get(hold.consumer)
        return (hold.incarnation == self.incarnation and consumer is not None and not hold.acking
                and consumer.conn_gen == hold.conn_gen and hold.config_gen == group.config_gen)

    def on_ack_sent(self, group_name: str, consumer: str, topic_id: uuid.UUID, partition: int,
                    offsets: list[int]) -> int:
        """An acknowledgement is on its way: until its answer, the broker may already have applied it
        (and handed the record to someone else, or moved the start offset past it). Returns the
        event number to give `on_acked`."""
        self.seq += 1
        part = self.groups[group_name].parts.get((topic_id, partition))
        if part is None:
            return
        for offset in offsets:
            hold = part.holds.get(offset)
            if hold is not None and hold.consumer == consumer:
                hold.acking = True
        return self.seq

    def on_acked(self, group_name: str, consumer: str, topic_id: uuid.UUID, partition: int,
                 acks: list[tuple[int, int]], now_ms: int, sent_seq: int) -> None:
        """A successful acknowledgement of (offset, type) pairs by `consumer` (sent at event `sent_seq`)."""
        group = self.groups[group_name]
        if topic_id not in self.topics:
            return
        part = group.part(topic_id, partition)
        for offset, ack_type in acks:
            hold = part.holds.get(offset)
            if hold is not None and hold.consumer != consumer:
                # a delivery seen after the acknowledgement was sent may follow it at the broker
                if hold.seq < sent_seq and self._hold_valid(group, hold) and now_ms < hold.deadline_ms - LOCK_SLACK_MS:
                    self._fail("acked-by-non-holder",
                               f"{group_name} {self.topic_name(topic_id)}-{partition} offset {offset}: "
                               f"{ACK_NAMES[ack_type]} by {consumer} succeeded while {hold.consumer} holds its lock "
                               f"until {hold.deadline_ms}")
                hold = None
            if ack_type in (ACCEPT, REJECT):
                part.finished[offset] = f"{'accepted' if ack_type == ACCEPT else 'rejected'} by {consumer} " \
                                        f"(acknowledged at {now_ms})"
                part.holds.pop(offset, None)
            elif ack_type == RELEASE:
                part.holds.pop(offset, None)
                if hold is not None and hold.config_gen == group.config_gen and hold.count >= group.limit:
                    part.finished[offset] = f"archived: released by {consumer} at delivery count {hold.count} = " \
                                            f"limit (acknowledged at {now_ms})"
            elif ack_type == RENEW and hold is not None:
                hold.deadline_ms = now_ms + group.lock_ms
                hold.acking = False
                if group.lock_uncertain:
                    hold.config_gen = -1

    def on_abandoned(self, group_name: str, topic_id: uuid.UUID, partition: int, offset: int, consumer: str) -> None:
        """The consumer forgot a record it holds without acknowledging it: its lock will expire; at
        the delivery limit that archives it."""
        group = self.groups[group_name]
        if topic_id not in self.topics:
            return
        part = group.part(topic_id, partition)
        hold = part.holds.get(offset)
        if hold is not None and hold.consumer == consumer and hold.config_gen == group.config_gen \
                and hold.count >= group.limit and self._hold_valid(group, hold):
            part.expired_at_limit[offset] = (hold.deadline_ms, self.incarnation, group.config_gen)

    def on_release_all_sent(self, consumer: str) -> None:
        """A request that ends the consumer's share session is on its way (it releases everything)."""
        self.seq += 1
        for group in self.groups.values():
            for part in group.parts.values():
                for hold in part.holds.values():
                    if hold.consumer == consumer:
                        hold.acking = True

    def on_released_all(self, consumer: str) -> None:
        """The consumer's session ended (connection dropped, session closed): its locks are gone."""
        for group in self.groups.values():
            for part in group.parts.values():
                for offset in [o for o, h in part.holds.items() if h.consumer == consumer]:
                    del part.holds[offset]
                    part.expired_at_limit.pop(offset, None)

    def on_reset(self, group_name: str, topic_id: uuid.UUID, partition: int, start: int | None) -> None:
        """An admin reset (alter: `start`; delete: 0 with share.auto.offset.reset=earliest; unknown
        outcome: None)."""
        self.groups[group_name].part(topic_id, partition).reset(start)

    def on_start_offset(self, group_name: str, topic_id: uuid.UUID, partition: int, start: int, now_ms: int) -> None:
        group = self.groups[group_name]
        if topic_id not in self.topics:
            return
        part = group.part(topic_id, partition)
        where = f"{group_name} {self.topic_name(topic_id)}-{partition}"
        if start < 0:
            if part.min_start is not None and part.min_start >= 0:
                self._fail("share-state-lost", f"{where}: start offset {part.min_start} was described before; now the "
                                               f"share partition has no state (no reset since)")
            return
        if part.min_start is not None and start < part.min_start:  # noqa: SIM102
            self._fail("start-offset-backwards", f"{where}: start offset {start}, below {part.min_start} described "
                                                 f"before (no reset since)")
        part.min_start = start if part.min_start is None else max(part.min_start, start)
        for offset, hold in part.holds.items():
            if offset < start and self._hold_valid(group, hold) and now_ms < hold.deadline_ms - LOCK_SLACK_MS:
                self._fail("start-offset-passed-locked", f"{where}: start offset {start} is past offset {offset}, "
                                                         f"locked by {hold.consumer} until {hold.deadline_ms}")

    def check_group_configs(self, group_name: str, configs: dict[str, str]) -> None:
        group = self.groups[group_name]
        for key, value in group.configs_acked.items():
            if configs.get(key) != value:
                self._fail("config-lost", f"group {group_name}: {key}={value} was acknowledged; "
                                          f"DescribeConfigs now says {configs.get(key)!r}")

    # ------------------------------------------------------------------ the end
    def check_drained(self, group_name: str) -> None:
        group = self.groups[group_name]
        for topic in self.topics.values():
            if topic.name not in group.topics:
                continue
            for partition in range(topic.partitions):
                part = group.part(topic.topic_id, partition)
                if part.base is None:
                    continue
                missing = [o for o, (value, _pid, _seq) in sorted(topic.acked[partition].items())
                           if o >= part.base and (o not in part.delivered or part.delivered[o] != value)]
                if missing:
                    self._fail("record-never-delivered",
                               f"{group_name} {topic.name}-{partition}: acknowledged records at offsets "
                               f"{_ranges(missing)} (group start {part.base}) were never delivered, after draining")

    def undelivered(self, group_name: str) -> int:
        group = self.groups[group_name]
        count = 0
        for topic in self.topics.values():
            if topic.name not in group.topics:
                continue
            for partition in range(topic.partitions):
                part = group.part(topic.topic_id, partition)
                if part.base is None:
                    continue
                count += sum(1 for o, (value, _pid, _seq) in topic.acked[partition].items()
                             if o >= part.base and (o not in part.delivered or part.delivered[o] != value))
        return count


def _ranges(offsets: list[int]) -> str:
    out: list[str] = []
    start = prev = None
    for o in offsets:
        if start is None:
            start = prev = o
        elif o == prev + 1:
            prev = o
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = o
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out[:10]) + (" ..." if len(out) > 10 else "")
