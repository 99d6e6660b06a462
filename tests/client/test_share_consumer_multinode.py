"""ShareConsumer against a scripted three-node fake cluster (tests/client/fake_cluster.py).

What the fake checks and logs, and these tests assert:
- one share session per leader node: each node sees one ShareFetch at epoch 0 per member until a
  fault forces a new one, then epochs 1, 2, ... (ShareFetch and ShareAcknowledge alike), never two
  requests of one session in flight at once;
- faults are followed: after NOT_COORDINATOR heartbeats reach the coordinator FindCoordinator
  names; after NOT_LEADER_OR_FOLLOWER the partition is fetched from the new leader and no longer
  from the old one;
- no committed acknowledgement is lost: every acknowledgement reported as a success (commit_sync's
  None, or the acknowledgement commit callback without exception) was accepted by the fake, which
  only accepts acknowledgements at the partition's leader; every produced record is consumed and
  acknowledged in the end;
- an unreachable broker (stopped, hung, or with its sessions evicted) does not crash the consumer,
  and commit_sync reports acknowledgements it could not deliver as exceptions (retriable ones for
  an unreachable leader) within its timeout.

Each test starts its own FakeCluster (own ports, topic "t" with a fresh topic id) and consumer.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from quafka.client import AcknowledgeType, KafkaException, ShareConsumer, TopicPartition
from quafka.protocol.errors import ErrorCode

from client.fake_cluster import (
    METADATA,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
    FakeCluster,
)

TOPIC = "t"
GROUP = "multinode-group"
SESSION_REFUSAL_CODES = {int(ErrorCode.invalid_share_session_epoch), int(ErrorCode.share_session_not_found),
                         int(ErrorCode.invalid_request)}


def consumer_config(fake: FakeCluster, mode: str = "explicit", **extra) -> dict:
    config = {
        "bootstrap.servers": fake.bootstrap_servers,
        "group.id": GROUP,
        "client.id": "multinode-test",
        "share.acknowledgement.mode": mode,
        "fetch.max.wait.ms": 100,
        "request.timeout.ms": 3000,
        "default.api.timeout.ms": 5000,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 100,
    }
    config.update(extra)
    return config


class App:
    """The application's side: what it received, acknowledged, and was told about its acks."""

    def __init__(self, consumer: ShareConsumer, fake: FakeCluster, explicit: bool = True) -> None:
        self.consumer = consumer
        self.fake = fake
        self.explicit = explicit
        self.received: list = []  # every Record poll returned
        self.unsent: dict[int, dict[int, int]] = defaultdict(dict)  # partition -> offset -> type, since last call
        # (how, partition, offset, types) reported committed; the callback names offsets only, so
        # any type the application used for the offset may be the one it reports
        self.claimed: list[tuple[str, int, int, frozenset[int]]] = []
        self.failures: list[tuple[str, int, KafkaException]] = []  # (how, partition, exception)
        self.poll_errors: list[KafkaException] = []
        self.ack_type = AcknowledgeType.ACCEPT  # or a function of the record
        self.poll_overrun = 0.0  # the most any poll(timeout) took beyond its timeout, seconds
        consumer.set_acknowledgement_commit_callback(self._callback)
        self._cb_types: dict[tuple[int, int], set[int]] = defaultdict(set)  # (partition, offset) -> types used

    def _callback(self, offsets: dict, exception) -> None:
        for tp, offs in offsets.items():
            if exception is None:
                for o in offs:
                    self.claimed.append(("callback", tp.partition, o, frozenset(self._cb_types[(tp.partition, o)])))
            else:
                self.failures.append(("callback", tp.partition, exception))

    def poll(self, timeout: float = 0.1, ack=None) -> list:
        """One poll; in explicit mode every record is acknowledged with ``ack`` (a type, or a
        function of the record; None: ``self.ack_type``; False: no acknowledgement)."""
        ack = self.ack_type if ack is None else ack
        started = time.monotonic()
        try:
            records = self.consumer.poll(timeout)
        except KafkaException as exc:
            assert exc.retriable, f"poll raised a non-retriable {exc!r}"
            self.poll_errors.append(exc)
            return []
        finally:
            self.poll_overrun = max(self.poll_overrun, time.monotonic() - started - timeout)
        for p in {r.partition for r in records}:
            offsets = [r.offset for r in records if r.partition == p]
            assert offsets == sorted(set(offsets)), f"p{p}'s offsets in one poll are not increasing: {offsets}"
        # acknowledgements made before this poll were handed to it (results go to the callback)
        self.unsent.clear()
        if not self.explicit:
            for r in records:  # the next poll or commit ACCEPTs them
                self.unsent[r.partition][r.offset] = int(AcknowledgeType.ACCEPT)
                self._cb_types[(r.partition, r.offset)].add(int(AcknowledgeType.ACCEPT))
        self.received.extend(records)
        if self.explicit and ack is not False:
            for r in records:
                self.acknowledge(r, ack(r) if callable(ack) else ack)
        return records

    def acknowledge(self, record, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self.consumer.acknowledge(record, ack_type)
        self.unsent[record.partition][record.offset] = int(ack_type)
        self._cb_types[(record.partition, record.offset)].add(int(ack_type))

    def commit_sync(self, timeout: float = 3.0) -> dict:
        results = self.consumer.commit_sync(timeout)
        for tp, outcome in results.items():
            assert tp.topic == TOPIC
            assert outcome is None or isinstance(outcome, KafkaException), f"{tp}: {outcome!r}"
            if outcome is None:
                for o, t in self.unsent.get(tp.partition, {}).items():
                    self.claimed.append(("commit_sync", tp.partition, o, frozenset({t})))
            else:
                self.failures.append(("commit_sync", tp.partition, outcome))
        self.unsent.clear()
        return results

    def commit_async(self) -> None:
        self.consumer.commit_async()  # results reach the callback
        self.unsent.clear()

    def consume_until(self, condition, timeout_s: float, commit_every: int = 2, what: str = "condition",
                      async_every: int = 0) -> None:
        """Poll (acknowledging in explicit mode) until ``condition()``; every ``commit_every``-th
        poll is followed by commit_sync, every ``async_every``-th by commit_async instead."""
        deadline = time.monotonic() + timeout_s
        polls = 0
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; not acknowledged in the fake: "
                                     f"{self.fake.not_acknowledged()}\nrequests:\n"
                                     f"{self.fake.transcript(share_only=True)[-6000:]}")
            self.poll()
            polls += 1
            if async_every and polls % async_every == 0:
                self.commit_async()
            elif commit_every and polls % commit_every == 0:
                self.commit_sync()

    def offsets_received(self, partition: int) -> set[int]:
        return {r.offset for r in self.received if r.partition == partition}


# ---------------------------------------------------------------------------------------------- checks


def member_of(fake: FakeCluster) -> str:
    members = {r.member for r in fake.share_requests()} | {m for _, m in fake.members()}
    assert len(members) == 1, f"expected one member, saw {members}"
    return members.pop()


def assert_no_lost_acknowledgements(app: App, fake: FakeCluster) -> None:
    """Every acknowledgement reported as committed was accepted by the partition's leader."""
    accepted = {(a.partition, a.offset, a.type) for a in fake.accepted}
    leaders_seen = defaultdict(set)
    for a in fake.accepted:
        leaders_seen[(a.partition, a.leader_epoch)].add(a.node)
    assert all(len(nodes) == 1 for nodes in leaders_seen.values()), leaders_seen  # one leader per epoch
    lost = [c for c in app.claimed if not any((c[1], c[2], t) in accepted for t in c[3])]
    assert not lost, (f"acknowledgements reported committed but never accepted by a leader: {lost[:20]}\n"
                      f"requests:\n{fake.transcript(share_only=True)[-6000:]}")


def assert_sessions_sequential(fake: FakeCluster, member: str, restarted: dict[int, int] | None = None) -> None:
    """Per node, the member's share requests run 0, 1, 2, ... (a new 0 only starts a new session),
    -1 only closes, and none was refused for its epoch."""
    restarted = restarted or {}
    for node in fake.node_ids:
        expected = None
        for r in fake.share_requests(node=node):
            assert r.member == member
            context = f"node {node}, request #{r.seq}:\n{fake.transcript(share_only=True)[-6000:]}"
            assert r.error not in SESSION_REFUSAL_CODES, f"share session error {ErrorCode(r.error).name}; {context}"
            if restarted.get(node) is not None and r.seq > restarted[node]:
                expected = None  # the node restarted: its sessions died with its connections
                restarted[node] = None
                assert r.epoch == 0, f"first share request to restarted node {node} is not at epoch 0; {context}"
            if r.epoch == 0:
                assert r.api_key == SHARE_FETCH, f"epoch 0 on a ShareAcknowledge; {context}"
                expected = 1
            elif r.epoch == -1:
                assert expected is not None, f"epoch -1 without an open session; {context}"
                expected = None
            else:
                assert r.epoch == expected, f"epoch {r.epoch}, expected {expected}; {context}"
                expected += 1


def assert_one_request_in_flight_per_session(fake: FakeCluster) -> None:
    """No request of a share session was sent while another of the same session was unanswered
    (checked last in each test, so that the other checks run first)."""
    closing = any("epoch -1" in o for o in fake.overlaps)
    assert not fake.overlaps, ("requests of one share session were in flight together"
                               + (" (the session's close, epoch -1, was sent while its ShareFetch was still "
                                  "unanswered)" if closing else "") + ":\n" + "\n".join(fake.overlaps))


def assert_one_session_open_per_node(fake: FakeCluster, nodes, member: str) -> None:
    for node in nodes:
        opens = [s for s in fake.session_opens(node) if s[3] == member]
        assert len(opens) == 1, (f"node {node} saw {len(opens)} share sessions opened (epoch 0) by the member, "
                                 f"expected 1: {opens}\n{fake.transcript(share_only=True)[-6000:]}")


def assert_fetches_only_from_leaders(fake: FakeCluster, after: int = 0, until: int | None = None,
                                     leaders: dict[int, int] | None = None) -> None:
    """No share request listed (or acknowledged) a partition its node did not lead (``leaders``:
    the leaders during the window, default the current ones)."""
    for r in fake.share_requests(after=after):
        if until is not None and r.seq > until:
            break
        for p in set(r.topics) | set(r.acks):
            leader = leaders[p] if leaders is not None else fake.leader(p)
            assert leader == r.node, f"#{r.seq} to node {r.node} names p{p} led by {leader}"


def assert_move_followed(fake: FakeCluster, partition: int, old: int, new: int, moved_at: int,
                         max_refusals: int = 3) -> int:
    """After ``moved_at`` the partition was served by ``new``; once ``new`` served it, ``old`` heard
    no more of it, and ``old`` refused it at most ``max_refusals`` times. Returns the seq of the
    first request that ``new`` served the partition in."""
    transcript = fake.transcript(after=moved_at, share_only=True)
    served = [r for r in fake.share_requests(node=new, after=moved_at) if partition in r.acquired]
    assert served, f"p{partition} was never fetched from its new leader, node {new}:\n{transcript}"
    late = [r.short() for r in fake.share_requests(node=old, after=served[0].seq)
            if partition in r.topics or partition in r.acks or partition in r.partition_errors]
    assert not late, (f"p{partition} still sent to (or held in the session of) its old leader {old} after node "
                      f"{new} served it:\n" + "\n".join(late))
    refusals = [r for r in fake.share_requests(node=old, after=moved_at)
                if r.partition_errors.get(partition) == ErrorCode.not_leader_or_follower
                or r.ack_errors.get(partition) == ErrorCode.not_leader_or_follower]
    assert len(refusals) <= max_refusals, (f"{len(refusals)} NOT_LEADER_OR_FOLLOWER answers for p{partition} "
                                           f"from node {old}:\n{transcript}")
    return served[0].seq


# ---------------------------------------------------------------------------------------------- the fake


def test_fake_cluster_enforces_share_session_epochs_leadership_and_coordination():
    """The fake's rules that the consumer tests rely on, driven with the client's transport."""
    import asyncio
    import datetime

    from quafka.client._cluster import Cluster

    with FakeCluster() as fake:
        fake.produce(1, 6, batch_size=3)

        async def main():
            cluster = Cluster(fake.bootstrap_servers, "fake-selftest")
            try:
                await cluster.bootstrap()  # brokers only: the topic is described when asked for
                assert TOPIC not in cluster.topics
                await cluster.refresh_metadata([TOPIC])
                topic_id = cluster.topics[TOPIC].topic_id
                assert {p: i.leader_id for p, i in cluster.topics[TOPIC].partitions.items()} == {0: 1, 1: 2, 2: 3}
                assert await cluster.find_coordinator(GROUP) == 1
                coordinator = await cluster.connection(1)
                hb = {"group_id": GROUP, "member_id": "m1", "member_epoch": 0, "rack_id": None,
                      "subscribed_topic_names": [TOPIC]}
                joined = await coordinator.call(SHARE_GROUP_HEARTBEAT, hb)
                assert joined.error_code == ErrorCode.none and joined.member_epoch == 1
                assert joined.assignment.topic_partitions[0].partitions == (0, 1, 2)
                other = await cluster.connection(2)
                assert (await other.call(SHARE_GROUP_HEARTBEAT, hb)).error_code == ErrorCode.not_coordinator

                conn = await cluster.connection(2)
                fetch = dict(group_id=GROUP, member_id="m1", max_wait=datetime.timedelta(milliseconds=50),
                             min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100, forgotten_topics_data=[])
                part = lambda acks=(): [{"topic_id": topic_id, "partitions": [  # noqa: E731
                    {"partition_index": 1, "acknowledgement_batches": list(acks)}]}]
                ack = lambda first, last, t: {"first_offset": first, "last_offset": last,  # noqa: E731
                                              "acknowledge_types": [t]}
                first = await conn.call(SHARE_FETCH, dict(fetch, share_session_epoch=0, topics=part()))
                acquired = first.responses[0].partitions[0].acquired_records
                assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(0, 5, 1)]
                wrong = await conn.call(SHARE_FETCH, dict(fetch, share_session_epoch=3, topics=[]))
                assert wrong.error_code == ErrorCode.invalid_share_session_epoch
                again = await conn.call(SHARE_ACKNOWLEDGE, dict(group_id=GROUP, member_id="m1", share_session_epoch=0,
                                                                topics=part([ack(0, 1, 1)])))
                assert again.error_code == ErrorCode.invalid_share_session_epoch
                acked = await conn.call(SHARE_ACKNOWLEDGE, dict(group_id=GROUP, member_id="m1", share_session_epoch=1,
                                                                topics=part([ack(0, 1, 1)])))
                assert acked.error_code == ErrorCode.none
                assert acked.responses[0].partitions[0].error_code == ErrorCode.none
                fake.move_leader(1, 3)
                moved = await conn.call(SHARE_FETCH, dict(fetch, share_session_epoch=2, topics=part([ack(2, 5, 1)])))
                p = moved.responses[0].partitions[0]
                assert p.error_code == ErrorCode.not_leader_or_follower
                assert p.acknowledge_error_code == ErrorCode.not_leader_or_follower
                assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3, 6)
                assert [(e.node_id, e.port) for e in moved.node_endpoints] == [(3, fake.port(3))]
                fake.move_coordinator(3)
                assert (await coordinator.call(SHARE_GROUP_HEARTBEAT, dict(hb, member_epoch=1))).error_code \
                    == ErrorCode.not_coordinator
                assert await cluster.find_coordinator(GROUP) == 3
                await cluster.refresh_metadata([TOPIC])
                assert cluster.topics[TOPIC].partitions[1].leader_id == 3
                # two requests of one session pipelined on the connection: answered in order, but noticed
                assert not fake.overlaps
                fake.hang_node(2)  # hold the first answer back until the second request has surely arrived
                pending = asyncio.gather(conn.call(SHARE_FETCH, dict(fetch, share_session_epoch=3, topics=[])),
                                         conn.call(SHARE_FETCH, dict(fetch, share_session_epoch=4, topics=[])))
                deadline = asyncio.get_running_loop().time() + 5
                while not fake.overlaps and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.005)
                fake.hang_node(2, False)
                both = await pending
                assert [r.error_code for r in both] == [ErrorCode.none, ErrorCode.none]
                assert len(fake.overlaps) == 1 and "epoch 4" in fake.overlaps[0], fake.overlaps
            finally:
                await cluster.close()

        asyncio.run(main())
        assert [(a.partition, a.offset, a.type) for a in fake.accepted] == [(1, 0, 1), (1, 1, 1)]
        assert fake.record_states(1) == ["acknowledged"] * 2 + ["available"] * 4  # released at the move
        assert not fake.unexpected, fake.unexpected


# ---------------------------------------------------------------------------------------------- the consumer


def first_delivery_ack(record) -> AcknowledgeType:
    """REJECT offsets 3, 10, 17 (archived), RELEASE offsets 1, 6, 11, 16 on their first delivery
    (redelivered, then accepted), ACCEPT the rest: ack batches with mixed types per offset."""
    if record.offset % 7 == 3:
        return AcknowledgeType.REJECT
    if record.offset % 5 == 1 and record.delivery_count == 1:
        return AcknowledgeType.RELEASE
    return AcknowledgeType.ACCEPT


def test_explicit_mode_uses_one_sequential_share_session_per_leader_and_loses_no_committed_ack():
    """No faults: one session per leader node, sequential epochs, partitions only at their leader,
    heartbeats only at the coordinator; mixed ACCEPT/RELEASE/REJECT acknowledgements by poll,
    commit_sync and commit_async all land; released records come back with delivery count 2;
    close() leaves no session open."""
    with FakeCluster(partitions=3) as fake:
        for p in range(3):
            fake.produce(p, 12, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            app.ack_type = first_delivery_ack
            consumer.subscribe([TOPIC])
            app.consume_until(fake.all_settled, 6.0, what="the first 36 records")
            for p in range(3):
                fake.produce(p, 6, batch_size=3)
            app.consume_until(fake.all_settled, 6.0, what="all 54 records", async_every=3)
            member = member_of(fake)
            sessions_before_close = fake.open_sessions()
        finally:
            consumer.close(5.0)

        released = {o for o in range(18) if o % 5 == 1 and o % 7 != 3}
        rejected = {o for o in range(18) if o % 7 == 3}
        seen = sorted((r.partition, r.offset, r.delivery_count) for r in app.received)
        assert seen == sorted([(p, o, 1) for p in range(3) for o in range(18)]
                              + [(p, o, 2) for p in range(3) for o in released]), \
            "each record once, the released ones once more with delivery count 2"
        assert all(r.value == f"{r.partition}:{r.offset}".encode() for r in app.received)
        for p in range(3):
            states = fake.record_states(p)
            assert {o for o, st in enumerate(states) if st == "archived"} == rejected, states
            assert {o for o, st in enumerate(states) if st == "acknowledged"} == set(range(18)) - rejected, states
        accepted = {(a.partition, a.offset, a.type) for a in fake.accepted}
        assert {(p, o, int(AcknowledgeType.RELEASE)) for p in range(3) for o in released} <= accepted
        assert_sessions_sequential(fake, member)
        assert_one_session_open_per_node(fake, (1, 2, 3), member)
        assert {k[0]: v for k, v in sessions_before_close.items() if k[2] == member} == {1: {0}, 2: {1}, 3: {2}}
        assert_fetches_only_from_leaders(fake)
        failed = [r.short() for r in fake.share_requests()
                  if r.error or r.partition_errors or any(r.ack_errors.values())]
        assert not failed, "requests refused without any fault:\n" + "\n".join(failed)
        heartbeats = fake.requests(SHARE_GROUP_HEARTBEAT)
        assert len(heartbeats) >= 2 and {h.node for h in heartbeats} == {1}
        assert_no_lost_acknowledgements(app, fake)
        assert {c[0] for c in app.claimed} == {"commit_sync", "callback"}, "successes reported by both paths"
        assert not app.failures and not app.poll_errors, (app.failures, app.poll_errors)
        assert not [k for k in fake.open_sessions() if k[2] == member], "close() left share sessions open"
        assert not fake.unexpected, fake.unexpected
        assert_one_request_in_flight_per_session(fake)


def test_coordinator_move_heartbeats_follow_to_the_new_coordinator():
    """The coordinator moves from node 1 to node 3: NOT_COORDINATOR, FindCoordinator, heartbeats at
    node 3 (same membership), none at node 1 after that; share sessions are untouched."""
    with FakeCluster(partitions=3, coordinator=1) as fake:
        for p in range(3):
            fake.produce(p, 6, batch_size=3)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            app.consume_until(fake.all_acknowledged, 5.0, what="the records before the move")
            moved_at = fake.move_coordinator(3)
            for p in range(3):
                fake.produce(p, 6, batch_size=3)

            def new_coordinator_heartbeats():
                ok = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=3, after=moved_at) if h.error == 0]
                return len(ok) >= 2 and fake.all_acknowledged()

            app.consume_until(new_coordinator_heartbeats, 5.0, what="heartbeats at node 3 and all records")
            app.commit_sync()
            member = member_of(fake)
        finally:
            consumer.close(5.0)

        transcript = fake.transcript()
        # (a heartbeat that arrived just before the move may be the one answered NOT_COORDINATOR)
        refused = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=1) if h.error == ErrorCode.not_coordinator]
        assert refused, f"node 1 never answered NOT_COORDINATOR after the move:\n{transcript}"
        lookups = [r for r in fake.requests(after=refused[0].seq) if r.info.get("key_type") == 0]
        assert lookups, f"no FindCoordinator after NOT_COORDINATOR:\n{transcript}"
        at_new = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=3, after=moved_at) if h.error == 0]
        assert at_new and at_new[0].seq > lookups[0].seq
        stale = [h.short() for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=1, after=at_new[0].seq)]
        assert not stale, "heartbeats still went to the old coordinator:\n" + "\n".join(stale)
        assert not fake.requests(SHARE_GROUP_HEARTBEAT, node=2), "a heartbeat went to a node never named coordinator"
        assert not [h for h in at_new if h.epoch == 0], "the member rejoined instead of keeping its membership"
        # the group coordinator moving does not touch share sessions
        assert_sessions_sequential(fake, member)
        assert_one_session_open_per_node(fake, (1, 2, 3), member)
        assert_fetches_only_from_leaders(fake)
        assert_no_lost_acknowledgements(app, fake)
        assert sorted((r.partition, r.offset) for r in app.received) == sorted(
            (p, o) for p in range(3) for o in range(12))
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)


@pytest.mark.parametrize("leader_hints", [True, False], ids=["current-leader-and-stale-metadata", "metadata-only"])
def test_leader_move_fetches_follow_the_new_leader_and_no_committed_ack_is_lost(leader_hints):
    """p0 moves from node 1 to node 3 (which had no share session: it led nothing) while the
    application holds acknowledged, unsent p0 records; later p3 moves from node 1 to node 2 while
    every fetch is parked on an empty log. With ``leader_hints`` the refusals name the new leader
    (CurrentLeader with its leader epoch, NodeEndpoints) while node 1's Metadata lags behind (it
    keeps naming the old leaders with their older epochs: a client must not go back to them);
    without, the refusals name no leader and Metadata (fresh everywhere) does."""
    leaders = {0: 1, 1: 2, 2: 2, 3: 1}
    with FakeCluster(partitions=4, leaders=leaders, leader_hints=leader_hints) as fake:
        for p in range(4):
            fake.produce(p, 10, batch_size=5)
        if leader_hints:
            fake.freeze_metadata(1)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            held: list = []
            deadline = time.monotonic() + 5.0
            while not held:  # until a poll returns records of p0, acknowledged but not yet sent
                assert time.monotonic() < deadline, f"p0 never delivered:\n{fake.transcript(share_only=True)}"
                records = app.poll()
                held = [r for r in records if r.partition == 0]
            moved_at = fake.move_leader(0, 3)
            result = app.commit_sync()
            tp0 = TopicPartition(TOPIC, 0)
            held_offsets = {r.offset for r in held}
            accepted_held = {a.offset for a in fake.accepted if a.partition == 0 and a.seq > moved_at} & held_offsets
            if accepted_held != held_offsets:  # not (all) delivered: commit_sync must not claim success
                assert isinstance(result.get(tp0), KafkaException), (
                    f"commit_sync returned {result.get(tp0)!r} for p0 acks the old leader refused:\n"
                    f"{fake.transcript(after=moved_at, share_only=True)}")
            for p in range(4):
                fake.produce(p, 5, batch_size=5)
            app.consume_until(fake.all_acknowledged, 6.0, what="all records after the leader move")
            open_sessions = fake.open_sessions()
            app.poll(0.3)  # nothing left: the fetches park at the leaders for fetch.max.wait.ms
            second_move_at = fake.move_leader(3, 2)
            fake.produce(3, 5, batch_size=5)
            app.consume_until(fake.all_acknowledged, 5.0, what="p3's records at its new leader")
            member = member_of(fake)
        finally:
            consumer.close(5.0)

        # the new leader serves p0, the old one stops hearing about it
        served_at = assert_move_followed(fake, 0, old=1, new=3, moved_at=moved_at)
        node1 = [v for k, v in open_sessions.items() if k[0] == 1 and k[2] == member]
        assert all(0 not in parts for parts in node1), f"node 1's session still holds p0: {node1}"
        # the second move happened while every fetch was parked (long poll) on an empty log
        assert_move_followed(fake, 3, old=1, new=2, moved_at=second_move_at)
        # records the old leader released came back from the new one, one delivery later
        redelivered = [r for r in app.received if r.partition == 0 and r.offset in held_offsets and r not in held]
        assert {r.offset for r in redelivered} >= held_offsets - accepted_held
        assert all(r.delivery_count == 2 for r in redelivered), [(r.offset, r.delivery_count) for r in redelivered]
        assert_sessions_sequential(fake, member)
        assert_one_session_open_per_node(fake, (1, 2, 3), member)
        assert_fetches_only_from_leaders(fake, after=served_at, until=second_move_at, leaders={0: 3, 1: 2, 2: 2, 3: 1})
        assert_no_lost_acknowledgements(app, fake)
        for p in range(4):
            assert app.offsets_received(p) == set(range(20 if p == 3 else 15)), p
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)


def test_unreachable_broker_is_retriable_and_commit_sync_reports_undelivered_acks():
    """Node 2 (leader of p1) is stopped while p1's records are acknowledged but unsent: commit_sync
    reports p1 with a retriable exception, the other partitions keep flowing, polls raise nothing
    non-retriable; after a restart on the same port node 2 sees a new session at epoch 0 and p1's
    released records are redelivered (delivery count 2)."""
    with FakeCluster(partitions=3) as fake:
        for p in range(3):
            fake.produce(p, 8, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            held: list = []
            deadline = time.monotonic() + 5.0
            while not held:  # until a poll returns records of p1 (led by node 2)
                assert time.monotonic() < deadline, f"p1 never delivered:\n{fake.transcript(share_only=True)}"
                records = app.poll(ack=False)
                held = [r for r in records if r.partition == 1]
                for r in records:
                    if r.partition != 1:
                        app.acknowledge(r)
            fake.stop_node(2)
            stopped_at = fake.last_seq
            for r in held:  # acknowledged while their leader is unreachable
                app.acknowledge(r)
            started = time.monotonic()
            result = app.commit_sync(timeout=1.0)
            assert time.monotonic() - started < 2.5, "commit_sync overran its timeout"
            metadata_during_commit = len(fake.requests(METADATA, after=stopped_at))
            tp1 = TopicPartition(TOPIC, 1)
            assert not [a for a in fake.accepted if a.partition == 1 and a.offset in {r.offset for r in held}]
            assert tp1 in result, f"commit_sync left out p1's undelivered acknowledgements: {result}"
            assert isinstance(result[tp1], KafkaException) and result[tp1].retriable, (
                f"undelivered acknowledgements reported as {result[tp1]!r}")

            # the consumer keeps consuming the partitions of the live nodes
            for p in (0, 2):
                fake.produce(p, 4, batch_size=4)
            live_done = lambda: all(s == "acknowledged" for p in (0, 2) for s in fake.record_states(p))  # noqa: E731
            app.consume_until(live_done, 6.0, what="records of the live nodes while node 2 is down")

            fake.start_node(2)
            restarted_at = fake.last_seq
            app.consume_until(fake.all_acknowledged, 6.0, what="p1's records after node 2 came back")
            member = member_of(fake)
        finally:
            consumer.close(5.0)

        assert all(e.retriable for e in app.poll_errors), app.poll_errors
        assert_sessions_sequential(fake, member, restarted={2: restarted_at})
        opens = [s for s in fake.session_opens(2) if s[3] == member]
        assert len(opens) == 2 and opens[0][0] <= stopped_at <= restarted_at < opens[1][0], opens
        assert_one_session_open_per_node(fake, (1, 3), member)
        assert_no_lost_acknowledgements(app, fake)
        redelivered = [r for r in app.received if r.partition == 1 and r.offset in {h.offset for h in held}
                       and r.delivery_count == 2]
        assert {r.offset for r in redelivered} == {h.offset for h in held}, "p1's released records not redelivered"
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)
        # commit_sync's retries back off exponentially from retry.backoff.ms (20) towards
        # retry.backoff.max.ms (100) (KIP-580): about a dozen attempts in that second, not fifty
        assert metadata_during_commit <= 20, (
            f"{metadata_during_commit} Metadata requests during a 1 s commit_sync with the leader unreachable: "
            f"the retries do not back off towards retry.backoff.max.ms")


def test_broker_failover_coordinator_and_leader_move_off_a_dead_node():
    """Node 1 (coordinator, leader of p0) dies; the group coordinator moves to node 2 and p0's
    leadership to node 3. The dead node can say nothing: the consumer must find both by itself."""
    with FakeCluster(partitions=3, coordinator=1) as fake:
        for p in range(3):
            fake.produce(p, 8, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 5.0
            while not app.offsets_received(0):  # p0's records are in the application's hands
                assert time.monotonic() < deadline, "p0 never delivered"
                app.poll()
            moved_at = fake.move_leader(0, 3)
            fake.move_coordinator(2)
            fake.stop_node(1)
            for p in range(3):
                fake.produce(p, 4, batch_size=4)

            def recovered():
                hb = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=2, after=moved_at) if h.error == 0]
                return len(hb) >= 2 and fake.all_acknowledged()

            app.consume_until(recovered, 8.0, what="heartbeats at node 2 and every record")
            member = member_of(fake)
        finally:
            closing = time.monotonic()
            consumer.close(3.0)  # node 1 is still down
            close_took = time.monotonic() - closing

        assert close_took < 3.5, f"close(3.0) took {close_took:.2f}s"
        assert all(e.retriable for e in app.poll_errors), app.poll_errors
        assert not [r for r in fake.requests(node=1) if r.seq > moved_at], "requests reached the stopped node"
        assert any(0 in r.acquired for r in fake.share_requests(node=3, after=moved_at)), (
            f"p0 never fetched from node 3:\n{fake.transcript(share_only=True)}")
        assert not [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, after=moved_at) if h.epoch == 0], (
            "the member rejoined instead of keeping its membership")
        assert_sessions_sequential(fake, member)
        assert_one_session_open_per_node(fake, (1, 2, 3), member)
        assert_no_lost_acknowledgements(app, fake)
        for p in range(3):
            assert app.offsets_received(p) == set(range(12)), p
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)


def test_implicit_mode_consumes_everything_across_coordinator_and_leader_moves():
    """Implicit mode: acknowledge() is refused; the coordinator moves to node 2 and p2's leadership
    from node 3 to node 1; every record ends ACCEPTed and no reported success is missing."""
    with FakeCluster(partitions=3, coordinator=1) as fake:
        for p in range(3):
            fake.produce(p, 8, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake, mode="implicit"))
        try:
            app = App(consumer, fake, explicit=False)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 5.0
            while not app.received:
                assert time.monotonic() < deadline, "nothing delivered"
                app.poll()
            with pytest.raises(KafkaException):  # IllegalStateException: implicit mode
                consumer.acknowledge(app.received[0])
            coordinator_moved_at = fake.move_coordinator(2)
            leader_moved_at = fake.move_leader(2, 1)
            for p in range(3):
                fake.produce(p, 8, batch_size=4)

            def done():
                at_new = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=2, after=coordinator_moved_at)
                          if h.error == 0]
                return at_new and fake.all_acknowledged()

            app.consume_until(done, 8.0, commit_every=3, what="all records after both moves")
            member = member_of(fake)
        finally:
            consumer.close(5.0)

        hb_new = [h for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=2, after=coordinator_moved_at) if h.error == 0]
        stale = [h.short() for h in fake.requests(SHARE_GROUP_HEARTBEAT, node=1, after=hb_new[0].seq)]
        assert not stale, "heartbeats still went to the old coordinator:\n" + "\n".join(stale)
        fetched_new = [r for r in fake.share_requests(node=1, after=leader_moved_at) if 2 in r.acquired]
        assert fetched_new, f"p2 never fetched from its new leader:\n{fake.transcript(share_only=True)}"
        late = [r.short() for r in fake.share_requests(node=3, after=fetched_new[0].seq)
                if 2 in r.topics or 2 in r.acks]
        assert not late, "p2 still sent to its old leader:\n" + "\n".join(late)
        assert_sessions_sequential(fake, member)
        assert_one_session_open_per_node(fake, (1, 2, 3), member)
        assert_no_lost_acknowledgements(app, fake)
        assert all(a.type == AcknowledgeType.ACCEPT for a in fake.accepted)
        for p in range(3):
            assert app.offsets_received(p) == set(range(16)), p
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)


def test_evicted_share_session_is_reopened_and_its_acknowledgements_are_not_claimed():
    """Node 2 forgets its share sessions while the connection stays up (the scripted fault that
    forces a new session): the next request of the session gets SHARE_SESSION_NOT_FOUND, the
    acknowledgements it carried must not be reported as committed, and the consumer opens a new
    session at epoch 0 and consumes the released records again."""
    with FakeCluster(partitions=3) as fake:
        for p in range(3):
            fake.produce(p, 8, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            held: list = []
            deadline = time.monotonic() + 5.0
            while not held:  # p1's records (node 2) acknowledged, not yet sent
                assert time.monotonic() < deadline, "p1 never delivered"
                held = [r for r in app.poll() if r.partition == 1]
            evicted_at = fake.evict_sessions(2)
            result = app.commit_sync()
            tp1 = TopicPartition(TOPIC, 1)
            held_accepted = {a.offset for a in fake.accepted if a.partition == 1 and a.seq > evicted_at}
            if not {r.offset for r in held} <= held_accepted:
                assert isinstance(result.get(tp1), KafkaException), (
                    f"commit_sync reported {result.get(tp1)!r} for acknowledgements node 2 never accepted:\n"
                    f"{fake.transcript(after=evicted_at, share_only=True)}")
            for p in range(3):
                fake.produce(p, 4, batch_size=4)
            app.consume_until(fake.all_acknowledged, 6.0, what="every record after the eviction")
            member = member_of(fake)
        finally:
            consumer.close(3.0)

        transcript = fake.transcript(share_only=True)
        # (the refused request may have arrived just before the eviction)
        refused = [r for r in fake.share_requests(node=2) if r.error == ErrorCode.share_session_not_found]
        assert len(refused) == 1, f"expected one SHARE_SESSION_NOT_FOUND from node 2:\n{transcript}"
        reopened = fake.share_requests(node=2, after=refused[0].seq)
        assert reopened and reopened[0].epoch == 0, f"the session was not reopened at epoch 0:\n{transcript}"
        opens = [s for s in fake.session_opens(2) if s[3] == member]
        assert len(opens) == 2, opens
        assert_one_session_open_per_node(fake, (1, 3), member)
        assert_no_lost_acknowledgements(app, fake)
        redelivered = {r.offset for r in app.received if r.partition == 1 and r.delivery_count == 2}
        assert {r.offset for r in held} - held_accepted <= redelivered
        for p in range(3):
            assert app.offsets_received(p) == set(range(12)), p
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)


def test_hung_broker_does_not_stall_the_others_and_commit_sync_keeps_its_timeout():
    """Node 2 stops answering (connections stay open). commit_sync(0.5) of p1's acknowledgements
    returns within its timeout with a retriable error, polls keep their timeouts and the live
    nodes' records keep flowing; once node 2 answers again everything is consumed."""
    with FakeCluster(partitions=3) as fake:
        for p in range(3):
            fake.produce(p, 8, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake, **{"request.timeout.ms": 1500}))
        try:
            app = App(consumer, fake)
            consumer.subscribe([TOPIC])
            held: list = []
            deadline = time.monotonic() + 5.0
            while not held:  # p1's records (node 2) in the application's hands
                assert time.monotonic() < deadline, "p1 never delivered"
                records = app.poll(ack=False)
                held = [r for r in records if r.partition == 1]
                for r in records:
                    if r.partition != 1:
                        app.acknowledge(r)
            hung_at = fake.hang_node(2)
            for r in held:
                app.acknowledge(r)
            started = time.monotonic()
            result = app.commit_sync(timeout=0.5)
            took = time.monotonic() - started
            tp1 = TopicPartition(TOPIC, 1)
            assert not [a for a in fake.accepted if a.partition == 1 and a.seq > hung_at]
            assert isinstance(result.get(tp1), KafkaException) and result[tp1].retriable, (
                f"p1's undelivered acknowledgements reported as {result.get(tp1)!r}")
            for p in (0, 2):
                fake.produce(p, 4, batch_size=4)
            live_done = lambda: all(s == "acknowledged" for p in (0, 2) for s in fake.record_states(p))  # noqa: E731
            app.consume_until(live_done, 4.0, what="the live nodes' records while node 2 hangs")
            live_overrun = app.poll_overrun
            fake.hang_node(2, False)
            app.consume_until(fake.all_acknowledged, 6.0, what="p1's records once node 2 answers again")
            member = member_of(fake)
        finally:
            consumer.close(3.0)

        assert live_overrun < 0.5, f"a poll overran its timeout by {live_overrun:.2f}s while node 2 hung"
        refused = [r.short() for r in fake.share_requests() if r.error in SESSION_REFUSAL_CODES]
        assert not refused, "share session errors:\n" + "\n".join(refused)
        assert_one_session_open_per_node(fake, (1, 3), member)
        assert_no_lost_acknowledgements(app, fake)
        for p in range(3):
            assert app.offsets_received(p) == set(range(12 if p != 1 else 8)), p
        assert fake.all_acknowledged()
        assert_one_request_in_flight_per_session(fake)
        assert took < 1.0, (f"commit_sync(timeout=0.5) took {took:.2f}s with the leader hung (request.timeout.ms "
                            f"is 1.5s):\n{fake.transcript(after=hung_at, share_only=True)}")


def test_close_reports_every_sent_acknowledgement_and_waits_for_parked_fetches():
    """Explicit mode, records acknowledged and handed to a poll whose ShareFetch then parks at the
    leaders (nothing new to fetch, fetch.max.wait.ms 1 s) when close() runs: close must still tell
    the callback the outcome of every acknowledgement (all of them succeed here), never have two
    requests of one session in flight, and leave no session open."""
    with FakeCluster(partitions=3) as fake:
        for p in range(3):
            fake.produce(p, 4, batch_size=4)
        consumer = ShareConsumer(consumer_config(fake, **{"fetch.max.wait.ms": 1000}))
        app = App(consumer, fake)
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 5.0
            while len(app.received) < 12:
                assert time.monotonic() < deadline, "records never delivered"
                app.poll(0.2)
            app.poll(0.05)  # hands the acknowledgements over; its fetches park at the leaders
            member = member_of(fake)
        finally:
            consumer.close(3.0)

        acknowledged = {(r.partition, r.offset) for r in app.received}
        reported = {(c[1], c[2]) for c in app.claimed}
        failed = {p for _, p, _ in app.failures}
        assert fake.all_acknowledged(), fake.not_acknowledged()
        missing = {(p, o) for p, o in acknowledged - reported if p not in failed}
        assert not missing, (f"close() returned without reporting the outcome of acknowledgements the broker "
                             f"applied: {sorted(missing)}\n{fake.transcript(share_only=True)}")
        assert_no_lost_acknowledgements(app, fake)
        assert not [k for k in fake.open_sessions() if k[2] == member], "close() left share sessions open"
        assert_one_request_in_flight_per_session(fake)
