"""`__transaction_state` is compacted as in Kafka (TransactionStateManager.transactionTopicConfigs:
cleanup.policy=compact, segment.bytes=transaction.state.log.segment.bytes): after many transactions
by the same few transactional ids the log cleaner leaves one record per id in the cleaned
segments, and a restart replays the same state from the compacted log (offsets with gaps). A
topic created before quafka compacted it becomes compacted when the coordinator loads it."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka

from support import wait_until

from quafka import EmbeddedBroker
from quafka.broker.server.internal_log import verified_records
from quafka.client import Admin
from quafka.protocol.transaction_log_records import TRANSACTION_STATE_TOPIC, decode_transaction_log_record

IDS = ("alpha", "beta", "gamma")
CONFIG = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1,
          "share.coordinator.state.topic.num.partitions": 1,
          # every segment older than 30 ms is rolled at the next append; rounds driven by clean() only
          "log.roll.ms": 30, "log.cleaner.backoff.ms": 3_600_000, "log.cleaner.min.cleanable.ratio": 0.01}


def txn_log(broker):
    return broker.server.state.topics[TRANSACTION_STATE_TOPIC].partitions[0].log


def records(broker) -> list[tuple[int, str, object]]:
    """(offset, transactional id, value or None) of every record of __transaction_state-0."""
    return [(o, r.transactional_id, r.value) for o, r in verified_records(txn_log(broker), decode_transaction_log_record)]


def on_loop(broker, coro):
    return asyncio.run_coroutine_threadsafe(coro, broker._loop).result(60)  # noqa: SLF001


def run_transactions(bootstrap: str, rounds: int) -> None:
    producers = {}
    for txn_id in IDS:
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                      "transaction.timeout.ms": 60000, "linger.ms": 0})
        p.init_transactions(30)
        producers[txn_id] = p
    for n in range(rounds):
        for i, (txn_id, p) in enumerate(producers.items()):
            p.begin_transaction()
            p.produce("out", value=f"{txn_id}-{n}".encode(), partition=n % 2)
            if (n + i) % 3 == 0:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
        time.sleep(0.035)  # let the segment age past log.roll.ms: the next round's records roll it


def test_cleaning_keeps_the_latest_record_per_transactional_id_and_a_restart_replays_the_same(tmp_path):
    data = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            admin.create_topics({"out": (2, 1)})
        run_transactions(b.bootstrap_servers, 12)
        topic = b.server.state.topics[TRANSACTION_STATE_TOPIC]
        assert topic.configs["cleanup.policy"] == "compact"
        assert topic.configs["segment.bytes"] == str(104857600)  # transaction.state.log.segment.bytes
        before = records(b)
        plog = txn_log(b)
        assert len(plog.segment_base_offsets) > 5, plog.segment_base_offsets
        cleaned_any = False
        while on_loop(b, b.server.log_cleaner.clean_filthiest(int(time.time() * 1000))):
            cleaned_any = True
        assert cleaned_any
        after = records(b)
        active_base = plog.segment_base_offsets[-1]
        cleaned = [(o, t) for o, t, _ in after if o < active_base]
        ids = [t for _, t in cleaned]
        assert sorted(ids) == sorted(set(ids)), f"more than one record per id below the active segment: {cleaned}"
        assert len(after) < len(before) / 4, (len(before), len(after))
        # what survives is each id's latest record: the same state as before the cleaning
        latest = {t: v for _, t, v in before}
        assert {t: v for _, t, v in after} == latest
        state = {t: m.to_value() for t, m in b.server.transactions.coordinator.durable_state().items()}
        assert state == latest and sorted(state) == sorted(IDS)
        assert all(m.state.state_name in ("CompleteCommit", "CompleteAbort")
                   for m in b.server.transactions.coordinator.durable_state().values())
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        replayed = {t: m.to_value() for t, m in b.server.transactions.coordinator.durable_state().items()}
        assert replayed == state
        assert [o for o, _, _ in records(b)] == [o for o, _, _ in after]  # the gaps stay, nothing is rewritten
        run_transactions(b.bootstrap_servers, 1)  # the next epoch of every id works on the replayed state
        epochs = {t: m.producer_epoch for t, m in b.server.transactions.coordinator.durable_state().items()}
        assert all(epochs[t] > replayed[t].producer_epoch for t in IDS), (epochs, replayed)


def test_a_transaction_state_topic_created_without_compaction_becomes_compacted_on_load(tmp_path):
    data = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            admin.create_topics({"out": (2, 1)})
        run_transactions(b.bootstrap_servers, 1)
        state = b.server.state

        async def as_before() -> None:  # the configs quafka created the topic with before compaction
            state.set_topic_configs(TRANSACTION_STATE_TOPIC, {"segment.bytes": "104857600", "retention.ms": "-1"})

        on_loop(b, as_before())
        assert "cleanup.policy" not in state.topics[TRANSACTION_STATE_TOPIC].configs
    with EmbeddedBroker(data_dir=data, config=CONFIG) as b:
        configs = b.server.state.topics[TRANSACTION_STATE_TOPIC].configs
        assert configs["cleanup.policy"] == "compact" and "retention.ms" not in configs
        assert configs["segment.bytes"] == "104857600"
        assert sorted(b.server.transactions.coordinator.durable_state()) == sorted(IDS)


def test_tombstones_of_expired_transactional_ids_are_kept_by_the_cleaner_and_replayed(tmp_path):
    """TransactionStateManager.removeExpiredTransactionalIds writes a tombstone for an id idle
    past transactional.id.expiration.ms; the cleaner keeps each id's tombstone (for
    delete.retention.ms) and drops everything before it, and the replay removes the id."""
    data = str(tmp_path / "data")
    config = {**CONFIG, "transactional.id.expiration.ms": 1000}
    with EmbeddedBroker(data_dir=data, config=config) as b:
        with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            admin.create_topics({"out": (2, 1)})
        run_transactions(b.bootstrap_servers, 6)
        service = b.server.transactions

        async def expire() -> int:
            return service.expire_transactional_ids()

        def expired() -> bool:
            on_loop(b, expire())
            return not set(IDS) & set(service.coordinator.durable_state())

        wait_until(expired, 20, message="the transactional ids expired")
        time.sleep(0.035)  # the tombstones' segment ages past log.roll.ms: the next append rolls it
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "delta"})
        p.init_transactions(30)
        while on_loop(b, b.server.log_cleaner.clean_filthiest(int(time.time() * 1000))):
            pass
        after = records(b)
        active_base = txn_log(b).segment_base_offsets[-1]
        for txn_id in IDS:
            assert [(v, o < active_base) for o, t, v in after if t == txn_id] == [(None, True)], (txn_id, after)
    with EmbeddedBroker(data_dir=data, config=config) as b:
        assert sorted(b.server.transactions.coordinator.durable_state()) == ["delta"]
