"""Online migration in the pure machines (broker/core/consumer_group_migration.py): a classic group
turned into a consumer group (ConsumerGroup.fromClassicGroup), its classic members served by the
consumer group (classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup), the downgrade when the
last consumer-protocol member goes (convertToClassicGroup, ClassicGroup.fromConsumerGroup) and the
policy; plus the codecs they need (ClassicMemberMetadata, ConsumerProtocol subscription/assignment)."""

from __future__ import annotations

import struct
from uuid import UUID

import pytest

from quafka.broker.core.classic_group_model import ClassicGroup, ClassicGroupMember, ClassicState
from quafka.broker.core.consumer_group import ConsumerGroupCoordinator, Downgraded, MemberRemoved, MigrationPolicy
from quafka.broker.core.consumer_group_images import ConsumerGroupImages, image_of, restore_group
from quafka.broker.core.consumer_group_migration import join_timer_key, sync_timer_key
from quafka.broker.core.consumer_offsets import GroupKind, GroupView, validate_consumer_member
from quafka.protocol.consumer_group_records import (
    decode_classic_member_metadata,
    decode_consumer_group_record,
    encode_classic_member_metadata,
    encode_consumer_group_record,
)
from quafka.protocol.consumer_protocol import (
    decode_consumer_assignment,
    decode_consumer_subscription,
    encode_consumer_assignment,
)
from quafka.protocol.errors import ErrorCode

T = UUID(int=7)
TOPICS = {"t": (T, 4)}


def subscription(topics=("t",), owned=None, version=1) -> bytes:
    """ConsumerProtocolSubscription as a Java or librdkafka client writes it."""
    out = struct.pack(">hi", version, len(topics))
    for name in topics:
        out += struct.pack(">h", len(name)) + name.encode()
    out += struct.pack(">i", -1)  # no user data
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for name, ps in owned.items():
            out += struct.pack(">h", len(name)) + name.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


def classic_group(generation=5, assignments=None) -> ClassicGroup:
    """A Stable classic group of two members, a holding partitions 0-1 and b 2-3 of t."""
    assignments = assignments or {"a": {"t": (0, 1)}, "b": {"t": (2, 3)}}
    group = ClassicGroup("g", ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE, 0, generation, "consumer",
                         "range", "a")
    for member_id, parts in assignments.items():
        group.add(ClassicGroupMember(member_id, None, "client-" + member_id, "/127.0.0.1", 30000, 10000, "consumer",
                                     (("range", subscription()), ("roundrobin", subscription())),
                                     encode_consumer_assignment(parts, 1)))
    return group


def coordinator(policy=MigrationPolicy.BIDIRECTIONAL) -> ConsumerGroupCoordinator:
    c = ConsumerGroupCoordinator(topics=TOPICS)
    c.migration_policy = policy
    return c


def upgraded(policy=MigrationPolicy.BIDIRECTIONAL):
    c = coordinator(policy)
    assert c.upgrade_refusal(classic_group()) is None
    effects = c.adopt_classic(classic_group(), now_ms=0)
    return c, effects


# --------------------------------------------------------------------------- codecs

def test_classic_member_metadata_round_trips_with_the_nullable_struct_marker():
    payload = encode_classic_member_metadata(10000, (("range", b"\x00\x01"), ("cooperative-sticky", b"")))
    assert payload[0] == 1  # Kafka's generated writer: a present nullable struct starts with byte 1
    assert decode_classic_member_metadata(payload) == (10000, (("range", b"\x00\x01"), ("cooperative-sticky", b"")))
    assert decode_classic_member_metadata(b"\xff") is None


def test_consumer_protocol_subscription_and_assignment():
    sub = decode_consumer_subscription(subscription(("t", "u"), {"t": [1, 2]}, version=1))
    assert (sub.version, sub.topics, sub.owned_partitions) == (1, ("t", "u"), {"t": (1, 2)})
    assert decode_consumer_subscription(subscription(("t",), version=0)).owned_partitions == {}
    encoded = encode_consumer_assignment({"t": frozenset({3, 1})}, 7)
    assert struct.unpack_from(">h", encoded)[0] == 3  # versions above 3 are written as 3
    assert decode_consumer_assignment(encoded) == {"t": (1, 3)}
    with pytest.raises(ValueError):
        decode_consumer_subscription(b"\x00\x01\x00")


# --------------------------------------------------------------------------- upgrade

def test_a_member_that_joined_during_the_rebalance_without_the_groups_protocol_comes_over():
    """The last generation chose range; a member that joined since (never synced: no assignment)
    asks roundrobin only, as aiokafka does. The upgrade takes its subscription from the protocol it
    has and gives it no partitions (ConsumerGroup.fromClassicGroup accepts the empty assignment);
    it was refused as a malformed protocol before — a clean-clone CI run caught it, an aiokafka
    member rejoining as the KIP-848 member arrived."""
    classic = classic_group()
    classic.add(ClassicGroupMember("c", None, "client-c", "/127.0.0.1", 30000, 10000, "consumer",
                                   (("roundrobin", subscription()),), b""))
    assert classic.protocol_name == "range"
    c = coordinator()
    c.adopt_classic(classic, now_ms=0)
    group = c.group("g")
    assert group.members["c"].current.assigned == {} and group.target["c"] == {}
    assert group.members["c"].subscribed_topic_names == group.members["a"].subscribed_topic_names
    assert group.members["a"].current.assigned and group.members["b"].current.assigned


def test_a_classic_group_becomes_a_consumer_group_at_its_generation_members_keeping_their_partitions():
    c, _effects = upgraded()
    group = c.group("g")
    assert group.assignment_epoch == 5 and group.group_epoch >= 5
    assert {m: dict(x.assigned) for m, x in group.members.items()} == {"a": {T: {0, 1}}, "b": {T: {2, 3}}}
    assert all(m.uses_classic_protocol and m.member_epoch == 5 for m in group.members.values())
    assert group.members["a"].subscribed_topic_names == ("t",)
    assert decode_classic_member_metadata(group.members["a"].classic_member_metadata)[0] == 10000


def test_the_converted_group_is_its_records():
    """What the shell appends after the classic tombstone replays into the same group."""
    c, _effects = upgraded()
    images = ConsumerGroupImages()
    for record in (decode_consumer_group_record(*encode_consumer_group_record(r))
                   for r in _records(c.group("g"))):
        images.replay(record)
    replayed = restore_group("g", images.groups()["g"])
    assert image_of(replayed) == image_of(c.group("g"))


def _records(group):
    from quafka.broker.core.consumer_group_images import diff
    return diff({}, image_of(group))


@pytest.mark.parametrize("policy, refused", [(MigrationPolicy.BIDIRECTIONAL, False), (MigrationPolicy.UPGRADE, False),
                                             (MigrationPolicy.DOWNGRADE, True), (MigrationPolicy.DISABLED, True)])
def test_the_policy_decides_the_upgrade(policy, refused):
    reason = coordinator(policy).upgrade_refusal(classic_group())
    assert (reason is not None) == refused
    if refused:
        assert "online upgrade is disabled" in reason


def test_a_group_not_using_the_consumer_protocol_or_too_large_is_not_upgraded():
    group = classic_group()
    group.protocol_type = "connect"
    assert "does not use the consumer embedded protocol" in coordinator().upgrade_refusal(group)
    c = coordinator()
    c.max_group_size = 1
    assert "exceeds the consumer group maximum size" in c.upgrade_refusal(classic_group())


# --------------------------------------------------------------------------- classic members in a consumer group

def join_consumer_member(c, member_id="m", now_ms=0):
    result, effects = c.heartbeat("g", member_id, 0, rebalance_timeout_ms=5000, subscribed_topic_names=["t"],
                                  topic_partitions={}, now_ms=now_ms)
    assert result.error is ErrorCode.none, result
    return result, effects


def test_a_new_consumer_member_makes_classic_members_rejoin_and_revoke_before_it_gets_partitions():
    c, _ = upgraded()
    joined, _ = join_consumer_member(c)
    assert joined.assignment == {}  # every partition is still held by a classic member
    error, effects = c.classic_heartbeat(group_id="g", member_id="a", instance_id=None, generation_id=5, now_ms=10)
    assert error is ErrorCode.rebalance_in_progress
    assert any(getattr(e, "key", None) == join_timer_key("g", "a") for e in effects)
    # a rejoins (eager: owning nothing); its generation is its member epoch, no leader
    result, effects = c.classic_join(group_id="g", member_id="a", instance_id=None, protocol_type="consumer",
                                     protocols=(("range", subscription()),), session_timeout_ms=10000,
                                     rebalance_timeout_ms=30000, client_id="c", client_host="h",
                                     requires_known_member_id=True, new_member_id="unused", now_ms=20)
    assert result.error is ErrorCode.none and result.protocol_name == "range"
    assert any(getattr(e, "key", None) == sync_timer_key("g", "a") for e in effects)
    synced, _ = c.classic_sync(group_id="g", member_id="a", instance_id=None, generation_id=result.generation_id,
                               protocol_type="consumer", protocol_name="range", now_ms=30)
    assert synced.error is ErrorCode.none
    mine = set(decode_consumer_assignment(synced.assignment).get("t", ()))
    assert mine == set(c.group("g").members["a"].assigned.get(T, ()))
    # no partition is held by two members, whatever the moment
    held = [p for m in c.group("g").members.values() for ps in (m.assigned, m.pending_revocation)
            for p in ps.get(T, ())]
    assert len(held) == len(set(held))


def test_classic_requests_are_checked_like_kafka():
    c, _ = upgraded()
    join_consumer_member(c)
    assert c.classic_heartbeat(group_id="g", member_id="a", instance_id=None, generation_id=4,
                               now_ms=1)[0] is ErrorCode.illegal_generation
    assert c.classic_heartbeat(group_id="g", member_id="zz", instance_id=None, generation_id=5,
                               now_ms=1)[0] is ErrorCode.unknown_member_id
    assert c.classic_heartbeat(group_id="g", member_id="m", instance_id=None, generation_id=1,
                               now_ms=1)[0] is ErrorCode.unknown_member_id  # it uses the consumer protocol
    synced, _ = c.classic_sync(group_id="g", member_id="a", instance_id=None, generation_id=5, protocol_type="consumer",
                               protocol_name="roundrobin", now_ms=1)
    assert synced.error is ErrorCode.inconsistent_group_protocol
    result, _ = c.classic_join(group_id="g", member_id="", instance_id=None, protocol_type="consumer",
                               protocols=(("range", subscription()),), session_timeout_ms=10000,
                               rebalance_timeout_ms=30000, client_id="c", client_host="h",
                               requires_known_member_id=True, new_member_id="new-1", now_ms=1)
    assert (result.error, result.member_id) == (ErrorCode.member_id_required, "new-1")
    result, _ = c.classic_join(group_id="g", member_id="x", instance_id=None, protocol_type="consumer",
                               protocols=(("sticky", subscription()),), session_timeout_ms=10000,
                               rebalance_timeout_ms=30000, client_id="c", client_host="h",
                               requires_known_member_id=True, new_member_id="unused", now_ms=1)
    assert result.error is ErrorCode.inconsistent_group_protocol  # no protocol every classic member supports


def test_a_classic_member_that_does_not_rejoin_in_its_rebalance_timeout_is_removed():
    c, _ = upgraded()
    join_consumer_member(c)
    _error, effects = c.classic_heartbeat(group_id="g", member_id="a", instance_id=None, generation_id=5, now_ms=0)
    deadline = next(e.deadline_ms for e in effects if getattr(e, "key", None) == join_timer_key("g", "a"))
    assert deadline == 30000
    effects = c.on_timer(join_timer_key("g", "a"), deadline)
    assert any(isinstance(e, MemberRemoved) and e.member_id == "a" for e in effects)
    assert "a" not in c.group("g").members


def test_classic_leave_removes_without_downgrading_and_offsets_check_generation():
    c, _ = upgraded()
    join_consumer_member(c)
    view = c.offsets_view("g")
    gv = GroupView(GroupKind.CONSUMER, member_epochs=view.member_epochs, classic_members=view.classic_members)
    assert validate_consumer_member(gv, "a", 5, api_version=2) is ErrorCode.none  # classic: any version
    assert validate_consumer_member(gv, "a", 4, api_version=8) is ErrorCode.illegal_generation
    assert validate_consumer_member(gv, "m", 0, api_version=8) is ErrorCode.unsupported_version
    epoch = c.group("g").group_epoch
    results, _effects = c.classic_leave("g", [("a", None), ("m", None), ("nobody", None)])
    assert [e for _m, _i, e in results] == [ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.unknown_member_id]
    assert c.group("g").group_epoch == epoch + 1 and set(c.group("g").members) == {"b", "m"}


# --------------------------------------------------------------------------- downgrade

def test_the_last_consumer_member_leaving_downgrades_to_a_classic_group_with_the_target_assignment():
    c, _ = upgraded()
    join_consumer_member(c)
    epoch = c.group("g").group_epoch
    targets = {m: set(t.get(T, ())) for m, t in c.group("g").target.items()}
    result, effects = c.heartbeat("g", "m", -1, now_ms=100)
    assert result.error is ErrorCode.none
    down = [e for e in effects if isinstance(e, Downgraded)]
    assert len(down) == 1 and c.group("g") is None
    value = down[0].value
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", epoch, "range", "a")
    held = {m.member_id: decode_consumer_assignment(m.assignment).get("t", ()) for m in value.members}
    # each keeps its target (ClassicGroup.fromConsumerGroup); the leaver's go in the rebalance that follows
    assert {m: set(ps) for m, ps in held.items()} == {"a": targets["a"], "b": targets["b"]}
    assert targets["m"] and not targets["m"] & (targets["a"] | targets["b"])


@pytest.mark.parametrize("policy", [MigrationPolicy.UPGRADE, MigrationPolicy.DISABLED])
def test_without_the_downgrade_policy_the_group_stays_a_consumer_group(policy):
    c, _ = upgraded(MigrationPolicy.BIDIRECTIONAL)
    join_consumer_member(c)
    c.migration_policy = policy
    _result, effects = c.heartbeat("g", "m", -1, now_ms=100)
    assert not any(isinstance(e, Downgraded) for e in effects)
    assert set(c.group("g").members) == {"a", "b"}


def test_a_consumer_member_whose_session_expires_downgrades_too_but_not_above_the_classic_max_size():
    c, _ = upgraded()
    _joined, effects = join_consumer_member(c)
    c.classic_max_size = 1
    deadline = c.group("g").members["m"].session_deadline_ms
    effects = c.on_timer(("consumer-group-session", "g", "m"), deadline)
    assert not any(isinstance(e, Downgraded) for e in effects) and c.group("g") is not None
    c2, _ = upgraded()
    join_consumer_member(c2)
    deadline = c2.group("g").members["m"].session_deadline_ms
    assert any(isinstance(e, Downgraded) for e in c2.on_timer(("consumer-group-session", "g", "m"), deadline))


# --------------------------------------------------------------------------- the classic machine's side

def test_a_surrendered_classic_group_answers_its_parked_joins_with_rebalance_in_progress():
    """convertToConsumerGroup: completeAllJoinFutures / completeAllSyncFutures(REBALANCE_IN_PROGRESS)."""
    from quafka.broker.core.classic_group import ClassicGroupCoordinator, JoinResponse

    machine = ClassicGroupCoordinator(new_member_id=lambda prefix: f"{prefix}-1")
    effects = machine.join_group(token=1, group_id="g", member_id="", protocol_type="consumer",
                                 protocols=[("range", subscription())], session_timeout_ms=10000,
                                 rebalance_timeout_ms=30000, group_instance_id=None, client_id="c",
                                 client_host="h", api_version=3, now_ms=0)
    assert not any(isinstance(e, JoinResponse) for e in effects)  # parked in the initial rebalance delay
    group, effects = machine.surrender("g", now_ms=1)
    assert group is not None and machine.group("g") is None
    assert [e.error for e in effects if isinstance(e, JoinResponse)] == [ErrorCode.rebalance_in_progress]


def test_an_adopted_classic_group_rebalances_so_its_members_rejoin():
    from quafka.broker.core.classic_group import ClassicGroupCoordinator
    from quafka.broker.core.classic_group_views import image_of as classic_image

    machine = ClassicGroupCoordinator(new_member_id=lambda prefix: prefix)
    machine.adopt("g", classic_image(classic_group()), now_ms=0)
    assert machine.group("g").state is ClassicState.PREPARING_REBALANCE
    error, _ = machine.heartbeat(group_id="g", member_id="a", generation_id=5, now_ms=1)
    assert error is ErrorCode.rebalance_in_progress
