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
