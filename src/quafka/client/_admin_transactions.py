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

__all__ = ["ListedTransaction", "TransactionDescription", "TransactionsAdminMixin"]

COORDINATOR_TRANSACTION = 1
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
