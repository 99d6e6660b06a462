"""quafka's delivery controls in the share partition machine, with virtual time: redelivery backoff,
delayed delivery, key ordering (with its failure modes), and the in-flight view and force actions.
With every control off the machine is Kafka's (the other share-partition tests)."""

import pytest

from quafka.broker.core import in_flight
from quafka.broker.core._runs import WAIT_BACKOFF, WAIT_DELIVERY
from quafka.broker.core.delivery_policy import (
    DUE_BAD,
    DUE_CAPPED,
    DUE_NONE,
    DUE_OK,
    DeliveryPolicy,
    backoff_delay_ms,
    delivery_due_ms,
)
from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import (
    AcquiredRange,
    DeadLetterWrite,
    LockTimer,
    PersistWrite,
    SharePartition,
    StateBatch,
    WakeFetches,
)
from quafka.protocol.errors import ErrorCode

from .test_share_partition import LIMIT, LOCK_MS, acquire, ack, complete, the_write

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                                         RecordState.ACKNOWLEDGED, RecordState.ARCHIVING,
                                                         RecordState.ARCHIVED)
ACCEPT, RELEASE, REJECT = 1, 2, 3
BACKOFF = DeliveryPolicy(backoff_ms=200, backoff_max_ms=10_000, backoff_multiplier=2.0)


def configured(policy: DeliveryPolicy, start: int = 0, **kwargs) -> SharePartition:
    sp = SharePartition(start, **kwargs)
    sp.configure(policy, 0)
    return sp


def commit_ack(sp, member, batches, *, now=0, limit=LIMIT, dlq=False):
    """Acknowledge and commit; the effects of the commit."""
    got = sp.acknowledge(member, [(f, l, tuple(t)) for f, l, t in batches], delivery_limit=limit,
                         lock_duration_ms=LOCK_MS, renew_enabled=True, now_ms=now, dlq_enabled=dlq)
    assert got.error == ErrorCode.none, got.error
    return complete(sp, got.write, now=now, limit=limit)


def fetchable(sp, now, max_in_flight=2000):
    return sp.fetch_offset(max_in_flight, now)


# ---------------------------------------------------------------- backoff arithmetic


def test_backoff_doubles_from_the_first_delay_and_stops_at_the_cap():
    policy = DeliveryPolicy(backoff_ms=200, backoff_max_ms=1_000, backoff_multiplier=2.0)
    assert [backoff_delay_ms(policy, n, 0) for n in range(1, 6)] == [200, 400, 800, 1_000, 1_000]
    assert backoff_delay_ms(DeliveryPolicy(), 3, 0) == 0  # off


def test_backoff_jitter_is_stable_and_stays_within_its_fraction():
    policy = DeliveryPolicy(backoff_ms=1_000, backoff_max_ms=100_000, backoff_multiplier=1.0, backoff_jitter=0.5,
                            jitter_seed=7)
    delays = [backoff_delay_ms(policy, 1, offset) for offset in range(2_000)]
    assert delays == [backoff_delay_ms(policy, 1, offset) for offset in range(2_000)]  # no randomness
    assert min(delays) >= 500 and max(delays) < 1_500
    assert len(set(delays)) > 500  # spread, not one value
    assert sum(delays) / len(delays) == pytest.approx(1_000, rel=0.05)


def test_backoff_jitter_never_passes_the_cap():
    policy = DeliveryPolicy(backoff_ms=1_000, backoff_max_ms=1_000, backoff_multiplier=3.0, backoff_jitter=1.0)
    assert max(backoff_delay_ms(policy, 4, offset) for offset in range(500)) <= 1_000


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, (0, DUE_NONE)),
    ({"quafka.deliver.after.ms": b"1500"}, (11_500, DUE_OK)),
    ({"quafka.deliver.at.ms": b"20000"}, (20_000, DUE_OK)),
    ({"quafka.deliver.at.ms": b"20000", "quafka.deliver.after.ms": b"500"}, (20_000, DUE_OK)),  # the later
    ({"quafka.deliver.after.ms": b"soon"}, (0, DUE_BAD)),
    ({"quafka.deliver.after.ms": b"-5"}, (0, DUE_BAD)),
    ({"quafka.deliver.after.ms": None}, (0, DUE_BAD)),
    ({"quafka.deliver.after.ms": b"\xff\xfe"}, (0, DUE_BAD)),
    ({"quafka.deliver.after.ms": b"1" * 40}, (0, DUE_BAD)),
    ({"quafka.deliver.at.ms": b"99999999999"}, (10_000 + 60_000, DUE_CAPPED)),
])
def test_delivery_headers_are_read_as_documented(headers, expected):
    # record timestamp 10,000; now 10,000; at most 60 s ahead
    assert delivery_due_ms(headers, 10_000, 60_000, 10_000) == expected


# ---------------------------------------------------------------- redelivery backoff


def test_a_released_record_waits_for_its_backoff_then_is_acquired_again():
    sp = configured(BACKOFF)
    acquire(sp, "m1", [(0, 0)], now=1_000)
    effects = commit_ack(sp, "m1", [(0, 0, [RELEASE])], now=1_000)
    assert LockTimer(1_200) in effects  # the timer covers the due time
    assert sp.record(0) == (AVAILABLE, 1, None)
    assert fetchable(sp, 1_199) == 1  # past the window: the released record is not acquirable yet
    assert acquire(sp, "m2", [(0, 0)], now=1_199) == []
    timer = sp.on_lock_timer(delivery_limit=LIMIT, now_ms=1_200)
    assert WakeFetches() in timer
    assert acquire(sp, "m2", [(0, 0)], now=1_200) == [AcquiredRange(0, 0, 2)]


def test_each_redelivery_waits_twice_as_long_as_the_one_before():
    sp = configured(BACKOFF)
    now = 0
    acquire(sp, "m", [(0, 0)], now=now)
    waited = []
    for _ in range(4):
        commit_ack(sp, "m", [(0, 0, [RELEASE])], now=now)
        due = sp.next_due_ms()
        waited.append(due - now)
        assert acquire(sp, "m", [(0, 0)], now=due - 1) == []
        now = due
        assert acquire(sp, "m", [(0, 0)], now=now) != []
    assert waited == [200, 400, 800, 1_600]


def test_the_due_time_is_persisted_with_the_released_batch_and_restored():
    sp = configured(BACKOFF)
    acquire(sp, "m1", [(0, 4)], now=0)
    got = sp.acknowledge("m1", [(0, 4, (RELEASE,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=50)
    assert got.write.state_batches == (StateBatch(0, 4, 0, 1, 250),)
    complete(sp, got.write, now=50)
    again = configured(BACKOFF, state_batches=[StateBatch(0, 4, 0, 1, 250)])
    assert again.next_due_ms() == 250
    assert acquire(again, "m2", [(0, 4)], now=249) == []
    assert acquire(again, "m2", [(0, 4)], now=250) == [AcquiredRange(0, 4, 2)]


def test_lock_expiry_and_a_member_leaving_wait_for_the_backoff_too():
    sp = configured(BACKOFF)
    acquire(sp, "m1", [(0, 0)], now=0)
    acquire(sp, "m2", [(0, 0), (1, 1)], now=0)
    write = the_write(sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS))
    assert {b.due_ms for b in write.state_batches} == {LOCK_MS + 200}
    complete(sp, write, now=LOCK_MS)
    assert fetchable(sp, LOCK_MS + 199) == 2
    sp2 = configured(BACKOFF)
    acquire(sp2, "m1", [(0, 2)], now=0)
    write = the_write(sp2.release_member("m1", delivery_limit=LIMIT, now_ms=10))
    assert write.state_batches == (StateBatch(0, 2, 0, 1, 210),)


def test_a_release_at_the_delivery_limit_archives_without_waiting():
    sp = configured(BACKOFF)
    acquire(sp, "m", [(0, 0)], now=0)
    commit_ack(sp, "m", [(0, 0, [RELEASE])], now=0, limit=2)
    acquire(sp, "m", [(0, 0)], now=200, limit=2)
    got = sp.acknowledge("m", [(0, 0, (RELEASE,))], delivery_limit=2, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=300)
    assert (got.write.start_offset, got.write.state_batches) == (1, ())  # archived: the start offset passes it
    assert sp.next_due_ms() is None


def test_a_failed_release_write_rolls_back_to_acquired_without_a_due_time():
    sp = configured(BACKOFF)
    acquire(sp, "m", [(0, 0)], now=0)
    got = sp.acknowledge("m", [(0, 0, (RELEASE,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=10)
    complete(sp, got.write, ok=False, now=20)
    assert sp.record(0) == (ACQUIRED, 1, "m")
    assert sp.next_due_ms() is None


def test_turning_backoff_off_frees_the_waiting_records():
    sp = configured(BACKOFF)
    acquire(sp, "m", [(0, 0)], now=0)
    commit_ack(sp, "m", [(0, 0, [RELEASE])], now=0)
    assert fetchable(sp, 10) == 1
    effects = sp.configure(DeliveryPolicy(), 10)
    assert WakeFetches() in effects
    assert fetchable(sp, 10) == 0


def test_waiting_records_count_in_the_window_as_kafka_counts_available_records():
    sp = configured(BACKOFF)
    acquire(sp, "m", [(0, 99)], now=0, max_in_flight=100)
    commit_ack(sp, "m", [(0, 99, [RELEASE])], now=0)
    assert sp.in_flight_count == 100 and sp.runs.waiting_counts[WAIT_BACKOFF] == 100
    assert sp.fetch_offset(100, 100) is None  # window full, nothing acquirable: a fetch parks
    assert sp.fetch_offset(200, 100) == 100  # a larger window lets new records flow


def test_settled_records_behind_a_waiting_one_do_not_hold_the_window_shut():
    # Kafka counts every offset from the start offset: one record waiting at the head would stop
    # the partition once the cap's worth of later records were done. With a control on, the cap
    # counts unsettled records only.
    sp = configured(BACKOFF)
    acquire(sp, "m", [(0, 0)], now=0)
    commit_ack(sp, "m", [(0, 0, [RELEASE])], now=0)  # waits 200 ms at the head
    for base in range(1, 1_001, 10):
        got = acquire(sp, "m", [(base, base + 9)], now=1, max_in_flight=100)
        assert got == [AcquiredRange(base, base + 9, 1)]
        commit_ack(sp, "m", [(base, base + 9, [ACCEPT])], now=1)
    assert (sp.start_offset, sp.in_flight_count, sp.window_used()) == (0, 1_001, 1)
    assert len(sp.runs) == 2  # the settled records behind it merged into one run
    kafka = SharePartition(0)
    acquire(kafka, "m", [(0, 0)], now=0)
    commit_ack(kafka, "m", [(0, 0, [RELEASE])], now=0)
    acquire(kafka, "m", [(0, 0)], now=0)  # held: Kafka's window counts every offset
    acquire(kafka, "m", [(1, 99)], now=0, max_in_flight=100)
    assert kafka.fetch_offset(100, 0) is None


# ---------------------------------------------------------------- delayed delivery


DELAYED = DeliveryPolicy(delayed_delivery=True)


def test_records_not_due_enter_the_window_waiting_and_later_ones_flow():
    sp = configured(DELAYED)
    meta = {0: (None, 5_000), 1: (None, 0), 2: (None, 5_000), 3: (None, 0)}
    got = sp.acquire("m", [(0, 3)], max_records=10, record_limit=True, lock_duration_ms=LOCK_MS,
                     delivery_limit=LIMIT, max_in_flight=2000, now_ms=1_000, record_meta=meta)
    assert got.ranges == [AcquiredRange(1, 1, 1), AcquiredRange(3, 3, 1)]
    assert sp.record(0) == (AVAILABLE, 0, None) and sp.record(2) == (AVAILABLE, 0, None)
    assert LockTimer(5_000) in got.effects
    assert sp.runs.waiting_counts[WAIT_DELIVERY] == 2
    assert fetchable(sp, 4_999) == 4
    assert WakeFetches() in sp.on_lock_timer(delivery_limit=LIMIT, now_ms=5_000)
    assert acquire(sp, "m", [(0, 3)], now=5_000) == [AcquiredRange(0, 0, 1), AcquiredRange(2, 2, 1)]


def test_delivery_times_are_read_again_for_the_window_after_a_restart():
    # offsets 1 and 3 acknowledged; 0 and 2 never delivered, 2 is due later: after the restart the
    # gap records are AVAILABLE and the delivery time of 2 must come from the log again
    sp = SharePartition(0, [StateBatch(1, 1, 2, 1), StateBatch(3, 3, 2, 1)])
    sp.configure(DELAYED, 100)
    assert sp.record_meta_missing
    sp.load_record_meta({0: (None, 0), 1: (None, 0), 2: (None, 9_000), 3: (None, 0)}, 100)
    assert not sp.record_meta_missing
    assert sp.fetch_offset(2000, 100) == 0
    acquire(sp, "m", [(0, 0)], now=100)
    assert sp.fetch_offset(2000, 100) == 4  # 2 waits for its time
    assert sp.next_due_ms() == 9_000


# ---------------------------------------------------------------- key ordering


ORDERED = DeliveryPolicy(key_ordering=True)


def keyed(sp, member, first, last, keys, *, now=0, max_records=500, record_limit=False, limit=LIMIT, due=None):
    """Acquire [first, last] (one log batch) whose records have `keys` (one per offset)."""
    meta = {o: (k, (due or {}).get(o, 0)) for o, k in zip(range(first, last + 1), keys)}
    got = sp.acquire(member, [(first, last)], max_records=max_records, record_limit=record_limit,
                     lock_duration_ms=LOCK_MS, delivery_limit=limit, max_in_flight=2000, now_ms=now,
                     record_meta=meta)
    return got


def test_only_the_first_unsettled_record_of_a_key_is_acquired():
    sp = configured(ORDERED)
    got = keyed(sp, "m1", 0, 4, [b"a", b"a", b"b", None, b"a"])
    assert got.ranges == [AcquiredRange(0, 0, 1), AcquiredRange(2, 3, 1)]
    assert [sp.runs.find(o).blocked for o in (1, 4)] == [True, True]
    assert sp.fetch_offset(2000, 0) == 5  # nothing acquirable in the window
    effects = commit_ack(sp, "m1", [(0, 0, [ACCEPT])])
    assert WakeFetches() in effects
    assert acquire(sp, "m2", [(0, 4)]) == [AcquiredRange(1, 1, 1)]  # the next of "a", not 4
    commit_ack(sp, "m2", [(1, 1, [ACCEPT])])
    assert acquire(sp, "m2", [(0, 4)]) == [AcquiredRange(4, 4, 1)]


def test_a_released_record_keeps_its_place_and_the_next_waits_behind_it():
    sp = configured(DeliveryPolicy(key_ordering=True, backoff_ms=100, backoff_max_ms=100))
    keyed(sp, "m1", 0, 1, [b"k", b"k"])
    commit_ack(sp, "m1", [(0, 0, [RELEASE])], now=0)
    assert sp.runs.find(1).blocked
    sp.on_lock_timer(delivery_limit=LIMIT, now_ms=100)
    assert acquire(sp, "m2", [(0, 1)], now=100) == [AcquiredRange(0, 0, 2)]


def test_records_of_other_keys_and_without_a_key_flow_past_a_busy_key():
    sp = configured(ORDERED)
    got = keyed(sp, "m", 0, 5, [b"x", b"x", b"x", b"y", None, b"z"], record_limit=True, max_records=3)
    assert got.ranges == [AcquiredRange(0, 0, 1), AcquiredRange(3, 4, 1)]  # z would be a fourth
    assert sp.keys.keys_in_flight() == 2 and sp.next_offset == 5


def test_the_key_queues_stay_bounded_by_the_window():
    sp = configured(ORDERED)
    for base in range(0, 1_000, 10):
        got = keyed(sp, "m", base, base + 9, [b"k%d" % (o % 7) for o in range(base, base + 10)])
        for r in got.ranges:
            commit_ack(sp, "m", [(r.first_offset, r.last_offset, [ACCEPT])])
        while (offset := sp.fetch_offset(2000, 0)) is not None and offset < base + 10:
            for r in acquire(sp, "m", [(offset, offset)]):
                commit_ack(sp, "m", [(r.first_offset, r.last_offset, [ACCEPT])])
    assert sp.start_offset == 1_000 and sp.keys.keys_in_flight() == 0 and not sp.keys


def park_policy(mode):
    return DeliveryPolicy(key_ordering=True, on_failure=mode)


def test_park_holds_a_keys_later_records_after_a_reject_until_the_key_is_released():
    sp = configured(park_policy("park"))
    keyed(sp, "m", 0, 3, [b"a", b"a", b"b", b"a"])
    got = sp.acknowledge("m", [(0, 0, (REJECT,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=0)
    assert got.write.failed_keys == ((b"a", 0),)
    complete(sp, got.write)
    assert sp.start_offset == 1  # 0 archived
    assert sp.runs.find(1).blocked and sp.runs.find(3).blocked
    assert acquire(sp, "m", [(0, 3)]) == []  # "b" is already held; "a" is parked
    view = in_flight.describe(sp, now_ms=0)
    assert view.failed_keys == [in_flight.FailedKey(b"a", 0, (1, 3))]
    result = in_flight.release_key(sp, b"a", 0)
    assert result.error == ErrorCode.none and result.write.failed_keys == ()
    assert WakeFetches() in result.effects
    complete(sp, result.write)
    assert acquire(sp, "m", [(0, 3)]) == [AcquiredRange(1, 1, 1)]


def test_park_survives_a_restart_through_the_persisted_failed_keys():
    sp = SharePartition(0, [StateBatch(0, 0, 4, 1)], failed_keys=((b"a", 0),))
    sp.configure(park_policy("park"), 0)
    sp.load_record_meta({1: (b"a", 0), 2: (b"b", 0)}, 0)
    got = keyed(sp, "m", 1, 2, [b"a", b"b"])
    assert got.ranges == [AcquiredRange(2, 2, 1)]
    assert sp.runs.find(1).blocked


def test_dead_letter_sends_a_keys_later_records_after_the_failed_one():
    sp = configured(park_policy("dead-letter")._replace(dead_letters=True))
    keyed(sp, "m", 0, 2, [b"a", b"a", b"a"])
    got = sp.acknowledge("m", [(0, 0, (REJECT,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=0, dlq_enabled=True)
    effects = complete(sp, got.write)
    assert DeadLetterWrite(0, 0, 1, "rejected") in effects
    letters = drain(sp, sp.on_dead_letters_done([(0, 0)]))
    # offset 1 follows (ARCHIVING, its dead letter with reason key-failed, ARCHIVED), then offset 2
    assert letters == [DeadLetterWrite(1, 1, 0, "key-failed")]
    letters = drain(sp, sp.on_dead_letters_done([(1, 1)]))
    assert letters == [DeadLetterWrite(2, 2, 0, "key-failed")]
    drain(sp, sp.on_dead_letters_done([(2, 2)]))
    assert sp.start_offset == 3 and sp.keys.failed == {b"a": 0}  # still failed until released


def drain(sp, effects) -> list[DeadLetterWrite]:
    """Complete every write among `effects` and those their completion starts; the DLQ writes."""
    letters, queue = [], list(effects)
    while queue:
        effect = queue.pop(0)
        if isinstance(effect, PersistWrite):
            queue.extend(complete(sp, effect))
        elif isinstance(effect, DeadLetterWrite):
            letters.append(effect)
    return letters


def test_continue_lets_a_keys_later_records_flow_after_a_reject():
    sp = configured(park_policy("continue"))
    keyed(sp, "m", 0, 1, [b"a", b"a"])
    got = sp.acknowledge("m", [(0, 0, (REJECT,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=0)
    assert got.write.failed_keys is None
    complete(sp, got.write)
    assert acquire(sp, "m", [(0, 1)]) == [AcquiredRange(1, 1, 1)]


def test_a_rolled_back_reject_does_not_park_the_key():
    sp = configured(park_policy("park"))
    keyed(sp, "m", 0, 1, [b"a", b"a"])
    got = sp.acknowledge("m", [(0, 0, (REJECT,))], delivery_limit=LIMIT, lock_duration_ms=LOCK_MS,
                         renew_enabled=True, now_ms=0)
    effects = complete(sp, got.write, ok=False)
    assert not sp.keys.failed
    assert [e.failed_keys for e in effects if isinstance(e, PersistWrite)] == [()]  # stored as it is now


def test_turning_key_ordering_off_unblocks_every_record():
    sp = configured(park_policy("park"))
    keyed(sp, "m", 0, 2, [b"a", b"a", b"a"])
    effects = sp.configure(DeliveryPolicy(), 0)
    assert WakeFetches() in effects
    assert acquire(sp, "m2", [(0, 2)]) == [AcquiredRange(1, 2, 1)]


# ---------------------------------------------------------------- in-flight view and force actions


def test_describe_shows_holders_counts_deadlines_and_due_times():
    sp = configured(BACKOFF)
    acquire(sp, "m1", [(0, 4)], now=0)
    acquire(sp, "m2", [(5, 9)], now=0)
    commit_ack(sp, "m1", [(0, 1, [ACCEPT]), (2, 2, [RELEASE])], now=100)
    view = in_flight.describe(sp, now_ms=100)
    assert (view.start_offset, view.end_offset, view.in_flight_count) == (2, 9, 8)
    assert [(r.first_offset, r.last_offset, r.state, r.delivery_count, r.member_id, r.lock_deadline_ms, r.due_ms,
             r.wait) for r in view.rows] == [
        (2, 2, AVAILABLE, 1, None, 0, 300, WAIT_BACKOFF),
        (3, 4, ACQUIRED, 1, "m1", LOCK_MS, 0, 0),
        (5, 9, ACQUIRED, 1, "m2", LOCK_MS, 0, 0),
    ]
    assert in_flight.locate(sp, 3, 100).member_id == "m1"
    assert in_flight.locate(sp, 1, 100) is None and in_flight.locate(sp, 10, 100) is None
    assert len(in_flight.describe(sp, max_rows=2, now_ms=100).rows) == 2
    assert in_flight.describe(sp, max_rows=2, now_ms=100).truncated


def test_force_release_makes_held_and_waiting_records_acquirable_at_once():
    sp = configured(BACKOFF)
    acquire(sp, "m1", [(0, 4)], now=0)
    commit_ack(sp, "m1", [(0, 0, [RELEASE]), (1, 1, [ACCEPT])], now=0)
    result = in_flight.force_release(sp, 0, 9, reset_delivery_count=True, now_ms=10)
    assert (result.changed, result.skipped, result.not_fetched) == (4, 1, 5)
    assert result.write.state_batches == (StateBatch(0, 0, 0, 0), StateBatch(2, 4, 0, 0))
    complete(sp, result.write, now=10)
    assert refused_ack(sp, "m1", 2)  # its holder lost the lock
    assert acquire(sp, "m2", [(0, 4)], now=10) == [AcquiredRange(0, 0, 1), AcquiredRange(2, 4, 1)]


def refused_ack(sp, member, offset) -> bool:
    return ack(sp, member, [(offset, offset, [ACCEPT])]).error == ErrorCode.invalid_record_state


def test_force_archive_archives_and_goes_through_the_dead_letter_queue_when_there_is_one():
    sp = configured(DeliveryPolicy())
    acquire(sp, "m", [(0, 3)], now=0)
    plain = in_flight.force_archive(sp, 0, 1, now_ms=0, dlq_enabled=False)
    complete(sp, plain.write)
    assert [sp.record(o) for o in (0, 1)] == [None, None]  # archived, and the start offset moved past
    assert sp.start_offset == 2
    dlq = in_flight.force_archive(sp, 2, 3, now_ms=0, dlq_enabled=True)
    effects = complete(sp, dlq.write)
    assert DeadLetterWrite(2, 3, 1, "force-archived") in effects


@pytest.mark.parametrize(("first", "last"), [(-1, 3), (5, 4)])
def test_force_actions_refuse_a_bad_range(first, last):
    sp = configured(DeliveryPolicy())
    assert in_flight.force_release(sp, first, last, reset_delivery_count=False, now_ms=0).error == \
        ErrorCode.invalid_request
    assert in_flight.force_archive(sp, first, last, now_ms=0, dlq_enabled=False).error == ErrorCode.invalid_request


def test_release_key_refuses_a_key_that_is_not_failed():
    sp = configured(park_policy("park"))
    assert in_flight.release_key(sp, b"nope", 0).error == ErrorCode.invalid_request
