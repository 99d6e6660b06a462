"""Transactions for the Admin: DescribeTransactions (key 65), ListTransactions (key 66) and
aborting a hanging transaction with WriteTxnMarkers (key 27), as `TransactionsAdminMixin`, which
`AsyncAdmin` inherits.

As Kafka's `Admin.describeTransactions` (DescribeTransactionsHandler: FindCoordinator with key type
TRANSACTION, then the coordinator), `Admin.listTransactions` (ListTransactionsHandler: every broker,
each listing the transactional ids it coordinates) and `Admin.abortTransaction`
(AbortTransactionHandler: a WriteTxnMarkers ABORT marker sent to the partition's leader). They
work against Apache Kafka as against quafka.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from quafka.protocol.errors import ErrorCode

from .errors import error_for_code

__all__ = ["HangingTransaction", "ListedTransaction", "ProducerState", "TransactionDescription",
           "TransactionsAdminMixin"]

COORDINATOR_TRANSACTION = 1
DESCRIBE_PRODUCERS_KEY = 61
WRITE_TXN_MARKERS_KEY = 27
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None when no transaction runs
    topic_partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True)
class ProducerState:
    """DescribeProducers' ProducerState: an active producer of a partition."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_transaction_start_offset: int  # -1: no open transaction


@dataclass(frozen=True)
class HangingTransaction:
    """An open transaction on a partition that its coordinator does not know as ongoing there."""

    topic: str
    partition: int
    producer: ProducerState


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


class TransactionsAdminMixin:
    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each transactional id's state at its coordinator. Raises KafkaException for the first id
        that fails (TRANSACTIONAL_ID_NOT_FOUND, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ...)."""
        ids = list(dict.fromkeys(transactional_ids))
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        out: dict[str, TransactionDescription] = {}
        by_node: dict[int, list[str]] = {}
        for txn_id, node in (await cluster.find_coordinators(ids, COORDINATOR_TRANSACTION)).items():
            by_node.setdefault(node, []).append(txn_id)
        for node, node_ids in sorted(by_node.items()):
            conn = await cluster.connection(node)
            response = await conn.call(DESCRIBE_TRANSACTIONS_KEY, {"transactional_ids": node_ids})
            for s in response.transaction_states:
                if s.error_code != ErrorCode.none:
                    raise error_for_code(s.error_code, f"DescribeTransactions of {s.transactional_id!r}")
                start = _ms(s.transaction_start_time)
                out[s.transactional_id] = TransactionDescription(
                    s.transactional_id, node, s.transaction_state, int(s.producer_id), int(s.producer_epoch),
                    _ms(s.transaction_timeout), None if start < 0 else start,
                    tuple((t.topic, int(p)) for t in s.topics for p in t.partitions))
        return {txn_id: out[txn_id] for txn_id in ids if txn_id in out}

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1, transactional_id_pattern: str | None = None,
                                ) -> list[ListedTransaction]:
        """The transactional ids of every broker, filtered by state names, producer ids, (v1+)
        running longer than ``duration_ms`` and (v2+) a regular expression on the id."""
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        await cluster.refresh_metadata([])
        rows: list[ListedTransaction] = []
        values = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                  "duration_filter": duration_ms, "transactional_id_pattern": transactional_id_pattern}
        min_version = 2 if transactional_id_pattern else (1 if duration_ms >= 0 else 0)
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            response = await conn.call(LIST_TRANSACTIONS_KEY, values, min_version=min_version)
            if response.error_code != ErrorCode.none:
                raise error_for_code(response.error_code, f"ListTransactions on broker {node}")
            rows += [ListedTransaction(t.transactional_id, int(t.producer_id), t.transaction_state, node)
                     for t in response.transaction_states]
        return sorted(rows, key=lambda r: r.transactional_id)

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int = 0) -> None:
        """Write an ABORT marker for (producer id, epoch) to the partition (a hanging transaction
        whose coordinator no longer knows it), through WriteTxnMarkers to the partition's leader,
        as Kafka's Admin.abortTransaction does. Needs CLUSTER_ACTION on the CLUSTER."""
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        leaders = await self._by_leader([(topic, partition)])  # type: ignore[attr-defined]
        [leader] = leaders
        conn = await cluster.connection(leader)
        response = await conn.call(WRITE_TXN_MARKERS_KEY, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [partition]}], "coordinator_epoch": coordinator_epoch}]})
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise error_for_code(p.error_code, f"WriteTxnMarkers (abort) on {t.name}-{p.partition_index}")

    async def describe_producers(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]:
        """The active producers of each partition, from its leader (DescribeProducers, as Kafka's
        Admin.describeProducers): their epoch, last sequence and timestamp, and the first offset of
        their open transaction (-1 when none)."""
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        out: dict[tuple[str, int], list[ProducerState]] = {}
        for leader, tps in (await self._by_leader(list(partitions))).items():  # type: ignore[attr-defined]
            by_topic: dict[str, list[int]] = {}
            for topic, partition in tps:
                by_topic.setdefault(topic, []).append(partition)
            conn = await cluster.connection(leader)
            response = await conn.call(DESCRIBE_PRODUCERS_KEY, {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise error_for_code(p.error_code, f"DescribeProducers of {t.name}-{p.partition_index}")
                    out[(t.name, int(p.partition_index))] = [ProducerState(
                        int(s.producer_id), int(s.producer_epoch), int(s.last_sequence), int(s.last_timestamp),
                        int(s.coordinator_epoch), int(s.current_txn_start_offset)) for s in p.active_producers]
        return out

    async def find_hanging_transactions(self, partitions: Iterable[tuple[str, int]], max_transaction_timeout_ms: int,
                                        now_ms: int) -> list[HangingTransaction]:
        """Open transactions on `partitions` older than `max_transaction_timeout_ms` (from their
        producer's last timestamp) that no coordinator knows as an ongoing transaction of that
        producer and epoch including the partition — what kafka-transactions.sh find-hanging
        reports (TransactionsCommand.FindHangingTransactionsCommand: DescribeProducers, then
        ListTransactions by producer id, then DescribeTransactions)."""
        candidates = [(tp, s) for tp, states in (await self.describe_producers(partitions)).items() for s in states
                      if s.current_transaction_start_offset >= 0
                      and now_ms - s.last_timestamp_ms > max_transaction_timeout_ms]
        if not candidates:
            return []
        listed = await self.list_transactions(producer_ids=sorted({s.producer_id for _tp, s in candidates}))
        ids_by_producer: dict[int, list[str]] = {}
        for t in listed:
            ids_by_producer.setdefault(t.producer_id, []).append(t.transactional_id)
        described = await self.describe_transactions([i for ids in ids_by_producer.values() for i in ids]) \
            if ids_by_producer else {}
        hanging = []
        for (topic, partition), s in sorted(candidates, key=lambda c: (c[0], c[1].producer_id)):
            known = any(d.state == "Ongoing" and d.producer_id == s.producer_id and d.producer_epoch == s.producer_epoch
                        and (topic, partition) in d.topic_partitions
                        for i in ids_by_producer.get(s.producer_id, ()) if (d := described.get(i)) is not None)
            if not known:
                hanging.append(HangingTransaction(topic, partition, s))
        return hanging
