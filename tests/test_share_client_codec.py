"""Self-test of tests/support/share_client.py: every request variation it builds (well-formed and
malformed) is a valid kio entity that survives encode/decode, and its epoch/assignment tracking and
response helpers behave. No broker: a scripted in-process responder stands in where a socket is needed."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import threading
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from quafka.protocol.record_batch import CONTROL_FLAG, build_batch
from support import RawClient
from support.share_client import (
    ACCEPT,
    GAP,
    INT32_MAX,
    REJECT,
    RELEASE,
    RENEW,
    ShareClient,
    ShareRecord,
    ack_topics,
    acks_for,
    acquired_offsets,
    all_records,
    coalesce,
    decode_response,
    describe_request,
    heartbeat_request,
    new_member_id,
    next_session_epoch,
    partition_errors,
    partition_list,
    records_in,
    share_acknowledge_request,
    share_fetch_request,
)

T1 = uuid.UUID("11111111-1111-1111-1111-111111111111")
T2 = uuid.UUID("22222222-2222-2222-2222-222222222222")
UNREACHABLE = "127.0.0.1:1"  # builders never connect


def roundtrip(entity):
    """Encode with kio's writer, decode with its reader; the result must equal the input."""
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    data = buf.getvalue()
    decoded, used = entity_reader(type(entity))(data, 0)
    assert used == len(data)
    assert decoded == entity, (decoded, entity)
    return decoded


def client(**kw) -> ShareClient:
    return ShareClient(UNREACHABLE, "sg", **kw)


# ----------------------------------------------------------------------------- basics

def test_member_id_is_22_char_urlsafe_base64_uuid():
    ids = {new_member_id() for _ in range(50)}
    assert len(ids) == 50
    for mid in ids:
        assert len(mid) == 22 and set(mid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(client().member_id) == 22
    assert client(member_id="").member_id == ""


def test_next_session_epoch():
    assert next_session_epoch(0) == 1
    assert next_session_epoch(1) == 2
    assert next_session_epoch(INT32_MAX) == 1
    assert next_session_epoch(-1) == 0


def test_partition_list_shapes():
    assert partition_list([(T1, 0), (T2, 3)]) == [(T1, 0), (T2, 3)]
    assert partition_list({T1: [0, 1], T2: [2]}) == [(T1, 0), (T1, 1), (T2, 2)]
    assert partition_list({(T1, 0): "x", (T2, 1): None}) == [(T1, 0), (T2, 1)]
    assert partition_list(None) == []


def test_ack_topics_groups_by_topic_without_validating():
    acks = {(T1, 0): [(5, 1, [1])], (T2, 0): [(0, 0, 9)], (T1, 1): [(3, 4, [1, 2, 3])]}
    assert ack_topics(acks, [(T2, 5)]) == [
        (T2, [(5, []), (0, [(0, 0, 9)])]),
        (T1, [(0, [(5, 1, [1])]), (1, [(3, 4, [1, 2, 3])])]),
    ]


# ----------------------------------------------------------------------------- heartbeat / describe

@pytest.mark.parametrize("kw", [
    dict(group_id="sg", member_id=new_member_id(), member_epoch=0, topics=["t1", "t2"]),
    dict(group_id="sg", member_id=new_member_id(), member_epoch=7, topics=None),
    dict(group_id="sg", member_id=new_member_id(), member_epoch=-1, topics=None),
    dict(group_id="sg", member_id="m", member_epoch=3, rack_id="rack-a", topics=[]),
    dict(group_id="", member_id="", member_epoch=0, topics=["t"]),
    dict(group_id="sg", member_id="x" * 200, member_epoch=INT32_MAX, topics=["t"]),
    dict(group_id="sg", member_id="m", member_epoch=-2**31, topics=["t"]),
])
def test_heartbeat_request_roundtrips(kw):
    req = roundtrip(heartbeat_request(**kw))
    assert req.__api_key__ == 76 and req.__version__ == 1
    assert req.member_epoch == kw["member_epoch"]
    assert req.subscribed_topic_names == (None if kw["topics"] is None else tuple(kw["topics"]))


@pytest.mark.parametrize("group_ids", [["sg"], ["a", "b"], [], [""]])
def test_describe_request_roundtrips(group_ids):
    req = roundtrip(describe_request(group_ids, include_authorized_operations=bool(group_ids)))
    assert req.__api_key__ == 77 and req.__version__ == 1 and req.group_ids == tuple(group_ids)


# ----------------------------------------------------------------------------- ShareFetch

MALFORMED_BATCHES = {
    "first_gt_last": [(5, 2, [ACCEPT])],
    "overlapping": [(0, 4, [ACCEPT]), (3, 6, [RELEASE])],
    "unordered": [(10, 12, [ACCEPT]), (0, 2, [ACCEPT])],
    "empty_types": [(0, 3, [])],
    "wrong_length_types": [(0, 3, [ACCEPT, REJECT])],
    "per_offset_types": [(0, 3, [GAP, ACCEPT, RELEASE, REJECT])],
    "type_5": [(0, 0, [5])],
    "type_negative": [(0, 0, [-1])],
    "type_i8_extremes": [(0, 1, [127, -128])],
    "renew_without_flag": [(0, 0, [RENEW])],
    "negative_offsets": [(-5, -1, [ACCEPT])],
    "huge_offsets": [(2**63 - 2, 2**63 - 1, ACCEPT)],
}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", sorted(MALFORMED_BATCHES))
def test_fetch_with_malformed_acks_roundtrips(version, case):
    c = client()
    c.session_epoch = 3
    req = roundtrip(c.fetch_request([(T1, 0)], version=version, acks={(T1, 0): MALFORMED_BATCHES[case]}))
    assert req.__version__ == version and req.share_session_epoch == 3
    (topic,) = req.topics
    (part,) = topic.partitions
    sent = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in part.acknowledgement_batches]
    expected = [(f, l, [t] if isinstance(t, int) else list(t)) for f, l, t in MALFORMED_BATCHES[case]]
    assert sent == expected


@pytest.mark.parametrize("version", [1, 2])
def test_first_fetch_lists_all_partitions_like_librdkafka(version):
    c = client()
    req = roundtrip(c.fetch_request({T1: [0, 1], T2: [0]}, version=version))
    assert req.share_session_epoch == 0
    assert req.group_id == "sg" and req.member_id == c.member_id
    assert req.max_wait == datetime.timedelta(milliseconds=500)
    assert (req.min_bytes, req.max_bytes, req.max_records, req.batch_size) == (1, 52428800, 500, 500)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(T1, [0, 1]), (T2, [0])]
    assert all(p.acknowledgement_batches == () for t in req.topics for p in t.partitions)
    assert req.forgotten_topics_data == ()
    if version == 2:
        assert req.share_acquire_mode == 0 and req.is_renew_ack is False


def test_incremental_fetch_lists_only_new_and_acked_partitions():
    c = client()
    c.session_epoch = 4
    c.session_partitions = {(T1, 0), (T1, 1)}
    req = roundtrip(c.fetch_request({T1: [0, 1]}))
    assert req.topics == ()
    req = roundtrip(c.fetch_request({T1: [0, 1], T2: [0]}, acks={(T1, 1): [(0, 4, [ACCEPT])]}))
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(T2, [0]), (T1, [1])]
    req = roundtrip(c.fetch_request({T1: [0, 1]}, send_partitions=[(T1, 0)]))
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(T1, [0])]
    req = roundtrip(c.fetch_request({T1: [0]}, epoch=0))
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(T1, [0])]


def test_fetch_defaults_to_assignment():
    c = client()
    c._assignment = {T1: [2, 0]}
    req = roundtrip(c.fetch_request())
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(T1, [2, 0])]


@pytest.mark.parametrize("forgotten", [[(T1, 0), (T1, 2), (T2, 1)], {T1: [0, 2], T2: [1]}, [(T1, [0, 2]), (T2, [1])]])
def test_fetch_forgotten_shapes(forgotten):
    c = client()
    c.session_epoch = 2
    req = roundtrip(c.fetch_request([], forgotten=forgotten))
    assert [(t.topic_id, list(t.partitions)) for t in req.forgotten_topics_data] == [(T1, [0, 2]), (T2, [1])]


def test_fetch_raw_topics_allow_duplicate_topic_ids_and_null_topic_id():
    c = client()
    c.session_epoch = 1
    raw = [(T1, [(0, [(0, 0, [1])])]), (T1, [(0, [(1, 1, [2])]), (1, [])]), (None, [(0, [])])]
    req = roundtrip(c.fetch_request(topics=raw))
    assert [t.topic_id for t in req.topics] == [T1, T1, None]
    assert [len(t.partitions) for t in req.topics] == [1, 2, 1]


@pytest.mark.parametrize("member_id", ["", "m" * 37, "m" * 1000, None])
@pytest.mark.parametrize("group_id", ["sg", "", None])
@pytest.mark.parametrize("epoch", [0, -1, 1, INT32_MAX, -2**31, 12345])
def test_fetch_any_member_group_epoch(member_id, group_id, epoch):
    c = client()
    req = roundtrip(c.fetch_request([(T1, 0)], member_id=member_id, group_id=group_id, epoch=epoch))
    assert (req.member_id, req.group_id, req.share_session_epoch) == (member_id, group_id, epoch)


def test_fetch_v2_fields_and_renew():
    c = client()
    c.session_epoch = 5
    req = roundtrip(c.fetch_request([(T1, 0)], version=2, share_acquire_mode=1, is_renew_ack=True, max_wait_ms=0,
                                    min_bytes=0, max_bytes=0, max_records=0, batch_size=0,
                                    acks={(T1, 0): [(0, 9, [RENEW])]}))
    assert (req.share_acquire_mode, req.is_renew_ack, req.max_wait, req.min_bytes, req.max_bytes,
            req.max_records) == (1, True, datetime.timedelta(0), 0, 0, 0)
    # out-of-range acquire mode still builds
    roundtrip(c.fetch_request([(T1, 0)], version=2, share_acquire_mode=-7))


def test_v1_refuses_fields_it_does_not_have():
    c = client()
    with pytest.raises(ValueError):
        c.fetch_request([(T1, 0)], version=1, is_renew_ack=True)
    with pytest.raises(ValueError):
        c.fetch_request([(T1, 0)], version=1, share_acquire_mode=1)
    with pytest.raises(ValueError):
        c.acknowledge_request({(T1, 0): [(0, 0, [RENEW])]}, version=1, is_renew_ack=True)


@pytest.mark.parametrize("version", [1, 2])
def test_module_level_builders_send_raw_topics_verbatim(version):
    topics = [(T1, [(0, [(3, 1, [1])]), (0, [])]), (T1, [(2, [(0, 0, 7)])])]
    f = roundtrip(share_fetch_request(version=version, group_id=None, member_id="", epoch=-5, topics=topics,
                                      forgotten=[(T2, [0, 0, -1])], max_wait_ms=-1, min_bytes=-1, max_bytes=-1,
                                      max_records=-1, batch_size=-1))
    assert [[p.partition_index for p in t.partitions] for t in f.topics] == [[0, 0], [2]]
    assert f.forgotten_topics_data[0].partitions == (0, 0, -1)
    assert f.max_wait == datetime.timedelta(milliseconds=-1)
    a = roundtrip(share_acknowledge_request(version=version, group_id="g", member_id=None, epoch=0, topics=topics))
    assert [[p.partition_index for p in t.partitions] for t in a.topics] == [[0, 0], [2]]


# ----------------------------------------------------------------------------- ShareAcknowledge

@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", sorted(MALFORMED_BATCHES))
def test_acknowledge_with_malformed_acks_roundtrips(version, case):
    c = client()
    c.session_epoch = 9
    req = roundtrip(c.acknowledge_request({(T1, 0): MALFORMED_BATCHES[case], (T2, 1): [(0, 0, [ACCEPT])]},
                                          version=version))
    assert req.__api_key__ == 79 and req.__version__ == version and req.share_session_epoch == 9
    assert [t.topic_id for t in req.topics] == [T1, T2]


@pytest.mark.parametrize("version", [1, 2])
def test_acknowledge_variants(version):
    c = client()
    close = roundtrip(c.acknowledge_request(None, version=version, epoch=-1))
    assert close.share_session_epoch == -1 and close.topics == ()
    at0 = roundtrip(c.acknowledge_request({(T1, 0): [(0, 0, 1)]}, version=version, epoch=0, member_id="",
                                          group_id=None))
    assert (at0.member_id, at0.group_id) == ("", None)
    raw = roundtrip(c.acknowledge_request(topics=[(T1, [(0, [])]), (T1, [(0, [(0, 0, [1])])])], version=version))
    assert [t.topic_id for t in raw.topics] == [T1, T1]
    if version == 2:
        renew = roundtrip(c.acknowledge_request({(T1, 0): [(0, 3, [RENEW])]}, version=2, is_renew_ack=True))
        assert renew.is_renew_ack is True


ack_batch = st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1),
                      st.lists(st.integers(-128, 127), max_size=6))


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from([1, 2]), epoch=st.integers(-2**31, 2**31 - 1),
       member_id=st.one_of(st.none(), st.text(max_size=60)),
       acks=st.dictionaries(st.tuples(st.sampled_from([T1, T2]), st.integers(0, 2**31 - 1)),
                            st.lists(ack_batch, max_size=4), max_size=4),
       renew=st.booleans())
def test_arbitrary_ack_batches_roundtrip(version, epoch, member_id, acks, renew):
    c = client()
    renew = renew and version == 2
    f = roundtrip(c.fetch_request([], version=version, acks=acks, epoch=epoch, member_id=member_id,
                                  is_renew_ack=renew))
    a = roundtrip(c.acknowledge_request(acks, version=version, epoch=epoch, member_id=member_id, is_renew_ack=renew))
    assert sum(len(p.acknowledgement_batches) for t in f.topics for p in t.partitions) == \
        sum(len(b) for b in acks.values())
    assert f.topics == tuple(f.topics) and len(a.topics) == len(f.topics)


# ----------------------------------------------------------------------------- a scripted responder

class ScriptedResponder:
    """Accepts one connection; for each request frame, records the decoded request and answers with the
    next scripted response body (a callable req -> response entity)."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.bootstrap = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.script: list = []
        self.requests: list = []
        self.frames: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:  # any exception closes the connection, so the client fails fast
            f = conn.makefile("rb")
            while True:
                size = f.read(4)
                if len(size) < 4:
                    return
                frame = f.read(int.from_bytes(size, "big"))
                self.frames.append(frame)
                key, ver, corr = struct.unpack_from(">hhi", frame, 0)
                req_cls = load_request_schema(key, ver)
                header, used = entity_reader(req_cls.__header_schema__)(frame, 0)
                req, _ = entity_reader(req_cls)(frame, used)
                self.requests.append(req)
                body = self.script.pop(0)(req)
                resp_cls = load_response_schema(key, ver)
                buf = io.BytesIO()
                entity_writer(resp_cls.__header_schema__)(buf, resp_cls.__header_schema__(correlation_id=corr))
                entity_writer(resp_cls)(buf, body)
                out = buf.getvalue()
                conn.sendall(len(out).to_bytes(4, "big") + out)

    def close(self):
        self.listener.close()


@pytest.fixture
def responder():
    r = ScriptedResponder()
    yield r
    r.close()


def fetch_response(version, error=ErrorCode.none, parts=()):
    """parts: [(topic_id, partition, records, [(first, last, dc)], error, ack_error)]"""
    mod = load_response_schema(78, version)
    import sys

    m = sys.modules[mod.__module__]
    topics: dict = {}
    for tid, p, records, acquired, err, ack_err in parts:
        topics.setdefault(tid, []).append(m.PartitionData(
            partition_index=p, error_code=err, acknowledge_error_code=ack_err,
            current_leader=m.LeaderIdAndEpoch(leader_id=0, leader_epoch=0), records=records,
            acquired_records=tuple(m.AcquiredRecords(first_offset=f, last_offset=l, delivery_count=d)
                                   for f, l, d in acquired)))
    return mod(throttle_time=datetime.timedelta(0), error_code=error,
               acquisition_lock_timeout=datetime.timedelta(seconds=30),
               responses=tuple(m.ShareFetchableTopicResponse(topic_id=t, partitions=tuple(ps))
                               for t, ps in topics.items()),
               node_endpoints=())


def ack_response(version, error=ErrorCode.none):
    cls = load_response_schema(79, version)
    values = dict(throttle_time=datetime.timedelta(0), error_code=error,
                  acquisition_lock_timeout=datetime.timedelta(seconds=30), responses=(), node_endpoints=())
    return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def heartbeat_response(error=ErrorCode.none, epoch=1, assignment=None, member_id=None):
    from kio.schema.share_group_heartbeat.v1 import response as m

    return m.ShareGroupHeartbeatResponse(
        throttle_time=datetime.timedelta(0), error_code=error, member_id=member_id, member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(seconds=5),
        assignment=None if assignment is None else m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in assignment.items())))


def test_heartbeat_tracks_epoch_and_assignment(responder):
    r = responder
    with ShareClient(r.bootstrap, "sg", timeout_s=5) as c:
        r.script += [lambda req: heartbeat_response(epoch=1, assignment={T1: [0, 1]}, member_id=req.member_id),
                     lambda req: heartbeat_response(epoch=2, assignment=None),
                     lambda req: heartbeat_response(error=ErrorCode.fenced_member_epoch, epoch=-1),
                     lambda req: heartbeat_response(epoch=-1),
                     lambda req: heartbeat_response(epoch=1, assignment={T2: [0]})]
        c.join(["t1"])
        assert (c.member_epoch, c.assignment, c.heartbeat_interval_ms) == (1, {T1: [0, 1]}, 5000)
        assert c.assigned_partitions == [(T1, 0), (T1, 1)]
        c.heartbeat(None)
        assert (c.member_epoch, c.assignment) == (2, {T1: [0, 1]})
        c.heartbeat(None)
        assert c.member_epoch == 2  # error: unchanged
        c.leave()
        assert (c.member_epoch, c.assignment) == (-1, {})
        c.join(["t2"])
        assert (c.member_epoch, c.assignment) == (1, {T2: [0]})
    reqs = r.requests
    assert [q.member_epoch for q in reqs] == [0, 1, 2, -1, 0]
    assert [q.subscribed_topic_names for q in reqs] == [("t1",), None, None, None, ("t2",)]
    assert len({q.member_id for q in reqs}) == 1


def test_session_epoch_tracking(responder):
    r = responder
    batch = build_batch([(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2"), (b"k3", None)], base_offset=10)
    with ShareClient(r.bootstrap, "sg", timeout_s=5) as c:
        r.script += [
            lambda req: fetch_response(1, parts=[(T1, 0, batch, [(10, 11, 1), (13, 13, 2)], ErrorCode.none, 0)]),
            lambda req: fetch_response(1, parts=[(T1, 0, b"", [], ErrorCode.none, ErrorCode.invalid_record_state)]),
            lambda req: fetch_response(1, error=ErrorCode.invalid_share_session_epoch),
            lambda req: ack_response(2),
            lambda req: ack_response(1),
        ]
        resp = c.fetch({T1: [0]})
        assert c.session_epoch == 1 and c.session_partitions == {(T1, 0)}
        assert acquired_offsets(resp) == {(T1, 0): [(10, 1), (11, 1), (13, 2)]}
        assert records_in(resp) == {(T1, 0): [ShareRecord(10, b"k0", b"v0", 1), (11, b"k1", b"v1", 1),
                                              (13, b"k3", None, 2)]}
        assert all_records(resp) == [(10, b"k0", b"v0", 1), (11, b"k1", b"v1", 1), (13, b"k3", None, 2)]
        acks = acks_for(resp)
        assert acks == {(T1, 0): [(10, 11, [ACCEPT]), (13, 13, [ACCEPT])]}

        resp = c.fetch({T1: [0]}, acks=acks)
        assert partition_errors(resp) == {(T1, 0): (ErrorCode.none, ErrorCode.invalid_record_state)}
        assert c.session_epoch == 2
        c.fetch({T1: [0]})
        assert c.session_epoch == 2  # error: not advanced
        c.session_epoch = INT32_MAX
        c.acknowledge({(T1, 0): [(12, 12, REJECT)]}, version=2)
        assert c.session_epoch == 1  # wrapped
        c.close_session()
        assert c.session_epoch == 0 and c.session_partitions == set()
    q = r.requests
    assert [x.share_session_epoch for x in q] == [0, 1, 2, INT32_MAX, -1]
    assert [[p.partition_index for t in x.topics for p in t.partitions] for x in q] == [[0], [0], [], [0], []]
    assert [b.first_offset for b in q[1].topics[0].partitions[0].acknowledgement_batches] == [10, 13]
    assert (q[3].__version__, q[4].__version__) == (2, 1)


def test_records_in_skips_control_batches_and_unacquired():
    data = (build_batch([(None, b"a"), (None, b"b")], base_offset=0)
            + build_batch([(None, b"ctrl")], base_offset=2, attributes=CONTROL_FLAG)
            + build_batch([(None, b"c"), (None, b"d"), (None, b"e")], base_offset=3))
    resp = fetch_response(2, parts=[(T2, 4, data, [(1, 4, 3)], ErrorCode.none, 0),
                                    (T2, 5, b"", [], ErrorCode.unknown_topic_or_partition, 0)])
    roundtrip(resp)
    assert records_in(resp) == {(T2, 4): [(1, None, b"b", 3), (3, None, b"c", 3), (4, None, b"d", 3)]}
    assert acquired_offsets(resp) == {(T2, 4): [(1, 3), (2, 3), (3, 3), (4, 3)]}
    assert partition_errors(resp)[(T2, 5)] == (ErrorCode.unknown_topic_or_partition, ErrorCode.none)
    assert partition_errors(ack_response(1)) == {}


def test_coalesce_like_librdkafka():
    assert coalesce([0, 1, 2, 5, 6, 9]) == [(0, 2, [1]), (5, 6, [1]), (9, 9, [1])]
    assert coalesce([3], RELEASE) == [(3, 3, [2])]
    assert coalesce([]) == []


def test_raw_frame_and_request_raw(responder):
    r = responder
    with ShareClient(r.bootstrap, "sg", timeout_s=5) as c:
        r.script += [lambda req: ack_response(2, error=ErrorCode.share_session_not_found),
                     lambda req: ack_response(2)]
        frame = c.raw_frame(c.acknowledge_request({(T1, 0): [(0, 0, 1)]}, version=2, epoch=-1))
        key, ver, _ = struct.unpack_from(">hhi", frame, 0)
        assert (key, ver) == (79, 2)
        resp = c.request_raw(frame)
        assert resp.error_code == ErrorCode.share_session_not_found
        # read a response undecoded, then decode it against the frame that was sent
        raw = c.request_raw(c.raw_frame(c.acknowledge_request(None, version=2)), decode=False)
        assert decode_response(r.frames[-1], raw).error_code == ErrorCode.none
        assert c.session_epoch == 0  # raw sends never touch tracking


def test_raw_client_still_importable_from_support():
    assert RawClient.__module__ == "support"
