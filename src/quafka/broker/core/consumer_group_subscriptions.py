"""A consumer group's subscribed topics, kept up to date as members come, go and change their
subscription, so that a heartbeat that changes nothing costs the same at 10 members as at 1,000
(issue 28).

Kafka keeps the same books in its ConsumerGroup (group-coordinator module, modern.consumer):

- `subscribedTopicNames`, a count per topic name of the subscriptions that include it, updated by
  `ConsumerGroup.updateMember`/`removeMember` through `computeSubscribedTopicNames(oldMember,
  newMember)`: only the member that changed is looked at;
- `subscribedRegularExpressions`, a count per regex of the members that use it
  (`ConsumerGroup.numSubscribedMembers(regex)` / `updateMember`);
- `resolvedRegularExpressions`, the topics each regex matched the last time it was resolved
  (KIP-848's ConsumerGroupRegularExpression record; `GroupMetadataManager.refreshRegularExpressions`
  resolves them in the background, at most once per `group.consumer.regex.refresh.interval.ms`,
  and counts each resolved topic once per regex, not once per member).

quafka does the same with one difference: it resolves a regex when the topics change
(`ConsumerGroupCoordinator.on_topics_changed`, once per regex and metadata version for all groups)
and when the first member subscribes with it, rather than in the background, so a new matching
topic reaches the group's next heartbeat as before. The regex resolutions are not stored as
records (quafka writes no ConsumerGroupRegularExpression record; they are resolved again at
start-up).

With an authorizer (issue 29), the topics a regex resolves to are also filtered by the DESCRIBE
permission of the member whose heartbeat resolved them (Kafka's
`TopicRegexResolver.filterTopicDescribeAuthorizedTopics`, called by
`GroupMetadataManager.maybeUpdateRegularExpressions` with that member's RequestContext): the
resolutions are then the group's own, not shared with other groups, and are refreshed as Kafka
refreshes them (consumer_group.py `_refresh_regexes`): `stale` says the topics changed since, and
`refreshed_ms` when they were last resolved.

`SubscribedTopics.names()` is what the group subscribes to: every topic named by a member (whether
it exists or not) and every existing topic a regex in use matches in full
(`Pattern.matcher(topic).matches()` in Kafka; `re.fullmatch` here).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

__all__ = ["Resolve", "SubscribedTopics"]

Resolve = Callable[[str], frozenset[str]]  # regex -> the topic names it matches now


class SubscribedTopics:
    """Reference counts of a group's subscribed topics and regexes. `add`/`remove` take one
    member's subscription (its names and its regex or None) and cost O(its topics)."""

    __slots__ = ("_topic_counts", "_regex_counts", "_resolved", "refreshed_ms", "stale")

    def __init__(self) -> None:
        self._topic_counts: Counter[str] = Counter()  # Kafka's subscribedTopicNames
        self._regex_counts: Counter[str] = Counter()  # subscribedRegularExpressions
        self._resolved: dict[str, frozenset[str]] = {}  # resolvedRegularExpressions
        # with an authorizer only: when the regexes were last resolved in a member's context
        # (lastResolvedRegularExpressionRefreshTimeMs), and whether topics were created since
        self.refreshed_ms = 0
        self.stale = False

    def has_regex(self, regex: str) -> bool:
        """Whether a member of the group subscribes with `regex` (numSubscribedMembers(regex) > 0)."""
        return regex in self._regex_counts

    def has_regexes(self) -> bool:
        return bool(self._regex_counts)

    def add(self, names: Iterable[str], regex: str | None, resolve: Resolve) -> bool:
        """Count one member's subscription in; True if the set of subscribed topics grew."""
        grew = self._count(names, 1)
        if regex:
            self._regex_counts[regex] += 1
            if self._regex_counts[regex] == 1:
                self._resolved[regex] = topics = resolve(regex)
                grew = self._count(topics, 1) or grew
        return grew

    def remove(self, names: Iterable[str], regex: str | None) -> bool:
        """Count one member's subscription out; True if the set of subscribed topics shrank."""
        shrank = self._count(names, -1)
        if regex:
            self._regex_counts[regex] -= 1
            if self._regex_counts[regex] <= 0:
                del self._regex_counts[regex]
                shrank = self._count(self._resolved.pop(regex, frozenset()), -1) or shrank
        return shrank

    def refresh(self, resolve: Resolve) -> bool:
        """Resolve every regex in use again (the topics changed); True if what any of them matches
        changed."""
        changed = False
        for regex in sorted(self._regex_counts):
            old, new = self._resolved.get(regex, frozenset()), resolve(regex)
            if new != old:
                self._resolved[regex] = new
                self._count(old - new, -1)
                self._count(new - old, 1)
                changed = True
        return changed

    def member_topics(self, names: Iterable[str], regex: str | None) -> frozenset[str]:
        """One member's topics: its names and what its regex (in use, so resolved) matches."""
        if not regex:
            return frozenset(names)
        return frozenset(names) | self._resolved.get(regex, frozenset())

    def names(self) -> frozenset[str]:
        return frozenset(self._topic_counts)

    def counts(self) -> tuple[dict[str, int], dict[str, int], dict[str, frozenset[str]]]:
        """The books as plain dicts (topic counts, regex counts, resolutions), for tests."""
        return dict(self._topic_counts), dict(self._regex_counts), dict(self._resolved)

    def _count(self, topics: Iterable[str], delta: int) -> bool:
        """Add `delta` to each topic's count; True if a topic appeared or disappeared."""
        counts = self._topic_counts
        edge = False
        for topic in topics:
            before = counts.get(topic, 0)
            after = before + delta
            if after <= 0:
                counts.pop(topic, None)
            else:
                counts[topic] = after
            edge = edge or (before > 0) != (after > 0)
        return edge
