"""Committed offsets of consumer groups for the Admin: OffsetFetch (key 9), OffsetCommit (key 8) and
OffsetDelete (key 47), as `ConsumerGroupOffsetsMixin`, which `AsyncAdmin` inherits.

The requests go to the group's coordinator (``AsyncAdmin._group_call``) at the highest version both
the broker and kio serve. The values name topics both ways (``name`` and ``topic_id``):
``build_entity`` keeps the one the chosen version has (OffsetCommit and OffsetFetch v10 name topics
by id), and answers naming topics by id are mapped back to names from metadata. OffsetFetch v8+
carries a list of groups; v1-7 one group at the top level: the values carry both shapes too.

Offsets are committed as an admin client (and ``kafka-consumer-groups.sh``) does: generation -1 and
member id "", which only a group without active members (a simple group, or an Empty one) accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from quafka.protocol.consumer_protocol import decode_consumer_assignment
from quafka.protocol.errors import ErrorCode

from .errors import KafkaException, error_for_code

__all__ = ["ConsumerGroupDescription", "ConsumerGroupOffsetsMixin", "ConsumerMemberDescription"]


@dataclass(frozen=True)
class ConsumerMemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, tuple[int, ...]]  # decoded when the protocol type is "consumer", else {}
    member_epoch: int | None = None  # KIP-848 groups only
    target_assignment: dict[str, tuple[int, ...]] | None = None  # KIP-848 groups only


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignment_strategy: str  # classic: the chosen protocol (Stable groups), else ""; consumer: the assignor
    members: tuple[ConsumerMemberDescription, ...]
    type: str = "classic"  # "classic", or "consumer" for a KIP-848 group
    group_epoch: int | None = None  # KIP-848 groups only
    assignment_epoch: int | None = None  # KIP-848 groups only

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
OFFSET_DELETE_KEY = 47
DESCRIBE_GROUPS_KEY = 15
CONSUMER_GROUP_DESCRIBE_KEY = 69
NO_GENERATION = -1
ZERO_UUID = UUID(int=0)


def _raise_for(code: int, context: str) -> None:
    if code != ErrorCode.none:
        raise error_for_code(code, context)


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return topics


class ConsumerGroupOffsetsMixin:
    """The consumer-group offset operations of `AsyncAdmin` (it provides ``_get_cluster``,
    ``_group_call`` and ``list_offsets``)."""

    async def _topic_ids(self, names: Iterable[str]) -> dict[str, UUID]:
        """{name: topic id} of existing topics (the zero UUID for a topic that does not exist, so that
        a v10 request names it and the broker answers UNKNOWN_TOPIC_ID for it)."""
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        out = {}
        for name in names:
            try:
                out[name] = (await cluster.topic(name)).topic_id or ZERO_UUID
            except KafkaException as exc:
                if exc.code != ErrorCode.unknown_topic_or_partition:
                    raise
                out[name] = ZERO_UUID
        return out

    async def _topic_names(self, topics: Iterable[Any]) -> dict[UUID, str]:
        """{topic id: name} for the answer's topics named by id (v10), from fresh metadata."""
        ids = {t.topic_id for t in topics if getattr(t, "topic_id", None) not in (None, ZERO_UUID)}
        if not ids:
            return {}
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        known = {info.topic_id: name for name, info in cluster.topics.items()}
        if not ids <= set(known):
            await cluster.refresh_metadata(None)
            known = {info.topic_id: name for name, info in cluster.topics.items()}
        return known

    @staticmethod
    def _name_of(topic: Any, names: Mapping[UUID, str]) -> str:
        name = getattr(topic, "name", None)
        if name:
            return name
        topic_id = getattr(topic, "topic_id", None)
        return names.get(topic_id, str(topic_id))

    async def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        """{group id: description} of consumer groups of either protocol, as Kafka's Admin does
        (DescribeConsumerGroupsHandler): ConsumerGroupDescribe first where the broker serves it, and
        DescribeGroups for the groups it does not know as consumer groups (classic groups). A group
        that does not exist raises KafkaException (GROUP_ID_NOT_FOUND; before DescribeGroups v6 a
        broker reports such a group as Dead, which raises the same)."""
        out: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:
            described = await self._describe_kip848_group(group_id)
            out[group_id] = described if described is not None else await self._describe_classic_group(group_id)
        return out

    async def _describe_kip848_group(self, group_id: str) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe of one group; None when it is not a KIP-848 group (or the broker
        does not serve the API)."""
        conn = await self._coordinator(group_id)  # type: ignore[attr-defined]
        if CONSUMER_GROUP_DESCRIBE_KEY not in conn.api_versions:
            return None
        response = await self._group_call(group_id, CONSUMER_GROUP_DESCRIBE_KEY, {  # type: ignore[attr-defined]
            "group_ids": [group_id], "include_authorized_operations": False},
            lambda r: r.groups[0].error_code if r.groups else ErrorCode.none)
        [group] = response.groups
        if group.error_code == ErrorCode.group_id_not_found:
            return None
        _raise_for(group.error_code, f"ConsumerGroupDescribe of group {group_id!r}")

        def parts(assignment: Any) -> dict[str, tuple[int, ...]]:
            return {tp.topic_name: tuple(sorted(tp.partitions)) for tp in assignment.topic_partitions}

        members = tuple(ConsumerMemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                                  parts(m.assignment), m.member_epoch, parts(m.target_assignment))
                        for m in group.members)
        return ConsumerGroupDescription(group_id, group.group_state, "consumer", group.assignor_name, members,
                                        "consumer", group.group_epoch, group.assignment_epoch)

    async def _describe_classic_group(self, group_id: str) -> ConsumerGroupDescription:
        response = await self._group_call(group_id, DESCRIBE_GROUPS_KEY, {  # type: ignore[attr-defined]
            "groups": [group_id], "include_authorized_operations": False},
            lambda r: r.groups[0].error_code if r.groups else ErrorCode.none)
        [group] = response.groups
        _raise_for(group.error_code, f"DescribeGroups of group {group_id!r}")
        if group.group_state == "Dead":
            _raise_for(ErrorCode.group_id_not_found, f"DescribeGroups of group {group_id!r}")
        members = []
        for m in group.members:
            try:
                assignment = decode_consumer_assignment(m.member_assignment) \
                    if group.protocol_type == "consumer" else {}
            except ValueError:
                assignment = {}
            members.append(ConsumerMemberDescription(m.member_id, getattr(m, "group_instance_id", None),
                                                     m.client_id, m.client_host, assignment))
        return ConsumerGroupDescription(group_id, group.group_state, group.protocol_type,
                                        group.protocol_data, tuple(members))

    async def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None,
                                          require_stable: bool = False) -> dict[tuple[str, int], tuple[int, str]]:
        """{(topic, partition): (committed offset, metadata)} of a consumer group (OffsetFetch).

        ``partitions``: None for every partition the group has an offset for, or (topic, partition)
        pairs; a partition without a committed offset is left out. A group that does not exist has
        no offsets ({}). Group-level and partition-level errors raise KafkaException."""
        wanted = None if partitions is None else _by_topic(dict.fromkeys(partitions))
        ids = await self._topic_ids(wanted) if wanted is not None else {}
        topics = None if wanted is None else [
            {"name": t, "topic_id": ids[t], "partition_indexes": ps} for t, ps in wanted.items()]
        values = {"group_id": group_id, "topics": topics, "require_stable": require_stable,
                  "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}]}

        def error_of(r: Any) -> int:
            return r.groups[0].error_code if hasattr(r, "groups") else getattr(r, "error_code", ErrorCode.none)

        response = await self._group_call(group_id, OFFSET_FETCH_KEY, values, error_of,  # type: ignore[attr-defined]
                                          min_version=2 if topics is None else 1)  # v1: no "every topic"
        context = f"OffsetFetch of group {group_id!r}"
        if hasattr(response, "groups"):
            [group] = [g for g in response.groups if g.group_id == group_id]
            _raise_for(group.error_code, context)
            answered = group.topics
        else:
            _raise_for(getattr(response, "error_code", ErrorCode.none), context)
            answered = response.topics
        names = await self._topic_names(answered)
        out: dict[tuple[str, int], tuple[int, str]] = {}
        for t in answered:
            name = self._name_of(t, names)
            for p in t.partitions:
                _raise_for(p.error_code, f"{context} for {name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(name, p.partition_index)] = (p.committed_offset, p.metadata or "")
        return dict(sorted(out.items()))

    async def _resolve_offsets(self, group_id: str, specs: Mapping[tuple[str, int], Any],
                               ) -> dict[tuple[str, int], tuple[int, str]]:
        """{tp: (offset, metadata)} from specs: an offset, (offset, metadata), "earliest", "latest" or
        ("timestamp", ms); a timestamp past every record resolves to the log end, as Kafka does."""
        lookups: dict[tuple[str, int], Any] = {}
        out: dict[tuple[str, int], tuple[int, str]] = {}
        for tp, spec in specs.items():
            if isinstance(spec, int) and not isinstance(spec, bool):
                out[tp] = (spec, "")
            elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], int) \
                    and not isinstance(spec[0], bool) and isinstance(spec[1], str):
                out[tp] = (spec[0], spec[1])
            elif spec in ("earliest", "latest"):
                lookups[tp] = spec
            elif isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "timestamp":
                lookups[tp] = spec[1]
            else:
                raise KafkaException(f"offset spec {spec!r} for {tp[0]}-{tp[1]} of group {group_id!r} is not an "
                                     f"offset, (offset, metadata), 'earliest', 'latest' or ('timestamp', ms)")
        if lookups:
            resolved = await self.list_offsets(lookups)  # type: ignore[attr-defined]
            past_end = [tp for tp, (offset, _) in resolved.items() if offset < 0]
            if past_end:
                latest = {tp: "latest" for tp in past_end}
                resolved.update(await self.list_offsets(latest))  # type: ignore[attr-defined]
            out.update({tp: (offset, "") for tp, (offset, _) in resolved.items()})
        return out

    async def alter_consumer_group_offsets(self, group_id: str, specs: Mapping[tuple[str, int], Any]) -> None:
        """Commit offsets for a consumer group (OffsetCommit, generation -1, member id ""): each spec
        is an offset, (offset, metadata), "earliest", "latest" or ("timestamp", ms). The group must
        have no active members (a classic group with members answers UNKNOWN_MEMBER_ID or
        ILLEGAL_GENERATION). Raises KafkaException naming the partition on a partition's error."""
        offsets = await self._resolve_offsets(group_id, specs)
        if not offsets:
            return
        wanted = _by_topic(offsets)
        ids = await self._topic_ids(wanted)
        topics = [{"name": t, "topic_id": ids[t], "partitions": [
            {"partition_index": p, "committed_offset": offsets[(t, p)][0], "committed_leader_epoch": -1,
             "committed_metadata": offsets[(t, p)][1]} for p in ps]}
            for t, ps in wanted.items()]

        def error_of(r: Any) -> int:  # a group-level error is answered on every partition
            codes = [p.error_code for t in r.topics for p in t.partitions]
            return codes[0] if codes else ErrorCode.none

        response = await self._group_call(group_id, OFFSET_COMMIT_KEY, {  # type: ignore[attr-defined]
            "group_id": group_id, "generation_id_or_member_epoch": NO_GENERATION, "member_id": "",
            "group_instance_id": None, "topics": topics}, error_of)
        requested = list(wanted)  # the broker answers the topics in the order asked (v10: by id only)
        for i, t in enumerate(response.topics):
            name = getattr(t, "name", None) or (requested[i] if i < len(requested) else str(t.topic_id))
            for p in t.partitions:
                offset = offsets.get((name, p.partition_index), ("?",))[0]
                _raise_for(p.error_code, f"OffsetCommit of group {group_id!r} for {name}-{p.partition_index} "
                                         f"(offset {offset})")

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                                            ) -> dict[tuple[str, int], KafkaException | None]:
        """Delete a consumer group's committed offsets of these partitions (OffsetDelete):
        {(topic, partition): None (deleted, or there was none) or the partition's KafkaException
        (e.g. GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION)}. A group-level error
        (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) raises KafkaException."""
        wanted = _by_topic(dict.fromkeys(partitions))
        if not wanted:
            return {}
        response = await self._group_call(group_id, OFFSET_DELETE_KEY, {  # type: ignore[attr-defined]
            "group_id": group_id, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                                             for t, ps in wanted.items()]}, lambda r: r.error_code)
        _raise_for(response.error_code, f"OffsetDelete of group {group_id!r}")
        out: dict[tuple[str, int], KafkaException | None] = {}
        for t in response.topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = None if p.error_code == ErrorCode.none else error_for_code(
                    p.error_code, f"OffsetDelete of group {group_id!r} for {t.name}-{p.partition_index}")
        return dict(sorted(out.items()))
