"""The ACL core (broker/core/acl.py) against Kafka's StandardAuthorizerData rules: implied operations,
deny over allow, wildcard principal, host and resource, literal vs prefixed patterns, the default
when a resource has no ACL, super users, and the AclBindingFilter semantics (ANY, MATCH). A randomized
run compares AclIndex.find with a brute-force oracle (seed printed; rerun with QUAFKA_SEED=<seed>)."""

from __future__ import annotations

import itertools
import os
import random

import pytest

from quafka.broker.core import acl as acls
from quafka.broker.core.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclError,
    AclIndex,
    ResourcePatternFilter,
    binding,
)
from quafka.broker.core.acl_types import AclOperation as Op
from quafka.broker.core.acl_types import AclPermissionType as Perm
from quafka.broker.core.acl_types import PatternType as PT
from quafka.broker.core.acl_types import ResourceType as RT
from quafka.broker.core.metadata import ClusterMetadata, MetadataError

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
REAL_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]
REQUESTED_OPS = [op for op in REAL_OPS if op != Op.ALL]

# StandardAuthorizerData.findResult: an ALLOW of the key also allows these (besides itself and ALL)
IMPLIED = {Op.READ: {Op.DESCRIBE}, Op.WRITE: {Op.DESCRIBE}, Op.DELETE: {Op.DESCRIBE}, Op.ALTER: {Op.DESCRIBE},
           Op.ALTER_CONFIGS: {Op.DESCRIBE_CONFIGS}}


def index_of(*bindings) -> AclIndex:
    index = AclIndex()
    for i, b in enumerate(bindings):
        index.add(f"id{i}", b)
    return index


def allowed(index, op, name="t", principal=ALICE, host=HOST, rtype=RT.TOPIC, *, default=False, supers=frozenset()):
    return acls.authorize(index, frozenset(supers), default, principal, host, op, rtype, name).allowed


def topic_acl(op, perm=Perm.ALLOW, name="t", pt=PT.LITERAL, principal=ALICE, host="*"):
    return binding(RT.TOPIC, name, pt, principal, host, op, perm)


@pytest.mark.parametrize("granted,requested", list(itertools.product(REAL_OPS, REQUESTED_OPS)))
def test_every_allow_operation_pair_follows_the_implication_table(granted, requested):
    index = index_of(topic_acl(granted))
    expected = granted == Op.ALL or granted == requested or requested in IMPLIED.get(granted, set())
    assert allowed(index, requested) is expected


@pytest.mark.parametrize("denied,requested", list(itertools.product(REAL_OPS, REQUESTED_OPS)))
def test_a_deny_denies_only_its_own_operation_or_all_never_the_implied_ones(denied, requested):
    # an ALLOW ALL for everyone, plus the DENY: only the DENY's exact operation (or ALL) is refused
    index = index_of(topic_acl(Op.ALL, principal="User:*"), topic_acl(denied, Perm.DENY))
    assert allowed(index, requested) is not (denied == Op.ALL or denied == requested)


def test_deny_wins_over_allow_whatever_the_pattern_that_carries_it():
    for deny in (topic_acl(Op.READ, Perm.DENY, name="*"), topic_acl(Op.READ, Perm.DENY, name="t", pt=PT.PREFIXED),
                 topic_acl(Op.READ, Perm.DENY, principal="User:*"), topic_acl(Op.READ, Perm.DENY, host=HOST)):
        index = index_of(topic_acl(Op.READ), topic_acl(Op.ALL), deny)
        assert not allowed(index, Op.READ), deny
        assert allowed(index, Op.WRITE), deny


def test_wildcard_principal_and_host():
    index = index_of(topic_acl(Op.READ, principal="User:*"))
    assert allowed(index, Op.READ, principal=BOB)
    # User:* is the one wildcard principal (StandardAuthorizerData.WILDCARD_PRINCIPAL)
    assert not allowed(index_of(topic_acl(Op.READ, principal="Group:*")), Op.READ, principal="Group:x")
    index = index_of(topic_acl(Op.READ, host=HOST))
    assert allowed(index, Op.READ, host=HOST)
    assert not allowed(index, Op.READ, host="10.0.0.2")
    assert not allowed(index, Op.READ, principal=BOB)


def test_literal_prefixed_and_wildcard_resource_patterns():
    index = index_of(topic_acl(Op.READ, name="orders"), topic_acl(Op.WRITE, name="pay", pt=PT.PREFIXED),
                     topic_acl(Op.DESCRIBE, name="*"))
    assert allowed(index, Op.READ, "orders")
    assert not allowed(index, Op.READ, "orders-eu")  # a literal is not a prefix
    assert allowed(index, Op.WRITE, "payments") and allowed(index, Op.WRITE, "pay")
    assert not allowed(index, Op.WRITE, "pa")
    assert allowed(index, Op.DESCRIBE, "anything")
    # the wildcard is a LITERAL "*"; a PREFIXED "*" matches only names starting with "*"
    index = index_of(topic_acl(Op.READ, name="*", pt=PT.PREFIXED))
    assert not allowed(index, Op.READ, "t") and allowed(index, Op.READ, "*t")
    # resource types do not mix
    assert not allowed(index_of(topic_acl(Op.READ, name="g")), Op.READ, "g", rtype=RT.GROUP)


def test_the_default_applies_only_when_the_resource_has_no_acl_at_all():
    index = index_of(topic_acl(Op.READ, name="t", principal=BOB))
    assert not allowed(index, Op.READ, "t", default=True)  # t has an ACL (for bob): alice is denied
    assert allowed(index, Op.READ, "u", default=True)  # u has none: allow.everyone.if.no.acl.found
    assert not allowed(index, Op.READ, "u", default=False)
    decision = acls.authorize(index, frozenset(), True, ALICE, HOST, Op.READ, RT.TOPIC, "u")
    assert decision.rule == "DefaultAllow"


def test_super_users_are_allowed_everything_even_against_a_deny():
    index = index_of(topic_acl(Op.ALL, Perm.DENY, principal="User:*"))
    assert allowed(index, Op.DELETE, supers={"User:admin"}, principal="User:admin")
    assert not allowed(index, Op.DELETE, supers={"User:admin"})
    assert acls.parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    with pytest.raises(AclError, match="principalType:principalName"):
        acls.parse_super_users("User:a;bob")


def test_index_add_remove_keep_the_prefix_lengths_right():
    index = AclIndex()
    index.add("a", topic_acl(Op.READ, name="ab", pt=PT.PREFIXED))
    index.add("b", topic_acl(Op.READ, name="ab", pt=PT.PREFIXED, principal=BOB))
    index.add("c", topic_acl(Op.READ, name="abc", pt=PT.PREFIXED, principal="User:carol"))
    with pytest.raises(AclError, match="already exists"):
        index.add("d", topic_acl(Op.READ, name="ab", pt=PT.PREFIXED))
    with pytest.raises(AclError, match="already exists"):
        index.add("a", topic_acl(Op.WRITE))
    index.remove("a")
    assert not allowed(index, Op.READ, "abx")
    assert allowed(index, Op.READ, "abx", principal=BOB)
    index.remove("b")
    assert allowed(index, Op.READ, "abcd", principal="User:carol")
    index.remove("c")
    assert len(index) == 0 and allowed(index, Op.READ, "abcd", default=True)
    with pytest.raises(AclError, match="not found"):
        index.remove("c")


def test_resource_pattern_filter_any_literal_prefixed_and_match():
    lit, star, pre, other = (topic_acl(Op.READ, name="foo"), topic_acl(Op.READ, name="*"),
                             topic_acl(Op.READ, name="fo", pt=PT.PREFIXED), topic_acl(Op.READ, name="bar"))
    group = binding(RT.GROUP, "foo", PT.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW)
    every = [lit, star, pre, other, group]

    def sel(**kw):
        f = AclBindingFilter(ResourcePatternFilter(**kw))
        return [b for b in every if f.matches(b)]

    assert sel() == every
    assert sel(resource_type=RT.TOPIC) == [lit, star, pre, other]
    assert sel(resource_type=RT.ANY, name="foo") == [lit, group]  # ANY pattern type: exact name
    assert sel(resource_type=RT.TOPIC, name="foo", pattern_type=PT.LITERAL) == [lit]
    assert sel(resource_type=RT.TOPIC, name="fo", pattern_type=PT.PREFIXED) == [pre]
    assert sel(resource_type=RT.TOPIC, name="foo", pattern_type=PT.MATCH) == [lit, star, pre]
    assert sel(resource_type=RT.TOPIC, pattern_type=PT.PREFIXED) == [pre]


def test_entry_filter_and_unknown_filters():
    a, b = topic_acl(Op.READ), topic_acl(Op.WRITE, Perm.DENY, principal=BOB, host=HOST)
    f = AclBindingFilter(entry=AccessControlEntryFilter(principal=BOB))
    assert [x for x in (a, b) if f.matches(x)] == [b]
    f = AclBindingFilter(entry=AccessControlEntryFilter(host=HOST, permission_type=Perm.DENY, operation=Op.WRITE))
    assert [x for x in (a, b) if f.matches(x)] == [b]
    f = AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.READ, permission_type=Perm.ALLOW))
    assert [x for x in (a, b) if f.matches(x)] == [a]
    acls.validate_filter(acls.ANY_FILTER)
    with pytest.raises(AclError, match="Unknown patternFilter"):
        acls.validate_filter(AclBindingFilter(ResourcePatternFilter(pattern_type=PT.UNKNOWN)))
    with pytest.raises(AclError, match="Unknown entryFilter"):
        acls.validate_filter(AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.UNKNOWN)))


@pytest.mark.parametrize("bad,message", [
    (binding(RT.ANY, "t", PT.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW), "Invalid resourceType ANY"),
    (binding(RT.UNKNOWN, "t", PT.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW), "Invalid resourceType UNKNOWN"),
    (binding(RT.TOPIC, "t", PT.MATCH, ALICE, "*", Op.READ, Perm.ALLOW), "Invalid patternType MATCH"),
    (binding(RT.TOPIC, "t", PT.ANY, ALICE, "*", Op.READ, Perm.ALLOW), "Invalid patternType ANY"),
    (binding(RT.TOPIC, "t", PT.LITERAL, ALICE, "*", Op.ANY, Perm.ALLOW), "Invalid operation ANY"),
    (binding(RT.TOPIC, "t", PT.LITERAL, ALICE, "*", Op.READ, Perm.ANY), "Invalid permissionType ANY"),
    (binding(RT.CLUSTER, "c", PT.LITERAL, ALICE, "*", Op.ALTER, Perm.ALLOW), "only valid name for the CLUSTER"),
    (binding(RT.TOPIC, "", PT.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW), "empty resource name"),
    (binding(RT.TOPIC, "t", PT.LITERAL, "alice", "*", Op.READ, Perm.ALLOW), "principalType:principalName"),
])
def test_new_bindings_are_validated_as_aclcontrolmanager_does(bad, message):
    with pytest.raises(AclError, match=message):
        acls.validate_new_binding(bad)


def test_acl_records_replay_remove_and_snapshot():
    md = ClusterMetadata(cluster_id="c", node_id=1)
    a, b = topic_acl(Op.READ), topic_acl(Op.WRITE, name="p", pt=PT.PREFIXED)
    md.replay(acls.to_record("1" * 32, a))
    md.replay(acls.to_record("2" * 32, b))
    md.replay({"type": "remove_acl", "id": "1" * 32})
    assert md.acls.items() == [("2" * 32, b)]
    again = ClusterMetadata(cluster_id="c", node_id=1)
    for record in md.snapshot_records():
        again.replay(record)
    assert again.acls.items() == [("2" * 32, b)]
    with pytest.raises(MetadataError):
        md.replay({"type": "remove_acl", "id": "9" * 32})
    with pytest.raises(MetadataError):
        md.replay({**acls.to_record("3" * 32, a), "operation": "FLY"})


# ------------------------------------------------------------------------------ randomized vs oracle

def oracle(bindings, principal, host, op, rtype, name):
    """Brute force over every binding, written from Kafka's rules independently of AclIndex."""
    applies_to_resource = [
        b for b in bindings if b.pattern.resource_type == rtype and (
            (b.pattern.pattern_type == PT.LITERAL and b.pattern.name in (name, "*"))
            or (b.pattern.pattern_type == PT.PREFIXED and name.startswith(b.pattern.name)))]
    results = set()
    for b in applies_to_resource:
        e = b.entry
        if e.principal not in (principal, "User:*") or e.host not in (host, "*"):
            continue
        if e.permission_type == Perm.ALLOW:
            ok = e.operation in (Op.ALL, op) or op in IMPLIED.get(e.operation, set())
        else:
            ok = e.operation in (Op.ALL, op)
        if ok:
            results.add(e.permission_type)
    if Perm.DENY in results:
        return False
    if Perm.ALLOW in results:
        return True
    return False if applies_to_resource else None


SEEDS = [int(os.environ["QUAFKA_SEED"])] if "QUAFKA_SEED" in os.environ else list(range(8))


@pytest.mark.parametrize("seed", SEEDS)
def test_find_equals_a_brute_force_oracle(seed):
    print(f"seed {seed} (rerun: QUAFKA_SEED={seed})")
    rng = random.Random(seed)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "*a", "abcd"]
    principals = [ALICE, BOB, "User:*"]
    hosts = ["*", HOST, "10.0.0.2"]
    index = AclIndex()
    live: dict[str, acls.AclBinding] = {}
    for step in range(400):
        if live and rng.random() < 0.3:
            acl_id = rng.choice(sorted(live))
            index.remove(acl_id)
            del live[acl_id]
        else:
            b = binding(rng.choice([RT.TOPIC, RT.GROUP]), rng.choice(names), rng.choice([PT.LITERAL, PT.PREFIXED]),
                        rng.choice(principals), rng.choice(hosts), rng.choice(REAL_OPS),
                        rng.choice([Perm.ALLOW, Perm.DENY]))
            if b in live.values():
                continue
            acl_id = f"id{step}"
            index.add(acl_id, b)
            live[acl_id] = b
        for _ in range(10):
            args = (rng.choice([ALICE, BOB]), rng.choice([HOST, "10.0.0.2"]), rng.choice(REQUESTED_OPS),
                    rng.choice([RT.TOPIC, RT.GROUP]), rng.choice(names + ["abcde", "x"]))
            found = index.find(*args)
            assert found.allowed == oracle(live.values(), *args), (seed, step, args)
            if found.acl is not None:  # the deciding ACL is a live one that says so
                assert found.acl in live.values()
                assert found.acl.entry.permission_type == (Perm.ALLOW if found.allowed else Perm.DENY)


# ---------------------------------------------------------------------------------------------- by resource type

def by_type(index, op=Op.WRITE, principal=ALICE, host=HOST, rtype=RT.TOPIC, *, default=False, supers=frozenset()):
    return acls.authorize_by_resource_type(index, frozenset(supers), default, principal, host, op, rtype)


def test_by_resource_type_an_allow_on_any_resource_of_the_type_for_this_principal_and_host():
    """Authorizer.authorizeByResourceType: one applying ALLOW (principal or User:*, host or *) suffices."""
    assert by_type(index_of(topic_acl(Op.WRITE, name="orders")))
    assert by_type(index_of(topic_acl(Op.WRITE, name="pay", pt=PT.PREFIXED)))
    assert by_type(index_of(topic_acl(Op.ALL, name="orders", principal="User:*", host=HOST)))
    assert not by_type(index_of(topic_acl(Op.WRITE, name="orders")), principal=BOB)
    assert not by_type(index_of(topic_acl(Op.WRITE, name="orders", host="10.0.0.2")))
    assert not by_type(index_of(topic_acl(Op.WRITE, name="orders")), rtype=RT.GROUP)  # types do not mix
    assert not by_type(AclIndex())


def test_by_resource_type_asks_the_exact_operation_without_implications():
    """Unlike authorize, no implied operations: an ALLOW of WRITE does not answer DESCRIBE by type."""
    index = index_of(topic_acl(Op.WRITE, name="orders"))
    assert allowed(index, Op.DESCRIBE, "orders")
    assert not by_type(index, Op.DESCRIBE)
    assert not by_type(index, Op.READ)


def test_by_resource_type_deny_dominance():
    """A LITERAL `*` DENY denies outright; a LITERAL DENY dominates the LITERAL ALLOW of its name only;
    a PREFIXED DENY dominates every ALLOW whose name it prefixes; a LITERAL `*` ALLOW allows."""
    allow_lit, allow_pre = topic_acl(Op.WRITE, name="orders"), topic_acl(Op.WRITE, name="orders", pt=PT.PREFIXED)
    assert not by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="*")))
    assert not by_type(index_of(topic_acl(Op.WRITE, name="*"), topic_acl(Op.ALL, Perm.DENY, name="*")))
    assert not by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="orders")))
    assert by_type(index_of(allow_pre, topic_acl(Op.WRITE, Perm.DENY, name="orders")))  # a literal deny: one name
    for deny_prefix in ("o", "ord", "orders"):
        deny = topic_acl(Op.WRITE, Perm.DENY, name=deny_prefix, pt=PT.PREFIXED)
        assert not by_type(index_of(allow_lit, deny)) and not by_type(index_of(allow_pre, deny)), deny_prefix
    assert by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="ordersx", pt=PT.PREFIXED)))
    assert by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="x", pt=PT.PREFIXED)))
    # one undominated ALLOW among dominated ones is enough
    assert by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="orders"), topic_acl(Op.WRITE, name="b")))
    # a wildcard ALLOW wins over non-wildcard DENYs; a DENY for someone else or another operation is ignored
    assert by_type(index_of(topic_acl(Op.WRITE, name="*"), topic_acl(Op.WRITE, Perm.DENY, name="o", pt=PT.PREFIXED)))
    assert by_type(index_of(allow_lit, topic_acl(Op.WRITE, Perm.DENY, name="*", principal=BOB)))
    assert by_type(index_of(allow_lit, topic_acl(Op.READ, Perm.DENY, name="*")))


def test_by_resource_type_honours_super_users_and_the_default_through_the_probe_name():
    """The probe `authorize` on the LITERAL resource "hardcode" comes first: super users are allowed
    whatever the DENYs, and allow.everyone.if.no.acl.found applies when no ACL covers that name."""
    deny_all = index_of(topic_acl(Op.ALL, Perm.DENY, name="*", principal="User:*"))
    assert by_type(deny_all, supers={ALICE})
    assert not by_type(deny_all)
    assert by_type(AclIndex(), default=True)
    assert not by_type(index_of(topic_acl(Op.READ, name="*", principal=BOB)), default=True)  # "hardcode" has ACLs
    assert by_type(index_of(topic_acl(Op.WRITE, name="hard", pt=PT.PREFIXED, principal=BOB),
                            topic_acl(Op.WRITE, name="hardcode", principal=ALICE)))
    with pytest.raises(AclError):
        by_type(AclIndex(), Op.ANY)
    with pytest.raises(AclError):
        by_type(AclIndex(), rtype=RT.ANY)
