"""A KIP-848 group's regexes under an authorizer (issue 29's departure, closed): the topics a regex
resolves to are those the heartbeating member's principal may DESCRIBE, resolved when Kafka's
GroupMetadataManager.maybeUpdateRegularExpressions resolves them (a regex new to the group, a topic
created since, or the last resolution older than group.consumer.regex.refresh.interval.ms) and
filtered as TopicRegexResolver.filterTopicDescribeAuthorizedTopics filters them."""

from uuid import UUID

from quafka.broker.core.consumer_group import REGEX_REFRESH_INTERVAL_MS, ConsumerGroupCoordinator
from quafka.broker.core.consumer_group_images import image_of, restore_group
from quafka.protocol.errors import ErrorCode

A, B, C, X = UUID(int=1), UUID(int=2), UUID(int=3), UUID(int=9)
TOPICS = {"rx-a": (A, 2), "rx-b": (B, 3), "other": (X, 1)}


class Principal:
    """A principal's DESCRIBE decisions, recording what was asked."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = set(allowed)
        self.asked: list[str] = []

    def __call__(self, topic: str) -> bool:
        self.asked.append(topic)
        return topic in self.allowed


def coordinator(topics=TOPICS) -> ConsumerGroupCoordinator:
    c = ConsumerGroupCoordinator(topics=topics)
    c.authorize_regex_topics = True
    return c


def join(c, member, principal, regex="rx-.*", now_ms=0):
    r, _ = c.heartbeat("g", member, 0, subscribed_topic_names=[], subscribed_topic_regex=regex,
                       rebalance_timeout_ms=1000, topic_partitions={}, now_ms=now_ms, describable=principal)
    assert r.error == ErrorCode.none, r
    return r


def beat(c, member, epoch, principal, now_ms):
    r, _ = c.heartbeat("g", member, epoch, now_ms=now_ms, describable=principal)
    assert r.error == ErrorCode.none, r
    return r


def held(c, member):
    return {t: len(ps) for t, ps in c.group("g").members[member].assigned.items() if ps}


def test_a_regex_resolves_to_the_matching_topics_the_member_may_describe_each_asked_once():
    p = Principal("rx-a")
    r = join(c := coordinator(), "m", p, regex="rx-.*|rx-a")
    assert {t: len(ps) for t, ps in r.assignment.items()} == {A: 2}
    assert c.offsets_view("g").subscribed_topics == {"rx-a"}
    assert sorted(p.asked) == ["rx-a", "rx-b"]  # "other" does not match; each match asked once


def test_a_describe_granted_later_is_assigned_at_the_next_resolution_as_in_kafka():
    """Kafka re-resolves on a heartbeat once a topic was created (lastMetadataImageWithNewTopics) or
    the last resolution is older than group.consumer.regex.refresh.interval.ms; an ACL change alone
    does not resolve again. A revoked DESCRIBE leaves the same way."""
    p = Principal("rx-a")
    c = coordinator()
    r = join(c, "m", p)
    p.allowed.add("rx-b")
    r = beat(c, "m", r.member_epoch, p, now_ms=1000)
    assert held(c, "m") == {A: 2}  # no resolution yet
    c.on_topics_changed({**TOPICS, "unrelated": (C, 1)}, 2000)  # a topic is created
    r = beat(c, "m", r.member_epoch, p, now_ms=2000)
    assert held(c, "m") == {A: 2, B: 3}
    p.allowed.discard("rx-a")
    r = beat(c, "m", r.member_epoch, p, now_ms=2000 + REGEX_REFRESH_INTERVAL_MS)
    assert held(c, "m") == {A: 2, B: 3}  # not older than the interval yet
    r = beat(c, "m", r.member_epoch, p, now_ms=2001 + REGEX_REFRESH_INTERVAL_MS)
    assert held(c, "m") == {B: 3}
    assert c.offsets_view("g").subscribed_topics == {"rx-b"}


def test_a_created_topic_the_member_may_not_describe_is_not_assigned():
    p = Principal("rx-a", "rx-c")
    c = coordinator()
    r = join(c, "m", p)
    c.on_topics_changed({**TOPICS, "rx-c": (C, 1), "rx-d": (UUID(int=4), 1)}, 10)
    beat(c, "m", r.member_epoch, p, now_ms=20)
    assert held(c, "m") == {A: 2, C: 1}


def test_the_group_shares_one_resolution_made_in_the_context_of_the_member_that_triggered_it():
    """Kafka resolves a group's regexes once for the group, with the RequestContext of the member
    whose heartbeat scheduled the resolution; a member joining with a regex already resolved takes
    that resolution; the next resolution (here: a topic created) is in the next heartbeat's context."""
    narrow, wide = Principal("rx-a"), Principal("rx-a", "rx-b")
    c = coordinator()
    ra = join(c, "a", narrow)
    rb = join(c, "b", wide, now_ms=5)
    assert wide.asked == []  # resolved already
    assert c.offsets_view("g").subscribed_topics == {"rx-a"}
    c.on_topics_changed({**TOPICS, "unrelated": (C, 1)}, 10)
    beat(c, "b", rb.member_epoch, wide, now_ms=20)
    assert c.offsets_view("g").subscribed_topics == {"rx-a", "rx-b"}
    beat(c, "a", ra.member_epoch, narrow, now_ms=30)
    assert c.offsets_view("g").subscribed_topics == {"rx-a", "rx-b"}  # no new resolution due


def test_a_restored_group_resolves_again_in_the_first_heartbeat_s_context():
    """Kafka stores the resolutions (ConsumerGroupRegularExpression records); quafka does not, so a
    group replayed at start-up resolves its regexes at its first heartbeat, filtered."""
    p = Principal("rx-a")
    c = coordinator()
    r = join(c, "m", p)
    image = image_of(c.group("g"))
    c2 = coordinator()
    c2.restore(restore_group("g", image), 100)
    beat(c2, "m", r.member_epoch, p, now_ms=200)
    assert c2.offsets_view("g").subscribed_topics == {"rx-a"}
    assert held(c2, "m") == {A: 2}


def test_without_an_authorizer_the_decision_is_never_asked():
    """The no-authorizer path is unchanged: the shell passes no decision, and one passed anyway is
    not called when `authorize_regex_topics` is off."""
    p = Principal()
    c = ConsumerGroupCoordinator(topics=TOPICS)
    r = join(c, "m", p)
    assert {t: len(ps) for t, ps in r.assignment.items()} == {A: 2, B: 3}
    c.on_topics_changed({**TOPICS, "rx-c": (C, 1)}, 10)
    beat(c, "m", r.member_epoch, p, now_ms=20)
    assert held(c, "m") == {A: 2, B: 3, C: 1} and p.asked == []
