"""The share consumer's request manager, sans-I/O: what ShareFetch and ShareAcknowledge requests to
send to which leader, and what each answer changes. After Kafka's ``ShareConsumeRequestManager``
(one share session per node, one request in flight per session, acknowledgements piggy-backed on
the next ShareFetch to the partition's leader, CurrentLeader hints) and ``ShareFetchCollector``.

The asyncio driver (``_share_driver.ShareConsumerDriver``) owns the connections, the tasks and the
clock; it asks this object for a request, sends it, and hands back the response (or the
exception the send raised). Time and metadata come in as data: ``topics`` is the client's
metadata (topic name → ``TopicInfo``, refreshed in place by the driver); the acknowledgement book
stays with the driver, which passes a ``take_acks`` callable (it takes them under its lock).

Per node the state is (session closed | open) × (idle | fetching); the inputs are a fetch
request, a response without error, a response with a session error, with a fatal or a retriable
top-level error, a failed send, and per partition: records, an acknowledgement error, a leader
error with or without CurrentLeader, a metadata error, another error, a partition revoked while
the fetch was out. tests/client/test_share_request_manager.py checks each pair.

An acknowledgement succeeded only when the response names its partition with error code NONE. A
partition the response leaves out fails with INVALID_RECORD_STATE, as Kafka's
ShareConsumeRequestManager fails "Acknowledgement not successful due to invalid response from
broker" (handleShareFetchSuccess for the acknowledgements left in flight; processingComplete
through processPendingInFlightAcknowledgements for ShareAcknowledge). Response partitions are named
by topic id through every name the client has known for it, not only the current metadata (as
Kafka's topicNamesMap): a topic deleted while the request was out is refreshed out of the metadata,
and its UNKNOWN_TOPIC_ID answer must still reach its acknowledgements.
"""

from __future__ import annotations

from uuid import UUID
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._metadata import BrokerInfo, TopicInfo
from ._share_acks import AckRange, AcknowledgeType, ack_batches, offset_runs
from ._share_fetch import BatchCache, DecodedPartition, decode_acquired, raw_acquired
from ._share_requests import (
    LEADER_ERRORS,
    PartitionErrorAction,
    acks_to_send_now,
    fetch_error_is_fatal,
    fetch_targets,
    leader_of,
    partition_error_action,
)
from ._share_session import ShareSession
from .errors import AuthenticationException, KafkaException, error_for_code
from .records import Record, TopicPartition

__all__ = ["ShareAcknowledgeResult", "ShareConsumeRequestManager", "ShareFetchRequest", "ShareFetchResult",
           "duration_ms", "omitted_error"]

TopicIdPartition = tuple[UUID, int]
Acks = dict[TopicPartition, list[AckRange]]
Outcomes = dict[TopicPartition, KafkaException | None]


def omitted_error(tp: TopicPartition, response: str) -> KafkaException:
    """The failure of acknowledgements whose partition ``response`` left out (or that were never
    sent: their topic id was unknown): INVALID_RECORD_STATE, as Kafka's ShareConsumeRequestManager
    (INVALID_RESPONSE); whether the broker applied them is unknown."""
    return error_for_code(ErrorCode.invalid_record_state,
                          f"acknowledging {tp.topic}-{tp.partition}: the {response} did not include the "
                          f"partition, so the acknowledgements are not known to have succeeded")


def duration_ms(value: Any) -> int:
    """A duration field of a response (a timedelta, or milliseconds) in milliseconds."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


@dataclass(slots=True)
class ShareFetchRequest:
    """A ShareFetch to send to ``node_id``; ``acks`` ride on it (their outcome comes back with
    the response)."""
    node_id: int
    values: dict[str, Any]
    acks: Acks


@dataclass(slots=True)
class ShareFetchResult:
    """What one ShareFetch answer (or failure) means for the driver."""
    ack_outcomes: Outcomes = field(default_factory=dict)  # for the acknowledgements that rode on it
    partitions: list[DecodedPartition] = field(default_factory=list)  # acquired records for the buffer
    own_acks: list[tuple[TopicPartition, Mapping[int, int]]] = field(default_factory=list)  # GAP/REJECT of corrupt
    released: Acks = field(default_factory=dict)  # acquired for a partition revoked while the fetch was out
    failures: list[tuple[TopicPartition, KafkaException]] = field(default_factory=list)  # for the next poll
    fatal: KafkaException | None = None  # ends the consumer
    back_off: bool = False  # wait retry.backoff.ms before this node fetches again
    brokers: list[BrokerInfo] = field(default_factory=list)  # NodeEndpoints learned
    bytes_count: int = 0
    records_count: int = 0


@dataclass(slots=True)
class ShareAcknowledgeResult:
    outcomes: Outcomes
    brokers: list[BrokerInfo] = field(default_factory=list)


class _NodeState:
    __slots__ = ("session", "fetching")

    def __init__(self, node_id: int) -> None:
        self.session = ShareSession(node_id)
        self.fetching = False


class ShareConsumeRequestManager:
    """The share consumer's leaders, share sessions and in-flight fetches; see the module docstring."""

    def __init__(self, *, group_id: str, member_id: str, topics: Mapping[str, TopicInfo], record_limit: bool,
                 check_crcs: bool, max_wait_ms: int, min_bytes: int, max_bytes: int, max_records: int,
                 acquire_mode: int) -> None:
        self.group_id, self.member_id = group_id, member_id
        self.topics = topics
        self.record_limit = record_limit
        self.check_crcs = check_crcs
        self.raw = False  # poll_batches(): acquired records stay undecoded
        self._fetch_settings = {"max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
                                "max_records": max_records, "batch_size": max_records, "acquire_mode": acquire_mode}
        self.assigned: dict[TopicPartition, TopicIdPartition] = {}
        self.leader_hints: dict[TopicPartition, tuple[int, int]] = {}  # tp → (leader id, leader epoch)
        self.nodes: dict[int, _NodeState] = {}
        self.rotation = 0
        self.metadata_stale = False  # a leader or topic is unknown: the driver refreshes the metadata
        self.lock_timeout_ms: int | None = None
        self.batch_cache = BatchCache()  # batches only partly acquired, decoded once
        self._names_known: dict[UUID, str] = {}  # every topic id → name seen (ids are never reused)

    # ------------------------------------------------------------------ leaders and metadata

    def node(self, node_id: int) -> _NodeState:
        state = self.nodes.get(node_id)
        if state is None:
            state = self.nodes[node_id] = _NodeState(node_id)
        return state

    def leader_of(self, tp: TopicPartition) -> int | None:
        info = self.topics.get(tp.topic)
        part = info.partitions.get(tp.partition) if info is not None else None
        leader = leader_of(part.leader_id if part is not None else None,
                           part.leader_epoch if part is not None else -1, self.leader_hints.get(tp))
        if leader is None:
            self.metadata_stale = True
        return leader

    def partitions_by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, set[TopicPartition]]:
        out: dict[int, set[TopicPartition]] = {}
        for tp in tps:
            leader = self.leader_of(tp)
            if leader is not None:
                out.setdefault(leader, set()).add(tp)
        return out

    def topic_names(self) -> dict[UUID, str]:
        """Topic id → name for every topic in the metadata now, and any seen before (a deleted
        topic's id keeps its name: its requests' answers still need it)."""
        known = self._names_known
        for name, info in self.topics.items():
            if info.topic_id is not None and known.get(info.topic_id) != name:
                known[info.topic_id] = name
        return known

    def on_metadata(self) -> None:
        """The metadata was refreshed: leader hints it has caught up with are dropped."""
        for tp, (_leader, epoch) in list(self.leader_hints.items()):
            info = self.topics.get(tp.topic)
            part = info.partitions.get(tp.partition) if info is not None else None
            if part is not None and part.leader_epoch >= epoch:
                del self.leader_hints[tp]

    def _partition_error(self, tp: TopicPartition, error: ErrorCode, current_leader) -> KafkaException | None:
        """Apply a partition's error; the exception for the application when it is not retried."""
        action = partition_error_action(error, current_leader.leader_id if current_leader is not None else None)
        if action is PartitionErrorAction.USE_LEADER_HINT:
            self.leader_hints[tp] = (current_leader.leader_id, current_leader.leader_epoch)
        elif action is PartitionErrorAction.REFRESH_METADATA:
            self.metadata_stale = True
        else:
            return error_for_code(error, f"ShareFetch of {tp.topic}-{tp.partition}")
        return None

    @staticmethod
    def _brokers(response) -> list[BrokerInfo]:
        return [BrokerInfo(ep.node_id, ep.host, ep.port, ep.rack)
                for ep in getattr(response, "node_endpoints", ()) or ()]

    # ------------------------------------------------------------------ assignment

    def resolve_assignment(self, assignment: Mapping[UUID, Iterable[int]]
                           ) -> tuple[dict[TopicPartition, TopicIdPartition], bool]:
        """The assignment by topic name, and whether every topic id in it is known (in the
        metadata now: a topic id assigned is one of a topic that exists)."""
        names = {info.topic_id: name for name, info in self.topics.items() if info.topic_id is not None}
        self.topic_names()
        resolved = {TopicPartition(names[topic_id], p): (topic_id, p)
                    for topic_id, partitions in assignment.items() if topic_id in names for p in partitions}
        complete = all(topic_id in names for topic_id in assignment)
        if not complete:
            self.metadata_stale = True
        return resolved, complete

    def set_assignment(self, resolved: Mapping[TopicPartition, TopicIdPartition]) -> set[TopicPartition]:
        """The new assignment; returns the partitions revoked (their buffered records are released)."""
        revoked = set(self.assigned) - set(resolved)
        self.assigned = dict(resolved)
        return revoked

    # ------------------------------------------------------------------ fetch

    def fetching_nodes(self) -> set[int]:
        return {node_id for node_id, state in self.nodes.items() if state.fetching}

    def fetches_to_start(self) -> list[int]:
        """The nodes a poll starts a ShareFetch on now (marked fetching until ``on_fetch_done``)."""
        by_leader = self.partitions_by_leader(self.assigned)
        targets, self.rotation = fetch_targets(by_leader, fetching=self.fetching_nodes(),
                                               record_limit=self.record_limit, rotation=self.rotation)
        for node_id in targets:
            self.node(node_id).fetching = True
        return targets

    def on_fetch_done(self, node_id: int) -> None:
        self.node(node_id).fetching = False

    def acks_to_send_now(self, pending: Iterable[TopicPartition], *, buffered: bool) -> set[TopicPartition]:
        """At poll: the partitions whose pending acknowledgements go out at once in a
        ShareAcknowledge; the rest ride on the ShareFetch about to go to their leader."""
        fetching = self.fetching_nodes()
        target = None
        if self.record_limit:  # the one broker this poll's fetch goes to (fetches_to_start picks the same)
            targets, _ = fetch_targets(self.partitions_by_leader(self.assigned), fetching=fetching, record_limit=True,
                                       rotation=self.rotation)
            target = targets[0] if targets else None
        return acks_to_send_now(
            pending, leader=lambda tp: self.leader_of(tp) if tp in self.assigned else None,
            session_open=lambda node_id: self.node(node_id).session.is_open,
            fetching=fetching, buffered=buffered, record_limit=self.record_limit, fetch_target=target)

    def fetch_request(self, node_id: int,
                      take_acks: Callable[[Callable[[TopicPartition], bool]], Acks]) -> ShareFetchRequest | None:
        """The ShareFetch for ``node_id``, or None when it leads none of the assigned partitions
        now. With the session open, the pending acknowledgements of the partitions it leads ride
        on it: ``take_acks(rides)`` takes them from the book (``rides(tp)`` says which)."""
        wanted_tps = {tp for tp in self.assigned if self.leader_of(tp) == node_id}
        if not wanted_tps:
            return None
        session = self.node(node_id).session
        acks: Acks = {}
        if session.is_open:
            acks = take_acks(lambda tp: tp in self.assigned and self.leader_of(tp) == node_id)
        values = session.fetch_values(self.group_id, self.member_id, {self.assigned[tp] for tp in wanted_tps},
                                      self.wire_acks(acks), **self._fetch_settings)
        return ShareFetchRequest(node_id, values, acks)

    def on_fetch_failed(self, request: ShareFetchRequest, error: KafkaException) -> ShareFetchResult:
        """The ShareFetch could not be sent or answered (connection lost): the session starts
        again, the metadata is refreshed, the node backs off. An AuthenticationException (the
        connection's SASL re-authentication or TLS refused) ends the consumer: Kafka's consumer
        treats one on any connection as fatal (NetworkClient's DefaultMetadataUpdater
        .handleServerDisconnect -> Metadata.fatalError, raised to poll() by NetworkClientDelegate
        .maybePropagateMetadataError) instead of reconnecting to be refused again."""
        self.node(request.node_id).session.reset()
        self.metadata_stale = True
        return ShareFetchResult(ack_outcomes={tp: error for tp in request.acks}, back_off=True,
                                fatal=error if isinstance(error, AuthenticationException) else None)

    def on_fetch_response(self, request: ShareFetchRequest, response) -> ShareFetchResult:
        node_id, acks = request.node_id, request.acks
        error = ErrorCode(response.error_code)
        self.node(node_id).session.on_response(error)
        if error != ErrorCode.none:
            exc = error_for_code(error, f"ShareFetch to node {node_id}"
                                        + (f" ({response.error_message})" if response.error_message else ""))
            return ShareFetchResult(ack_outcomes={tp: exc for tp in acks},
                                    fatal=exc if fetch_error_is_fatal(error) else None, back_off=True)
        self.lock_timeout_ms = duration_ms(response.acquisition_lock_timeout)
        result = ShareFetchResult(brokers=self._brokers(response))
        names = self.topic_names()
        outcomes = result.ack_outcomes
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                self.metadata_stale = True
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp in acks:
                    code = ErrorCode(p.acknowledge_error_code)
                    outcomes[tp] = None if code == ErrorCode.none else error_for_code(
                        code, f"acknowledging {name}-{p.partition_index}"
                              + (f" ({p.acknowledge_error_message})" if p.acknowledge_error_message else ""))
                error = ErrorCode(p.error_code)
                if error != ErrorCode.none:
                    failure = self._partition_error(tp, error, p.current_leader)
                    if failure is not None:
                        result.failures.append((tp, failure))
                    continue
                if self.raw:
                    item, releases = raw_acquired(tp, p.records, p.acquired_records)
                    decoded = DecodedPartition(tp, [item] if item is not None else [], releases,
                                               len(p.records or b""))
                    records_count = item.count if item is not None else 0
                else:
                    decoded = decode_acquired(tp, p.records, p.acquired_records, check_crcs=self.check_crcs,
                                              cache=self.batch_cache)
                    records_count = decoded.records_count
                if decoded.acks:
                    result.own_acks.append((tp, decoded.acks))
                if tp not in self.assigned:  # revoked while the fetch was out: give the records back
                    result.released[tp] = self._release_all(decoded)
                    continue
                result.partitions.append(decoded)
                result.bytes_count += decoded.bytes_count
                result.records_count += records_count
        for tp in acks:
            if tp not in outcomes:
                outcomes[tp] = omitted_error(tp, f"ShareFetch response from node {node_id}")
        return result

    def _release_all(self, decoded: DecodedPartition) -> list[AckRange]:
        if self.raw:
            return [(first, last, AcknowledgeType.RELEASE) for item in decoded.items for first, last, _ in item.acquired]
        return [(first, last, AcknowledgeType.RELEASE)
                for first, last in offset_runs(r.offset for r in decoded.items if isinstance(r, Record))]

    # ------------------------------------------------------------------ acknowledge

    def wire_acks(self, acks: Mapping[TopicPartition, list[AckRange]]) -> dict[TopicIdPartition, list]:
        """Acknowledgements keyed as on the wire; a partition whose topic id is unknown is left out."""
        out = {}
        for tp, ranges in acks.items():
            key = self.assigned.get(tp)
            if key is None:
                info = self.topics.get(tp.topic)
                if info is None or info.topic_id is None:
                    continue
                key = (info.topic_id, tp.partition)
            out[key] = ack_batches(ranges)
        return out

    def commit_targets(self, tps: Iterable[TopicPartition]) -> tuple[dict[int, set[TopicPartition]], Outcomes]:
        """(partitions by leader, failures of those with no known leader) for a ShareAcknowledge round."""
        tps = set(tps)
        by_leader = self.partitions_by_leader(tps)
        led = {tp for part in by_leader.values() for tp in part}
        return by_leader, {tp: KafkaException(f"{tp.topic}-{tp.partition} has no known leader",
                                              ErrorCode.leader_not_available) for tp in tps - led}

    def open_sessions(self) -> list[int]:
        return [node_id for node_id, state in self.nodes.items() if state.session.is_open]

    def open_session_request(self, node_id: int) -> dict[str, Any] | None:
        """An empty ShareFetch that opens the session to carry acknowledgements; None when it is open."""
        session = self.node(node_id).session
        if session.is_open:
            return None
        return session.fetch_values(self.group_id, self.member_id, set(), {}, max_wait_ms=0, min_bytes=0,
                                    max_bytes=0, max_records=0, batch_size=0, acquire_mode=0)

    def on_open_session_response(self, node_id: int, response) -> KafkaException | None:
        error = ErrorCode(response.error_code)
        self.node(node_id).session.on_response(error)
        if error != ErrorCode.none:
            return error_for_code(error, f"opening a share session with node {node_id}")
        return None

    def acknowledge_request(self, node_id: int, acks: Acks, *, is_renew: bool, closing: bool = False) -> dict[str, Any]:
        """A ShareAcknowledge on the node's open session (epoch −1 when ``closing``)."""
        return self.node(node_id).session.acknowledge_values(self.group_id, self.member_id, self.wire_acks(acks),
                                                             is_renew=is_renew, closing=closing)

    def on_request_failed(self, node_id: int) -> None:
        """A request to the node failed to go or to be answered: its session starts again."""
        self.node(node_id).session.reset()

    def on_acknowledge_response(self, node_id: int, acks: Acks, response) -> ShareAcknowledgeResult:
        error = ErrorCode(response.error_code)
        self.node(node_id).session.on_response(error)
        if error != ErrorCode.none:
            exc = error_for_code(error, f"ShareAcknowledge to node {node_id}"
                                        + (f" ({response.error_message})" if response.error_message else ""))
            return ShareAcknowledgeResult({tp: exc for tp in acks})
        timeout = getattr(response, "acquisition_lock_timeout", None)
        if timeout is not None and duration_ms(timeout) > 0:
            self.lock_timeout_ms = duration_ms(timeout)
        names = self.topic_names()
        out: Outcomes = {}
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                self.metadata_stale = True
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp not in acks:
                    continue
                code = ErrorCode(p.error_code)
                out[tp] = None
                if code != ErrorCode.none:
                    if code in LEADER_ERRORS:
                        self._partition_error(tp, code, p.current_leader)
                    out[tp] = error_for_code(code, f"acknowledging {tp.topic}-{tp.partition}"
                                             + (f" ({p.error_message})" if p.error_message else ""))
        for tp in acks:
            if tp not in out:
                out[tp] = omitted_error(tp, f"ShareAcknowledge response from node {node_id}")
        return ShareAcknowledgeResult(out, self._brokers(response))
