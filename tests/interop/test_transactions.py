"""Transactions with confluent-kafka's transactional Producer against a real broker (issue 31):
the transaction coordinator's side (Kafka's TransactionCoordinator, TransactionStateManager,
KafkaApis' transaction handlers; OffsetMetadataManager for transactional offsets).

What needs the log side's control batches (txn_markers.write_txn_markers: COMMIT/ABORT markers on
the data partitions) is asserted where the marker is the end of the story: a committed offset
appears, an aborted one is dropped, the transaction reaches CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import struct

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
    wait_until(lambda: state_of(txn_broker, "slow") in ("PrepareAbort", "CompleteAbort"), 10,
               message="the timed-out transaction aborted")
    assert txn_broker.server.transactions.coordinator.metadata("slow").producer_epoch > epoch  # fenced
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
    assert state_of(txn_broker, "aio") in ("PrepareCommit", "CompleteCommit")
    kp = KafkaProducer(bootstrap_servers=bs, transactional_id="kp")
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send_offsets_to_transaction({KafkaTP("in", 0): OffsetAndMetadata(3, "", -1)}, "g-kp")
        assert state_of(txn_broker, "kp") == "Ongoing"
        kp.abort_transaction()
    finally:
        kp.close(1)
    assert state_of(txn_broker, "kp") in ("PrepareAbort", "CompleteAbort")


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
