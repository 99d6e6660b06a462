"""`quafka transactions`: list, describe and abort transactions, as kafka-transactions.sh.

Follows Kafka's TransactionsCommand: ``list`` prints TransactionalId, Coordinator, ProducerId and
TransactionState for every transactional id of every broker (``--duration-filter`` keeps those
running longer, ``--transactional-id-pattern`` filters by regular expression, as Kafka 4.2);
``describe --transactional-id`` prints the coordinator's view of one id (state, producer id and
epoch, timeout, start time and duration, partitions); ``abort`` writes an ABORT marker for a
hanging transaction on one partition (``--topic --partition --producer-id --producer-epoch
--coordinator-epoch``, or ``--start-offset`` to take the producer from DescribeProducers;
Admin.abortTransaction, WriteTxnMarkers); ``find-hanging`` (``--broker-id`` or ``--topic
[--partition]``, ``--max-transaction-timeout`` minutes, default 15) lists the open transactions of
the partitions (DescribeProducers) older than that which no coordinator knows as ongoing there
(TransactionsCommand.FindHangingTransactionsCommand), with Kafka's columns.
"""

from __future__ import annotations

import argparse
import time

from ._common import ToolError, add_bootstrap, kafka_parser_errors, kafka_table, open_admin, run_tool

EXAMPLES = """
examples:
  quafka transactions list
  quafka transactions list --duration-filter 60000         # running for more than a minute
  quafka transactions describe --transactional-id orders-writer
  quafka transactions abort --topic orders --partition 0 --producer-id 4000 --producer-epoch 2 \\
      --coordinator-epoch 0
  quafka transactions find-hanging --broker-id 1 --max-transaction-timeout 15
  quafka transactions abort --topic orders --partition 0 --start-offset 1200
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "transactions",
        help="list, describe and abort transactions (kafka-transactions)",
        description="List the transactional ids, describe one, or abort a hanging transaction, with "
                    "kafka-transactions.sh's commands and output.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    commands = p.add_subparsers(dest="transactions_command", metavar="COMMAND")
    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                         help="only transactions running longer than this many milliseconds")
    listing.add_argument("--transactional-id-pattern", default=None, metavar="REGEX",
                         help="only transactional ids that match this regular expression")
    kafka_parser_errors(listing)
    describe = commands.add_parser("describe", help="describe the state of an active transactional id")
    describe.add_argument("--transactional-id", required=True, help="the transactional id to describe")
    kafka_parser_errors(describe)
    abort = commands.add_parser("abort", help="abort a hanging transaction (an ABORT marker on one partition)")
    abort.add_argument("--topic", required=True, help="the topic of the hanging transaction")
    abort.add_argument("--partition", type=int, required=True, help="its partition")
    abort.add_argument("--producer-id", type=int, help="the producer id of the hanging transaction")
    abort.add_argument("--producer-epoch", type=int, help="its producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, default=0, help="its coordinator epoch (default 0)")
    abort.add_argument("--start-offset", type=int,
                       help="the first offset of the hanging transaction (its producer from DescribeProducers)")
    kafka_parser_errors(abort)
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="the partitions this broker leads")
    hanging.add_argument("--topic", help="the partitions of this topic")
    hanging.add_argument("--partition", type=int, help="only this partition of --topic")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="transactions open longer than this are candidates (default 15, Kafka's "
                              "transaction.max.timeout.ms)")
    kafka_parser_errors(hanging)
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_tool("transactions", lambda: _run(args))


def _run(args: argparse.Namespace) -> int | None:
    op = args.transactions_command
    if op is None:
        raise ToolError("a command is required: list, describe or abort (see quafka transactions --help)")
    if op == "find-hanging" and args.broker_id is None and args.topic is None:
        raise ToolError("find-hanging needs --broker-id or --topic")
    if op == "find-hanging" and args.partition is not None and args.topic is None:
        raise ToolError("--partition needs --topic")
    if op == "abort" and args.start_offset is None and (args.producer_id is None or args.producer_epoch is None):
        raise ToolError("abort needs --start-offset, or --producer-id and --producer-epoch (and --coordinator-epoch)")
    with open_admin(args) as admin:
        if op == "list":
            rows = admin.list_transactions(duration_ms=args.duration_filter,
                                           transactional_id_pattern=args.transactional_id_pattern)
            kafka_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                        [(r.transactional_id, r.coordinator_id, r.producer_id, r.state) for r in rows], (0, 0, 0, 0))
        elif op == "describe":
            d = admin.describe_transactions([args.transactional_id])[args.transactional_id]
            now_ms = int(time.time() * 1000)
            start = d.transaction_start_time_ms
            kafka_table(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                         "TopicPartitions"),
                        [(d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
                          d.transaction_timeout_ms, start, None if start is None else max(now_ms - start, 0),
                          ",".join(f"{t}-{p}" for t, p in d.topic_partitions))], (0,) * 9)
        elif op == "find-hanging":
            _find_hanging(admin, args)
        else:
            producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
            if args.start_offset is not None:  # TransactionsCommand.AbortTransactionCommand
                states = admin.describe_producers([(args.topic, args.partition)])[(args.topic, args.partition)]
                found = [s for s in states if s.current_transaction_start_offset == args.start_offset]
                if not found:
                    raise ToolError(f"Could not find any open transactions starting at offset {args.start_offset} "
                                    f"on partition {args.topic}-{args.partition}")
                producer_id, producer_epoch, coordinator_epoch = (found[0].producer_id, found[0].producer_epoch,
                                                                  found[0].coordinator_epoch)
            admin.abort_transaction(args.topic, args.partition, producer_id, producer_epoch, coordinator_epoch)
            print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) "
                  f"on {args.topic}-{args.partition}.")
    return None


def _find_hanging(admin, args: argparse.Namespace) -> None:
    if args.topic is not None:
        described = admin.describe_topics([args.topic])[args.topic]
        partitions = [(args.topic, p.partition) for p in described.partitions.values()
                      if args.partition is None or p.partition == args.partition]
    else:
        partitions = [(name, p.partition) for name, t in sorted(admin.list_topics(include_internal=True).items())
                      for p in t.partitions.values() if p.leader == args.broker_id]
    now_ms = int(time.time() * 1000)
    hanging = admin.find_hanging_transactions(partitions, args.max_transaction_timeout * 60_000, now_ms)
    kafka_table(("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                 "LastTimestamp", "Duration(min)"),
                [(h.topic, h.partition, h.producer.producer_id, h.producer.producer_epoch, h.producer.coordinator_epoch,
                  h.producer.current_transaction_start_offset, h.producer.last_timestamp_ms,
                  (now_ms - h.producer.last_timestamp_ms) // 60_000) for h in hanging], (0,) * 8)
