"""A test-side Kafka wire client for share groups (KIP-932), built on kio.

`ShareClient` speaks ShareGroupHeartbeat v1, ShareGroupDescribe v1, ShareFetch v1-v2 and
ShareAcknowledge v1-v2 over one connection (framing by `support.RawClient`). It tracks the member
epoch, the last assignment and the share-session epoch the way librdkafka does, but it never
validates what it sends: ack batches may be inverted, overlapping, unordered, have wrong-length or
out-of-range type arrays, carry RENEW without IsRenewAck; member ids may be empty, over-long or
null; any epoch may be forced. For byte-level mutation, `raw_frame(entity)` returns the encoded
request frame (header + body, no size prefix) and `request_raw(frame)` sends one.

Shapes used throughout:

* a *partition* is ``(topic_id: uuid.UUID, partition: int)``;
* a *partition set* is a list of partitions, a dict ``{(topic_id, partition): ...}`` (keys are
  used), or a dict ``{topic_id: [partition, ...]}`` (like `ShareClient.assignment`);
* an *ack batch* is ``(first_offset, last_offset, types)`` where ``types`` is a list of ints (or a
  single int, meaning ``[int]``);
* *acks* is ``{(topic_id, partition): [ack batch, ...]}``;
* *raw topics* (the ``topics=`` escape hatch) is ``[(topic_id, [(partition, [ack batch, ...]),
  ...]), ...]`` and is sent verbatim, so the same topic id may appear twice.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import struct
import sys
import uuid
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from . import RawClient, wait_until

# API keys
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79

# Acknowledge types
GAP = 0
ACCEPT = 1
RELEASE = 2
REJECT = 3
RENEW = 4

INT32_MAX = 2**31 - 1
# What librdkafka sends on its first ShareFetch (wire-notes §2.3).
DEFAULT_MAX_BYTES = 52428800

_UNSET: Any = object()

TopicPartition = tuple[uuid.UUID, int]
AckBatch = tuple[int, int, "Sequence[int] | int"]


class ShareRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    delivery_count: int


# ----------------------------------------------------------------------------- small utilities

def new_member_id() -> str:
    """A fresh 22-character URL-safe base64 UUID, like librdkafka's client-generated member ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def next_session_epoch(epoch: int) -> int:
    """The epoch expected after a successful request at `epoch` (0 opens, -1 closes, wraps to 1)."""
    if epoch == -1:
        return 0
    if epoch >= INT32_MAX:
        return 1
    return epoch + 1


def _make(cls, **values):
    """Build a kio entity, keeping only the fields `cls` has (wire-notes §3)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _nested(cls, name: str):
    return getattr(sys.modules[cls.__module__], name)


def _check_version_fields(cls, **values) -> None:
    """Refuse non-default values for fields this version lacks (an API misuse, not validation)."""
    names = {f.name for f in dataclasses.fields(cls)}
    defaults = {"share_acquire_mode": 0, "is_renew_ack": False}
    for k, v in values.items():
        if k not in names and v != defaults.get(k):
            raise ValueError(f"{cls.__name__} v{cls.__version__} has no field {k!r} (got {v!r})")


def _types(types) -> tuple[int, ...]:
    if isinstance(types, int):
        return (types,)
    return tuple(types)


def partition_list(partitions) -> list[TopicPartition]:
    """Normalise a partition set (see module doc) to an ordered list of (topic_id, partition)."""
    if partitions is None:
        return []
    out: list[TopicPartition] = []
    if isinstance(partitions, Mapping):
        for k, v in partitions.items():
            if isinstance(k, tuple):
                out.append((k[0], k[1]))
            else:
                out.extend((k, p) for p in v)
        return out
    for item in partitions:
        tid, p = item
        out.append((tid, p))
    return out


def _group_by_topic(tps: Iterable[TopicPartition]) -> list[tuple[uuid.UUID, list[int]]]:
    grouped: dict[Any, list[int]] = {}
    for tid, p in tps:
        grouped.setdefault(tid, []).append(p)
    return list(grouped.items())


def ack_topics(acks: Mapping[TopicPartition, Sequence[AckBatch]] | None,
               partitions: Iterable[TopicPartition] = ()) -> list[tuple[uuid.UUID, list[tuple[int, list]]]]:
    """Raw topics listing `partitions` (no acks) and every partition of `acks`, grouped by topic id,
    in first-appearance order. Nothing is validated or merged beyond the grouping."""
    acks = dict(acks or {})
    order: list[TopicPartition] = []
    seen = set()
    for tp in list(partitions) + list(acks):
        tp = (tp[0], tp[1])
        if tp not in seen:
            seen.add(tp)
            order.append(tp)
    topics: dict[Any, list[tuple[int, list]]] = {}
    for tid, p in order:
        topics.setdefault(tid, []).append((p, list(acks.get((tid, p), ()))))
    return list(topics.items())


# ----------------------------------------------------------------------------- request builders (no validation)

def heartbeat_request(*, group_id, member_id, member_epoch: int, rack_id=None, topics=None, version: int = 1):
    cls = load_request_schema(SHARE_GROUP_HEARTBEAT, version)
    return _make(cls, group_id=group_id, member_id=member_id, member_epoch=member_epoch, rack_id=rack_id,
                 subscribed_topic_names=None if topics is None else tuple(topics))


def describe_request(group_ids: Sequence[str], *, include_authorized_operations: bool = False, version: int = 1):
    cls = load_request_schema(SHARE_GROUP_DESCRIBE, version)
    return _make(cls, group_ids=tuple(group_ids), include_authorized_operations=include_authorized_operations)


def _ack_batches(cls, batches) -> tuple:
    batch_cls = _nested(cls, "AcknowledgementBatch")
    return tuple(batch_cls(first_offset=b[0], last_offset=b[1], acknowledge_types=_types(b[2])) for b in batches)


def share_fetch_request(*, version: int = 1, group_id, member_id, epoch: int, topics=(), forgotten=(),
                        max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = DEFAULT_MAX_BYTES,
                        max_records: int = 500, batch_size: int = 500, share_acquire_mode: int = 0,
                        is_renew_ack: bool = False):
    """ShareFetchRequest v1/v2 from raw topics ``[(topic_id, [(partition, [ack batch])])]`` and forgotten
    ``[(topic_id, [partition])]``, both sent verbatim."""
    cls = load_request_schema(SHARE_FETCH, version)
    _check_version_fields(cls, share_acquire_mode=share_acquire_mode, is_renew_ack=is_renew_ack)
    topic_cls, part_cls, forgot_cls = (_nested(cls, n) for n in ("FetchTopic", "FetchPartition", "ForgottenTopic"))
    return _make(
        cls, group_id=group_id, member_id=member_id, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
        max_records=max_records, batch_size=batch_size, share_acquire_mode=share_acquire_mode,
        is_renew_ack=is_renew_ack,
        topics=tuple(topic_cls(topic_id=tid, partitions=tuple(
            _make(part_cls, partition_index=p, partition_max_bytes=0, acknowledgement_batches=_ack_batches(cls, b))
            for p, b in parts)) for tid, parts in topics),
        forgotten_topics_data=tuple(forgot_cls(topic_id=tid, partitions=tuple(parts)) for tid, parts in forgotten),
    )


def share_acknowledge_request(*, version: int = 1, group_id, member_id, epoch: int, topics=(),
                              is_renew_ack: bool = False):
    """ShareAcknowledgeRequest v1/v2 from raw topics ``[(topic_id, [(partition, [ack batch])])]``."""
    cls = load_request_schema(SHARE_ACKNOWLEDGE, version)
    _check_version_fields(cls, is_renew_ack=is_renew_ack)
    topic_cls, part_cls = _nested(cls, "AcknowledgeTopic"), _nested(cls, "AcknowledgePartition")
    return _make(
        cls, group_id=group_id, member_id=member_id, share_session_epoch=epoch, is_renew_ack=is_renew_ack,
        topics=tuple(topic_cls(topic_id=tid, partitions=tuple(
            part_cls(partition_index=p, acknowledgement_batches=_ack_batches(cls, b)) for p, b in parts))
            for tid, parts in topics),
    )


def _forgotten_list(forgotten) -> list[tuple[uuid.UUID, list[int]]]:
    """Forgotten as a partition set, or already as ``[(topic_id, [partitions])]``."""
    if not forgotten:
        return []
    if not isinstance(forgotten, Mapping):
        items = list(forgotten)
        if items and not isinstance(items[0][1], int):
            return [(tid, list(parts)) for tid, parts in items]
        forgotten = items
    return _group_by_topic(partition_list(forgotten))


# ----------------------------------------------------------------------------- the client

class ShareClient:
    """One connection acting as one share-group member (tests only; never validates what it sends).

    State (all plain attributes, free to set in tests): ``group_id``, ``member_id``, ``member_epoch``
    (heartbeat), ``session_epoch`` (next ShareFetch/ShareAcknowledge epoch), ``session_partitions``
    (what the broker's share session should hold), ``last_heartbeat``.
    The connection opens lazily on the first request; ``disconnect()`` drops it (the next request
    reconnects), ``close()`` drops it for good.
    """

    def __init__(self, bootstrap: str, group_id: str | None, member_id: str | None = None, *,
                 timeout_s: float = 10) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.member_id = new_member_id() if member_id is None else member_id
        self.timeout_s = timeout_s
        self.member_epoch = 0
        self.session_epoch = 0
        self.session_partitions: set[TopicPartition] = set()
        self.heartbeat_interval_ms: int | None = None
        self.last_heartbeat = None
        self._assignment: dict[uuid.UUID, list[int]] = {}
        self._raw: RawClient | None = None

    # -- connection

    @property
    def raw(self) -> RawClient:
        if self._raw is None:
            self._raw = RawClient(self.bootstrap, timeout_s=self.timeout_s)
        return self._raw

    @property
    def connected(self) -> bool:
        return self._raw is not None

    def disconnect(self) -> None:
        """Close the TCP connection (the broker should drop this connection's share sessions)."""
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    def close(self) -> None:
        self.disconnect()

    def __enter__(self) -> "ShareClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, entity):
        """Send any kio request entity, return the decoded response (no state tracking).

        If the broker closes the connection (ConnectionError) or the socket fails, the connection is
        dropped before re-raising, so the next request reconnects."""
        try:
            return self.raw.request(entity)
        except OSError:
            self.disconnect()
            raise

    def raw_frame(self, entity) -> bytes:
        """Encode `entity` with a fresh correlation id: request header + body, without the size prefix."""
        return self.raw.encode(entity)

    def request_raw(self, frame: bytes, *, decode: bool = True):
        """Send a (possibly mutated) frame and read one response frame.

        With `decode`, the response is decoded with the class for the api key/version found in the
        frame's first four bytes and its correlation id is checked against bytes 4-8; otherwise the
        raw response frame (response header included) is returned. Raises ConnectionError if the
        broker closes the connection."""
        try:
            self.raw.send_frame(frame)
            resp = self.raw.recv_frame()
        except OSError:
            self.disconnect()
            raise
        if not decode:
            return resp
        return decode_response(frame, resp)

    # -- ShareGroupHeartbeat / ShareGroupDescribe

    def heartbeat(self, topics: Sequence[str] | None, epoch: int | None = None, rack_id: str | None = None, *,
                  member_id: str | None = _UNSET, group_id: str | None = _UNSET, version: int = 1):
        """ShareGroupHeartbeat at `epoch` (default: the tracked member epoch). On success the member
        epoch (and the member id, if the broker returns one) is taken from the response, and a
        non-null assignment replaces `assignment`."""
        req = heartbeat_request(group_id=self.group_id if group_id is _UNSET else group_id,
                                member_id=self.member_id if member_id is _UNSET else member_id,
                                member_epoch=self.member_epoch if epoch is None else epoch,
                                rack_id=rack_id, topics=topics, version=version)
        resp = self.request(req)
        self.last_heartbeat = resp
        if resp.error_code == ErrorCode.none:
            self.member_epoch = resp.member_epoch
            if resp.member_id:
                self.member_id = resp.member_id
            self.heartbeat_interval_ms = int(resp.heartbeat_interval.total_seconds() * 1000)
            if resp.assignment is not None:
                self._assignment = {tp.topic_id: list(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    def join(self, topics: Sequence[str], rack_id: str | None = None):
        """Heartbeat at epoch 0 subscribing to `topics`."""
        return self.heartbeat(list(topics), epoch=0, rack_id=rack_id)

    def leave(self):
        """Heartbeat at epoch -1; on success the assignment is cleared."""
        resp = self.heartbeat(None, epoch=-1)
        if resp.error_code == ErrorCode.none:
            self._assignment = {}
        return resp

    def wait_for_assignment(self, predicate=None, timeout_s: float = 10.0, interval_s: float = 0.05):
        """Heartbeat (topics unchanged) until `predicate(assignment)` holds (default: non-empty)."""
        predicate = predicate or (lambda a: any(a.values()))

        def poll():
            self.heartbeat(None)
            return predicate(self.assignment)

        wait_until(poll, timeout_s, interval_s, message=f"assignment for member {self.member_id}")
        return self.assignment

    @property
    def assignment(self) -> dict[uuid.UUID, list[int]]:
        """topic_id -> partitions, from the last non-null assignment of a successful heartbeat."""
        return {k: list(v) for k, v in self._assignment.items()}

    @property
    def assigned_partitions(self) -> list[TopicPartition]:
        return partition_list(self._assignment)

    def describe(self, group_ids: Sequence[str] | None = None, *, include_authorized_operations: bool = False):
        """ShareGroupDescribe v1 (default: this client's group)."""
        return self.request(describe_request([self.group_id] if group_ids is None else group_ids,
                                             include_authorized_operations=include_authorized_operations))

    # -- ShareFetch / ShareAcknowledge

    def fetch_request(self, partitions=None, *, version: int = 1, acks=None, max_wait_ms: int = 500,
                      min_bytes: int = 1, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int = 500,
                      batch_size: int = 500, share_acquire_mode: int = 0, is_renew_ack: bool = False,
                      forgotten=None, epoch: int | None = None, send_partitions=None, topics=None,
                      member_id: str | None = _UNSET, group_id: str | None = _UNSET):
        """Build (not send) the ShareFetch that `fetch` would send with these arguments."""
        epoch = self.session_epoch if epoch is None else epoch
        if topics is None:
            given = partition_list(self._assignment if partitions is None else partitions)
            if send_partitions is None:
                if epoch == 0:
                    send = given
                elif epoch == -1:
                    send = []
                else:
                    send = [tp for tp in given if tp not in self.session_partitions]
            else:
                send = partition_list(send_partitions)
            topics = ack_topics(acks, send)
        return share_fetch_request(
            version=version, group_id=self.group_id if group_id is _UNSET else group_id,
            member_id=self.member_id if member_id is _UNSET else member_id, epoch=epoch, topics=topics,
            forgotten=_forgotten_list(forgotten), max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
            max_records=max_records, batch_size=batch_size, share_acquire_mode=share_acquire_mode,
            is_renew_ack=is_renew_ack)

    def fetch(self, partitions=None, *, version: int = 1, acks=None, max_wait_ms: int = 500, min_bytes: int = 1,
              max_bytes: int = DEFAULT_MAX_BYTES, max_records: int = 500, batch_size: int = 500,
              share_acquire_mode: int = 0, is_renew_ack: bool = False, forgotten=None, epoch: int | None = None,
              send_partitions=None, topics=None, member_id: str | None = _UNSET, group_id: str | None = _UNSET):
        """Send a ShareFetch and return the decoded response.

        `partitions` (default: the current assignment) is the partition set this fetch is about; like
        librdkafka, only the ones not yet in the share session are listed (all of them at epoch 0),
        unless `send_partitions` says exactly which to list. Partitions with `acks` are always listed.
        `topics` replaces the whole Topics array verbatim (raw topics). `forgotten` is a partition set
        or ``[(topic_id, [partitions])]``. `epoch` defaults to `session_epoch`; on a successful
        response (top-level error NONE) `session_epoch` advances from the epoch sent."""
        req = self.fetch_request(partitions, version=version, acks=acks, max_wait_ms=max_wait_ms,
                                 min_bytes=min_bytes, max_bytes=max_bytes, max_records=max_records,
                                 batch_size=batch_size, share_acquire_mode=share_acquire_mode,
                                 is_renew_ack=is_renew_ack, forgotten=forgotten, epoch=epoch,
                                 send_partitions=send_partitions, topics=topics, member_id=member_id,
                                 group_id=group_id)
        resp = self.request(req)
        self._track_session(req, resp)
        return resp

    def acknowledge_request(self, acks=None, *, version: int = 1, is_renew_ack: bool = False,
                            epoch: int | None = None, topics=None, member_id: str | None = _UNSET,
                            group_id: str | None = _UNSET):
        """Build (not send) the ShareAcknowledge that `acknowledge` would send."""
        return share_acknowledge_request(
            version=version, group_id=self.group_id if group_id is _UNSET else group_id,
            member_id=self.member_id if member_id is _UNSET else member_id,
            epoch=self.session_epoch if epoch is None else epoch,
            topics=ack_topics(acks) if topics is None else topics, is_renew_ack=is_renew_ack)

    def acknowledge(self, acks=None, *, version: int = 1, is_renew_ack: bool = False, epoch: int | None = None,
                    topics=None, member_id: str | None = _UNSET, group_id: str | None = _UNSET):
        """Send a ShareAcknowledge with `acks` ({(topic_id, partition): [ack batch]}) or raw `topics`;
        session epoch tracked as in `fetch`."""
        req = self.acknowledge_request(acks, version=version, is_renew_ack=is_renew_ack, epoch=epoch,
                                       topics=topics, member_id=member_id, group_id=group_id)
        resp = self.request(req)
        self._track_session(req, resp)
        return resp

    def close_session(self, *, version: int = 1):
        """ShareAcknowledge at epoch -1 with no acks (what librdkafka sends on close())."""
        return self.acknowledge(None, version=version, epoch=-1)

    def reset_session(self) -> None:
        """Forget the tracked session: the next fetch opens a new one at epoch 0."""
        self.session_epoch = 0
        self.session_partitions = set()

    def _track_session(self, req, resp) -> None:
        if resp.error_code != ErrorCode.none:
            return
        epoch = req.share_session_epoch
        self.session_epoch = next_session_epoch(epoch)
        if epoch == -1:
            self.session_partitions = set()
            return
        if req.__api_key__ != SHARE_FETCH:
            return
        if epoch == 0:
            self.session_partitions = set()
        for t in req.topics:
            self.session_partitions.update((t.topic_id, p.partition_index) for p in t.partitions)
        for t in req.forgotten_topics_data:
            self.session_partitions.difference_update((t.topic_id, p) for p in t.partitions)


# ----------------------------------------------------------------------------- responses

def decode_response(request_frame: bytes, response_frame: bytes):
    """Decode the response to `request_frame` (api key/version/correlation id read from its header)."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", request_frame, 0)
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(response_frame, 0)
    assert header.correlation_id == correlation_id, (header.correlation_id, correlation_id)
    body, _ = entity_reader(cls)(response_frame, used)
    return body


def _code(value):
    try:
        return ErrorCode(value)
    except ValueError:
        return value


def partition_errors(response) -> dict[TopicPartition, tuple[Any, Any]]:
    """{(topic_id, partition): (error_code, acknowledge_error_code)} of a ShareFetch response; for a
    ShareAcknowledge response the second element is None. Codes are ErrorCode members when known."""
    out = {}
    for t in response.responses:
        for p in t.partitions:
            ack = getattr(p, "acknowledge_error_code", None)
            out[(t.topic_id, p.partition_index)] = (_code(p.error_code), None if ack is None else _code(ack))
    return out


def acquired_offsets(response) -> dict[TopicPartition, list[tuple[int, int]]]:
    """{(topic_id, partition): [(offset, delivery_count), ...]} expanding every AcquiredRecords range
    (partitions with no acquired records are left out)."""
    out: dict[TopicPartition, list[tuple[int, int]]] = {}
    for t in response.responses:
        for p in t.partitions:
            for a in p.acquired_records:
                out.setdefault((t.topic_id, p.partition_index), []).extend(
                    (o, a.delivery_count) for o in range(a.first_offset, a.last_offset + 1))
    return out


def records_in(response) -> dict[TopicPartition, list[ShareRecord]]:
    """{(topic_id, partition): [ShareRecord(offset, key, value, delivery_count), ...]}: the records of
    the returned batches whose offsets were acquired (control batches skipped), in offset order,
    the way a real client delivers them."""
    from quafka.protocol.record_batch import CONTROL_FLAG, LOG_OVERHEAD, iter_headers, iter_records

    acquired = acquired_offsets(response)
    out: dict[TopicPartition, list[ShareRecord]] = {}
    for t in response.responses:
        for p in t.partitions:
            tp = (t.topic_id, p.partition_index)
            counts = dict(acquired.get(tp, ()))
            if not counts or not p.records:
                continue
            buf = p.records
            got = {}
            for pos, header in iter_headers(buf):
                if header.attributes & CONTROL_FLAG:
                    continue
                for rec in iter_records(memoryview(buf)[pos:pos + header.batch_length + LOG_OVERHEAD]):
                    if rec.offset in counts and rec.offset not in got:
                        got[rec.offset] = ShareRecord(rec.offset, rec.key, rec.value, counts[rec.offset])
            out[tp] = [got[o] for o in sorted(got)]
    return out


def all_records(response) -> list[ShareRecord]:
    """`records_in` flattened (partition order of the response, then offset order)."""
    return [r for recs in records_in(response).values() for r in recs]


def coalesce(offsets: Iterable[int], ack_type: int = ACCEPT) -> list[tuple[int, int, list[int]]]:
    """Ack batches covering `offsets` as librdkafka sends them: runs of consecutive offsets, each with a
    single-element type array."""
    batches: list[tuple[int, int, list[int]]] = []
    for o in sorted(set(offsets)):
        if batches and batches[-1][1] == o - 1:
            batches[-1] = (batches[-1][0], o, batches[-1][2])
        else:
            batches.append((o, o, [ack_type]))
    return batches


def acks_for(response, ack_type: int = ACCEPT) -> dict[TopicPartition, list[tuple[int, int, list[int]]]]:
    """Acks of `ack_type` for every record acquired in a ShareFetch `response`."""
    return {tp: coalesce((o for o, _ in offs), ack_type) for tp, offs in acquired_offsets(response).items()}


# ----------------------------------------------------------------------------- topics

def topic_id_of(bootstrap: str, topic: str, *, timeout_s: float = 10.0) -> uuid.UUID:
    """The topic's id, from a Metadata v12 request by name."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    with RawClient(bootstrap, timeout_s=timeout_s) as raw:
        meta = raw.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
    t = meta.topics[0]
    assert t.error_code == ErrorCode.none and t.topic_id is not None, meta
    return t.topic_id


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None, *,
                 timeout_s: float = 10.0) -> uuid.UUID:
    """Create a topic with confluent-kafka's AdminClient and return its id."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1, config=dict(configs or {}))],
                                 operation_timeout=timeout_s)[name]
    future.result(timeout=timeout_s)
    return topic_id_of(bootstrap, name, timeout_s=timeout_s)


def produce(bootstrap: str, topic: str, values: Iterable[bytes | str | None], *, partition: int = 0,
            keys: Iterable[bytes | str | None] | None = None, timeout_s: float = 10.0) -> int:
    """Produce `values` (acks=all, one flush) with confluent-kafka; returns how many were delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list = []
    values = list(values)
    keys = [None] * len(values) if keys is None else list(keys)
    for k, v in zip(keys, values):
        producer.produce(topic, value=v, key=k, partition=partition,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    remaining = producer.flush(timeout_s)
    assert remaining == 0 and not errors, (remaining, errors)
    return len(values)
