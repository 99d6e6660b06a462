"""A share group in the middle of its work, scripted, for the dashboard's tests (issue 30,
acceptance 1-3): one broker, and a window that holds every state the in-flight strip draws at once.

Group ``orders-workers`` on topic ``orders`` (one partition), DLQ ``dlq.orders`` with copies of the
records. Two quafka ShareConsumers (client ids ``worker-a`` and ``worker-b``) fetch, acknowledge
some records and keep the others, and then stop polling (their heartbeats keep them members; the
group's lock duration of 10 minutes keeps their records acquired). The window then is:

    offset  state                         how
    0       ACQUIRED by worker-a          kept
    1       AVAILABLE, waiting (backoff)  worker-a released it (10-minute redelivery backoff)
    2-3     ACKNOWLEDGED                  worker-a accepted them
    4       ARCHIVED, dead letter         worker-a rejected it (key and value: markup, invalid UTF-8)
    5       ACQUIRED by worker-a          kept
    6       ACQUIRED by worker-b          kept
    7       ARCHIVED, dead letter         worker-b rejected it (key: invalid UTF-8, value: markup)
    8       ACKNOWLEDGED                  worker-b accepted it
    9       AVAILABLE, waiting (backoff)  worker-b released it
    10      ACQUIRED by worker-b          kept
    11-12   AVAILABLE (released)          worker-b released them, then an operator (Admin.alter_in_flight)
    13-15   not fetched yet               produced after the consumers stopped (lag)

Records 0-1 and 11-12 keep the window open at both ends: a settled record at the start would move
the share-partition start offset past it (Kafka's SharePartition.maybeUpdateCachedStateAndOffsets),
so the ACKNOWLEDGED and ARCHIVED ranges sit between unsettled ones.

The DLQ also holds a dead letter written as quafka.framework's workers write theirs
(``quafka.error.*`` headers) whose error class and message hold markup and invalid UTF-8, and a
header whose name is markup.

A consumer group, ``orders-audit``, has committed offset 10 of ``orders`` (lag 6, no members).

A second share group, ``<img src=x onerror=alert(1)>`` (XSS_GROUP), on topic ``payments`` with DLQ
``dlq.payments``, has one member (client id XSS_CLIENT, markup too) that rejected payments offset 0
(a dead letter of that group), accepted offset 1 and holds 2-3: the dashboard's action tests
redrive its dead letter and force-release 2-3, so the orders group's window stays as above.

`build` checks the result against `Admin.describe_in_flight` and `Admin.list_dead_letters`
before any browser is involved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from quafka.client import AcknowledgeType, Admin, ShareConsumer
from quafka.protocol import dead_letter_headers as h
from support import set_group_configs, wait_until
from support.dlq import produce, produce_messages
from support.share_client import create_topic

GROUP = "orders-workers"
TOPIC = "orders"
DLQ = "dlq.orders"
XSS_GROUP = "<img src=x onerror=alert(1)>"
XSS_CLIENT = "<b>worker-c</b><script>alert('client')</script>"
AUDIT_GROUP = "orders-audit"  # a consumer group with a committed offset on orders (no members)
AUDIT_COMMITTED = 10
PAYMENTS = "payments"
PAYMENTS_DLQ = "dlq.payments"
LOCK_MS = 600_000  # the groups' share.record.lock.duration.ms: kept records stay acquired
BACKOFF_MS = 600_000  # quafka.share.redelivery.backoff.ms while the released records wait

#: the broker configs the scenario needs (the group lock duration above the default maximum)
BROKER_CONFIG = {"group.share.max.record.lock.duration.ms": str(LOCK_MS)}

# Payloads that must be shown as text: markup, and bytes that are not UTF-8.
MARKUP_KEY = b"<b>order-4</b>"
MARKUP_VALUE = b"<script>alert(4)</script>"
BAD_UTF8_KEY = b"\xc3\x28order-7\xff"
BAD_UTF8_VALUE = b"\xff\xfe<img src=x onerror=alert(7)>"
FRAMEWORK_ERROR_CLASS = b"myapp.<svg onload=alert(5)>Error"
FRAMEWORK_ERROR_MESSAGE = b"\xff\xfebad <i>input</i> <script>alert(6)</script>"
MARKUP_HEADER = ("<b>x-trace</b>", b"<img src=x onerror=alert(8)>\x80")

#: offset -> (state, wait reason, holder client id) of the orders window once built
EXPECTED = {
    0: ("ACQUIRED", "", "worker-a"),
    1: ("AVAILABLE", "backoff", None),
    2: ("ACKNOWLEDGED", "", None),
    3: ("ACKNOWLEDGED", "", None),
    4: ("ARCHIVED", "", None),
    5: ("ACQUIRED", "", "worker-a"),
    6: ("ACQUIRED", "", "worker-b"),
    7: ("ARCHIVED", "", None),
    8: ("ACKNOWLEDGED", "", None),
    9: ("AVAILABLE", "backoff", None),
    10: ("ACQUIRED", "", "worker-b"),
    11: ("AVAILABLE", "", None),
    12: ("AVAILABLE", "", None),
}
UNFETCHED = 3  # records 13-15
XSS_EXPECTED = {0: ("ACQUIRED", "", XSS_CLIENT), 1: ("ARCHIVED", "", None), 2: ("ACKNOWLEDGED", "", None),
                3: ("ACQUIRED", "", XSS_CLIENT)}


@dataclass
class Scenario:
    bootstrap: str
    consumers: list[ShareConsumer] = field(default_factory=list)

    def close(self) -> None:
        for c in self.consumers:
            c.close()
        self.consumers.clear()


def offset_states(view) -> dict[int, tuple[str, str, str | None]]:
    """offset -> (state, wait reason, holder client id) of an InFlightPartitionView's ranges."""
    out = {}
    for r in view.ranges:
        for o in range(r.first_offset, r.last_offset + 1):
            out[o] = (r.state, r.wait_reason, r.client_id if r.state == "ACQUIRED" else None)
    return out


def _consumer(bootstrap: str, group: str, client_id: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                          "share.acknowledgement.mode": "explicit"})


def _poll_exactly(consumer: ShareConsumer, topic: str, offsets: range, timeout_s: float = 15.0) -> list:
    """The records at `offsets`, in one poll: the producer wrote them as one batch, and the first
    ShareFetch acquires all of it (a second poll would need the first poll's records acknowledged
    in explicit mode, and the scenario keeps some)."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not got and time.monotonic() < deadline:
        got = consumer.poll(0.5)
    assert [r.offset for r in got] == list(offsets), f"{topic}: polled {[r.offset for r in got]}, expected {offsets}"
    return got


def _ack(consumer: ShareConsumer, records: list, plan: dict[int, AcknowledgeType]) -> None:
    for r in records:
        if r.offset in plan:
            consumer.acknowledge(r, plan[r.offset])
    failed = {tp: e for tp, e in consumer.commit_sync(10).items() if e is not None}
    assert not failed, failed


def _window(admin: Admin, group: str, topic: str):
    return admin.describe_in_flight(group, [topic])[(topic, 0)]


def build(bootstrap: str) -> Scenario:
    """Script both groups on a running broker started with BROKER_CONFIG; check them with the Admin."""
    scenario = Scenario(bootstrap)
    try:
        _create(bootstrap)
        # the three members join at once (a join takes a heartbeat or two); none fetches before its poll
        for group, client_id, topic in ((GROUP, "worker-a", TOPIC), (GROUP, "worker-b", TOPIC),
                                        (XSS_GROUP, XSS_CLIENT, PAYMENTS)):
            scenario.consumers.append(_consumer(bootstrap, group, client_id))
            scenario.consumers[-1].subscribe([topic])
        _build_orders(scenario, *scenario.consumers[:2])
        _build_payments(scenario, scenario.consumers[2])
        verify(bootstrap)
    except BaseException:
        scenario.close()
        raise
    return scenario


def _create(bootstrap: str) -> None:
    """The topics, DLQs and group configs of both groups."""
    dlq_topic = {"errors.deadletterqueue.group.enable": "true"}
    for topic, configs in ((TOPIC, None), (DLQ, dlq_topic), (PAYMENTS, None), (PAYMENTS_DLQ, dlq_topic)):
        create_topic(bootstrap, topic, configs=configs)
    set_group_configs(bootstrap, GROUP, {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS),
        "errors.deadletterqueue.topic.name": DLQ, "errors.deadletterqueue.copy.record.enable": "true",
        "quafka.share.redelivery.backoff.ms": str(BACKOFF_MS)})
    set_group_configs(bootstrap, XSS_GROUP, {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS),
        "errors.deadletterqueue.topic.name": PAYMENTS_DLQ, "errors.deadletterqueue.copy.record.enable": "true"})


def _build_orders(scenario: Scenario, a: ShareConsumer, b: ShareConsumer) -> None:
    bootstrap = scenario.bootstrap
    first = [(None, f"order-{i}".encode(), None) for i in range(6)]
    first[4] = (MARKUP_KEY, MARKUP_VALUE, None)
    produce(bootstrap, TOPIC, first)
    got = _poll_exactly(a, TOPIC, range(0, 6))
    A, R, J = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
    _ack(a, got, {1: R, 2: A, 3: A, 4: J})

    second = [(None, f"order-{i}".encode(), None) for i in range(6, 13)]
    second[7 - 6] = (BAD_UTF8_KEY, BAD_UTF8_VALUE, None)
    produce(bootstrap, TOPIC, second)
    got = _poll_exactly(b, TOPIC, range(6, 13))
    _ack(b, got, {7: J, 8: A, 9: R, 11: R, 12: R})
    with Admin({"bootstrap.servers": bootstrap}) as admin:  # 11-12 need not wait: an operator's release
        wait_until(lambda: offset_states(_window(admin, GROUP, TOPIC)).get(12) == ("AVAILABLE", "backoff", None),
                   10, 0.02, message="offset 12 waiting for its backoff")
        assert admin.alter_in_flight(GROUP, TOPIC, 0, "release", first_offset=11, last_offset=12).changed == 2
    produce(bootstrap, TOPIC, [(None, f"order-{i}".encode(), None) for i in range(13, 16)])

    # a dead letter as quafka.framework's worker writes it, for offset 3 (accepted since)
    produce_messages(bootstrap, [(DLQ, 0, MARKUP_KEY, BAD_UTF8_VALUE, [
        (h.HEADER_TOPIC, TOPIC.encode()), (h.HEADER_PARTITION, b"0"), (h.HEADER_OFFSET, b"3"),
        (h.HEADER_GROUP, GROUP.encode()), (h.HEADER_DELIVERY_COUNT, b"3"),
        (h.HEADER_MESSAGE, h.MESSAGE_CLIENT_REJECT.encode()), (h.HEADER_REASON, h.REASON_MAX_ATTEMPTS.encode()),
        (h.HEADER_ERROR_CLASS, FRAMEWORK_ERROR_CLASS), (h.HEADER_ERROR_MESSAGE, FRAMEWORK_ERROR_MESSAGE),
        (h.HEADER_ERROR_ROUTE, f"{GROUP}/{TOPIC}".encode()), MARKUP_HEADER])])
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_consumer_group_offsets(AUDIT_GROUP, {(TOPIC, 0): AUDIT_COMMITTED})


def _build_payments(scenario: Scenario, c: ShareConsumer) -> None:
    bootstrap = scenario.bootstrap
    produce(bootstrap, PAYMENTS, [(None, b"pay-0", None), (b"<u>pay-1</u>", b"\x80<b>1</b>", None),
                                  (None, b"pay-2", None), (None, b"pay-3", None)])
    got = _poll_exactly(c, PAYMENTS, range(0, 4))
    _ack(c, got, {1: AcknowledgeType.REJECT, 2: AcknowledgeType.ACCEPT})


def verify(bootstrap: str, timeout_s: float = 10.0, *, payments: bool = True) -> None:
    """Both windows and DLQs are as scripted (the dead letters are written after the consumers'
    acknowledgements are answered: polled with a deadline). ``payments=False``: the orders group
    only (the action tests change the payments group on purpose)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        def settled():
            return (offset_states(_window(admin, GROUP, TOPIC)) == EXPECTED
                    and (not payments or offset_states(_window(admin, XSS_GROUP, PAYMENTS)) == XSS_EXPECTED))

        try:
            wait_until(settled, timeout_s, 0.05, message="the scripted windows")
        except AssertionError:
            raise AssertionError(f"orders window {offset_states(_window(admin, GROUP, TOPIC))}, expected {EXPECTED}; "
                                 f"payments window {offset_states(_window(admin, XSS_GROUP, PAYMENTS))}, "
                                 f"expected {XSS_EXPECTED}") from None
        view = _window(admin, GROUP, TOPIC)
        # end_offset is the window's last offset; the browser tests may produce more after it
        assert (view.start_offset, view.end_offset) == (0, 12) and view.log_end_offset >= 13 + UNFETCHED, view
        assert view.waiting_backoff_count == 2 and view.dead_letter_topic == DLQ, view
        holders = {r.client_id: r.member_id for r in view.ranges if r.state == "ACQUIRED"}
        assert set(holders) == {"worker-a", "worker-b"} and len(set(holders.values())) == 2, holders
        members = admin.describe_share_groups([GROUP])[GROUP].members
        assert sorted(m.client_id for m in members) == ["worker-a", "worker-b"], members

        letters = admin.list_dead_letters(GROUP)
        assert [(d.offset, d.key, d.value) for d in letters] == [
            (4, MARKUP_KEY, MARKUP_VALUE), (7, BAD_UTF8_KEY, BAD_UTF8_VALUE), (3, MARKUP_KEY, BAD_UTF8_VALUE)], letters
        assert letters[2].error_class is not None and "<svg" in letters[2].error_class, letters[2]
        assert admin.list_consumer_group_offsets(AUDIT_GROUP)[(TOPIC, 0)][0] == AUDIT_COMMITTED
        if payments:
            [xss_letter] = admin.list_dead_letters(XSS_GROUP)
            assert (xss_letter.group, xss_letter.topic, xss_letter.offset) == (XSS_GROUP, PAYMENTS, 1), xss_letter
