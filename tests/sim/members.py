"""Consumer groups in the simulation (KIP-848): members that heartbeat, own partitions, commit and
fetch offsets, leave, crash and rejoin; and what the oracle checks of them.

A `Member` speaks ConsumerGroupHeartbeat v1 (its own member id, the owned partitions it reports,
rebalance timeout 60 s), OffsetFetch v9 (with its member id and epoch) when it is given a
partition, and OffsetCommit v9 (member epoch as the generation) of positions that only move
forward. It adopts an assignment at once: revoked partitions are dropped before the next heartbeat
reports them gone, as Kafka's consumer does (`ConsumerMembershipManager`). After a heartbeat that
failed or was refused, it sends a full one (every field), whose answer carries the assignment
again (see `Member.heartbeat`). A member "crashes"
(the client process dies: it forgets its id and partitions, and rejoins later as a new member;
the broker expires the old one after the session timeout).

Invariants (`GroupLedger`):

- ``partition-owned-twice``: a member is given a partition that another member of the group still
  owns, while that member's session is valid — its last successful heartbeat was sent less than the
  session timeout ago, and it has not left (Kafka's coordinator gives a partition only once its
  owner revoked it or was fenced: `CurrentAssignmentBuilder`; on loading a group it restarts every
  member's session timer, `GroupMetadataManager.onLoaded`, so a crash does not shorten a session);
- ``committed-offset-lost``: OffsetFetch shows no committed offset, or one that was never committed,
  although a commit was answered NONE before the fetch was sent;
- ``committed-offset-backwards``: OffsetFetch shows a value that an acknowledged commit superseded
  (a commit answered NONE that was sent after the older one was answered) — there is no reset in
  the simulation, so committed offsets move only by commits;
- ``partition-never-assigned``: after the drain (no faults, members heartbeating), the members'
  assignments do not cover every partition of the topics the group subscribes to.

A commit whose answer never came (broker crash, dropped connection) may or may not have been
applied, and commits in flight together may be applied in either order: the ledger allows every
value not superseded (see `CommitLog.allowed`).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .actors import FENCED_MEMBER_EPOCH, NONE, UNKNOWN_MEMBER_ID, Actor, ms, req, td_ms
from .oracle import Violation

if TYPE_CHECKING:
    from .runner import Simulation

SESSION_TIMEOUT_MS = 45_000  # group.consumer.session.timeout.ms (the broker's default)
REBALANCE_TIMEOUT_MS = 60_000
SESSION_SLACK_MS = 50
ANY = object()  # a committed offset the ledger cannot know (the topic was deleted)


# ----------------------------------------------------------------------------- the oracle's side


@dataclass
class Commit:
    value: object  # int, or ANY
    sent_seq: int
    done_seq: int | None = None  # when its answer (or its loss) was seen
    acked: bool | None = None  # True: answered NONE; False: refused; None: unknown or pending


@dataclass
class CommitLog:
    """The commits of one (group, topic name, partition), in the order they were sent."""

    commits: list[Commit] = field(default_factory=list)
    superseded: set = field(default_factory=set)  # values an acknowledged commit replaced

    def allowed(self, fetch_sent_seq: int) -> tuple[list[object], bool]:
        """The values an OffsetFetch sent at `fetch_sent_seq` may show, and whether "no offset"
        may be shown. A commit is ruled out by an acknowledged commit that was sent after it was
        answered, when that one was answered before the fetch was sent."""
        floors = [c.sent_seq for c in self.commits if c.acked and c.done_seq is not None
                  and c.done_seq < fetch_sent_seq]
        floor = max(floors, default=None)
        values = [c.value for c in self.commits if c.acked is not False
                  and (floor is None or c.done_seq is None or c.done_seq > floor or c.sent_seq >= floor)]
        return values, floor is None

    def prune(self) -> None:
        """Forget commits that no later fetch can show."""
        acked = [c for c in self.commits if c.acked and c.done_seq is not None]
        if not acked:
            return
        floor = max(c.sent_seq for c in acked)
        keep = []
        for c in self.commits:
            if c.acked is False:
                continue
            if c.done_seq is not None and c.done_seq < floor and c.sent_seq < floor:
                if c.value is not ANY:
                    self.superseded.add(c.value)
                continue
            keep.append(c)
        self.commits = keep


@dataclass
class GroupModel:
    name: str
    topics: list[str]
    logs: dict[tuple[str, int], CommitLog] = field(default_factory=dict)

    def log(self, topic: str, partition: int) -> CommitLog:
        key = (topic, partition)
        got = self.logs.get(key)
        if got is None:
            got = self.logs[key] = CommitLog()
        return got


class GroupLedger:
    """What consumer-group members were told, and the invariants over it."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.world = sim.world
        self.oracle = sim.oracle
        self.groups: dict[str, GroupModel] = {}
        self.members: list[Member] = []
        self.seq = 0
        self.commits_acked = 0
        self.oracle.topic_hooks.append(self)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # -- commits
    def on_commit_sent(self, group: str, topic: str, partition: int, value: int) -> Commit:
        commit = Commit(value, self.next_seq())
        self.groups[group].log(topic, partition).commits.append(commit)
        return commit

    def on_commit_done(self, group: str, topic: str, partition: int, commit: Commit, acked: bool | None) -> None:
        commit.done_seq = self.next_seq()
        commit.acked = acked
        if acked:
            self.commits_acked += 1
            self.groups[group].log(topic, partition).prune()

    def on_topic_gone(self, name: str) -> None:
        """A topic is (maybe) deleted: its committed offsets may be gone or kept; until a commit
        answered after it comes back, any value may be shown."""
        for group in self.groups.values():
            for (topic, partition), log in group.logs.items():
                if topic == name:
                    log.commits.append(Commit(ANY, self.next_seq()))

    def on_topic_created(self, name: str) -> None:
        seq = self.next_seq()
        for group in self.groups.values():
            for (topic, _p), log in group.logs.items():
                if topic == name:
                    for c in log.commits:
                        if c.value is ANY and c.done_seq is None:
                            c.done_seq = seq

    def check_fetched(self, group: str, topic: str, partition: int, shown: int, fetch_sent_seq: int,
                      who: str) -> None:
        if topic in self.oracle.uncertain_topics or not any(t.name == topic for t in self.oracle.topics.values()):
            return
        log = self.groups[group].log(topic, partition)
        values, none_ok = log.allowed(fetch_sent_seq)
        if ANY in values or shown in values or (shown < 0 and none_ok):
            return
        where = f"consumer group {group} {topic}-{partition}"
        known = sorted(v for v in values if isinstance(v, int))
        if shown in log.superseded:
            raise Violation("committed-offset-backwards",
                            f"{where}: OffsetFetch by {who} shows {shown}, which a later acknowledged commit "
                            f"replaced; it may show only {known}")
        raise Violation("committed-offset-lost",
                        f"{where}: OffsetFetch by {who} shows {shown if shown >= 0 else 'no offset'}; an "
                        f"acknowledged commit was answered before it was sent, and it may show only {known}")

    # -- ownership
    def on_assigned(self, member: "Member", new: set[tuple[uuid.UUID, int]], now_ms: int) -> None:
        for other in self.members:
            if other is member or other.group != member.group or not other.session_valid(now_ms):
                continue
            both = new & other.owned
            if both:
                tid, p = sorted(both, key=lambda k: (str(k[0]), k[1]))[0]
                raise Violation("partition-owned-twice",
                                f"consumer group {member.group}: {member.name} (epoch {member.epoch}) is given "
                                f"{self.oracle.topic_name(tid)}-{p}, which {other.name} (epoch {other.epoch}) still "
                                f"owns; its last heartbeat answered NONE was sent at "
                                f"{other.last_ok_sent_ms / 1000.0:.3f}s (session {SESSION_TIMEOUT_MS} ms)")

    def subscribed_partitions(self, group: str) -> set[tuple[uuid.UUID, int]]:
        topics = self.groups[group].topics
        return {(t.topic_id, p) for t in self.oracle.topics.values() if t.name in topics
                for p in range(t.partitions)}

    def converged(self, group: str) -> bool:
        owned: set = set()
        for m in self.members:
            if m.group == group and m.joined:
                owned |= m.owned
        return owned == self.subscribed_partitions(group) and not self.oracle.uncertain_topics

    def check_drained(self, group: str) -> None:
        wanted = self.subscribed_partitions(group)
        owned: set = set()
        for m in self.members:
            if m.group == group and m.joined:
                owned |= m.owned
        missing = wanted - owned
        if missing:
            names = sorted(f"{self.oracle.topic_name(t)}-{p}" for t, p in missing)
            raise Violation("partition-never-assigned",
                            f"consumer group {group}: after the drain, {', '.join(names)} of its subscribed topics "
                            f"are assigned to no member (members: "
                            f"{', '.join(f'{m.name} epoch {m.epoch} joined {m.joined}' for m in self.members if m.group == group)})")


# ----------------------------------------------------------------------------- the actor


class Member(Actor):
    """A KIP-848 consumer-group member."""

    kind = "member"

    def __init__(self, sim: "Simulation", name: str, group: str, topics: list[str]) -> None:
        super().__init__(sim, name)
        self.ledger: GroupLedger = sim.groups_ledger
        self.group = group
        self.topics = topics
        self.member_id = ""
        self.epoch = 0
        self.joined = False
        self.owned: set[tuple[uuid.UUID, int]] = set()
        self.positions: dict[tuple[uuid.UUID, int], int] = {}
        self.last_ok_sent_ms = -10**12
        self.hb_interval_ms = 5000
        self.next_hb_ms = 0
        self.rejoin_at_step = 0
        self.report_owned = True
        self.full_request = True  # the next heartbeat sends every field (see heartbeat)
        self.assignor: str | None = None
        self.draining = False
        self.pending_fetch: list | None = None
        self._new_identity()

    def _new_identity(self) -> None:
        self.member_id = base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()
        self.epoch = 0
        self.joined = False
        self.owned = set()
        self.positions = {}
        self.full_request = True

    def session_valid(self, now_ms: int) -> bool:
        return self.joined and bool(self.owned) and now_ms < self.last_ok_sent_ms + SESSION_TIMEOUT_MS - SESSION_SLACK_MS

    # -- choosing what to do
    def act(self) -> None:
        rng = self.rng
        now = self.world.now_ms()
        if self.pending_fetch and self.before_act():
            return
        if not self.joined:
            if self.world.step >= self.rejoin_at_step:
                self.heartbeat()
            return
        if now >= self.next_hb_ms and (self.draining or rng.random() < 0.9):
            self.heartbeat()
            return
        if self.draining:
            if self.owned and rng.random() < 0.3:
                self.commit()
            return
        x = rng.random()
        if x < 0.5 and self.owned:
            self.commit()
        elif x < 0.6 and self.owned:
            self.fetch_offsets(sorted(self.owned, key=lambda k: (str(k[0]), k[1])))
        elif x < 0.62:
            self.world.event(f"{self.name} leaves consumer group {self.group}")
            self.owned = set()  # a leaving consumer stops consuming first
            self.heartbeat(leave=True)
            self.rejoin_at_step = self.world.step + rng.randint(3, 40)
        elif x < 0.64:
            self.world.event(f"{self.name} crashes (its consumer process dies); member {self.member_id} is left "
                             f"to expire")
            if self.conn is not None:
                self.conn.drop()
            self.conn = None
            self._new_identity()
            self.rejoin_at_step = self.world.step + rng.randint(3, 60)
        else:
            self.heartbeat()

    # -- heartbeats
    def heartbeat(self, leave: bool = False) -> None:
        """A heartbeat sends only what changed since the last one, except for a full request (every
        field: rebalance timeout, subscription, assignor, owned partitions) when joining and after a
        heartbeat that failed or was answered with an error: the answer to a full request carries
        the assignment again (GroupMetadataManager.consumerGroupHeartbeat), so a revocation whose
        answer was lost is learned then. Kafka's consumer does the same: AbstractHeartbeatRequestManager
        onFailure / onErrorResponse call resetHeartbeatState, which clears
        ConsumerHeartbeatRequestManager.HeartbeatState's sent fields."""
        epoch = -1 if leave else (self.epoch if self.joined else 0)
        joining = epoch == 0
        if joining:
            self.assignor = self.rng.choice((None, None, "uniform", "range"))
        full = joining or (self.full_request and not leave)
        owned = None
        if full or self.report_owned or self.rng.random() < 0.3:
            by_topic: dict[uuid.UUID, list[int]] = {}
            for tid, p in sorted(self.owned, key=lambda k: (str(k[0]), k[1])):
                by_topic.setdefault(tid, []).append(p)
            owned = [{"topic_id": t, "partitions": tuple(ps)} for t, ps in by_topic.items()]
        topics = list(self.topics) if full or self.rng.random() < 0.1 else None
        entity = req(68, 1, group_id=self.group, member_id=self.member_id, member_epoch=epoch, instance_id=None,
                     rack_id=None, rebalance_timeout=ms(REBALANCE_TIMEOUT_MS if full else -1),
                     subscribed_topic_names=topics, subscribed_topic_regex=None,
                     server_assignor=self.assignor if full else None, topic_partitions=owned)
        sent_ms = self.world.now_ms()
        member_id = self.member_id
        self.report_owned = False
        if not leave:
            self.full_request = False
        resent = full and not joining
        self.send(entity, lambda r, f, now: self._on_heartbeat(r, f, now, epoch, sent_ms, member_id, resent),
                  f"ConsumerGroupHeartbeat {self.group} epoch {epoch}")

    def _on_heartbeat(self, response, failure, now_ms, sent_epoch, sent_ms, member_id, resent=False) -> None:
        if member_id != self.member_id:
            return  # an answer to the process that crashed
        if response is None:
            self.report_owned = True
            self.full_request = True
            return
        error = int(response.error_code)
        if sent_epoch == -1:
            if error == NONE:
                self.joined = False
                self.epoch = 0
                self.event(f"{self.name} <- left consumer group {self.group}")
            return
        if error == NONE:
            self.joined = True
            self.epoch = response.member_epoch
            self.last_ok_sent_ms = sent_ms
            self.hb_interval_ms = max(td_ms(response.heartbeat_interval), 100)
            self.next_hb_ms = now_ms + self.hb_interval_ms
            if response.assignment is not None:
                target = {(tp.topic_id, p) for tp in response.assignment.topic_partitions for p in tp.partitions}
                new = target - self.owned
                revoked = self.owned - target
                if resent and (new or revoked):  # what a lost answer said, learned from the full request's
                    self.world.stats["consumer assignment changes answered to a full heartbeat after a lost one"] += 1
                self.owned = target
                for key in revoked:
                    self.positions.pop(key, None)
                self.report_owned = True
                self.event(f"{self.name} <- consumer heartbeat epoch {self.epoch} owns "
                           f"{sorted(f'{self.oracle.topic_name(t)}-{p}' for t, p in target)}")
                if new:
                    self.ledger.on_assigned(self, new, now_ms)
                    self.fetch_offsets(sorted(new, key=lambda k: (str(k[0]), k[1])), defer=True)
            else:
                self.event(f"{self.name} <- consumer heartbeat epoch {self.epoch}")
        elif error in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.event(f"{self.name} <- consumer heartbeat error {error}: rejoin with its partitions dropped")
            self.joined = False
            self.epoch = 0
            self.owned = set()
            self.positions = {}
        else:
            self.report_owned = True
            self.full_request = True
            self.event(f"{self.name} <- consumer heartbeat error {error}")

    # -- offsets
    def _topic(self, tid: uuid.UUID):
        t = self.oracle.topics.get(tid)
        if t is None or t.name in self.oracle.uncertain_topics:
            return None
        return t

    def fetch_offsets(self, keys: list[tuple[uuid.UUID, int]], defer: bool = False) -> None:
        if defer:
            self.pending_fetch = keys  # sent at the next act (one request in flight per connection)
            return
        by_name: dict[str, list[int]] = {}
        for tid, p in keys:
            t = self._topic(tid)
            if t is not None:
                by_name.setdefault(t.name, []).append(p)
        if not by_name:
            return
        entity = req(9, 9, groups=[{"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                                    "topics": [{"name": n, "partition_indexes": tuple(ps)}
                                               for n, ps in sorted(by_name.items())]}], require_stable=False)
        sent_seq = self.ledger.next_seq()
        self.send(entity, lambda r, f, now: self._on_fetch_offsets(r, sent_seq), f"OffsetFetch {self.group} {by_name}")

    def _on_fetch_offsets(self, response, sent_seq) -> None:
        if response is None:
            return
        g = response.groups[0]
        if int(g.error_code) != NONE:
            self.event(f"{self.name} <- OffsetFetch error {int(g.error_code)}")
            return
        shown = []
        for t in g.topics:
            tid = next((x.topic_id for x in self.oracle.topics.values() if x.name == t.name), None)
            for p in t.partitions:
                if int(p.error_code) != NONE:
                    continue
                shown.append(f"{t.name}-{p.partition_index}@{p.committed_offset}")
                self.ledger.check_fetched(self.group, t.name, p.partition_index, p.committed_offset, sent_seq,
                                          self.name)
                key = (tid, p.partition_index)
                if key in self.owned and key not in self.positions:
                    self.positions[key] = max(p.committed_offset, 0)
        self.event(f"{self.name} <- OffsetFetch {' '.join(shown)}")

    def commit(self) -> None:
        chosen = []
        for key in sorted(self.owned, key=lambda k: (str(k[0]), k[1])):
            t = self._topic(key[0])
            if t is None or self.rng.random() < 0.3:
                continue
            pos = self.positions.get(key, 0)
            end = max(t.acked[key[1]], default=-1) + 1
            value = max(pos, min(end, pos + self.rng.randint(0, 6)))
            self.positions[key] = value
            chosen.append((t.name, key[1], value))
        if not chosen:
            return
        by_name: dict[str, list[tuple[int, int]]] = {}
        for name, p, value in chosen:
            by_name.setdefault(name, []).append((p, value))
        entity = req(8, 9, group_id=self.group, generation_id_or_member_epoch=self.epoch, member_id=self.member_id,
                     group_instance_id=None, topics=[{"name": n, "partitions": [
                         {"partition_index": p, "committed_offset": v, "committed_leader_epoch": -1,
                          "committed_metadata": ""} for p, v in ps]} for n, ps in sorted(by_name.items())])
        commits = {(name, p): self.ledger.on_commit_sent(self.group, name, p, value) for name, p, value in chosen}
        self.send(entity, lambda r, f, now: self._on_commit(r, commits),
                  f"OffsetCommit {self.group} epoch {self.epoch} {by_name}")

    def _on_commit(self, response, commits) -> None:
        if response is None:
            for (name, p), c in commits.items():
                self.ledger.on_commit_done(self.group, name, p, c, None)
            return
        results = {(t.name, p.partition_index): int(p.error_code) for t in response.topics for p in t.partitions}
        for (name, p), c in commits.items():
            error = results.get((name, p))
            # an error may come after the append (a failed fsync): the outcome is unknown
            self.ledger.on_commit_done(self.group, name, p, c, True if error == NONE else None)
        self.event(f"{self.name} <- OffsetCommit {results}")

    def before_act(self) -> bool:
        """Send an OffsetFetch deferred from an assignment; True when it did."""
        keys, self.pending_fetch = self.pending_fetch, None
        if keys:
            keys = [k for k in keys if k in self.owned]
            if keys:
                self.fetch_offsets(keys)
                return True
        return False
