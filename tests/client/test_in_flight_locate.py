"""quafka.client.in_flight_locate: "where is record O" of a share group. The classification on
hand-made windows (every answer, pure), and ``locate_record`` over an AsyncAdmin against an
embedded broker on a scenario with a dead-lettered record, a settled one, a held one, one not
delivered yet and one not produced yet (the dashboard's path; the CLI's blocking path is
tests/cli/test_share_groups_in_flight.py)."""

from __future__ import annotations

import asyncio

import pytest

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, produce
from support.share_client import create_topic

from quafka.client import (
    AcknowledgeType,
    AsyncAdmin,
    FailedKeyView,
    InFlightPartitionView,
    InFlightRange,
    ShareConsumer,
)
from quafka.client.dead_letters import DeadLetterRecord
from quafka.client.in_flight_locate import WHERE, classify, latest_letter, locate_record, needs_letter

NOW_MS = 1_700_000_000_000


def row(first, last, state, *, count=1, member=None, lock=None, due=None, wait="", blocked=False, key=None):
    return InFlightRange(first, last, state, count, member, "worker" if member else None,
                         "/10.0.0.7" if member else None, lock, due, wait, blocked, False, key)


def window(*ranges, start=10, end=19, log_start=5, log_end=25, dlq=None, failed=()):
    return InFlightPartitionView("jobs", 0, start, end, log_start, log_end, 10, 200, 0, 0, 0, bool(failed), False,
                                 dlq, tuple(ranges), tuple(failed))


def letter(offset, *, ts=NOW_MS, dlq_offset=0, error_class=None, error_message=None):
    return DeadLetterRecord("dlq.jobs", 0, dlq_offset, ts, "g", "jobs", 0, offset, 3, "rejected by the client",
                            "rejected", error_class=error_class, error_message=error_message)


@pytest.mark.parametrize("view, offset, found, expected", [
    (window(row(12, 12, "ACQUIRED", member="m-1", lock=12_300)), 12, None,
     ("in-flight", "in flight, held by m-1 (worker@10.0.0.7), lock left 12.3s")),
    (window(row(12, 12, "ACKNOWLEDGED")), 12, None,
     ("acknowledged", "acknowledged (settled; the start offset has not passed it yet)")),
    (window(row(12, 12, "ARCHIVED")), 12, None,
     ("archived", "archived (settled; the start offset has not passed it yet)")),
    (window(row(12, 12, "ARCHIVED"), dlq="dlq.jobs"), 12, letter(12, error_class="ValueError",
                                                                 error_message="bad\n  input"),
     ("dead-lettered", "archived, dead-lettered to dlq.jobs partition 0 offset 0 at 2023-11-14T22:13:20.000Z, "
                       "reason rejected, delivery count 3, error ValueError: bad input")),
    (window(row(12, 12, "ARCHIVING"), dlq="dlq.jobs"), 12, None,
     ("archiving", "being written to the dead-letter queue dlq.jobs, then archived")),
    (window(row(12, 12, "AVAILABLE", wait="backoff", due=NOW_MS + 90_000)), 12, None,
     ("in-flight", "in flight, available; it waits for its redelivery backoff: due in 1m30s "
                   "(2023-11-14T22:14:50.000Z)")),
    (window(row(12, 12, "AVAILABLE", wait="delivery-time", due=NOW_MS - 1)), 12, None,
     ("in-flight", "in flight, available; it waits for its delivery time: due now (2023-11-14T22:13:19.999Z)")),
    (window(row(12, 12, "AVAILABLE", blocked=True, key=b"k")), 12, None,
     ("in-flight", "in flight, available but blocked behind an earlier record of its key (key ordering)")),
    (window(row(12, 12, "AVAILABLE", blocked=True, key=b"k"), failed=[FailedKeyView(b"k", 11, (12,))]), 12, None,
     ("in-flight", "in flight, available but blocked: its key failed (key ordering); it waits until the key is "
                   "released with --release --key")),
    (window(row(12, 12, "AVAILABLE")), 12, None, ("in-flight", "in flight, available: the next fetch can acquire it")),
    (window(), 7, None, ("settled", "settled: acknowledged or archived (it is below the share partition's start "
                                    "offset 10, where the broker no longer keeps which)")),
    (window(dlq="dlq.jobs"), 3, None,
     ("settled", "settled: acknowledged or archived (it is below the share partition's start offset 10, where the "
                 "broker no longer keeps which); the dead-letter queue dlq.jobs holds no dead letter for it; and "
                 "deleted from the log since (below the log start offset 5: retention or delete-records)")),
    (window(dlq="dlq.jobs"), 7, letter(7),
     ("dead-lettered", "dead-lettered to dlq.jobs partition 0 offset 0 at 2023-11-14T22:13:20.000Z, reason "
                       "rejected, delivery count 3 (settled: below the start offset 10)")),
    (window(), 25, None, ("not-produced", "no such record yet: the log end offset is 25 (the next record produced "
                                          "gets that offset)")),
    (window(start=3, log_start=5), 4, None,
     ("deleted", "deleted from the log (below the log start offset 5: retention or delete-records) before it was "
                 "delivered")),
    (window(), 20, None, ("not-delivered", "not delivered yet: it waits to be fetched (past the end offset 19; the "
                                           "log end offset is 25)")),
    (window(), 15, None, ("no-record", "no record at this offset in the window (start offset 10, end offset 19): a "
                                       "gap in the log, such as a compacted or transaction-marker offset")),
])
def test_classify_says_where_the_record_is(view, offset, found, expected):
    assert classify(view, offset, NOW_MS, found) == expected
    assert expected[0] in WHERE


def test_the_dead_letters_are_asked_only_when_they_can_tell_more():
    archived = window(row(12, 12, "ARCHIVED"), dlq="dlq.jobs")
    assert needs_letter(archived, 12)
    assert not needs_letter(window(row(12, 12, "ARCHIVED")), 12)  # no DLQ
    assert not needs_letter(window(row(12, 12, "ACKNOWLEDGED"), dlq="dlq.jobs"), 12)
    assert needs_letter(window(dlq="dlq.jobs"), 9)  # below the start offset
    assert not needs_letter(window(dlq="dlq.jobs"), 10)  # in the window, no record
    assert not needs_letter(window(dlq="dlq.jobs"), 30)


def test_the_latest_letter_for_the_record_wins():
    old, new, other = letter(7, ts=NOW_MS, dlq_offset=1), letter(7, ts=NOW_MS + 5, dlq_offset=0), letter(8)
    assert latest_letter([old, other, new], 0, 7) is new
    assert latest_letter([old, other, new], 1, 7) is None
    assert latest_letter([], 0, 7) is None


def test_locate_record_over_an_async_admin(broker):
    bs = broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    create_topic(bs, "dlq.orders", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "gd", {"share.auto.offset.reset": "earliest",
                                 "errors.deadletterqueue.topic.name": "dlq.orders"})
    produce(bs, "orders", [(None, b"o%d" % i, []) for i in range(6)])
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "gd", "client.id": "worker",
                       "share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit",
                       "max.poll.records": 4})

    async def where(offsets):
        async with AsyncAdmin({"bootstrap.servers": bs}) as admin:
            return [await locate_record(admin, "gd", "orders", 0, o, now_ms=NOW_MS) for o in offsets]

    try:
        c.subscribe(["orders"])
        held = []
        wait_until(lambda: held.extend(c.poll(0.2)) or len(held) >= 4, 10.0, message="4 records")
        assert [r.offset for r in held] == [0, 1, 2, 3]
        c.acknowledge(held[0], AcknowledgeType.ACCEPT)
        c.acknowledge(held[1], AcknowledgeType.REJECT)
        c.acknowledge(held[2], AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync().values())
        wait_until(lambda: asyncio.run(where([0]))[0].view.start_offset == 3, message="start offset 3")

        settled, dead, in_flight, waiting, future = asyncio.run(where([0, 1, 3, 4, 6]))
        assert (settled.where, settled.letter, settled.row) == ("settled", None, None)
        assert settled.text.endswith("the dead-letter queue dlq.orders holds no dead letter for it")
        assert dead.where == "dead-lettered" and dead.row is None
        assert (dead.letter.offset, dead.letter.reason, dead.letter.dlq_topic) == (1, "rejected", "dlq.orders")
        assert dead.text.startswith("dead-lettered to dlq.orders partition 0 offset 0 at ")
        assert in_flight.where == "in-flight" and in_flight.letter is None
        assert (in_flight.row.first_offset, in_flight.row.state, in_flight.row.member_id) == (3, "ACQUIRED",
                                                                                              c.member_id)
        assert in_flight.text.startswith(f"in flight, held by {c.member_id} (worker@127.0.0.1), lock left ")
        assert (waiting.where, future.where) == ("not-delivered", "not-produced")
        assert {x.sample_ms for x in (settled, dead, in_flight, waiting, future)} == {NOW_MS}
        assert (future.view.end_offset, future.view.log_end_offset) == (3, 6)
    finally:
        c.close()
