"""The pure transaction coordinator, driven directly with virtual time (Kafka's TransactionCoordinator
and TransactionStateManager are the reference; each test names the behaviour it follows)."""

from __future__ import annotations

import itertools

import pytest

from quafka.broker.core.transaction_coordinator import (
    AppendTxnRecord,
    TransactionCoordinator,
    TxnResult,
    WriteTxnMarkers,
    error_for_version,
)
from quafka.broker.core.transaction_state import (
    IGNORE,
    RESTING_STATES,
    TRANSITIONS,
    VALID_PREVIOUS_STATES,
    Answer,
    Go,
    Input,
    TransactionState,
    TxnMetadata,
)
from quafka.protocol.errors import ErrorCode
from quafka.protocol.partition_placement import group_partition
from quafka.protocol.transaction_log_records import TransactionLogRecord

S = TransactionState
E = ErrorCode
TID = "txn-a"
T0 = 1_000_000


class Harness:
    """A coordinator with every partition loaded and a log per partition; writes are completed
    (or failed) explicitly, so a test sees what is in flight."""

    def __init__(self, **config) -> None:
        self.ids = itertools.count(1000)
        self.config = config
        self.coordinator = TransactionCoordinator(lambda: next(self.ids), num_partitions=4, **config)
        for p in range(4):
            self.coordinator.begin_loading(p)
            self.coordinator.finish_loading(p, 0)
        self.log: list[tuple[int, int, TransactionLogRecord]] = []  # (partition, offset, record)

    def complete(self, effect: AppendTxnRecord, now_ms: int = T0):
        offset = len(self.log)
        self.log.append((effect.partition, offset, effect.record))
        return self.coordinator.on_write_complete(effect.write_id, offset, now_ms)

    def settle(self, outcome, now_ms: int = T0) -> TxnResult | None:
        """Complete every write and marker the outcome leads to; the first answer seen."""
        result = outcome.result
        queue = list(outcome.effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, AppendTxnRecord):
                out = self.complete(effect, now_ms)
                result = result or out.result
                queue.extend(out.effects)
            else:
                queue.extend(self.coordinator.on_markers_written(effect.transactional_id, effect.partitions, now_ms))
        return result

    def init(self, tid: str = TID, timeout_ms: int = 60_000, expected=None, now_ms: int = T0) -> TxnResult:
        return self.settle(self.coordinator.handle_init_producer_id(tid, timeout_ms, expected, now_ms), now_ms)

    def replayed(self) -> TransactionCoordinator:
        fresh = TransactionCoordinator(lambda: 0, num_partitions=4, **self.config)
        for p in range(4):
            fresh.begin_loading(p)
        for partition, offset, record in self.log:
            fresh.replay(partition, offset, record)
        return fresh


def test_init_producer_id_for_a_new_transactional_id_writes_empty_at_epoch_zero():
    h = Harness()
    outcome = h.coordinator.handle_init_producer_id(TID, 60_000, None, T0)
    assert outcome.result is None
    (write,) = outcome.effects
    assert write.partition == h.coordinator.partition_for(TID)
    assert write.record.value.transaction_status == S.EMPTY.id
    assert h.coordinator.metadata(TID) is None  # not durable yet
    assert h.coordinator.handle_init_producer_id(TID, 60_000, None, T0).result.error is E.concurrent_transactions
    assert h.complete(write).result == TxnResult(E.none, 1000, 0)
    assert h.coordinator.metadata(TID).state is S.EMPTY


def test_a_second_init_bumps_the_epoch_and_fences_the_first_producer():
    h = Harness()
    first = h.init()
    second = h.init()
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    zombie = h.coordinator.handle_add_partitions(TID, first.producer_id, first.producer_epoch, [("t", 0)], T0)
    assert zombie.result.error is E.producer_fenced
    assert error_for_version("AddPartitionsToTxn", 1, zombie.result.error) is E.invalid_producer_epoch
    assert error_for_version("AddPartitionsToTxn", 2, zombie.result.error) is E.producer_fenced
    assert error_for_version("InitProducerId", 3, E.producer_fenced) is E.invalid_producer_epoch


def test_init_with_an_unknown_expected_producer_id_is_fenced():
    h = Harness()
    h.init()
    assert h.coordinator.handle_init_producer_id(TID, 60_000, (5, 0), T0).result.error is E.producer_fenced


def test_init_retry_with_the_previous_epoch_returns_the_current_one_without_a_bump():
    """prepareIncrementProducerEpoch: the expected epoch is the last epoch (KIP-360 retry)."""
    h = Harness()
    first = h.init()
    bumped = h.init(expected=(first.producer_id, first.producer_epoch))
    assert bumped.producer_epoch == first.producer_epoch + 1
    retry = h.init(expected=(first.producer_id, first.producer_epoch))
    assert retry.producer_epoch == bumped.producer_epoch
    # and across a restart, since the last epoch is persisted
    again = h.replayed()
    assert again.metadata(TID).last_producer_epoch == first.producer_epoch


def test_invalid_timeout_and_empty_id_are_refused():
    h = Harness(transaction_max_timeout_ms=1000)
    assert h.coordinator.handle_init_producer_id(TID, 1001, None, T0).result.error is E.invalid_transaction_timeout
    assert h.coordinator.handle_init_producer_id(TID, 0, None, T0).result.error is E.invalid_transaction_timeout
    assert h.coordinator.handle_init_producer_id("", 10, None, T0).result.error is E.invalid_request


def _begin(h: Harness, partitions=(("t", 0), ("t", 1)), tv: int = 0, now_ms: int = T0) -> TxnResult:
    pid = h.init(now_ms=now_ms)
    added = h.settle(h.coordinator.handle_add_partitions(TID, pid.producer_id, pid.producer_epoch, partitions,
                                                         now_ms, tv), now_ms)
    assert added.error is E.none and {tp for tp, _ in added.partition_errors} == set(partitions)
    return pid


def test_add_partitions_starts_a_transaction_and_a_known_partition_writes_nothing():
    h = Harness()
    pid = _begin(h)
    meta = h.coordinator.metadata(TID)
    assert (meta.state, meta.topic_partitions, meta.txn_start_timestamp_ms) == (S.ONGOING, {("t", 0), ("t", 1)}, T0)
    again = h.coordinator.handle_add_partitions(TID, pid.producer_id, pid.producer_epoch, [("t", 1)], T0 + 5)
    assert again.effects == () and again.result.error is E.none
    unknown = h.coordinator.handle_add_partitions("other", pid.producer_id, 0, [("t", 1)], T0)
    assert unknown.result.error is E.invalid_producer_id_mapping


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    h = Harness(offsets_num_partitions=50)
    pid = h.init()
    h.settle(h.coordinator.handle_add_offsets(TID, pid.producer_id, pid.producer_epoch, "g1", T0))
    assert h.coordinator.metadata(TID).topic_partitions == {("__consumer_offsets", group_partition("g1", 50))}


def test_verify_only_path_answers_per_partition_and_never_writes():
    """handleVerifyPartitionsInTransaction (KIP-890 part 1)."""
    h = Harness()
    pid = _begin(h, partitions=(("t", 0),))
    out = h.coordinator.handle_verify_partitions(TID, pid.producer_id, pid.producer_epoch, [("t", 0), ("t", 9)])
    assert out.effects == ()
    assert dict(out.result.partition_errors) == {("t", 0): E.none, ("t", 9): E.transaction_abortable}
    stale = h.coordinator.handle_verify_partitions(TID, pid.producer_id, pid.producer_epoch - 1, [("t", 0)])
    assert dict(stale.result.partition_errors) == {("t", 0): E.producer_fenced}


def test_commit_tv1_writes_prepare_then_markers_then_complete():
    h = Harness()
    pid = _begin(h)
    out = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 0, T0 + 10)
    (prepare,) = out.effects
    assert prepare.record.value.transaction_status == S.PREPARE_COMMIT.id
    done = h.complete(prepare, T0 + 11)
    assert done.result == TxnResult(E.none)  # TV1 answers no producer id/epoch
    (markers,) = done.effects
    assert markers == WriteTxnMarkers(TID, pid.producer_id, pid.producer_epoch, True, (("t", 0), ("t", 1)), 0)
    assert h.coordinator.metadata(TID).state is S.PREPARE_COMMIT
    retry = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 0, T0 + 12)
    assert retry.result.error is E.concurrent_transactions
    assert h.coordinator.on_markers_written(TID, [("t", 0)], T0 + 13) == ()
    (complete,) = h.coordinator.on_markers_written(TID, [("t", 1)], T0 + 14)
    assert h.complete(complete).result is None
    meta = h.coordinator.metadata(TID)
    assert (meta.state, meta.topic_partitions, meta.producer_epoch) == (S.COMPLETE_COMMIT, frozenset(), 1 - 1)
    again = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 0, T0 + 20)
    assert again.result.error is E.none and again.effects == ()
    wrong = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, False, 0, T0 + 20)
    assert wrong.result.error is E.invalid_txn_state


def test_commit_tv2_bumps_the_epoch_and_answers_it_and_a_retry_is_recognised():
    h = Harness()
    pid = _begin(h, tv=2)
    result = h.settle(h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 2, T0 + 10))
    assert result == TxnResult(E.none, pid.producer_id, pid.producer_epoch + 1)
    meta = h.coordinator.metadata(TID)
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (S.COMPLETE_COMMIT, pid.producer_epoch + 1,
                                                                          pid.producer_epoch)
    retry = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 2, T0 + 11)
    assert retry.result == TxnResult(E.none, pid.producer_id, pid.producer_epoch + 1) and retry.effects == ()
    retry_abort = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, False, 2, T0 + 11)
    assert retry_abort.result.error is E.invalid_txn_state
    older = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch - 1, True, 2, T0 + 11)
    assert older.result.error is E.producer_fenced


def test_tv2_abort_of_an_empty_transaction_bumps_the_epoch_with_no_markers():
    h = Harness()
    pid = h.init()
    out = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, False, 2, T0 + 5)
    (prepare,) = out.effects
    done = h.complete(prepare)
    assert done.result == TxnResult(E.none, pid.producer_id, pid.producer_epoch + 1)
    (complete,) = done.effects  # no partition: straight to CompleteAbort
    assert isinstance(complete, AppendTxnRecord)
    h.complete(complete)
    assert h.coordinator.metadata(TID).state is S.COMPLETE_ABORT
    assert h.coordinator.metadata(TID).txn_start_timestamp_ms == T0 + 5  # noPartitionAdded: start = now


def test_tv2_exhausted_epoch_rotates_the_producer_id_at_completion():
    h = Harness()
    pid = _begin(h, tv=2)
    meta = h.coordinator.metadata(TID)
    exhausted = TxnMetadata(TID, pid.producer_id, 32766, S.ONGOING, 60_000, meta.topic_partitions, T0, T0,
                            client_transaction_version=2)
    h.coordinator.replay(h.coordinator.partition_for(TID), 99, TransactionLogRecord(TID, exhausted.to_value()))
    result = h.settle(h.coordinator.handle_end_txn(TID, pid.producer_id, 32766, True, 2, T0 + 1))
    meta = h.coordinator.metadata(TID)
    assert (meta.state, meta.producer_epoch, meta.previous_producer_id) == (S.COMPLETE_COMMIT, 0, pid.producer_id)
    assert meta.producer_id != pid.producer_id and result == TxnResult(E.none, meta.producer_id, 0)
    retry = h.coordinator.handle_end_txn(TID, pid.producer_id, 32766, True, 2, T0 + 2)  # retryOnOverflow
    assert retry.result == TxnResult(E.none, meta.producer_id, 0)


def test_init_while_ongoing_fences_aborts_and_answers_concurrent_transactions():
    """prepareInitProducerIdTransit (Ongoing) + endTransaction's epoch-fence branch."""
    h = Harness(transaction_version_level=1)
    pid = _begin(h)
    out = h.coordinator.handle_init_producer_id(TID, 60_000, None, T0 + 1)
    (prepare,) = out.effects
    assert prepare.record.value.transaction_status == S.PREPARE_ABORT.id
    assert prepare.record.value.producer_epoch == pid.producer_epoch + 1
    done = h.complete(prepare)
    assert done.result.error is E.concurrent_transactions
    (markers,) = done.effects
    assert (markers.committed, markers.producer_epoch) == (False, pid.producer_epoch + 1)
    zombie = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 0, T0 + 2)
    assert zombie.result.error is E.producer_fenced
    h.settle(type(out)(None, done.effects))
    retried = h.init(now_ms=T0 + 3)
    assert retried.producer_epoch == pid.producer_epoch + 2


def test_fence_with_server_tv2_bumps_twice():
    h = Harness(transaction_version_level=2)
    pid = _begin(h)
    (prepare,) = h.coordinator.handle_init_producer_id(TID, 60_000, None, T0 + 1).effects
    assert prepare.record.value.producer_epoch == pid.producer_epoch + 2


def test_a_failed_write_answers_the_mapped_error_and_leaves_the_state():
    h = Harness()
    pid = h.init()
    out = h.coordinator.handle_add_partitions(TID, pid.producer_id, pid.producer_epoch, [("t", 0)], T0)
    failed = h.coordinator.on_write_failed(out.effects[0].write_id, E.not_enough_replicas, T0)
    assert dict(failed.result.partition_errors) == {("t", 0): E.coordinator_not_available}
    assert h.coordinator.metadata(TID).state is S.EMPTY and not h.coordinator.has_pending(TID)
    fence = h.coordinator.handle_init_producer_id(TID, 60_000, None, T0).effects[0]
    assert h.coordinator.on_write_failed(fence.write_id, E.not_leader_or_follower, T0).result.error is E.not_coordinator
    with pytest.raises(KeyError):
        h.coordinator.on_write_complete(fence.write_id, 0, T0)


def test_a_failed_complete_write_is_written_again():
    h = Harness()
    pid = _begin(h, partitions=(("t", 0),))
    prepare = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, False, 0, T0).effects[0]
    (markers,) = h.complete(prepare).effects
    (complete,) = h.coordinator.on_markers_written(TID, markers.partitions, T0)
    (again,) = h.coordinator.on_write_failed(complete.write_id, E.request_timed_out, T0).effects
    assert again.record == complete.record and again.write_id != complete.write_id
    h.complete(again)
    assert h.coordinator.metadata(TID).state is S.COMPLETE_ABORT


def test_timed_out_transaction_is_fenced_and_aborted():
    h = Harness(transaction_version_level=1)
    pid = _begin(h, now_ms=T0)
    assert h.coordinator.abort_timed_out_transactions(T0 + 60_000) == ()  # not past start + timeout yet
    (prepare,) = h.coordinator.abort_timed_out_transactions(T0 + 60_001)
    assert h.coordinator.abort_timed_out_transactions(T0 + 60_002) == ()  # a write is in flight
    done = h.complete(prepare)
    assert done.result is None
    h.settle(type(done)(None, done.effects))
    meta = h.coordinator.metadata(TID)
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, pid.producer_epoch + 1)


def test_idle_transactional_id_expires_with_a_tombstone():
    h = Harness(transactional_id_expiration_ms=1000)
    h.init(now_ms=T0)
    assert h.coordinator.expire_transactional_ids(T0 + 999) == ()
    (tombstone,) = h.coordinator.expire_transactional_ids(T0 + 1000)
    assert tombstone.record.value is None
    h.complete(tombstone)
    assert h.coordinator.metadata(TID) is None
    assert h.coordinator.describe_transaction(TID).error is E.transactional_id_not_found


def test_describe_and_list_transactions():
    h = Harness()
    pid = _begin(h, now_ms=T0)
    h.init("other", now_ms=T0)
    described = h.coordinator.describe_transaction(TID)
    assert (described.state, described.producer_id, described.topics) == ("Ongoing", pid.producer_id,
                                                                           (("t", (0, 1)),))
    listed = h.coordinator.list_transactions(states=["Ongoing", "Bogus"])
    assert listed.transaction_states == ((TID, pid.producer_id, "Ongoing"),)
    assert listed.unknown_state_filters == ("Bogus",)
    assert len(h.coordinator.list_transactions().transaction_states) == 2
    # KIP-994: running longer than the filter (an Empty id has start -1: always "longer", as in Kafka)
    assert h.coordinator.list_transactions(duration_filter_ms=10, now_ms=T0 + 10).transaction_states == (
        ("other", pid.producer_id + 1, "Empty"),)
    assert len(h.coordinator.list_transactions(duration_filter_ms=10, now_ms=T0 + 11).transaction_states) == 2


def test_loading_answers_load_in_progress_and_resumes_markers_of_prepared_transactions():
    h = Harness()
    pid = _begin(h)
    prepare = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, True, 0, T0).effects[0]
    h.complete(prepare)  # markers asked for, never written: the broker stops here
    fresh = h.replayed()
    assert fresh.handle_init_producer_id(TID, 60_000, None, T0).result.error is E.coordinator_load_in_progress
    assert TransactionCoordinator(lambda: 0, num_partitions=4).describe_transaction(TID).error is E.not_coordinator
    effects = ()
    for p in range(4):
        effects += fresh.finish_loading(p, T0 + 5)
    (markers,) = effects
    assert markers.committed and markers.partitions == (("t", 0), ("t", 1))
    (complete,) = fresh.on_markers_written(TID, markers.partitions, T0 + 6)
    assert complete.record.value.transaction_status == S.COMPLETE_COMMIT.id


def test_replaying_the_log_rebuilds_the_same_state():
    h = Harness()
    pid = _begin(h, tv=2)
    h.settle(h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, False, 2, T0 + 3))
    h.init("b")
    assert h.replayed().durable_state() == h.coordinator.durable_state()


# ----------------------------------------------------------------------------- the table


def test_every_target_of_the_table_is_a_valid_transition_in_kafka():
    for (state, _input), outcome in TRANSITIONS.items():
        if isinstance(outcome, Go):
            assert state in VALID_PREVIOUS_STATES[outcome.target], (state, _input, outcome)


def test_the_table_has_every_resting_state_and_input():
    assert set(TRANSITIONS) == {(s, i) for s in RESTING_STATES for i in Input}


def _at_rest(state: TransactionState, tv: int = 0) -> tuple[Harness, int, int]:
    """A harness whose TID is in `state`, reached by requests (producer id, epoch returned)."""
    h = Harness(transaction_version_level=tv)
    pid = h.init()
    if state is S.EMPTY:
        return h, pid.producer_id, pid.producer_epoch
    h.settle(h.coordinator.handle_add_partitions(TID, pid.producer_id, pid.producer_epoch, [("t", 0)], T0, tv))
    if state is S.ONGOING:
        return h, pid.producer_id, pid.producer_epoch
    committed = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    prepare = h.coordinator.handle_end_txn(TID, pid.producer_id, pid.producer_epoch, committed, tv, T0).effects[0]
    done = h.complete(prepare)
    if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        h.settle(type(done)(None, done.effects))
    meta = h.coordinator.metadata(TID)
    assert meta.state is state
    return h, meta.producer_id, meta.producer_epoch


_REQUESTS = {Input.INIT_PRODUCER_ID, Input.ADD_PARTITIONS, Input.VERIFY_PARTITIONS, Input.COMMIT_V1, Input.ABORT_V1,
             Input.COMMIT_V2, Input.ABORT_V2, Input.COMMIT_V2_RETRY, Input.ABORT_V2_RETRY}


def _drive(h: Harness, pid: int, epoch: int, inp: Input):
    c = h.coordinator
    if inp is Input.INIT_PRODUCER_ID:
        return c.handle_init_producer_id(TID, 60_000, None, T0 + 1)
    if inp is Input.ADD_PARTITIONS:
        return c.handle_add_partitions(TID, pid, epoch, [("t", 5)], T0 + 1)
    if inp is Input.VERIFY_PARTITIONS:
        return c.handle_verify_partitions(TID, pid, epoch, [("t", 0)])
    if inp in (Input.COMMIT_V1, Input.ABORT_V1):
        return c.handle_end_txn(TID, pid, epoch, inp is Input.COMMIT_V1, 0, T0 + 1)
    if inp in (Input.COMMIT_V2, Input.ABORT_V2):
        return c.handle_end_txn(TID, pid, epoch, inp is Input.COMMIT_V2, 2, T0 + 1)
    if inp in (Input.COMMIT_V2_RETRY, Input.ABORT_V2_RETRY):
        return c.handle_end_txn(TID, pid, epoch - 1, inp is Input.COMMIT_V2_RETRY, 2, T0 + 1)
    if inp is Input.MARKERS_WRITTEN:
        return c.on_markers_written(TID, [("t", 0)], T0 + 1)
    if inp is Input.TXN_TIMED_OUT:
        return c.abort_timed_out_transactions(T0 + 10**9)
    return c.expire_transactional_ids(T0 + 10**12)


@pytest.mark.parametrize("state", RESTING_STATES, ids=lambda s: s.state_name)
@pytest.mark.parametrize("inp", list(Input), ids=lambda i: i.name)
def test_every_state_and_input_pair_does_what_the_table_says(state, inp):
    """Each resting state, reached by requests (TV2 where the retry inputs need a bumped epoch),
    meets each input with valid producer id and epoch: the table's outcome, except that a request
    meeting a write in flight (PrepareCommit/PrepareAbort always have their markers in flight, as
    in Kafka) is answered CONCURRENT_TRANSACTIONS, and the epoch checks before the table fence a
    TV2 EndTxn whose epoch cannot be valid in that state."""
    tv = 2 if inp in (Input.COMMIT_V2_RETRY, Input.ABORT_V2_RETRY) else 0
    h, pid, epoch = _at_rest(state, tv)
    expected = TRANSITIONS[(state, inp)]
    pending = h.coordinator.has_pending(TID)
    before = h.coordinator.metadata(TID)
    out = _drive(h, pid, epoch, inp)
    if inp in _REQUESTS:
        # the epoch checks come first: a retry epoch is fenced where the epoch was not bumped, and in
        # PrepareCommit/PrepareAbort only a retry epoch passes with TV2 (endTransaction's isValidEpoch)
        fenced = ((tv == 2 and state in (S.EMPTY, S.ONGOING))
                  or (inp in (Input.COMMIT_V2, Input.ABORT_V2) and state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)))
        if fenced:
            assert out.result.error is E.producer_fenced
        elif pending:
            assert state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
            assert out.result.error is E.concurrent_transactions and out.effects == ()
        elif isinstance(expected, Answer):
            assert out.effects == ()
            errors = {e for _, e in out.result.partition_errors} or {out.result.error}
            if inp is Input.VERIFY_PARTITIONS and expected.error is E.none:
                assert dict(out.result.partition_errors) == {("t", 0): E.none if state is S.ONGOING
                                                             else E.transaction_abortable}
            else:
                assert errors == {expected.error}
        else:
            (write,) = out.effects
            assert write.record.value.transaction_status == expected.target.id
    else:
        writes = [e for e in out if isinstance(e, AppendTxnRecord)]
        if expected is IGNORE:
            assert writes == []
        else:
            (write,) = writes
            status = None if write.record.value is None else write.record.value.transaction_status
            assert status == (None if expected.target is S.DEAD else expected.target.id)
    assert h.coordinator.metadata(TID) == before  # nothing changes until a record is durable
