from quafka.broker.core.producer_state import APPEND, Duplicate, INT32_MAX, ProducerStateTable, Refused, in_sequence
from quafka.protocol.errors import ErrorCode


def test_unknown_producer_is_accepted_at_any_sequence():
    table = ProducerStateTable()
    assert table.check(7, 0, 42, 45) == APPEND


def test_retried_batch_is_recognised_as_duplicate_with_its_original_offsets():
    table = ProducerStateTable()
    table.record(7, 0, 0, 4, 100, 104)
    table.record(7, 0, 5, 9, 105, 109)
    assert table.check(7, 0, 0, 4) == Duplicate(100, 104)
    assert table.check(7, 0, 5, 9) == Duplicate(105, 109)


def test_only_the_last_five_batches_are_remembered():
    table = ProducerStateTable()
    for i in range(6):
        table.record(7, 0, i, i, i, i)
    assert table.check(7, 0, 5, 5) == Duplicate(5, 5)
    outcome = table.check(7, 0, 0, 0)
    assert isinstance(outcome, Refused) and outcome.error_code == ErrorCode.out_of_order_sequence_number


def test_gap_in_sequence_is_out_of_order():
    table = ProducerStateTable()
    table.record(7, 0, 0, 4, 0, 4)
    assert table.check(7, 0, 5, 5) == APPEND
    outcome = table.check(7, 0, 6, 6)
    assert isinstance(outcome, Refused) and outcome.error_code == ErrorCode.out_of_order_sequence_number


def test_older_epoch_is_fenced_and_new_epoch_must_start_at_zero():
    table = ProducerStateTable()
    table.record(7, 3, 0, 0, 0, 0)
    assert table.check(7, 2, 1, 1).error_code == ErrorCode.invalid_producer_epoch
    assert table.check(7, 4, 1, 1).error_code == ErrorCode.out_of_order_sequence_number
    assert table.check(7, 4, 0, 0) == APPEND


def test_sequence_wraps_after_int32_max():
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(INT32_MAX, 1)
    assert in_sequence(4, 5)


def test_replay_rebuilds_state_from_batch_headers():
    table = ProducerStateTable()
    table.replay(9, 1, 10, 4, 500)  # base seq 10, 5 records at offset 500
    table.replay(-1, -1, -1, 3, 505)  # non-idempotent batch is ignored
    assert table.check(9, 1, 10, 14) == Duplicate(500, 504)
    assert table.check(9, 1, 15, 20) == APPEND


# ----------------------------------------------------------------------------- transactions
# Kafka: ProducerAppendInfo.updateCurrentTxnFirstOffset / appendEndTxnMarker (checkProducerEpoch,
# checkCoordinatorEpoch), ProducerStateManager.firstUnstableOffset / lastStableOffset(completedTxn)

from quafka.broker.core.producer_state import CompletedTxn  # noqa: E402


def test_first_transactional_batch_opens_the_transaction_and_the_marker_closes_it():
    table = ProducerStateTable()
    table.record(7, 0, 0, 1, 10, 11, transactional=True)
    table.record(7, 0, 2, 3, 14, 15, transactional=True)  # the first offset stays the first batch's
    assert table.entries[7].current_txn_first_offset == 10
    assert table.first_unstable_offset() == 10 and table.last_stable_offset(16) == 10
    assert table.check_marker(7, 0, 0) is None
    assert table.complete_txn(7, 0, 0, 16, aborted=True) == CompletedTxn(7, 10, 16, True)
    assert table.first_unstable_offset() is None and table.last_stable_offset(17) == 17
    assert table.entries[7].current_txn_first_offset == -1 and table.entries[7].coordinator_epoch == 0


def test_lso_is_the_earliest_open_transaction_and_the_entry_lso_skips_the_completed_one():
    table = ProducerStateTable()
    table.record(1, 0, 0, 0, 5, 5, transactional=True)
    table.record(2, 0, 0, 0, 6, 6, transactional=True)
    table.record(3, 0, 0, 0, 7, 7)  # idempotent, not transactional: no effect on the LSO
    assert table.last_stable_offset(8) == 5
    done = table.complete_txn(1, 0, 0, 8, aborted=True)
    assert table.last_stable_offset_after(done) == 6  # producer 2 is still open at 6
    done2 = table.complete_txn(2, 0, 0, 9, aborted=False)
    assert done2 == CompletedTxn(2, 6, 9, False) and table.last_stable_offset_after(done2) == 10


def test_marker_without_an_open_transaction_completes_nothing():
    table = ProducerStateTable()
    assert table.complete_txn(4, 2, 1, 0, aborted=False) is None  # a partition the producer never wrote
    assert table.entries[4].epoch == 2 and table.entries[4].coordinator_epoch == 1
    table.record(5, 0, 0, 0, 1, 1)
    assert table.complete_txn(5, 0, 0, 2, aborted=True) is None


def test_marker_epoch_checks():
    table = ProducerStateTable()
    table.record(7, 3, 0, 0, 0, 0, transactional=True)
    table.complete_txn(7, 3, 5, 1, aborted=False)
    older = table.check_marker(7, 2, 5)
    assert isinstance(older, Refused) and older.error_code == ErrorCode.invalid_producer_epoch
    zombie = table.check_marker(7, 3, 4)
    assert isinstance(zombie, Refused) and zombie.error_code == ErrorCode.transaction_coordinator_fenced
    assert table.check_marker(7, 4, 5) is None  # a bumped epoch (TV2, fencing) is accepted
    table.complete_txn(7, 4, 5, 2, aborted=True)
    assert table.entries[7].epoch == 4 and not table.entries[7].batches  # maybeUpdateProducerEpoch
    assert table.check(7, 4, 0, 0, transactional=True) == APPEND
    assert table.complete_txn(7, 3, 5, 3, aborted=True) is None  # replaying an older marker changes nothing


def test_plain_batch_while_a_transaction_is_open_is_invalid_txn_state():
    table = ProducerStateTable()
    table.record(7, 0, 0, 0, 0, 0, transactional=True)
    refused = table.check(7, 0, 1, 1)
    assert isinstance(refused, Refused) and refused.error_code == ErrorCode.invalid_txn_state
    assert table.check(7, 0, 1, 1, transactional=True) == APPEND


def test_snapshot_keeps_the_open_transaction_and_coordinator_epoch():
    table = ProducerStateTable()
    table.record(1, 0, 0, 0, 3, 3, transactional=True)
    table.record(1, 0, 1, 1, 4, 4, transactional=True)
    table.record(2, 1, 0, 0, 5, 5, transactional=True)
    table.complete_txn(2, 1, 6, 6, aborted=False)
    table.record(2, 1, 1, 1, 7, 7)
    entries = table.snapshot_entries()
    assert (1, 0, 1, 4, 0, -1, -1, 3) in entries  # Kafka's currentTxnFirstOffset = 3
    assert (2, 1, 1, 7, 0, -1, 6, -1) in entries
    loaded = ProducerStateTable()
    loaded.load_snapshot(entries)
    assert loaded.ongoing == {1: 3} and loaded.last_stable_offset(8) == 3
    assert loaded.entries[2].coordinator_epoch == 6 and loaded.check_marker(2, 1, 5) is not None
