"""Broker metrics on `metrics.listener` (issue 6, acceptance 4).

The scrape parses with prometheus_client's parser; every metric listed in docs/metrics.md is there;
every listed counter (and every histogram's `_count`) goes up during a workload of produce
(confluent-kafka Producer), share-consume with accept, release and reject (quafka.client
ShareConsumer, explicit mode), renew, an acquisition lock that times out, failing ShareFetch and
ShareAcknowledge requests and a dropped connection holding a share session (the kio test client).
Also: a bad `metrics.listener` is refused at start-up naming the key, and a scrape connection that
sends garbage or stalls does not disturb the broker.
"""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from quafka import EmbeddedBroker
from quafka.broker import config as cfg
from quafka.broker.server.metrics import CONTENT_TYPE
from quafka.client import AcknowledgeType, ShareConsumer
from support import produce_batch, set_group_configs, wait_until
from support.share_client import ACCEPT, RENEW, ShareClient, acquired_offsets, create_topic, partition_errors

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `((?:kafka|quafka)_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", re.MULTILINE)
TOPIC = "metrics-topic"
RECORDS = 30
# Counted only when a disk fails: tests/broker/server/test_storage_faults.py shows them move.
FAILURE_ONLY = {"quafka_log_flush_failures_total", "quafka_log_dir_failures_total",
                "quafka_flush_scheduler_errors_total"}
# Move only when a compacted log is cleaned (tests/interop/test_compaction.py::
# test_the_cleaner_runs_by_itself_and_compacts_consumer_offsets shows them move) or a round fails
COMPACTION_ONLY = {"kafka_log_logcleaner_rounds_total", "kafka_log_logcleaner_bytes_read_total",
                   "kafka_log_logcleaner_bytes_written_total", "quafka_log_cleaner_errors_total"}
# Counted only below the free-space watermark: tests/broker/server/test_disk_space.py and test_disk_watermark.py
LOW_DISK_ONLY = {"quafka_log_dir_produce_refusals_total"}
# A connection dropped between a parked fetch's acquisition and its answer:
# tests/broker/server/test_share_fetch_disconnect.py shows it move
DISCONNECT_RACE_ONLY = {"quafka_share_fetch_unsent_records_returned_total"}
# A refused DLQ append: tests/interop/test_dead_letters.py::test_a_dead_letter_over_the_dlq_topic_max_message_bytes...
DLQ_FAILURE_ONLY = {"kafka_server_sharegroupmetrics_deadletterqueuefailedproducerequests_total"}
# quafka's delivery controls: test_delivery_control_metrics_count_waits_blocks_refusals_and_force_actions
DELIVERY_CONTROLS = {f"quafka_share_partition_{n}_total" for n in (
    "failed_keys_over_cap", "window_stalls", "delivery_headers_refused", "force_actions", "forced_records")}
# Client quotas and connection limits: tests/broker/server/test_quota_wire.py moves the throttle and
# refusal counters, tests/interop/test_quotas.py closes an idle connection; the throttle families
# have a series per (quota, user, client id) only once one is throttled.
QUOTA_ONLY = {"quafka_client_quota_throttles_total", "quafka_client_quota_throttle_time_ms_total",
              "quafka_connections_refused_total", "quafka_connections_idle_closed_total"}
NO_SERIES_UNTIL_THROTTLED = {"quafka_client_quota_throttles_total", "quafka_client_quota_throttle_time_ms_total"}
# Consumer-group counters: test_group_coordinator_metrics_count_groups_offsets_and_rebalances moves them.
GROUP_WORKLOAD = {f"kafka_server_group_coordinator_metrics_{n}_total" for n in (
    "offset_commit", "offset_expiration", "offset_deletion", "group_completed_rebalance", "consumer_group_rebalance")}

# The authorizer's counters move only with authorizer.class.name set: tests/broker/server/test_acls.py
AUTHORIZER_ONLY = {"kafka_server_authorizer_metrics_authorization_allowed_total",
                   "kafka_server_authorizer_metrics_authorization_denied_total",
                   "kafka_server_authorizer_metrics_authorization_request_total",
                   "quafka_authorizer_denial_log_lines_suppressed_total"}


def documented() -> dict[str, str]:
    found = dict(ROW.findall(DOC.read_text()))
    assert len(found) >= 20, "docs/metrics.md lists fewer metrics than expected: table format changed?"
    return found


class Scrape:
    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def family(self, name: str, type_: str):
        # the parser names a counter family without its _total suffix
        key = name[:-len("_total")] if type_ == "counter" and name.endswith("_total") else name
        return self.families.get(key)

    def total(self, name: str, type_: str, **labels) -> float:
        family = self.family(name, type_)
        if family is None:
            return 0.0
        sample_name = name + "_count" if type_ == "histogram" else name
        return sum(s.value for s in family.samples
                   if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()))


def scrape(broker: EmbeddedBroker) -> Scrape:
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        return Scrape(resp.read().decode())


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(config={"metrics.listener": "http://127.0.0.1:0",
                                "group.share.min.record.lock.duration.ms": 1000,
                                "log.flush.interval.ms": 50}) as b:  # the flush scheduler fsyncs
        yield b


def _workload(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"job-{i}".encode())
    assert producer.flush(10) == 0

    # share-consume with accept / release / reject (quafka.client, explicit acknowledgement); the
    # rejected records go to the group's dead-letter queue
    create_topic(bootstrap, "dlq.metrics", configs={"errors.deadletterqueue.group.enable": "true"})
    set_group_configs(bootstrap, "metrics-consumers", {"share.auto.offset.reset": "earliest",
                                                       "errors.deadletterqueue.topic.name": "dlq.metrics"})
    seen: dict[int, int] = {}
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "metrics-consumers",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe([TOPIC])

        def consume() -> bool:
            for record in consumer.poll(0.5):
                n = seen[record.offset] = seen.get(record.offset, 0) + 1
                if record.offset % 3 == 1 and n == 1:
                    consumer.acknowledge(record, AcknowledgeType.RELEASE)  # comes back once
                elif record.offset % 3 == 2:
                    consumer.acknowledge(record, AcknowledgeType.REJECT)
                else:
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT)
            consumer.commit_sync(5)
            return len(seen) == RECORDS and all(seen[o] == 2 for o in seen if o % 3 == 1)

        wait_until(consume, 10, 0, message="every record consumed, released ones twice")

    # renew, a lock timeout, failing requests, a dropped connection (kio test client)
    producer.produce(TOPIC, b"held")
    assert producer.flush(10) == 0
    set_group_configs(bootstrap, "metrics-raw", {"share.auto.offset.reset": "earliest",
                                                 "share.record.lock.duration.ms": "1000"})
    tp = (topic_id, 0)
    with ShareClient(bootstrap, "metrics-raw") as client:
        client.join([TOPIC])
        client.wait_for_assignment()
        held: list[tuple[int, int]] = []  # (offset, delivery count)
        wait_until(lambda: held.extend(acquired_offsets(client.fetch(version=2)).get(tp, [])) or held, 10, 0)
        first, last = held[0][0], held[-1][0]
        resp = client.acknowledge({tp: [(first, last, [RENEW])]}, version=2, is_renew_ack=True)
        assert partition_errors(resp)[tp][0] == 0
        # let the lock expire; the next fetch acquires the records again (delivery count 2)
        again: list[tuple[int, int]] = []
        wait_until(lambda: again.extend(acquired_offsets(client.fetch(version=2, max_wait_ms=200)).get(tp, []))
                   or again, 10, 0.1)
        assert [o for o, _ in again] == [o for o, _ in held] and all(count == 2 for _, count in again)
        resp = client.acknowledge({tp: [(first, last, [ACCEPT])]}, version=2)
        assert partition_errors(resp)[tp][0] == 0
        # an acknowledgement at a stale share-session epoch -> INVALID_SHARE_SESSION_EPOCH
        resp = client.acknowledge({tp: [(first, last, [ACCEPT])]}, version=2, epoch=client.session_epoch + 5)
        assert resp.error_code != 0
        # a ShareFetch naming a topic that does not exist -> UNKNOWN_TOPIC_ID on the partition
        client.fetch(partitions={uuid.uuid4(): [0]}, version=2, max_wait_ms=0)
        client.disconnect()  # the share session goes with the connection: an eviction
    wait_until(lambda: len(broker.server.share_sessions) == 0, 10, 0.02)
    producer.flush(1)


# series per TLS or SASL listener; this broker has neither (test_tls_fuzz.py and tests/interop/test_sasl*.py
# read them)
ONLY_WITH_TLS = {"quafka_tls_handshakes_total", "quafka_tls_handshake_failures_total",
                 "kafka_server_socket_server_metrics_authentication_total"}


def test_scrape_lists_every_documented_metric_and_counters_move(broker):
    metrics = documented()
    before = scrape(broker)
    for name, type_ in metrics.items():
        assert before.family(name, type_) is not None, f"{name} missing from the scrape"
        assert before.family(name, type_).type == type_, name
    _workload(broker)
    after = scrape(broker)
    scraped = {f.name + ("_total" if f.type == "counter" else "") for f in after.families.values()}
    assert scraped - set(metrics) == set(), "series the broker exports that docs/metrics.md does not list"
    for name, type_ in metrics.items():
        family = after.family(name, type_)
        if name in ONLY_WITH_TLS:  # one series per TLS listener; this broker has none (test_tls_fuzz.py scrapes them)
            assert family is not None, name
            continue
        assert family is not None, f"{name} missing after the workload"
        assert family.samples or name in NO_SERIES_UNTIL_THROTTLED, f"{name} has no samples after the workload"
    moved = [name for name, type_ in metrics.items() if type_ in ("counter", "histogram")
             and name not in FAILURE_ONLY | LOW_DISK_ONLY | DISCONNECT_RACE_ONLY | GROUP_WORKLOAD | DLQ_FAILURE_ONLY | DELIVERY_CONTROLS
             | AUTHORIZER_ONLY | QUOTA_ONLY | ONLY_WITH_TLS | COMPACTION_ONLY]
    assert len(moved) >= 10
    for name in moved:
        type_ = metrics[name]
        assert after.total(name, type_) > before.total(name, type_), f"{name} did not increase"
    for ack_type in ("Accept", "Release", "Reject", "Renew"):
        name = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
        assert after.total(name, "counter", acktype=ack_type) > before.total(name, "counter", acktype=ack_type), \
            ack_type
    assert after.total("kafka_server_sharegroupmetrics_recordacknowledgements_total", "counter",
                       acktype="Reject") == RECORDS // 3
    for api in ("Produce", "ShareFetch", "ShareAcknowledge", "ShareGroupHeartbeat"):
        assert after.total("kafka_network_requestmetrics_requests_total", "counter", request=api) > 0, api
        assert after.total("kafka_network_requestmetrics_totaltimems", "histogram", request=api) > 0, api
    window = after.family("kafka_server_sharepartitionmetrics_inflightmessagecount", "gauge")
    assert {s.labels["group"] for s in window.samples} >= {"metrics-consumers", "metrics-raw"}
    assert after.total("kafka_server_group_coordinator_metrics_group_count", "gauge", protocol="share") >= 2
    dlq_records = "kafka_server_sharegroupmetrics_deadletterqueuerecordcount_total"
    assert after.total(dlq_records, "counter", group="metrics-consumers") == RECORDS // 3


@pytest.mark.parametrize("value", ["https://127.0.0.1:0", "127.0.0.1:9404", "http://:9404", "http://h:65536",
                                   "http://127.0.0.1"])
def test_bad_listener_is_refused_naming_the_key(value):
    with pytest.raises(cfg.ConfigError) as info:
        EmbeddedBroker(config={"metrics.listener": value})
    assert "metrics.listener" in str(info.value)


def test_metrics_are_off_by_default(make_broker):
    b = make_broker()
    assert b.metrics_port is None and b.metrics_url is None


def test_misbehaving_scrapes_do_not_disturb_the_broker(broker):
    port = broker.metrics_port
    assert port
    stalled = socket.create_connection(("127.0.0.1", port), timeout=5)  # says nothing, stays open
    stalled.sendall(b"GET /met")
    for garbage in (b"\x00\xff" * 5000 + b"\r\n\r\n", b"NOT HTTP AT ALL\r\n\r\n", b"\r\n\r\n", b"GET /metrics\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(garbage)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
            assert reply == b"" or reply.startswith(b"HTTP/1.1 4"), reply[:80]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # connect and vanish
        pass
    for path, status in (("/nope", 404),):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
        assert info.value.code == status
    req = urllib.request.Request(broker.metrics_url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 405
    # the metrics endpoint and the Kafka listener still serve, with the stalled connection open: three
    # Produce requests (raw, one each) are three more in the requests counter, and nothing else moved it
    create_topic(broker.bootstrap_servers, "metrics-after-garbage")
    requests = "kafka_network_requestmetrics_requests_total"
    before = scrape(broker).total(requests, "counter", request="Produce")
    for _ in range(3):
        produce_batch(broker.bootstrap_servers, "metrics-after-garbage", 1)
    wait_until(lambda: scrape(broker).total(requests, "counter", request="Produce") >= before + 3, 10, 0.02,
               message="three Produce requests counted")
    assert scrape(broker).total(requests, "counter", request="Produce") == before + 3
    stalled.close()


def test_group_coordinator_metrics_count_groups_offsets_and_rebalances(make_broker):
    """GroupCoordinatorMetrics and GroupMetadataManager's gauges: a classic group and a KIP-848 group
    (confluent-kafka consumers), committed offsets, an OffsetDelete and an expired offset (an
    OffsetCommit v2 with a 1 ms retention time, then the expiry pass)."""
    import datetime

    from confluent_kafka import Consumer, TopicPartition
    from kio.schema.offset_commit.v2 import request as oc2
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32, i64

    from quafka.client import Admin
    from support import RawClient

    broker = make_broker(config={"metrics.listener": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": 0})
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC)
    counter = "kafka_server_group_coordinator_metrics_{}_total"
    before = scrape(broker)
    consumers = {}
    for group, protocol in (("m-classic", "classic"), ("m-consumer", "consumer")):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                      "enable.auto.commit": False})
        c.subscribe([TOPIC])
        wait_until(lambda c=c: c.poll(0.05) is None and c.assignment(), 20, message=f"{group} assigned")
        c.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
        consumers[group] = c
    live = scrape(broker)
    assert live.total("kafka_server_group_coordinator_metrics_group_count", "gauge", protocol="classic") == 1
    assert live.total("kafka_server_group_coordinator_metrics_group_count", "gauge", protocol="consumer") == 1
    assert live.total("kafka_server_group_coordinator_metrics_consumer_group_count", "gauge", state="Stable") == 1
    assert live.total("kafka_coordinator_group_groupmetadatamanager_numgroupsstable", "gauge") == 1
    assert live.total("kafka_coordinator_group_groupmetadatamanager_numoffsets", "gauge") == 2
    assert live.total(counter.format("group_completed_rebalance"), "counter") >= 1
    assert live.total(counter.format("consumer_group_rebalance"), "counter") >= 1
    assert live.total(counter.format("offset_commit"), "counter") == before.total(counter.format("offset_commit"),
                                                                                 "counter") + 2
    for c in consumers.values():
        c.close()
    with Admin({"bootstrap.servers": bootstrap}) as admin:  # the classic group is Empty now
        admin.delete_consumer_group_offsets("m-classic", [(TOPIC, 0)])
    with RawClient(bootstrap) as raw:  # a simple group's commit that expires 1 ms later
        resp = raw.request(oc2.OffsetCommitRequest(
            group_id=GroupId("m-simple"), generation_id_or_member_epoch=i32(-1), member_id="",
            retention_time=datetime.timedelta(milliseconds=1), topics=(oc2.OffsetCommitRequestTopic(
                name=TopicName(TOPIC), partitions=(oc2.OffsetCommitRequestPartition(
                    partition_index=i32(0), committed_offset=i64(5), committed_metadata=""),)),)))
    assert resp.topics[0].partitions[0].error_code == 0
    wait_until(lambda: broker.call(broker.server.consumer_offsets.expire_now) >= 1, 10,
               message="the 1 ms offset expired")
    after = scrape(broker)
    assert after.total(counter.format("offset_deletion"), "counter") == 1
    assert after.total(counter.format("offset_expiration"), "counter") >= 1
    assert after.total("kafka_server_group_coordinator_metrics_consumer_group_count", "gauge", state="Empty") == 1


def test_delivery_control_metrics_count_waits_blocks_refusals_and_force_actions(make_broker):
    """quafka's delivery controls (docs/metrics.md "Delivery controls"): records waiting for a
    backoff or a delivery time, records and keys blocked by key ordering, a parked key, a refused
    header, force actions and a window full of waiting records each show in their series."""
    from quafka.client import Admin

    broker = make_broker(config={"metrics.listener": "http://127.0.0.1:0"})
    bootstrap = broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for topic in ("mc-backoff", "mc-delay", "mc-keys"):
        create_topic(bootstrap, topic)
    set_group_configs(bootstrap, "mc-backoff", {"share.auto.offset.reset": "earliest",
                                                "share.partition.max.record.locks": "100",
                                                "quafka.share.redelivery.backoff.ms": "600000"})
    set_group_configs(bootstrap, "mc-delay", {"share.auto.offset.reset": "earliest",
                                              "quafka.share.delivery.delay.enable": "true"})
    set_group_configs(bootstrap, "mc-keys", {"share.auto.offset.reset": "earliest", "quafka.share.key.ordering": "true",
                                             "quafka.share.key.ordering.on.failure": "park"})
    for i in range(100):
        producer.produce("mc-backoff", f"job-{i}".encode())
    producer.produce("mc-delay", b"later", headers={"quafka.deliver.after.ms": b"600000"})
    producer.produce("mc-delay", b"bad header", headers={"quafka.deliver.after.ms": b"soon"})
    for key in (b"a", b"a", b"b"):
        producer.produce("mc-keys", b"v", key=key)
    assert producer.flush(10) == 0

    def consume(group: str, topic: str, wanted: int, verdict) -> list:
        got: list = []
        with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "share.acknowledgement.mode": "explicit"}) as consumer:
            consumer.subscribe([topic])

            def step() -> bool:
                for record in consumer.poll(0.5):
                    got.append(record)
                    consumer.acknowledge(record, verdict(record))
                consumer.commit_sync(5)
                return len(got) >= wanted

            wait_until(step, 15, 0, message=f"{wanted} records of {topic}")
        return got

    consume("mc-backoff", "mc-backoff", 100, lambda r: AcknowledgeType.RELEASE)  # all wait 10 minutes: window full
    assert [r.value for r in consume("mc-delay", "mc-delay", 1, lambda r: AcknowledgeType.ACCEPT)] == [b"bad header"]
    keyed = consume("mc-keys", "mc-keys", 2, lambda r: AcknowledgeType.REJECT if r.offset == 0 else
                    AcknowledgeType.ACCEPT)
    assert sorted(r.offset for r in keyed) == [0, 2]  # offset 1 waits behind offset 0 of key a, then is parked
    producer.produce("mc-backoff", b"one more")  # cannot enter the full window: a stall
    assert producer.flush(10) == 0
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "mc-backoff"}) as consumer:
        consumer.subscribe(["mc-backoff"])
        wait_until(lambda: not consumer.poll(0.2) and scrape(broker).total(
            "quafka_share_partition_window_stalls_total", "counter", group="mc-backoff") >= 1, 15, 0,
            message="a stall counted")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_in_flight("mc-keys", "mc-keys", 0, "release-key", key=b"a")
        admin.alter_in_flight("mc-backoff", "mc-backoff", 0, "release", first_offset=0, last_offset=9)
    after = scrape(broker)
    waiting = "quafka_share_partition_waiting_records"
    assert after.total(waiting, "gauge", group="mc-backoff", reason="backoff") == 90
    assert after.total(waiting, "gauge", group="mc-delay", reason="delivery_time") == 1
    assert after.total("quafka_share_partition_delivery_headers_refused_total", "counter", group="mc-delay",
                       outcome="ignored") == 1
    assert after.total("quafka_share_partition_failed_keys", "gauge", group="mc-keys") == 0  # released
    assert after.total("quafka_share_partition_force_actions_total", "counter", group="mc-keys",
                       action="release-key") == 1
    assert after.total("quafka_share_partition_forced_records_total", "counter", group="mc-backoff",
                       action="release") == 10
    assert after.total("quafka_share_partition_blocked_records", "gauge", group="mc-keys") == 0


def test_a_parked_key_shows_as_a_failed_key_with_its_blocked_record(make_broker):
    broker = make_broker(config={"metrics.listener": "http://127.0.0.1:0"})
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "mk")
    set_group_configs(bootstrap, "mk", {"share.auto.offset.reset": "earliest", "quafka.share.key.ordering": "true",
                                        "quafka.share.key.ordering.on.failure": "park"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key in (b"a", b"a", b"b"):
        producer.produce("mk", b"v", key=key)
    assert producer.flush(10) == 0
    seen: list[int] = []
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "mk",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe(["mk"])

        def step() -> bool:
            for record in consumer.poll(0.5):
                seen.append(record.offset)
                consumer.acknowledge(record, AcknowledgeType.REJECT if record.offset == 0 else AcknowledgeType.ACCEPT)
            consumer.commit_sync(5)
            return sorted(seen) == [0, 2]

        wait_until(step, 15, 0, message="offsets 0 and 2")
        after = scrape(broker)
        assert after.total("quafka_share_partition_failed_keys", "gauge", group="mk") == 1
        assert after.total("quafka_share_partition_blocked_records", "gauge", group="mk") == 1
        assert after.total("quafka_share_partition_blocked_keys", "gauge", group="mk") == 1
        assert not consumer.poll(0.5)  # offset 1 stays parked
