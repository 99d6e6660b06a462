"""Acceptance: share-group membership and group configs (KIP-932 as Kafka 4.2-4.4 runs it).

Criterion 6 — membership, read with ShareGroupDescribe after each join or leave:

- coverage: every partition of the subscribed topic has a member;
- balance: with M <= P members each holds floor(P/M) or ceil(P/M) partitions and each partition has
  exactly one member; with M > P every partition has ceil(M/P) members (Kafka's SimpleAssignor; so
  the per-partition counts differ by at most one) and the members' counts differ by at most one;
- stickiness, the exact rule asserted: the number of (member, partition) pairs the new assignment
  keeps from the previous one equals the most that ANY balanced assignment of the new membership
  could keep (computed exactly as a min-cost flow over all balanced assignments). With M <= P before
  and after, that is: the number of partitions that change owner is P - sum(min(c_i, t_i)) with c_i
  the partitions member i held before (0 for a new member) and t_i the balanced quotas, both sorted
  in decreasing order; a join M -> M+1 <= P therefore moves at most ceil(P/(M+1)) partitions, and a
  leave moves only the leaver's partitions. (This is the issue's "nothing moves unless balance
  requires it" and what quafka's share_assignor promises; Kafka's SimpleHomogeneousAssignmentBuilder
  hands out quotas by member index and is not always this sticky, but is never less balanced.)
- a member frozen with SIGSTOP is removed after share.session.timeout.ms and its partitions go to
  the others; the group goes Stable -> Empty when its last member leaves; one member beyond
  group.share.max.size gets GROUP_MAX_SIZE_REACHED.

Criterion 10 — group configs through confluent's AdminClient (ConfigResource(GROUP, g)): every
share.* key can be set (source GROUP_CONFIG), deleted (back to the default, taken from the broker
key where Kafka has one) and described; out-of-bounds or unknown keys get INVALID_CONFIG naming the
key and the bound; a new share.record.lock.duration.ms applies from the next acquisition only.

Members are librdkafka ShareConsumers (each on its own thread, which polls and so heartbeats) and
test-side ShareClients (heartbeated by the waiting loop). Everything waits with deadlines.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from support import wait_until
from support.share_client import ShareClient, acquired_offsets, create_topic, produce

from quafka import EmbeddedBroker
from quafka.broker.core.record_state import RecordState
from quafka.broker.server.clock import monotonic_ms

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_share_member_child.py")


def now_ms() -> int:
    """The broker's clock (EmbeddedBroker runs in this process and reads the same wall clock)."""
    return time.time_ns() // 1_000_000


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- group configs via AdminClient

def alter_group_configs(bootstrap: str, group: str, ops: list[tuple[str, str | None, AlterConfigOpType]]):
    """IncrementalAlterConfigs on GROUP `group`; returns None or the KafkaError of the resource."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    (future,) = admin.incremental_alter_configs([resource]).values()
    try:
        future.result(10)
    except KafkaException as exc:
        return exc.args[0]
    return None


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    error = alter_group_configs(bootstrap, group, [(k, v, AlterConfigOpType.SET) for k, v in configs.items()])
    assert error is None, error


def describe_group_configs(bootstrap: str, group: str) -> dict[str, ConfigEntry]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return future.result(10)


# ----------------------------------------------------------------------------- members

class _Member:
    member_id: str | None = None
    client_id: str | None = None
    errors: list

    def pump(self) -> None:
        """Heartbeat if this member is driven by the test (ShareConsumers heartbeat by themselves)."""


class ConsumerMember(_Member):
    """A librdkafka ShareConsumer on its own thread (the client is single-threaded): created,
    subscribed, polled (so it heartbeats) and closed (so it leaves) there. Its member id is
    generated by librdkafka; it is found in ShareGroupDescribe by its client id."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        self.bootstrap, self.group, self.topic, self.client_id = bootstrap, group, topic, client_id
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=client_id, daemon=True)

    def start(self) -> "ConsumerMember":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "client.id": self.client_id, "log_level": 3})
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                for msg in consumer.poll(0.1):
                    if msg.error() is not None:
                        self.errors.append(f"{self.client_id}: {msg.error()}")
            consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.errors.append(f"{self.client_id}: {exc!r}")

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.client_id} did not close"


class ClientMember(_Member):
    """A test-side ShareClient member: joins at epoch 0, heartbeats when pumped, leaves at epoch -1."""

    def __init__(self, bootstrap: str, group: str, topic: str, client: ShareClient | None = None) -> None:
        self.client = client or ShareClient(bootstrap, group)
        self.member_id = self.client.member_id
        self.topic = topic
        self.errors: list = []

    def start(self) -> "ClientMember":
        resp = self.client.join([self.topic])
        assert resp.error_code == ErrorCode.none, resp
        return self

    def pump(self) -> None:
        resp = self.client.heartbeat(None)
        if resp.error_code != ErrorCode.none:
            self.errors.append(f"{self.member_id}: heartbeat {ErrorCode(resp.error_code).name} {resp.error_message}")

    def leave(self) -> None:
        resp = self.client.leave()
        assert (resp.error_code, resp.member_epoch) == (ErrorCode.none, -1), resp
        self.client.close()


class ChildMember(_Member):
    """The ShareConsumer of _share_member_child.py, known by its client id."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.errors: list = []


def described_assignment(member, topic_id, topic: str) -> frozenset[int]:
    parts: set[int] = set()
    for tp in member.assignment.topic_partitions:
        assert (tp.topic_id, tp.topic_name) == (topic_id, topic), tp
        assert len(set(tp.partitions)) == len(tp.partitions), f"a partition listed twice: {tp}"
        parts.update(tp.partitions)
    return frozenset(parts)


def wait_settled(observer: ShareClient, group: str, topic_id, topic: str, members: list[_Member],
                 timeout_s: float = 20.0):
    """Pump the test-driven members until ShareGroupDescribe shows exactly `members`, the group
    Stable with its target assignment computed for the current group epoch, and every member at that
    assignment epoch (so each holds its final partitions); ShareClient members must also have been
    given, on the wire, the partitions describe shows. Returns the described group."""

    def check():
        for m in members:
            m.pump()
        (group_desc,) = observer.describe([group]).groups
        if group_desc.error_code != ErrorCode.none:
            return None
        for m in members:
            if m.member_id is None:
                mine = [d.member_id for d in group_desc.members if d.client_id == m.client_id]
                if len(mine) != 1:
                    return None
                m.member_id = mine[0]
        described = {d.member_id: d for d in group_desc.members}
        if set(described) != {m.member_id for m in members}:
            return None
        if group_desc.group_state != "Stable" or group_desc.group_epoch != group_desc.assignment_epoch:
            return None
        if any(d.member_epoch != group_desc.assignment_epoch for d in group_desc.members):
            return None
        for m in members:
            if isinstance(m, ClientMember):
                if m.client.member_epoch != group_desc.assignment_epoch:
                    return None
                given = frozenset(p for tid, ps in m.client.assignment.items() if tid == topic_id for p in ps)
                if given != described_assignment(described[m.member_id], topic_id, topic):
                    return None
        return group_desc

    return wait_until(check, timeout_s, 0.05,
                      message=f"group {group} to settle with {len(members)} members (ShareGroupDescribe)")


def holdings(group_desc, topic_id, topic: str) -> dict[str, frozenset[int]]:
    return {d.member_id: described_assignment(d, topic_id, topic) for d in group_desc.members}


# ----------------------------------------------------------------------------- balance and stickiness

def quotas(members: int, partitions: int) -> list[int]:
    """The balanced partition counts, largest first: ceil(M/P) members per partition, those
    sharing * P slots spread so that members' counts differ by at most one."""
    sharing = ceil_div(members, partitions)
    base, extra = divmod(sharing * partitions, members)
    return [base + 1] * extra + [base] * (members - extra)


def assert_balanced(held: dict[str, frozenset[int]], partitions: int, when: str) -> None:
    m = len(held)
    per_partition = Counter(p for ps in held.values() for p in ps)
    counts = sorted(len(ps) for ps in held.values())
    assert set(per_partition) == set(range(partitions)), f"{when}: partitions without a member in {held}"
    if m <= partitions:
        assert set(per_partition.values()) == {1}, f"{when}: a partition has several members: {held}"
        assert set(counts) <= {partitions // m, ceil_div(partitions, m)}, f"{when}: unbalanced {counts}"
    else:
        sharing = dict(per_partition)
        assert max(sharing.values()) - min(sharing.values()) <= 1, f"{when}: members per partition {sharing}"
        assert set(sharing.values()) == {ceil_div(m, partitions)}, (
            f"{when}: each partition should have ceil(M/P) = {ceil_div(m, partitions)} members: {sharing}")
        assert counts[0] >= 1 and counts[-1] - counts[0] <= 1, f"{when}: unbalanced member counts {counts}"
    balanced = sorted(quotas(m, partitions))
    assert counts == balanced, f"{when}: member counts {counts}, balanced {balanced}"


def max_kept(previous: dict[str, frozenset[int]], members: list[str], partitions: int) -> int:
    """The most (member, partition) pairs of `previous` that any balanced assignment of `partitions`
    over `members` keeps: a min-cost flow source -> member (capacity `base` at cost -BIG, forcing
    every member to its base quota, plus 1 spare at cost 0) -> partition (capacity 1, cost -1 where
    the member held it) -> sink (capacity ceil(M/P)), of value ceil(M/P) * P."""
    m, p = len(members), partitions
    sharing = ceil_div(m, p)
    base, extra = divmod(sharing * p, m)
    big = 10 * (m * p + 1)
    n = m + p + 2
    src, sink = 0, n - 1
    graph: list[list[list[int]]] = [[] for _ in range(n)]  # edge: [to, capacity, cost, index of reverse]

    def add(u: int, v: int, cap: int, cost: int) -> None:
        graph[u].append([v, cap, cost, len(graph[v])])
        graph[v].append([u, 0, -cost, len(graph[u]) - 1])

    for i, member in enumerate(members, 1):
        add(src, i, base, -big)
        if extra:
            add(src, i, 1, 0)
        held = previous.get(member, frozenset())
        for q in range(p):
            add(i, m + 1 + q, 1, -1 if q in held else 0)
    for q in range(p):
        add(m + 1 + q, sink, sharing, 0)

    flow = cost = 0
    while flow < sharing * p:  # successive shortest paths (Bellman-Ford: the residual costs may be negative)
        dist = [float("inf")] * n
        via: list[tuple[int, int] | None] = [None] * n
        dist[src] = 0
        for _ in range(n):
            changed = False
            for u in range(n):
                if dist[u] == float("inf"):
                    continue
                for idx, (v, cap, c, _rev) in enumerate(graph[u]):
                    if cap > 0 and dist[u] + c < dist[v]:
                        dist[v], via[v], changed = dist[u] + c, (u, idx), True
            if not changed:
                break
        assert dist[sink] != float("inf"), "no balanced assignment exists (test bug)"
        v = sink
        while v != src:
            u, idx = via[v]
            edge = graph[u][idx]
            edge[1] -= 1
            graph[v][edge[3]][1] += 1
            v = u
        flow += 1
        cost += int(dist[sink])
    assert cost <= -big * base * m, "the flow left a member below its base quota (test bug)"
    return -(cost + big * base * m)


def assert_sticky(previous: dict[str, frozenset[int]], now: dict[str, frozenset[int]], partitions: int,
                  when: str) -> None:
    if not previous:
        return
    kept = sum(len(previous[m] & now[m]) for m in now if m in previous)
    best = max_kept(previous, list(now), partitions)
    assert kept == best, (f"{when}: kept {kept} (member, partition) pairs but balance allows keeping {best}; "
                          f"before {previous}, after {now}")
    if len(previous) <= partitions and len(now) <= partitions:
        # one owner per partition before and after: the closed form, and the bound of the brief
        counts = sorted((len(previous.get(m, ())) for m in now), reverse=True)
        closed = sum(min(c, t) for c, t in zip(counts, quotas(len(now), partitions)))
        assert best == closed, (best, closed)
        moved = partitions - kept
        if len(now) > len(previous):
            assert moved <= ceil_div(partitions, len(now)), f"{when}: {moved} partitions moved"
        else:
            left = set(previous) - set(now)
            assert moved == sum(len(previous[m]) for m in left), f"{when}: more than the leaver's partitions moved"


# ----------------------------------------------------------------------------- criterion 6: membership

PARTITIONS = 6


def join_then_leave_one_by_one(observer: ShareClient, group: str, topic_id, topic: str, new_members: list) -> None:
    """Start the members one by one (M = 1..len), then stop them one by one, the oldest first
    (M = len-1..0). After each change: wait until the group settles, then check coverage, balance
    and stickiness against the previous settled assignment; at the end the group goes Stable ->
    Empty. Group epochs must increase with each change."""
    members: list[_Member] = []
    started: list[_Member] = []
    previous: dict[str, frozenset[int]] = {}
    epochs: list[int] = []

    def check(when: str) -> None:
        nonlocal previous
        described = wait_settled(observer, group, topic_id, topic, members)
        now = holdings(described, topic_id, topic)
        assert_balanced(now, PARTITIONS, when)
        assert_sticky(previous, now, PARTITIONS, when)
        previous = now
        epochs.append(described.group_epoch)

    try:
        for make in new_members:
            member = make().start()
            members.append(member)
            started.append(member)
            check(f"join of {member.client_id or member.member_id} (M={len(members)})")
        while len(members) > 1:
            leaving = members.pop(0)
            leaving.leave()
            check(f"leave of {leaving.client_id or leaving.member_id} (M={len(members)})")

        (last,) = members
        (stable,) = observer.describe([group]).groups
        assert (stable.group_state, [d.member_id for d in stable.members]) == ("Stable", [last.member_id])
        members.clear()
        last.leave()

        def empty():
            (g,) = observer.describe([group]).groups
            return g if g.error_code == ErrorCode.none and g.group_state == "Empty" else None

        emptied = wait_until(empty, 10, 0.05, message="the group to become Empty after its last member left")
        assert emptied.members == ()
        assert emptied.group_epoch > epochs[-1]
        assert emptied.assignment_epoch == emptied.group_epoch  # KAFKA-20442 (4.4)
    finally:
        for m in members:
            try:
                m.leave()
            except Exception:  # noqa: BLE001 - cleanup after a failure
                pass
    assert epochs == sorted(set(epochs)), f"group epochs did not increase at each change: {epochs}"
    errors = [e for m in started for e in m.errors]
    assert not errors, errors


# Members M = 1..9 over P = 6 (M <= P up to 6, then M > P) and back. The ShareClient members have
# fixed ids so that each run is the same: quafka's assignor visits members in id order, so the two
# orders (ids ascending or descending in join order) give different, reproducible histories.
@pytest.mark.parametrize("order", ["ids-ascending", "ids-descending"])
def test_members_join_and_leave_one_by_one_with_coverage_balance_and_stickiness(broker, order):
    bootstrap, topic, group = broker.bootstrap_servers, "members-6", "sg-members"
    topic_id = create_topic(bootstrap, topic, PARTITIONS)
    # a new target assignment at once for each change (KIP-1263's interval would only delay it)
    set_group_configs(bootstrap, group, {"share.assignment.interval.ms": "0"})
    names = [f"member-{i}" for i in range(9)]
    if order == "ids-descending":
        names.reverse()
    with ShareClient(bootstrap, group) as observer:
        join_then_leave_one_by_one(observer, group, topic_id, topic, [
            lambda name=name: ClientMember(bootstrap, group, topic, client=ShareClient(bootstrap, group, name))
            for name in names])


@pytest.mark.timeout(60)
def test_librdkafka_share_consumers_join_and_leave_one_by_one_with_coverage_balance_and_stickiness(make_broker):
    """The same with librdkafka ShareConsumers (their member ids are random, so M stays <= P here,
    where the outcome does not depend on them), each picking up its assignment by itself."""
    broker = make_broker(config={"group.share.min.heartbeat.interval.ms": 100})
    bootstrap, topic, group = broker.bootstrap_servers, "consumers-6", "sg-consumers"
    topic_id = create_topic(bootstrap, topic, PARTITIONS)
    # ShareConsumers pick up a new assignment at their next heartbeat: every 200 ms rather than 5 s
    set_group_configs(bootstrap, group, {"share.heartbeat.interval.ms": "200", "share.assignment.interval.ms": "0"})
    consumers = [ConsumerMember(bootstrap, group, topic, f"consumer-{i}") for i in range(PARTITIONS)]
    with ShareClient(bootstrap, group) as observer:
        join_then_leave_one_by_one(observer, group, topic_id, topic, [lambda c=c: c for c in consumers])


@pytest.mark.timeout(60)
def test_a_sigstopped_member_is_removed_after_the_session_timeout_and_its_partitions_go_to_the_others(
        make_broker, tmp_path):
    session_ms = 2000
    broker = make_broker(config={"group.share.min.session.timeout.ms": 1000,
                                 "group.share.min.heartbeat.interval.ms": 100})
    bootstrap, topic, group = broker.bootstrap_servers, "stopped", "sg-stopped"
    topic_id = create_topic(bootstrap, topic, 4)
    set_group_configs(bootstrap, group, {"share.session.timeout.ms": str(session_ms),
                                         "share.heartbeat.interval.ms": "200",
                                         "share.assignment.interval.ms": "0"})
    stderr = open(tmp_path / "child.stderr", "wb")
    child = subprocess.Popen([sys.executable, CHILD, bootstrap, group, topic, "stopped-member"], stderr=stderr)
    frozen = ChildMember("stopped-member")
    survivor = ConsumerMember(bootstrap, group, topic, "survivor").start()
    try:
        with ShareClient(bootstrap, group) as observer:
            try:
                described = wait_settled(observer, group, topic_id, topic, [frozen, survivor], timeout_s=30)
            except AssertionError:
                raise AssertionError(f"child stderr: {(tmp_path / 'child.stderr').read_bytes()!r}") from None
            before = holdings(described, topic_id, topic)
            assert sorted(len(ps) for ps in before.values()) == [2, 2], before

            child.send_signal(signal.SIGSTOP)

            # The session the coordinator armed for the frozen member runs on the group's 2 s timeout.
            def session_left():
                group_state = broker.server.share_groups.coordinator.group(group)
                member = group_state.members.get(frozen.member_id) if group_state else None
                return None if member is None else member.session_deadline_ms - now_ms()
            remaining = broker.call(session_left)
            assert remaining is None or remaining <= session_ms, remaining

            described = wait_settled(observer, group, topic_id, topic, [survivor],
                                     timeout_s=5 * session_ms / 1000 + 5)
            assert frozen.member_id not in {d.member_id for d in described.members}
            assert holdings(described, topic_id, topic) == {survivor.member_id: frozenset(range(4))}
            assert child.poll() is None, "the child died instead of being removed by the session timeout"
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
        child.wait(10)
        stderr.close()
        survivor.leave()
    assert not survivor.errors, survivor.errors


@pytest.mark.timeout(60)
def test_one_member_beyond_group_share_max_size_gets_group_max_size_reached(make_broker):
    broker = make_broker(config={"group.share.max.size": 2, "group.share.min.heartbeat.interval.ms": 100})
    bootstrap, topic, group = broker.bootstrap_servers, "capped", "sg-capped"
    topic_id = create_topic(bootstrap, topic, 2)
    set_group_configs(bootstrap, group, {"share.heartbeat.interval.ms": "200", "share.assignment.interval.ms": "0"})
    first = ConsumerMember(bootstrap, group, topic, "first").start()
    second = ClientMember(bootstrap, group, topic).start()
    members = [first, second]
    try:
        with ShareClient(bootstrap, group) as observer:
            wait_settled(observer, group, topic_id, topic, members)

            with ShareClient(bootstrap, group) as third:
                refused = third.join([topic])
                assert refused.error_code == ErrorCode.group_max_size_reached == 81, refused
                assert "maximum capacity of 2 members" in (refused.error_message or ""), refused.error_message

                # librdkafka treats it as fatal, as the Java client does
                consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                          "client.id": "one-too-many", "log_level": 0})
                try:
                    consumer.subscribe([topic])
                    fatal = []

                    def refused_consumer():
                        second.pump()
                        try:
                            consumer.poll(0.1)
                        except KafkaException as exc:
                            fatal.append(exc.args[0])
                        return fatal

                    wait_until(refused_consumer, 20, 0, message="the third ShareConsumer's fatal error")
                    assert fatal[0].code() == KafkaError.GROUP_MAX_SIZE_REACHED and fatal[0].fatal(), fatal[0]
                finally:
                    consumer.close()

                # the full group is untouched; a member already in it may still rejoin at epoch 0
                wait_settled(observer, group, topic_id, topic, members)
                assert second.client.join([topic]).error_code == ErrorCode.none

                # once a member leaves, there is room again
                members.remove(second)
                second.leave()
                assert third.join([topic]).error_code == ErrorCode.none
                third_member = ClientMember(bootstrap, group, topic, client=third)
                described = wait_settled(observer, group, topic_id, topic, [first, third_member])
                assert sorted(len(ps) for ps in holdings(described, topic_id, topic).values()) == [1, 1]
                assert third.leave().error_code == ErrorCode.none
    finally:
        for m in members:
            m.leave()
    assert not first.errors, first.errors


# ----------------------------------------------------------------------------- criterion 10: group configs

# The broker keys the group configs default to, all set away from Kafka's defaults so that a default
# read back is visibly the broker's value.
BROKER_CONFIG = {
    "group.share.session.timeout.ms": 50000,  # bounds 45000..60000 (defaults)
    "group.share.heartbeat.interval.ms": 6000,  # bounds 5000..15000
    "group.share.record.lock.duration.ms": 20000,  # bounds 15000..60000
    "group.share.delivery.count.limit": 4,  # bounds 2..10
    "group.share.partition.max.record.locks": 1500,  # bounds 100..4000
    "group.share.assignment.interval.ms": 2000,  # bounds 0..15000
    "group.share.assignor.offload.enable": False,
}

# (key, its default as described, the source of that default, a valid non-default value,
#  refused values with what the INVALID_CONFIG message must name besides the key)
GROUP_CONFIG_CASES = [
    ("share.session.timeout.ms", "50000", ConfigSource.STATIC_BROKER_CONFIG, "55000",
     [("44999", ["45000"]), ("60001", ["60000"])]),
    ("share.heartbeat.interval.ms", "6000", ConfigSource.STATIC_BROKER_CONFIG, "7000",
     [("4999", ["5000"]), ("15001", ["15000"])]),
    ("share.record.lock.duration.ms", "20000", ConfigSource.STATIC_BROKER_CONFIG, "40000",
     [("14999", ["15000"]), ("60001", ["60000"]), ("999", ["1000"])]),
    ("share.auto.offset.reset", "latest", ConfigSource.DEFAULT_CONFIG, "by_duration:PT5M",
     [("sometimes", ["earliest", "latest", "by_duration"])]),
    ("share.isolation.level", "read_uncommitted", ConfigSource.DEFAULT_CONFIG, "read_committed",
     [("read_some", ["read_committed", "read_uncommitted"])]),
    ("share.delivery.count.limit", "4", ConfigSource.STATIC_BROKER_CONFIG, "7",
     [("1", ["2"]), ("11", ["10"])]),
    ("share.partition.max.record.locks", "1500", ConfigSource.STATIC_BROKER_CONFIG, "3000",
     [("99", ["100"]), ("4001", ["4000"])]),
    ("share.renew.acknowledge.enable", "true", ConfigSource.DEFAULT_CONFIG, "false",
     [("maybe", ["true", "false"])]),
    ("share.assignment.interval.ms", "2000", ConfigSource.STATIC_BROKER_CONFIG, "500",
     [("-1", ["0"]), ("15001", ["15000"])]),
    ("share.assignor.offload.enable", "false", ConfigSource.STATIC_BROKER_CONFIG, "true",
     [("perhaps", ["true", "false"])]),
]


@pytest.fixture(scope="module")
def config_broker():
    with EmbeddedBroker(config=BROKER_CONFIG) as b:
        yield b


def effective(broker, group: str, key: str):
    """The value the broker applies for the group (its resolved ShareGroupConfig), as a string."""
    value = broker.call(lambda: getattr(broker.server.state.group_config(group),
                                        key.removeprefix("share.").replace(".", "_")))
    return str(value).lower() if isinstance(value, bool) else str(value)


def described(bootstrap: str, group: str, key: str) -> tuple[str, ConfigSource, bool]:
    entry = describe_group_configs(bootstrap, group)[key]
    return entry.value, ConfigSource(entry.source), entry.is_default


@pytest.mark.parametrize("key, default, default_source, value, refused", GROUP_CONFIG_CASES,
                         ids=[c[0] for c in GROUP_CONFIG_CASES])
def test_every_share_group_config_is_set_described_deleted_and_validated(config_broker, key, default,
                                                                         default_source, value, refused):
    bootstrap, group = config_broker.bootstrap_servers, f"cfg-{key}"
    assert described(bootstrap, group, key) == (default, default_source, default_source == ConfigSource.DEFAULT_CONFIG)
    assert effective(config_broker, group, key) == default

    set_group_configs(bootstrap, group, {key: value})
    assert described(bootstrap, group, key) == (value, ConfigSource.GROUP_CONFIG, False)
    assert effective(config_broker, group, key) == value

    for bad, bounds in refused:
        error = alter_group_configs(bootstrap, group, [(key, bad, AlterConfigOpType.SET)])
        assert error is not None and error.code() == KafkaError.INVALID_CONFIG, (bad, error)
        message = error.str()
        assert key in message and all(b in message for b in bounds), (bad, message)
        assert described(bootstrap, group, key) == (value, ConfigSource.GROUP_CONFIG, False), f"{bad} was stored"

    assert alter_group_configs(bootstrap, group, [(key, None, AlterConfigOpType.DELETE)]) is None
    assert described(bootstrap, group, key) == (default, default_source, default_source == ConfigSource.DEFAULT_CONFIG)
    assert effective(config_broker, group, key) == default


def test_unknown_group_config_keys_get_invalid_config_and_nothing_is_applied(config_broker):
    bootstrap, group = config_broker.bootstrap_servers, "cfg-unknown"
    error = alter_group_configs(bootstrap, group, [("share.no.such", "1", AlterConfigOpType.SET)])
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG, error
    assert "share.no.such" in error.str(), error.str()

    # the request is validated as a whole: a valid key next to an unknown one is not applied either
    error = alter_group_configs(bootstrap, group, [("share.delivery.count.limit", "3", AlterConfigOpType.SET),
                                                   ("share.no.such", "1", AlterConfigOpType.SET)])
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG, error
    assert described(bootstrap, group, "share.delivery.count.limit") == ("4", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert "share.no.such" not in describe_group_configs(bootstrap, group)


def test_a_new_lock_duration_applies_from_the_next_acquisition(make_broker):
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000})
    bootstrap, topic, group = broker.bootstrap_servers, "lock-change", "sg-lock-change"
    topic_id = create_topic(bootstrap, topic, 1)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    tp = (topic_id, 0)

    def lock(offset: int):
        """(state, holder, lock deadline) of the run holding `offset` in the group's share partition."""
        def read():
            ctx = broker.server.share_partitions.contexts.get((group, topic_id, 0))
            if ctx is None:
                return None
            run = next((r for r in ctx.share_partition.runs if r.first <= offset <= r.last), None)
            return None if run is None else (run.state, run.member_id, run.deadline_ms)
        return broker.call(read)

    def acquire(client: ShareClient, offset: int):
        """ShareFetch until `offset` is acquired; returns (response, the broker's lock clock before,
        after): acquisition locks run on the monotonic clock (`clock.monotonic_ms`)."""
        got = {}

        def fetch():
            before = monotonic_ms()
            resp = client.fetch(max_wait_ms=200)
            after = monotonic_ms()
            assert resp.error_code == ErrorCode.none, resp
            if acquired_offsets(resp).get(tp):
                got["result"] = (resp, before, after)
            return got
        wait_until(fetch, 10, 0, message=f"offset {offset} acquired")
        resp, before, after = got["result"]
        assert acquired_offsets(resp)[tp] == [(offset, 1)], acquired_offsets(resp)
        return resp, before, after

    produce(bootstrap, topic, [b"old lock"])
    with ShareClient(bootstrap, group) as member:
        assert member.join([topic]).error_code == ErrorCode.none
        member.wait_for_assignment()
        resp, t0, t1 = acquire(member, 0)
        assert resp.acquisition_lock_timeout == datetime.timedelta(milliseconds=30000)
        state, holder, old_deadline = lock(0)
        assert (state, holder) == (RecordState.ACQUIRED, member.member_id)
        assert t0 + 30000 <= old_deadline <= t1 + 30000, (t0, old_deadline, t1)

        set_group_configs(bootstrap, group, {"share.record.lock.duration.ms": "1000"})
        assert describe_group_configs(bootstrap, group)["share.record.lock.duration.ms"].value == "1000"
        # the record already acquired keeps the lock it was given
        assert lock(0) == (RecordState.ACQUIRED, member.member_id, old_deadline)

        produce(bootstrap, topic, [b"new lock"])
        resp, t2, t3 = acquire(member, 1)
        assert resp.acquisition_lock_timeout == datetime.timedelta(milliseconds=1000)
        state, holder, new_deadline = lock(1)
        assert (state, holder) == (RecordState.ACQUIRED, member.member_id)
        assert t2 + 1000 <= new_deadline <= t3 + 1000, (t2, new_deadline, t3)

        # the new 1 s lock runs out (the record becomes AVAILABLE again) while the old one still holds
        wait_until(lambda: (lock(1) or (None,))[0] == RecordState.AVAILABLE, 10,
                   message="the 1 s lock on offset 1 to expire")
        assert lock(0) == (RecordState.ACQUIRED, member.member_id, old_deadline)
