"""Transactions with confluent-kafka's transactional Producer against a real broker (issue 31):
the transaction coordinator's side (Kafka's TransactionCoordinator, TransactionStateManager,
KafkaApis' transaction handlers; OffsetMetadataManager for transactional offsets).

With the log side's control batches (txn_markers.write_txn_markers), a transaction ends with its
markers: committed offsets and records appear, aborted ones are dropped, and the coordinator
reaches CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import errno
import struct
import time

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition as TP
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

from cli.helpers import cli
from support import BrokerProcess, RawClient, wait_until

from quafka import EmbeddedBroker
from quafka.client import Admin
from quafka.protocol.errors import ErrorCode
from quafka.protocol.partition_placement import group_partition
from quafka.protocol.record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, build_batch, read_header

CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 2,
          "share.coordinator.state.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100}


def producer(bootstrap: str, txn_id: str, **extra) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                     "transaction.timeout.ms": 60000, "socket.timeout.ms": 5000, **extra})


def consumer(bootstrap: str, group: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "enable.auto.commit": False})


def stable_fetch(bootstrap: str, group: str, topic: str, partition: int) -> tuple[int, int]:
    """OffsetFetch v7 with RequireStable: (committed offset, partition error)."""
    with RawClient(bootstrap) as raw:
        resp = raw.request(OffsetFetchRequest(group_id=group, require_stable=True, topics=(
            OffsetFetchRequestTopic(name=topic, partition_indexes=(partition,)),)))
    p = resp.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def state_of(broker: EmbeddedBroker, txn_id: str) -> str | None:
    meta = broker.server.transactions.coordinator.metadata(txn_id)
    return None if meta is None else meta.state.state_name


@pytest.fixture
def txn_broker(tmp_path):
    with EmbeddedBroker(data_dir=str(tmp_path / "data"), config=CONFIG) as b:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            admin.create_topics({"in": (1, 1)})
        yield b


def test_init_fence_offsets_describe_list_and_restart(tmp_path):
    """InitProducerId (TransactionCoordinator.handleInitProducerId) gives each producer of a
    transactional id the next epoch, fencing the one before (its next request gets
    PRODUCER_FENCED: fatal in librdkafka); AddOffsetsToTxn + TxnOffsetCommit leave the offset
    pending (OffsetFetch RequireStable: UNSTABLE_OFFSET_COMMIT, OffsetMetadataManager.fetchOffsets);
    DescribeTransactions/ListTransactions (Admin and `quafka transactions`) show the ongoing
    transaction; a restart replays __transaction_state and the pending offset."""
    data = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        bs = b.bootstrap_servers
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.create_topics({"in": (1, 1)})
        first = producer(bs, "orders")
        first.init_transactions(10)
        zombie_id = b.server.transactions.coordinator.metadata("orders")
        second = producer(bs, "orders")
        second.init_transactions(10)
        meta = b.server.transactions.coordinator.metadata("orders")
        assert (meta.producer_id, meta.producer_epoch) == (zombie_id.producer_id, zombie_id.producer_epoch + 1)
        group = consumer(bs, "g1")
        first.begin_transaction()
        with pytest.raises(confluent_kafka.KafkaException) as fenced:
            first.send_offsets_to_transaction([TP("in", 0, 7)], group.consumer_group_metadata(), 10)
        assert fenced.value.args[0].fatal() and fenced.value.args[0].code() == confluent_kafka.KafkaError._FENCED
        second.begin_transaction()
        second.send_offsets_to_transaction([TP("in", 0, 5)], group.consumer_group_metadata(), 10)
        ongoing = b.server.transactions.coordinator.metadata("orders")
        offsets_tp = ("__consumer_offsets", group_partition("g1", 2))
        assert (ongoing.state.state_name, ongoing.topic_partitions) == ("Ongoing", {offsets_tp})
        assert stable_fetch(bs, "g1", "in", 0) == (-1, ErrorCode.unstable_offset_commit)
        with Admin({"bootstrap.servers": bs}) as admin:
            d = admin.describe_transactions(["orders"])["orders"]
            assert (d.state, d.producer_epoch, d.transaction_timeout_ms) == ("Ongoing", meta.producer_epoch, 60000)
            assert d.topic_partitions == (offsets_tp,)
            assert d.transaction_start_time_ms is not None
            assert [(t.transactional_id, t.state) for t in admin.list_transactions()] == [("orders", "Ongoing")]
            assert admin.list_transactions(states=["Empty"]) == []
            assert admin.list_transactions(duration_ms=3_600_000) == []
            assert [t.transactional_id for t in admin.list_transactions(transactional_id_pattern="ord.*")] == ["orders"]
            assert admin.list_transactions(transactional_id_pattern="x.*") == []
        del first, second, group
    with EmbeddedBroker(data_dir=data, config=CONFIG) as again:
        assert again.server.transactions.coordinator.metadata("orders") == ongoing
        assert stable_fetch(again.bootstrap_servers, "g1", "in", 0) == (-1, ErrorCode.unstable_offset_commit)


def test_cli_list_and_describe(capsys, txn_broker):
    bs = txn_broker.bootstrap_servers
    p = producer(bs, "cli-txn")
    p.init_transactions(10)
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "list")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert lines[1].split()[::3] == ["cli-txn", "Empty"]
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "describe", "--transactional-id", "cli-txn")
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header.split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    assert row.split()[1] == "cli-txn" and row.split()[4] == "Empty"
    code, _out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "describe", "--transactional-id", "nope")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err.upper().replace(" ", "_")
    code, _out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "find-hanging")
    assert code == 1 and "needs --broker-id or --topic" in err


def test_timeouts_and_coordinator_key_types(txn_broker):
    """transaction.max.timeout.ms: a longer transaction.timeout.ms gets INVALID_TRANSACTION_TIMEOUT
    (fatal in librdkafka); a transaction past its timeout is aborted by the broker
    (TransactionCoordinator.abortTimedOutTransactions, every
    transaction.abort.timed.out.transaction.cleanup.interval.ms) with the producer fenced; a
    coordinator key type quafka cannot serve gets INVALID_REQUEST at once, a transaction key this
    node."""
    bs = txn_broker.bootstrap_servers
    too_long = producer(bs, "too-long", **{"transaction.timeout.ms": 900_001})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        too_long.init_transactions(10)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT
    slow = producer(bs, "slow", **{"transaction.timeout.ms": 1000, "socket.timeout.ms": 1000})
    slow.init_transactions(10)
    slow.begin_transaction()
    slow.send_offsets_to_transaction([TP("in", 0, 3)], consumer(bs, "g2").consumer_group_metadata(), 10)
    epoch = txn_broker.server.transactions.coordinator.metadata("slow").producer_epoch
    wait_until(lambda: state_of(txn_broker, "slow") == "CompleteAbort", 10, message="the timed-out transaction aborted")
    assert txn_broker.server.transactions.coordinator.metadata("slow").producer_epoch > epoch  # fenced
    assert stable_fetch(bs, "g2", "in", 0) == (-1, ErrorCode.none)  # its offset dropped with the ABORT marker
    with RawClient(bs) as raw:
        resp = raw.request(FindCoordinatorRequest(key_type=1, coordinator_keys=("slow",)))
        assert resp.coordinators[0].error_code == ErrorCode.none
        assert resp.coordinators[0].node_id == txn_broker.server.state.node_id
        resp = raw.request(FindCoordinatorRequest(key_type=7, coordinator_keys=("x",)))
        assert resp.coordinators[0].error_code == ErrorCode.invalid_request


def test_sigkill_mid_transaction_is_replayed(tmp_path):
    """SIGKILL of the broker process while a transaction is ongoing: at the next start
    __transaction_state is replayed (TransactionStateManager.loadTransactionsForTxnTopicPartition)
    and the producer's transaction is still there, its pending offset still pending."""
    data = str(tmp_path / "data")
    overrides = {k: str(v) for k, v in CONFIG.items()}
    b = BrokerProcess(data, overrides=overrides).start()
    try:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            admin.create_topics({"in": (1, 1)})
        p = producer(b.bootstrap_servers, "crash")
        p.init_transactions(10)
        p.begin_transaction()
        p.send_offsets_to_transaction([TP("in", 0, 9)], consumer(b.bootstrap_servers, "g3").consumer_group_metadata(), 10)
        b.kill()
        b = BrokerProcess(data, port=b.port, overrides=overrides).start()
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            d = wait_until(lambda: admin.describe_transactions(["crash"]).get("crash"), 10)
            assert d.state == "Ongoing" and d.topic_partitions[0][0] == "__consumer_offsets"
        assert stable_fetch(b.bootstrap_servers, "g3", "in", 0) == (-1, ErrorCode.unstable_offset_commit)
    finally:
        b.ensure_stopped()


def control_batch(producer_id: int, producer_epoch: int, committed: bool) -> bytearray:
    """A COMMIT/ABORT control batch as Kafka writes it (EndTransactionMarker: key version 0 and
    the control type, value version 0 and the coordinator epoch)."""
    key = struct.pack(">hh", 0, 1 if committed else 0)
    value = struct.pack(">hi", 0, 0)
    return bytearray(build_batch([(key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                                 attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG))


def test_transactional_offsets_settle_on_their_markers_when_replayed(tmp_path):
    """__consumer_offsets replay understands transactional batches and control batches
    (CoordinatorLoaderImpl; OffsetMetadataManager.replayEndTransactionMarker): the offsets of a
    producer whose COMMIT marker follows them are committed, those whose ABORT marker follows are
    dropped, and a producer with no marker yet keeps them pending."""
    data = str(tmp_path / "data")
    config = {**CONFIG, "offsets.topic.num.partitions": 1}
    with EmbeddedBroker(data_dir=data, config=config) as b:
        bs = b.bootstrap_servers
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.create_topics({"in": (1, 1)})
        ids = {}
        for txn_id, group, offset in (("commits", "gc", 5), ("aborts", "ga", 6), ("open", "go", 7)):
            p = producer(bs, txn_id)
            p.init_transactions(10)
            p.begin_transaction()
            p.send_offsets_to_transaction([TP("in", 0, offset)], consumer(bs, group).consumer_group_metadata(), 10)
            meta = b.server.transactions.coordinator.metadata(txn_id)
            ids[txn_id] = (meta.producer_id, meta.producer_epoch)
        for group in ("gc", "ga", "go"):
            assert stable_fetch(bs, group, "in", 0) == (-1, ErrorCode.unstable_offset_commit)
        plog = b.server.state.topics["__consumer_offsets"].partitions[0].log

        def write_markers():
            for txn_id, committed in (("commits", True), ("aborts", False)):
                buf = control_batch(*ids[txn_id], committed)
                plog.append(buf, [(0, read_header(buf))], 0)
        b.call(write_markers)
    with EmbeddedBroker(data_dir=data, config=config) as again:
        bs = again.bootstrap_servers
        assert stable_fetch(bs, "gc", "in", 0) == (5, ErrorCode.none)
        assert stable_fetch(bs, "ga", "in", 0) == (-1, ErrorCode.none)
        assert stable_fetch(bs, "go", "in", 0) == (-1, ErrorCode.unstable_offset_commit)


def test_kafka_python_and_aiokafka_transactional_producers(txn_broker):
    """kafka-python 3.x and aiokafka 0.14: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit and
    EndTxn as those clients send them (aiokafka commits, kafka-python aborts)."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTP
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition as KafkaTP

    bs = txn_broker.bootstrap_servers

    async def aiokafka_commits():
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio")
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_offsets_to_transaction({AioTP("in", 0): 4}, "g-aio")
            assert stable_fetch(bs, "g-aio", "in", 0) == (-1, ErrorCode.unstable_offset_commit)
            await p.commit_transaction()
        finally:
            await p.stop()
    asyncio.run(aiokafka_commits())
    wait_until(lambda: state_of(txn_broker, "aio") == "CompleteCommit", 10, message="aiokafka's commit")
    assert stable_fetch(bs, "g-aio", "in", 0) == (4, ErrorCode.none)
    kp = KafkaProducer(bootstrap_servers=bs, transactional_id="kp")
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send_offsets_to_transaction({KafkaTP("in", 0): OffsetAndMetadata(3, "", -1)}, "g-kp")
        assert state_of(txn_broker, "kp") == "Ongoing"
        kp.abort_transaction()
    finally:
        kp.close(1)
    wait_until(lambda: state_of(txn_broker, "kp") == "CompleteAbort", 10, message="kafka-python's abort")
    assert stable_fetch(bs, "g-kp", "in", 0) == (-1, ErrorCode.none)


def test_commit_and_abort_write_markers_end_to_end(txn_broker, capsys):
    """EndTxn with markers (TransactionCoordinator.handleEndTransaction, then
    TransactionMarkerChannelManager): the records and the offsets of a committed transaction are
    visible to read_committed readers and the group, those of an aborted one are not; the
    coordinator reaches CompleteCommit/CompleteAbort. `quafka transactions abort` writes an ABORT
    marker through WriteTxnMarkers."""
    bs = txn_broker.bootstrap_servers
    p = producer(bs, "e2e")
    p.init_transactions(10)
    group = consumer(bs, "g-e2e")
    p.begin_transaction()
    for i in range(3):
        p.produce("in", value=b"committed-%d" % i, partition=0)
    p.send_offsets_to_transaction([TP("in", 0, 10)], group.consumer_group_metadata(), 10)
    p.commit_transaction(10)
    wait_until(lambda: state_of(txn_broker, "e2e") == "CompleteCommit", 10, message="CompleteCommit")
    assert stable_fetch(bs, "g-e2e", "in", 0) == (10, ErrorCode.none)
    p.begin_transaction()
    for i in range(2):
        p.produce("in", value=b"aborted-%d" % i, partition=0)
    p.send_offsets_to_transaction([TP("in", 0, 20)], group.consumer_group_metadata(), 10)
    p.abort_transaction(10)
    wait_until(lambda: state_of(txn_broker, "e2e") == "CompleteAbort", 10, message="CompleteAbort")
    assert stable_fetch(bs, "g-e2e", "in", 0) == (10, ErrorCode.none)
    reader = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "reader", "isolation.level": "read_committed",
                                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.assign([TP("in", 0, 0)])
    values = []
    deadline = time.monotonic() + 10
    while len(values) < 3 and time.monotonic() < deadline:
        m = reader.poll(0.2)
        if m is not None and m.error() is None:
            values.append(m.value())
    assert values == [b"committed-0", b"committed-1", b"committed-2"]
    assert reader.poll(0.5) is None  # the aborted records are never delivered
    reader.close()
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "abort", "--topic", "in", "--partition", "0",
                         "--producer-id", "999999", "--producer-epoch", "0", "--coordinator-epoch", "0")
    assert code == 0, err
    assert "Aborted" in out


def test_find_hanging_and_abort_a_hanging_transaction(txn_broker, capsys):
    """A transaction open on a partition that no coordinator knows (written below the produce
    path's verification, as a lost coordinator would leave it): `quafka transactions
    find-hanging` lists it (DescribeProducers, then ListTransactions and DescribeTransactions:
    TransactionsCommand.FindHangingTransactionsCommand) and `abort --start-offset` closes it with an
    ABORT marker (WriteTxnMarkers), after which it is no longer listed and the LSO moves on."""
    from quafka.broker.server.handlers.produce import produce_to_partition

    bs = txn_broker.bootstrap_servers
    topic = txn_broker.server.state.topics["in"]
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    batch = build_batch([(None, b"hanging")], producer_id=777_777, producer_epoch=3, base_sequence=0,
                        base_timestamp=two_hours_ago, attributes=TRANSACTIONAL_FLAG)
    result = txn_broker.call(lambda: produce_to_partition(topic, topic.partitions[0], batch, two_hours_ago, 9,
                                                          transactional_id="lost"))
    assert result.error_code == 0
    start = result.base_offset
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "find-hanging", "--topic", "in",
                         "--max-transaction-timeout", "1")
    assert code == 0, err
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[0][:6] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset"]
    assert [r[:6] for r in rows[1:]] == [["in", "0", "777777", "3", "-1", str(start)]]
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "abort", "--topic", "in", "--partition", "0",
                         "--start-offset", str(start))
    assert code == 0 and "777777" in out, err
    code, out, err = cli(capsys, "transactions", "--bootstrap-server", bs, "find-hanging", "--broker-id",
                         str(txn_broker.server.state.node_id), "--max-transaction-timeout", "1")
    assert code == 0 and len(out.strip().splitlines()) == 1, out  # the header alone
    assert topic.partitions[0].last_stable_offset == topic.partitions[0].log.log_end_offset


def test_verify_produce_answers_as_the_produce_path_does(txn_broker):
    """`server.transactions.verify_produce`, the produce path's KIP-890 question
    (TransactionCoordinator.handleVerifyPartitionsInTransaction; errors as
    AddPartitionsToTxnManager hands them to the produce path): a partition outside the
    transaction is INVALID_TXN_STATE for a transaction version 1 client and added to the
    transaction for a version 2 one; a stale epoch is INVALID_PRODUCER_EPOCH."""
    import asyncio

    p = producer(txn_broker.bootstrap_servers, "verified")
    p.init_transactions(10)
    meta = txn_broker.server.transactions.coordinator.metadata("verified")

    def verify(epoch, tv=None):
        coro = txn_broker.server.transactions.verify_produce("verified", meta.producer_id, epoch, [("in", 0)], tv)
        return asyncio.run_coroutine_threadsafe(coro, txn_broker._loop).result(10)[("in", 0)]
    assert verify(meta.producer_epoch) == ErrorCode.invalid_txn_state
    assert verify(meta.producer_epoch - 1) == ErrorCode.invalid_producer_epoch
    assert verify(meta.producer_epoch, 2) == ErrorCode.none
    after = txn_broker.server.transactions.coordinator.metadata("verified")
    assert (after.state.state_name, after.topic_partitions) == ("Ongoing", {("in", 0)})
    assert verify(meta.producer_epoch) == ErrorCode.none  # now in the transaction


def test_transaction_version_2_on_the_wire(txn_broker):
    """KIP-890 part 2 as a Kafka 4.x client speaks it: Produce v12 adds the partition to the
    transaction implicitly (no AddPartitionsToTxn), EndTxn v5 answers the bumped epoch, and the
    COMMIT marker makes the records stable; a batch at the old epoch is then refused."""
    from support.acl_fixtures import kreq

    bs = txn_broker.bootstrap_servers
    with RawClient(bs) as raw:
        init = raw.request(kreq(22, 5, transactional_id="tv2", transaction_timeout=60000, producer_id=-1,
                                producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch

        def produce(sequence: int, at_epoch: int):
            batch = build_batch([(None, b"tv2-%d" % sequence)], producer_id=pid, producer_epoch=at_epoch,
                                base_sequence=sequence, attributes=TRANSACTIONAL_FLAG)
            resp = raw.request(kreq(0, 12, transactional_id="tv2", acks=-1, timeout=10000, topic_data=[
                {"name": "in", "partition_data": [{"index": 0, "records": batch}]}]))
            return resp.responses[0].partition_responses[0].error_code
        assert produce(0, epoch) == ErrorCode.none
        meta = txn_broker.server.transactions.coordinator.metadata("tv2")
        assert (meta.state.state_name, meta.topic_partitions) == ("Ongoing", {("in", 0)})
        ended = raw.request(kreq(26, 5, transactional_id="tv2", producer_id=pid, producer_epoch=epoch, committed=True))
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        wait_until(lambda: state_of(txn_broker, "tv2") == "CompleteCommit", 10, message="CompleteCommit")
        part = txn_broker.server.state.topics["in"].partitions[0]
        assert part.last_stable_offset == part.log.log_end_offset
        assert produce(1, epoch) != ErrorCode.none  # the old epoch is fenced


def test_a_failed_transaction_log_append_changes_nothing(txn_broker):
    """Records are the truth: an append to __transaction_state that fails answers the request
    with the coordinator's mapping of the storage error (TransactionStateManager.appendTransactionToLog:
    KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, which clients retry) and leaves the coordinator as it
    was; the retry once the log takes appends again succeeds."""
    from support.acl_fixtures import kreq

    def init(txn_id):
        with RawClient(txn_broker.bootstrap_servers) as raw:
            return raw.request(kreq(22, 4, transactional_id=txn_id, transaction_timeout=60000, producer_id=-1,
                                    producer_epoch=-1)).error_code
    assert init("first") == ErrorCode.none  # __transaction_state exists now
    logs = [p.log for p in txn_broker.server.state.topics["__transaction_state"].partitions]

    def failing_append(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device (injected)")
    txn_broker.call(lambda: [setattr(plog, "append", failing_append) for plog in logs])
    try:
        assert init("second") == ErrorCode.not_coordinator
        assert txn_broker.server.transactions.coordinator.metadata("second") is None
        assert not txn_broker.server.transactions.coordinator.has_pending("second")
    finally:
        txn_broker.call(lambda: [plog.__dict__.pop("append", None) for plog in logs])
    assert init("second") == ErrorCode.none
    assert state_of(txn_broker, "second") == "Empty"


def test_markers_are_written_again_after_a_restart_in_prepare_commit(tmp_path):
    """A transaction whose COMMIT marker could not be written to one of its partitions stays in
    PrepareCommit (the marker retried with backoff); after a restart the coordinator finds it in
    PrepareCommit while loading and writes its markers again
    (TransactionStateManager.loadTransactionsForTxnTopicPartition), so it completes: the record
    becomes stable and the offset committed."""
    data = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        bs = b.bootstrap_servers
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.create_topics({"in": (1, 1)})
        p = producer(bs, "resumed")
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("in", value=b"resumed", partition=0)
        p.send_offsets_to_transaction([TP("in", 0, 11)], consumer(bs, "g-resumed").consumer_group_metadata(), 10)
        p.flush(10)
        plog = b.server.state.topics["in"].partitions[0].log

        def failing_append(*_args, **_kwargs):
            raise OSError(errno.EIO, "I/O error (injected)")
        b.call(setattr, plog, "append", failing_append)
        p.commit_transaction(10)  # answered once PrepareCommit is durable
        assert state_of(b, "resumed") == "PrepareCommit"
        wait_until(lambda: stable_fetch(bs, "g-resumed", "in", 0) == (11, ErrorCode.none), 10,
                   message="the marker on __consumer_offsets")  # that partition took its marker
        assert state_of(b, "resumed") == "PrepareCommit"  # "in" did not
        part = b.server.state.topics["in"].partitions[0]
        assert part.last_stable_offset < plog.log_end_offset
        # stopped with the marker still failing: the restart must write it
    with EmbeddedBroker(data_dir=data, config=CONFIG) as again:
        wait_until(lambda: state_of(again, "resumed") == "CompleteCommit", 10, message="markers resumed")
        part = again.server.state.topics["in"].partitions[0]
        assert part.last_stable_offset == part.log.log_end_offset
        assert stable_fetch(again.bootstrap_servers, "g-resumed", "in", 0) == (11, ErrorCode.none)
