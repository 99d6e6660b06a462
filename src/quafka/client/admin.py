"""Admin / AsyncAdmin: topic and offset administration over the Kafka protocol.

``AsyncAdmin(config)`` does the work on asyncio; ``Admin(config)`` drives it from a private event
loop thread (each method is ``self._loop.run(self._async.method(...))``). Config keys:
``bootstrap.servers``, ``client.id``, ``request.timeout.ms``; unknown keys raise ConfigException.
Timeouts are float seconds. Broker error codes raise KafkaException naming the resource.

Operations: create_topics, delete_topics, list_topics, describe_topics, create_partitions,
list_offsets, delete_records, describe_log_dirs (in _admin_log_dirs.py), describe_configs, alter_configs (IncrementalAlterConfigs; resource
types "topic", "broker", "group"), list_groups, describe_share_groups, list_share_group_offsets,
alter_share_group_offsets, delete_share_group_offsets, delete_groups, the consumer-group offsets
list_consumer_group_offsets, alter_consumer_group_offsets, delete_consumer_group_offsets (in
_admin_groups.py), and a share group's dead letters: list_dead_letters, redrive_dead_letters (in
dead_letters.py), ACLs: create_acls, describe_acls, delete_acls (in _admin_acls.py), and SCRAM
credentials: describe_user_scram_credentials, alter_user_scram_credentials (in _admin_scram.py). Group requests go to the group's coordinator (FindCoordinator key type 0).
Topic-level requests go to the controller that the metadata names; offset requests go to each
partition's leader.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from quafka.protocol.errors import ErrorCode

from . import dead_letters
from ._admin_acls import AclAdminMixin, AclBinding, AclBindingFilter, operation_names
from ._admin_groups import ConsumerGroupOffsetsMixin
from ._admin_in_flight import AlterInFlightResult, InFlightAdminMixin, InFlightPartitionView
from ._admin_log_dirs import LogDirDescription, LogDirPartition, LogDirsAdminMixin
from ._admin_scram import ScramAdminMixin, UserScramCredentialAlteration, UserScramCredentialsDescription
from ._admin_transactions import (
    HangingTransaction,
    ListedTransaction,
    ProducerState,
    TransactionDescription,
    TransactionsAdminMixin,
)
from ._base import AsyncClient, SyncClient
from ._config import Key
from ._security import SECURITY_CONFIG
from ._transport import BrokerConnection
from .dead_letters import DeadLetterRecord, RedriveResult
from .errors import KafkaConnectionError, KafkaException, error_for_code

UPDATE_FEATURES_KEY = 57
UPGRADE_TYPES = {"upgrade": 1, "safe_downgrade": 2, "unsafe_downgrade": 3}  # FeatureUpdate.UpgradeType


class FeatureMetadata(NamedTuple):
    """Kafka's FeatureMetadata: {feature: (min, max)} supported and finalized, and the epoch."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, tuple[int, int]]
    finalized_epoch: int

__all__ = ["ADMIN_CONFIG", "AclBinding", "AclBindingFilter", "Admin", "AsyncAdmin", "BrokerDescription", "ClusterDescription", "ConfigEntry",
           "ConfigSynonym", "ListedGroup", "LogDirDescription", "LogDirPartition", "NewTopic", "PartitionDescription",
           "HangingTransaction", "ListedTransaction", "ProducerState", "ShareGroupDescription", "ShareMemberDescription", "TopicDescription",
           "TransactionDescription"]

LIST_OFFSETS_KEY = 2
CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DELETE_RECORDS_KEY = 21
CREATE_PARTITIONS_KEY = 37
DESCRIBE_CONFIGS_KEY = 32
INCREMENTAL_ALTER_CONFIGS_KEY = 44
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
SHARE_GROUP_DESCRIBE_KEY = 77
DESCRIBE_SHARE_GROUP_OFFSETS_KEY = 90
ALTER_SHARE_GROUP_OFFSETS_KEY = 91
DELETE_SHARE_GROUP_OFFSETS_KEY = 92
LEADER_MOVED_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                                 ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch})
COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                                ErrorCode.coordinator_not_available})
MAX_RETRIES = 5
RETRY_BACKOFF_S = 0.1
RESOURCE_TYPES = {"topic": 2, "broker": 4, "group": 32}
CONFIG_SET, CONFIG_DELETE = 0, 1
CONFIG_SOURCE_DEFAULT = 5
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0

ADMIN_CONFIG: dict[str, Key] = {
    "bootstrap.servers": Key.required(str),
    "client.id": Key(str, "quafka-admin"),
    "request.timeout.ms": Key(int, 30000, 1),
    **SECURITY_CONFIG,  # security.protocol, ssl.*, sasl.* (_security)
}


@dataclass(frozen=True)
class NewTopic:
    """A topic to create: name, partition count, replication factor and topic configs."""

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: UUID | None
    is_internal: bool
    partitions: dict[int, PartitionDescription]


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource. ``source`` is Kafka's ConfigSource id (1 dynamic topic, 2 dynamic
    broker, 3 dynamic default broker, 4 static broker, 5 default, 8 dynamic group, ...)."""

    name: str
    value: str | None
    source: int
    sensitive: bool
    read_only: bool
    synonyms: tuple[ConfigSynonym, ...]

    @property
    def is_default(self) -> bool:
        return self.source == CONFIG_SOURCE_DEFAULT


class BrokerDescription(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


class ListedGroup(NamedTuple):
    group_id: str
    type: str
    state: str


@dataclass(frozen=True)
class ShareMemberDescription:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    # the ACL operation names (confluent's AclOperation names: "READ", "DESCRIBE", ...) the caller may
    # do on the group, when asked for with include_authorized_operations; else None
    authorized_operations: frozenset[str] | None = None


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(seconds * 1000))


def _check(code: int, context: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        error = error_for_code(code, context)
        if message:
            error = KafkaException(f"{error.message}: {message}", error.code)
        raise error


def _offset_spec(spec: Any, where: str) -> int:
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return spec
    raise KafkaException(f"offset spec {spec!r} for {where} is not 'earliest', 'latest' or a timestamp in ms >= 0")


class AsyncAdmin(ConsumerGroupOffsetsMixin, InFlightAdminMixin, LogDirsAdminMixin, AclAdminMixin, ScramAdminMixin,
                 TransactionsAdminMixin, AsyncClient):
    """The asyncio admin client; see the module docstring. Use ``async with``."""

    CONFIG = ADMIN_CONFIG
    NAME = "Admin"

    async def _controller(self) -> BrokerConnection:
        cluster = await self._get_cluster()
        if cluster.controller_id < 0 or cluster.controller_id not in cluster.brokers:
            await cluster.refresh_metadata([])
        if cluster.controller_id >= 0:
            return await cluster.connection(cluster.controller_id)
        return await cluster.any_connection()

    async def _controller_call(self, api_key: int, values: Mapping[str, Any], results: Callable[[Any], Iterable[Any]],
                               **versions: int) -> Any:
        """Send a topic-level request to the controller; when the controller moved (NOT_CONTROLLER
        in the results) or cannot be reached, learn the new one from metadata and send again."""
        cluster = await self._get_cluster()
        for attempt in range(MAX_RETRIES + 1):
            last = attempt == MAX_RETRIES
            try:
                response = await (await self._controller()).call(api_key, values, **versions)
            except KafkaConnectionError:
                if last:
                    raise
            else:
                if last or not any(r.error_code == ErrorCode.not_controller for r in results(response)):
                    return response
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))
            cluster.controller_id = -1
            await cluster.refresh_metadata([])
        raise AssertionError("unreachable")

    @property
    def _request_timeout(self) -> float:
        return self.config["request.timeout.ms"] / 1000

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Mapping[str, tuple[int, int]] | Iterable[NewTopic],
                            timeout: float | None = None) -> dict[str, UUID | None]:
        """Create topics ({name: (partitions, replication_factor)} or NewTopics); returns {name: topic id}."""
        if isinstance(topics, Mapping):
            new = [NewTopic(name, p, r) for name, (p, r) in topics.items()]
        else:
            new = list(topics)
        timeout = self._request_timeout if timeout is None else timeout
        response = await self._controller_call(CREATE_TOPICS_KEY, {
            "topics": [{"name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}
                       for t in new],
            "timeout": _timeout(timeout), "validate_only": False}, lambda r: r.topics, min_version=2)
        out = {}
        for result in response.topics:
            _check(result.error_code, f"CreateTopics of topic {result.name!r}", result.error_message)
            out[result.name] = getattr(result, "topic_id", None)
        if self._cluster is not None:
            await self._cluster.refresh_metadata(list(out))
        return out

    async def delete_topics(self, names: Iterable[str], timeout: float | None = None) -> None:
        """Delete the topics by name."""
        names = list(names)
        timeout = self._request_timeout if timeout is None else timeout
        response = await self._controller_call(DELETE_TOPICS_KEY, {
            "topics": [{"name": n, "topic_id": UUID(int=0)} for n in names], "topic_names": names,
            "timeout": _timeout(timeout)}, lambda r: r.responses, min_version=1)
        for result in response.responses:
            _check(result.error_code, f"DeleteTopics of topic {result.name!r}", getattr(result, "error_message", None))
        cluster = await self._get_cluster()
        for n in names:
            cluster.topics.pop(n, None)

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Topic id, partitions and leaders of each topic; UNKNOWN_TOPIC_OR_PARTITION names a missing one."""
        names = list(names)
        cluster = await self._get_cluster()
        await cluster.refresh_metadata(names)
        out = {}
        for name in names:
            info = cluster.topics.get(name)
            if info is None:
                raise KafkaException(f"topic {name!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                                     ErrorCode.unknown_topic_or_partition)
            out[name] = self._describe(info)
        return out

    @staticmethod
    def _describe(info: Any) -> TopicDescription:
        return TopicDescription(info.name, info.topic_id, info.is_internal, {
            p.partition: PartitionDescription(p.partition, p.leader_id, p.leader_epoch)
            for p in sorted(info.partitions.values())})

    async def list_topics(self, include_internal: bool = False) -> dict[str, TopicDescription]:
        """Every topic by name (internal topics only with ``include_internal``)."""
        cluster = await self._get_cluster()
        await cluster.refresh_metadata(None)
        return {name: self._describe(info) for name, info in sorted(cluster.topics.items())
                if include_internal or not info.is_internal}

    async def create_partitions(self, new_totals: Mapping[str, int], timeout: float | None = None) -> None:
        """Grow each topic to ``new_total`` partitions."""
        timeout = self._request_timeout if timeout is None else timeout
        response = await self._controller_call(CREATE_PARTITIONS_KEY, {
            "topics": [{"name": n, "count": c, "assignments": None} for n, c in new_totals.items()],
            "timeout": _timeout(timeout), "validate_only": False}, lambda r: r.results)
        for result in response.results:
            _check(result.error_code, f"CreatePartitions of topic {result.name!r}", result.error_message)
        await (await self._get_cluster()).refresh_metadata(list(new_totals))

    # ------------------------------------------------------------------ offsets

    async def _by_leader(self, partitions: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        cluster = await self._get_cluster()
        groups: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            groups.setdefault(await cluster.leader_for(topic, partition), []).append((topic, partition))
        return groups

    @staticmethod
    def _topics_field(items: Iterable[tuple[str, int]], partition_values: Mapping[tuple[str, int], dict],
                      ) -> list[dict]:
        topics: dict[str, list[dict]] = {}
        for tp in items:
            topics.setdefault(tp[0], []).append(partition_values[tp])
        return [{"name": t, "partitions": parts} for t, parts in topics.items()]

    async def _leader_calls(self, items: Iterable[tuple[str, int]],
                            send: Callable[[BrokerConnection, list[tuple[str, int]]], Any]) -> dict[tuple[str, int], Any]:
        """Send ``send(conn, partitions)`` to each partition's leader; ``send`` returns
        {tp: (error_code, value, context)}. Partitions whose leader moved (NOT_LEADER_OR_FOLLOWER,
        LEADER_NOT_AVAILABLE, ...) or whose leader was unreachable are retried on the leader that
        fresh metadata names, up to MAX_RETRIES times with a growing backoff."""
        cluster = await self._get_cluster()
        pending, out = list(items), {}
        for attempt in range(MAX_RETRIES + 1):
            last = attempt == MAX_RETRIES
            retry: list[tuple[str, int]] = []
            for leader, group in (await self._by_leader(pending)).items():
                try:
                    results = await send(await cluster.connection(leader), group)
                except KafkaConnectionError:
                    if last:
                        raise
                    retry += group
                    continue
                for tp, (code, value, context) in results.items():
                    if ErrorCode(code) in LEADER_MOVED_ERRORS and not last:
                        retry.append(tp)
                    else:
                        _check(code, context)
                        out[tp] = value
            if not retry:
                break
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))
            await cluster.refresh_metadata(sorted({t for t, _ in retry}))
            pending = retry
        return out

    async def list_offsets(self, specs: Mapping[tuple[str, int], Any]) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): "earliest" | "latest" | timestamp ms} → {(topic, partition): (offset, timestamp)}.

        A timestamp later than every record's gives offset -1."""
        values = {tp: {"partition_index": tp[1], "current_leader_epoch": -1,
                       "timestamp": _offset_spec(spec, f"{tp[0]}-{tp[1]}")} for tp, spec in specs.items()}

        async def send(conn: BrokerConnection, items: list[tuple[str, int]]) -> dict:
            response = await conn.call(LIST_OFFSETS_KEY, {
                "replica_id": -1, "isolation_level": READ_UNCOMMITTED,
                "topics": self._topics_field(items, values), "timeout": _timeout(self._request_timeout)},
                min_version=1)
            return {(t.name, p.partition_index): (p.error_code, (p.offset, p.timestamp),
                                                   f"ListOffsets of {t.name}-{p.partition_index}")
                    for t in response.topics for p in t.partitions}

        return await self._leader_calls(specs, send)

    async def delete_records(self, offsets: Mapping[tuple[str, int], int],
                             timeout: float | None = None) -> dict[tuple[str, int], int]:
        """Delete the records before each offset (-1: the high watermark); returns the new low watermarks."""
        timeout = self._request_timeout if timeout is None else timeout
        values = {tp: {"partition_index": tp[1], "offset": o} for tp, o in offsets.items()}

        async def send(conn: BrokerConnection, items: list[tuple[str, int]]) -> dict:
            response = await conn.call(DELETE_RECORDS_KEY, {
                "topics": self._topics_field(items, values), "timeout": _timeout(timeout)})
            return {(t.name, p.partition_index): (p.error_code, p.low_watermark,
                                                   f"DeleteRecords of {t.name}-{p.partition_index} before offset "
                                                   f"{offsets[(t.name, p.partition_index)]}")
                    for t in response.topics for p in t.partitions}

        return await self._leader_calls(offsets, send)

    # ------------------------------------------------------------------ configs

    async def _config_connection(self, resource_type: str, name: str) -> tuple[int, BrokerConnection]:
        if resource_type not in RESOURCE_TYPES:
            raise KafkaException(f"config resource type {resource_type!r} is not one of {sorted(RESOURCE_TYPES)}")
        if resource_type == "broker" and name != "":  # "" is the cluster-wide default broker resource
            if not name.isdigit():
                raise KafkaException(f"broker config resource name {name!r} is not a node id")
            cluster = await self._get_cluster()
            if int(name) not in cluster.brokers:
                await cluster.refresh_metadata([])
            if int(name) not in cluster.brokers:
                raise KafkaException(f"broker {name} is not in the cluster (brokers: "
                                     f"{', '.join(str(b) for b in sorted(cluster.brokers))})")
            return RESOURCE_TYPES[resource_type], await cluster.connection(int(name))
        return RESOURCE_TYPES[resource_type], await self._controller()

    async def describe_configs(self, resource_type: str, name: str) -> dict[str, str | None]:
        """The configs of a "topic", "broker" (name: node id, or "" for the cluster default) or
        "group" as {key: value}."""
        return {e.name: e.value for e in await self.describe_config_entries(resource_type, name)}

    async def describe_configs_of(self, resource_type: str, names: Iterable[str], keys: Iterable[str] | None = None,
                                  ) -> dict[str, dict[str, str | None] | KafkaException]:
        """``describe_configs`` of many resources of one type ("topic" or "group") in one
        DescribeConfigs (Kafka's `Admin.describeConfigs` takes a collection of resources the same
        way), without synonyms; ``keys`` asks only for those configs. {name: {key: value}}, or the
        KafkaException of a resource that failed (one resource's error does not fail the others)."""
        if resource_type not in ("topic", "group"):
            raise KafkaException(f"describe_configs_of takes topic or group resources, not {resource_type!r}")
        names = list(dict.fromkeys(names))
        if not names:
            return {}
        kind, conn = await self._config_connection(resource_type, names[0])
        wanted = None if keys is None else list(keys)
        response = await conn.call(DESCRIBE_CONFIGS_KEY, {
            "resources": [{"resource_type": kind, "resource_name": n, "configuration_keys": wanted} for n in names],
            "include_synonyms": False, "include_documentation": False}, min_version=1)
        out: dict[str, Any] = {}
        for result in response.results:
            try:
                _check(result.error_code, f"DescribeConfigs of {resource_type} {result.resource_name!r}",
                       result.error_message)
                out[result.resource_name] = {c.name: c.value for c in result.configs}
            except KafkaException as exc:
                out[result.resource_name] = exc
        return {n: out.get(n, KafkaException(f"DescribeConfigs of {resource_type} {n!r}: no answer")) for n in names}

    async def describe_config_entries(self, resource_type: str, name: str) -> list[ConfigEntry]:
        """Every config of a resource with its source, sensitivity and synonyms (DescribeConfigs
        with IncludeSynonyms), as kafka-configs.sh shows them."""
        kind, conn = await self._config_connection(resource_type, name)
        response = await conn.call(DESCRIBE_CONFIGS_KEY, {
            "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}, min_version=1)
        [result] = response.results
        _check(result.error_code, f"DescribeConfigs of {resource_type} {name!r}", result.error_message)
        return [ConfigEntry(c.name, c.value, int(getattr(c, "config_source", CONFIG_SOURCE_DEFAULT)),
                            bool(c.is_sensitive), bool(c.read_only),
                            tuple(ConfigSynonym(y.name, y.value, int(y.source))
                                  for y in getattr(c, "synonyms", ()) or ()))
                for c in result.configs]

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and every broker (fresh Metadata)."""
        cluster = await self._get_cluster()
        await cluster.refresh_metadata([])
        return ClusterDescription(cluster.cluster_id, cluster.controller_id, tuple(
            BrokerDescription(b.node_id, b.host, b.port, b.rack) for _, b in sorted(cluster.brokers.items())))

    async def find_coordinator(self, group_id: str) -> BrokerDescription:
        """The broker coordinating ``group_id`` (FindCoordinator, key type group)."""
        cluster = await self._get_cluster()
        node_id = await cluster.find_coordinator(group_id)
        info = cluster.brokers[node_id]
        return BrokerDescription(node_id, info.host, info.port, info.rack)

    async def alter_configs(self, resource_type: str, name: str, set: Mapping[str, str] | None = None,  # noqa: A002
                            delete: Iterable[str] = ()) -> None:
        """Set and delete (revert to default) configs of a resource with IncrementalAlterConfigs."""
        kind, conn = await self._config_connection(resource_type, name)
        configs = [{"name": k, "config_operation": CONFIG_SET, "value": str(v)} for k, v in (set or {}).items()]
        configs += [{"name": k, "config_operation": CONFIG_DELETE, "value": None} for k in delete]
        response = await conn.call(INCREMENTAL_ALTER_CONFIGS_KEY, {
            "resources": [{"resource_type": kind, "resource_name": name, "configs": configs}], "validate_only": False})
        [result] = response.responses
        _check(result.error_code, f"IncrementalAlterConfigs of {resource_type} {name!r}", result.error_message)

    # ------------------------------------------------------------------ groups

    async def _coordinator(self, group_id: str) -> BrokerConnection:
        cluster = await self._get_cluster()
        return await cluster.connection(await cluster.find_coordinator(group_id))

    async def _group_call(self, group_id: str, api_key: int, values: Mapping[str, Any],
                          error_of: Callable[[Any], int], **versions: int) -> Any:
        """Send a request to the group's coordinator (``versions``: min_version / max_version);
        NOT_COORDINATOR and the coordinator-loading errors find the coordinator again and retry (up to
        MAX_RETRIES times, growing backoff)."""
        for attempt in range(MAX_RETRIES + 1):
            conn = await self._coordinator(group_id)
            response = await conn.call(api_key, values, **versions)
            if error_of(response) not in COORDINATOR_ERRORS or attempt == MAX_RETRIES:
                return response
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    async def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """Every group of every broker as (group_id, type, state), filtered by state and type
        (case-insensitive, as Kafka's ListGroups v5 filters)."""
        cluster = await self._get_cluster()
        await cluster.refresh_metadata([])
        out: list[ListedGroup] = []
        for node_id in sorted(cluster.brokers):
            conn = await cluster.connection(node_id)
            response = await conn.call(LIST_GROUPS_KEY, {"states_filter": list(states), "types_filter": list(types)},
                                       min_version=5 if types else (4 if states else None))
            _check(response.error_code, f"ListGroups on broker {node_id}")
            out += [ListedGroup(g.group_id, getattr(g, "group_type", "") or g.protocol_type,
                                getattr(g, "group_state", "")) for g in response.groups]
        return sorted(out)

    async def describe_share_groups(self, group_ids: Iterable[str], include_authorized_operations: bool = False,
                                    ) -> dict[str, ShareGroupDescription]:
        """ShareGroupDescribe of the groups: one request per coordinator with all of its groups (as
        Kafka's `DescribeShareGroupsHandler` batches them); GROUP_ID_NOT_FOUND (or any other error
        of a group) raises, naming the first such group in ``group_ids``' order.
        ``include_authorized_operations``: each description's ``authorized_operations`` is the set
        of ACL operation names the caller may do on the group (None when not asked for)."""
        ids = list(dict.fromkeys(group_ids))
        answers = await self._per_coordinator(ids, SHARE_GROUP_DESCRIBE_KEY, lambda batch: {
            "group_ids": batch, "include_authorized_operations": include_authorized_operations})
        out = {}
        for group_id in ids:
            g = answers[group_id]
            _check(g.error_code, f"ShareGroupDescribe of group {group_id!r}", g.error_message)
            members = tuple(ShareMemberDescription(
                m.member_id, m.member_epoch, m.client_id, m.client_host, m.rack_id, tuple(m.subscribed_topic_names),
                {tp.topic_name: tuple(sorted(tp.partitions)) for tp in m.assignment.topic_partitions})
                for m in g.members)
            operations = operation_names(g.authorized_operations) if include_authorized_operations else None
            out[group_id] = ShareGroupDescription(g.group_id, g.group_state, g.group_epoch, g.assignment_epoch,
                                                  g.assignor_name, members, operations)
        return out

    async def list_share_group_offsets(self, group_id: str, topics: Iterable[str] | Mapping[str, Iterable[int]]
                                       | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (start_offset, lag)} of a share group (start -1: no state yet).

        ``topics``: None for every topic the group has state for; a list of names (every partition);
        or {name: partitions}."""
        cluster = await self._get_cluster()
        if topics is None:
            topic_values = None
        else:
            wanted = topics if isinstance(topics, Mapping) else {t: None for t in topics}
            topic_values = []
            for name, parts in wanted.items():
                if parts is None:
                    parts = sorted((await cluster.topic(name)).partitions)
                topic_values.append({"topic_name": name, "partitions": list(parts)})
        response = await self._group_call(group_id, DESCRIBE_SHARE_GROUP_OFFSETS_KEY, {
            "groups": [{"group_id": group_id, "topics": topic_values}]}, lambda r: r.groups[0].error_code)
        [g] = response.groups
        return _share_group_offsets(group_id, g)

    async def list_share_groups_offsets(self, group_ids: Iterable[str],
                                        ) -> dict[str, dict[tuple[str, int], tuple[int, int]] | KafkaException]:
        """``list_share_group_offsets`` of many groups at once, every topic each group has state for:
        one DescribeShareGroupOffsets per coordinator with all of its groups (Kafka batches them the
        same way: `Admin.listShareGroupOffsets` over `ListShareGroupOffsetsHandler`, a batched
        coordinator handler). {group: offsets}, or the KafkaException of a group that failed
        (GROUP_ID_NOT_FOUND, not authorized, ...): one group's error does not fail the others."""
        ids = list(dict.fromkeys(group_ids))
        answers = await self._per_coordinator(ids, DESCRIBE_SHARE_GROUP_OFFSETS_KEY, lambda batch: {
            "groups": [{"group_id": g, "topics": None} for g in batch]})
        out: dict[str, Any] = {}
        for group_id in ids:
            try:
                out[group_id] = _share_group_offsets(group_id, answers[group_id])
            except KafkaException as exc:
                out[group_id] = exc
        return out

    async def _per_coordinator(self, ids: list[str], api_key: int,
                               request: Callable[[list[str]], dict]) -> dict[str, Any]:
        """One request per group coordinator carrying all of its groups (``request(batch)`` builds
        it; the response lists ``groups`` with ``group_id`` and ``error_code``), groups answered with
        a coordinator error asked again after a backoff. {group id: its entry of the response}."""
        cluster = await self._get_cluster()
        answers: dict[str, Any] = {}
        pending = ids
        for attempt in range(MAX_RETRIES + 1):
            by_node: dict[int, list[str]] = {}
            for group_id, node_id in (await cluster.find_coordinators(pending)).items():
                by_node.setdefault(node_id, []).append(group_id)
            retry = []
            for node_id, batch in sorted(by_node.items()):
                response = await (await cluster.connection(node_id)).call(api_key, request(batch))
                for g in response.groups:
                    if g.error_code in COORDINATOR_ERRORS and attempt < MAX_RETRIES:
                        retry.append(g.group_id)
                    else:
                        answers[g.group_id] = g
            if not retry:
                break
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))
            pending = retry
        return answers

    async def alter_share_group_offsets(self, group_id: str, specs: Mapping[tuple[str, int], Any]) -> None:
        """Set a share group's start offsets: each spec is "earliest", "latest", ("timestamp", ms) or an
        offset. The group must be empty (no members): NON_EMPTY_GROUP otherwise."""
        lookups: dict[tuple[str, int], Any] = {}
        offsets: dict[tuple[str, int], int] = {}
        for tp, spec in specs.items():
            if isinstance(spec, int) and not isinstance(spec, bool):
                offsets[tp] = spec
            elif spec in ("earliest", "latest"):
                lookups[tp] = spec
            elif isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "timestamp":
                lookups[tp] = spec[1]
            else:
                raise KafkaException(f"offset spec {spec!r} for {tp[0]}-{tp[1]} of group {group_id!r} is not "
                                     f"'earliest', 'latest', ('timestamp', ms) or an offset")
        if lookups:
            resolved = await self.list_offsets(lookups)
            for tp, (offset, _) in resolved.items():
                if offset < 0:  # a timestamp past every record: start at the log end, as Kafka does
                    offset = (await self.list_offsets({tp: "latest"}))[tp][0]
                offsets[tp] = offset
        topics: dict[str, list[dict]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "start_offset": offset})
        response = await self._group_call(group_id, ALTER_SHARE_GROUP_OFFSETS_KEY, {
            "group_id": group_id, "topics": [{"topic_name": t, "partitions": p} for t, p in topics.items()]},
            lambda r: r.error_code)
        if response.error_code == ErrorCode.non_empty_group:
            raise KafkaException(f"AlterShareGroupOffsets of group {group_id!r}: NON_EMPTY_GROUP (error code "
                                 f"{int(ErrorCode.non_empty_group)}): the group has members; stop its consumers "
                                 f"first", ErrorCode.non_empty_group)
        _check(response.error_code, f"AlterShareGroupOffsets of group {group_id!r}", response.error_message)
        for t in response.responses:
            for p in t.partitions:
                _check(p.error_code, f"AlterShareGroupOffsets of group {group_id!r} for "
                                     f"{t.topic_name}-{p.partition_index}", p.error_message)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """Delete a share group's state for whole topics (the group must be empty)."""
        response = await self._group_call(group_id, DELETE_SHARE_GROUP_OFFSETS_KEY, {
            "group_id": group_id, "topics": [{"topic_name": t} for t in topics]}, lambda r: r.error_code)
        _check(response.error_code, f"DeleteShareGroupOffsets of group {group_id!r}", response.error_message)
        for t in response.responses:
            _check(t.error_code, f"DeleteShareGroupOffsets of group {group_id!r} for topic {t.topic_name!r}",
                   t.error_message)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaException | None]:
        """Delete groups; {group_id: None (deleted) or the KafkaException that group got}."""
        out: dict[str, KafkaException | None] = {}
        for group_id in group_ids:
            response = await self._group_call(group_id, DELETE_GROUPS_KEY, {"groups_names": [group_id]},
                                              lambda r: r.results[0].error_code if r.results else ErrorCode.none)
            for r in response.results:
                out[r.group_id] = (None if r.error_code == ErrorCode.none
                                   else error_for_code(r.error_code, f"DeleteGroups of group {r.group_id!r}"))
        return out

    # ------------------------------------------------------------------ dead letters (dead_letters.py)

    async def describe_features(self) -> FeatureMetadata:
        """The features the broker supports and their finalized levels (ApiVersions v3+, as
        Kafka's Admin.describeFeatures; kafka-features.sh describe)."""
        cluster = await self._get_cluster()
        conn = await cluster.any_connection()
        response = await conn.request(ApiVersionsRequest(client_software_name="quafka-admin",
                                                         client_software_version="1"))
        _check(response.error_code, "ApiVersions")
        return FeatureMetadata(
            {f.name: (int(f.min_version), int(f.max_version)) for f in response.supported_features},
            {f.name: (int(f.min_version_level), int(f.max_version_level)) for f in response.finalized_features},
            int(response.finalized_features_epoch))

    # ------------------------------------------------------------------ client quotas
    async def describe_client_quotas(self, components: Iterable[tuple[str, str | None | type]] = (),
                                     strict: bool = False) -> dict[tuple, dict[str, float]]:
        """Client quotas (DescribeClientQuotas, as Kafka's Admin.describeClientQuotas). Each
        component is (entity type, match): a name matches exactly, None the default entity, `...`
        any entity of the type (the default one too, as Kafka's broker matches). Returns
        {entity: {key: value}}, an entity being sorted (type, name or None for the default) pairs."""
        wire = []
        for entity_type, match in components:
            if match is ...:
                wire.append({"entity_type": entity_type, "match_type": 2, "match": None})
            elif match is None:
                wire.append({"entity_type": entity_type, "match_type": 1, "match": None})
            else:
                wire.append({"entity_type": entity_type, "match_type": 0, "match": match})
        response = await (await self._controller()).call(48, {"components": wire, "strict": strict})
        _check(response.error_code, "DescribeClientQuotas", response.error_message)
        return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                {v.key: float(v.value) for v in entry.values} for entry in response.entries or ()}

    async def alter_client_quotas(self, alterations: Mapping[tuple, Mapping[str, float | None]],
                                  validate_only: bool = False) -> dict[tuple, KafkaException | None]:
        """Set (a value) or remove (None) quotas per entity (AlterClientQuotas, as Kafka's
        Admin.alterClientQuotas). An entity is (type, name or None for the default) pairs."""
        entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in ops.items()]} for entity, ops in alterations.items()]
        response = await (await self._controller()).call(49, {"entries": entries, "validate_only": validate_only})
        results: dict[tuple, KafkaException | None] = {}
        for entry in response.entries:
            entity = tuple((e.entity_type, e.entity_name) for e in entry.entity)
            results[entity] = (None if entry.error_code == ErrorCode.none
                               else error_for_code(entry.error_code, entry.error_message or ""))
        return results

    async def update_features(self, levels: Mapping[str, int], upgrade_type: str = "upgrade",
                              validate_only: bool = False) -> dict[str, KafkaException | None]:
        """Set finalized feature levels (UpdateFeatures, as Kafka's Admin.updateFeatures;
        kafka-features.sh upgrade/downgrade). `upgrade_type`: "upgrade", "safe_downgrade" or
        "unsafe_downgrade" (a lower level needs a downgrade type). The controller applies every
        update or none; the result maps each feature to its error (None when applied)."""
        kind = UPGRADE_TYPES.get(upgrade_type)
        if kind is None:
            raise KafkaException(f"upgrade_type {upgrade_type!r} is not one of {', '.join(UPGRADE_TYPES)}")
        updates = [{"feature": name, "max_version_level": int(level), "upgrade_type": kind,
                    "allow_downgrade": kind != 1} for name, level in levels.items()]
        response = await (await self._controller()).call(UPDATE_FEATURES_KEY, {
            "timeout": _timeout(self._request_timeout), "feature_updates": updates, "validate_only": validate_only})
        results: dict[str, KafkaException | None] = {name: None for name in levels}
        for result in getattr(response, "results", ()) or ():
            if result.error_code != ErrorCode.none:
                results[result.feature] = error_for_code(result.error_code, result.error_message or "")
        if response.error_code != ErrorCode.none:  # v2: one error for the request
            error = error_for_code(response.error_code, response.error_message or "")
            results = {name: error for name in levels}
        return results

    async def list_dead_letters(self, group_id: str, dlq_topic: str | None = None,
                                topic: str | None = None, limit: int | None = None) -> list[DeadLetterRecord]:
        """The dead letters of a share group in its DLQ topic (``dlq_topic``, else the group's
        errors.deadletterqueue.topic.name), in DLQ order; ``topic`` keeps one source topic's;
        ``limit`` the newest ``limit`` of each DLQ partition (read back from its end only as far as
        needed; None: all, read from the log start)."""
        return await dead_letters.read_dead_letters(self, group_id, dlq_topic, topic, limit)

    async def redrive_dead_letters(self, group_id: str, dlq_topic: str | None, *, to_topic: str | None = None,
                                   offsets: Any = None, dry_run: bool = False,
                                   progress: Callable[[int], None] | None = None) -> RedriveResult:
        """Produce the group's dead letters again (to ``to_topic``, else their source topics), each
        once: ``offsets`` is None (all), a (first, last) DLQ offset range for every DLQ partition, or
        {partition: (first, last)}. See dead_letters.py for payloads, headers and progress."""
        return await dead_letters.redrive(self, group_id, dlq_topic, to_topic=to_topic, offsets=offsets,
                                          dry_run=dry_run, progress=progress)

    # ------------------------------------------------------------------ lifecycle


class Admin(SyncClient):
    """The blocking admin client: the same methods as AsyncAdmin. Use ``with``."""

    ASYNC = AsyncAdmin

    def create_topics(self, topics: Any, timeout: float | None = None) -> dict[str, UUID | None]:
        return self._run(self._async.create_topics(topics, timeout))

    def delete_topics(self, names: Iterable[str], timeout: float | None = None) -> None:
        return self._run(self._async.delete_topics(names, timeout))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        return self._run(self._async.describe_topics(names))

    def list_topics(self, include_internal: bool = False) -> dict[str, TopicDescription]:
        return self._run(self._async.list_topics(include_internal))

    def create_partitions(self, new_totals: Mapping[str, int], timeout: float | None = None) -> None:
        return self._run(self._async.create_partitions(new_totals, timeout))

    def list_offsets(self, specs: Mapping[tuple[str, int], Any]) -> dict[tuple[str, int], tuple[int, int]]:
        return self._run(self._async.list_offsets(specs))

    def delete_records(self, offsets: Mapping[tuple[str, int], int],
                       timeout: float | None = None) -> dict[tuple[str, int], int]:
        return self._run(self._async.delete_records(offsets, timeout))

    def describe_configs(self, resource_type: str, name: str) -> dict[str, str | None]:
        return self._run(self._async.describe_configs(resource_type, name))

    def describe_config_entries(self, resource_type: str, name: str) -> list[ConfigEntry]:
        return self._run(self._async.describe_config_entries(resource_type, name))

    def alter_configs(self, resource_type: str, name: str, set: Mapping[str, str] | None = None,  # noqa: A002
                      delete: Iterable[str] = ()) -> None:
        return self._run(self._async.alter_configs(resource_type, name, set, delete))

    def describe_configs_of(self, resource_type: str, names: Iterable[str], keys: Iterable[str] | None = None,
                            ) -> dict[str, Any]:
        return self._run(self._async.describe_configs_of(resource_type, names, keys))

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self._async.describe_cluster())

    def find_coordinator(self, group_id: str) -> BrokerDescription:
        return self._run(self._async.find_coordinator(group_id))

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        return self._run(self._async.list_groups(states, types))

    def describe_share_groups(self, group_ids: Iterable[str], include_authorized_operations: bool = False,
                              ) -> dict[str, ShareGroupDescription]:
        return self._run(self._async.describe_share_groups(group_ids, include_authorized_operations))

    def list_share_group_offsets(self, group_id: str, topics: Any = None) -> dict[tuple[str, int], tuple[int, int]]:
        return self._run(self._async.list_share_group_offsets(group_id, topics))

    def list_share_groups_offsets(self, group_ids: Iterable[str]) -> dict[str, Any]:
        return self._run(self._async.list_share_groups_offsets(group_ids))

    def alter_share_group_offsets(self, group_id: str, specs: Mapping[tuple[str, int], Any]) -> None:
        return self._run(self._async.alter_share_group_offsets(group_id, specs))

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        return self._run(self._async.delete_share_group_offsets(group_id, topics))

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaException | None]:
        return self._run(self._async.delete_groups(group_ids))

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, Any]:
        return self._run(self._async.describe_consumer_groups(group_ids))

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None,
                                    require_stable: bool = False) -> dict[tuple[str, int], tuple[int, str]]:
        return self._run(self._async.list_consumer_group_offsets(group_id, partitions, require_stable))

    def alter_consumer_group_offsets(self, group_id: str, specs: Mapping[tuple[str, int], Any]) -> None:
        return self._run(self._async.alter_consumer_group_offsets(group_id, specs))

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                                      ) -> dict[tuple[str, int], KafkaException | None]:
        return self._run(self._async.delete_consumer_group_offsets(group_id, partitions))

    def describe_features(self) -> FeatureMetadata:
        return self._run(self._async.describe_features())

    def describe_log_dirs(self, topics: Any = None) -> list[LogDirDescription]:
        return self._run(self._async.describe_log_dirs(topics))

    def describe_client_quotas(self, components: Iterable[tuple[str, Any]] = (),
                               strict: bool = False) -> dict[tuple, dict[str, float]]:
        return self._run(self._async.describe_client_quotas(components, strict))

    def alter_client_quotas(self, alterations: Mapping[tuple, Mapping[str, float | None]],
                            validate_only: bool = False) -> dict[tuple, KafkaException | None]:
        return self._run(self._async.alter_client_quotas(alterations, validate_only))

    def create_acls(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, KafkaException | None]:
        return self._run(self._async.create_acls(bindings))

    def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        return self._run(self._async.describe_acls(acl_filter))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> dict[AclBindingFilter, list[AclBinding] | KafkaException]:
        return self._run(self._async.delete_acls(filters))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, UserScramCredentialsDescription | KafkaException]:
        return self._run(self._async.describe_user_scram_credentials(users))

    def alter_user_scram_credentials(self, alterations: Iterable[UserScramCredentialAlteration]
                                     ) -> dict[str, KafkaException | None]:
        return self._run(self._async.alter_user_scram_credentials(alterations))

    def update_features(self, levels: Mapping[str, int], upgrade_type: str = "upgrade",
                        validate_only: bool = False) -> dict[str, KafkaException | None]:
        return self._run(self._async.update_features(levels, upgrade_type, validate_only))

    def describe_in_flight(self, group_id: str, topics: Any = None, *, offset: int | None = None,
                           max_rows: int = 1000) -> dict[tuple[str, int], InFlightPartitionView]:
        return self._run(self._async.describe_in_flight(group_id, topics, offset=offset, max_rows=max_rows))

    def alter_in_flight(self, group_id: str, topic: str, partition: int, action: str, *, first_offset: int = -1,
                        last_offset: int = -1, reset_delivery_count: bool = False, key: bytes | None = None,
                        validate_only: bool = False) -> AlterInFlightResult:
        return self._run(self._async.alter_in_flight(
            group_id, topic, partition, action, first_offset=first_offset, last_offset=last_offset,
            reset_delivery_count=reset_delivery_count, key=key, validate_only=validate_only))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._run(self._async.describe_transactions(transactional_ids))

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
                          transactional_id_pattern: str | None = None) -> list[ListedTransaction]:
        return self._run(self._async.list_transactions(states, producer_ids, duration_ms, transactional_id_pattern))

    def describe_producers(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]:
        return self._run(self._async.describe_producers(partitions))

    def find_hanging_transactions(self, partitions: Iterable[tuple[str, int]], max_transaction_timeout_ms: int,
                                  now_ms: int) -> list[HangingTransaction]:
        return self._run(self._async.find_hanging_transactions(partitions, max_transaction_timeout_ms, now_ms))

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int = 0) -> None:
        return self._run(self._async.abort_transaction(topic, partition, producer_id, producer_epoch,
                                                       coordinator_epoch))

    def list_dead_letters(self, group_id: str, dlq_topic: str | None = None,
                          topic: str | None = None, limit: int | None = None) -> list[DeadLetterRecord]:
        return self._run(self._async.list_dead_letters(group_id, dlq_topic, topic, limit))

    def redrive_dead_letters(self, group_id: str, dlq_topic: str | None, *, to_topic: str | None = None,
                             offsets: Any = None, dry_run: bool = False,
                             progress: Callable[[int], None] | None = None) -> RedriveResult:
        return self._run(self._async.redrive_dead_letters(group_id, dlq_topic, to_topic=to_topic, offsets=offsets,
                                                          dry_run=dry_run, progress=progress))


def _share_group_offsets(group_id: str, g: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (start offset, lag)} from one group's DescribeShareGroupOffsets entry;
    the group's or a partition's error raises."""
    _check(g.error_code, f"DescribeShareGroupOffsets of group {group_id!r}", g.error_message)
    out = {}
    for t in g.topics:
        for p in t.partitions:
            _check(p.error_code, f"DescribeShareGroupOffsets of group {group_id!r} for "
                                 f"{t.topic_name}-{p.partition_index}", p.error_message)
            out[(t.topic_name, p.partition_index)] = (p.start_offset, getattr(p, "lag", -1))
    return out
