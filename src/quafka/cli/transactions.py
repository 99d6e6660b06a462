"""`quafka transactions`: list, describe and abort transactions, as kafka-transactions.sh.

Follows Kafka's TransactionsCommand: ``list`` prints TransactionalId, Coordinator, ProducerId and
TransactionState for every transactional id of every broker (``--duration-filter`` keeps those
running longer, ``--transactional-id-pattern`` filters by regular expression, as Kafka 4.2);
``describe --transactional-id`` prints the coordinator's view of one id (state, producer id and
epoch, timeout, start time and duration, partitions); ``abort`` writes an ABORT marker for a
hanging transaction on one partition (``--topic --partition --producer-id --producer-epoch
--coordinator-epoch``; Admin.abortTransaction, WriteTxnMarkers). ``find-hanging`` is not offered yet:
it needs DescribeProducers (the open transactions of each partition), which quafka does not serve;
it is refused with a line saying so. ``abort --start-offset`` needs it too.
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
    abort.add_argument("--start-offset", type=int, help="not served: needs DescribeProducers")
    kafka_parser_errors(abort)
    hanging = commands.add_parser("find-hanging", help="not served yet (needs DescribeProducers)")
    hanging.add_argument("--broker-id", type=int)
    hanging.add_argument("--topic")
    hanging.add_argument("--partition", type=int)
    hanging.add_argument("--max-transaction-timeout", type=int, default=15)
    kafka_parser_errors(hanging)
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_tool("transactions", lambda: _run(args))


def _run(args: argparse.Namespace) -> int | None:
    op = args.transactions_command
    if op is None:
        raise ToolError("a command is required: list, describe or abort (see quafka transactions --help)")
    if op == "find-hanging":
        raise ToolError("find-hanging is not served: it needs DescribeProducers (the open transactions of each "
                        "partition), which quafka does not serve yet; `quafka transactions list --duration-filter "
                        "MS` lists the transactions running longer than MS")
    if op == "abort":
        if args.start_offset is not None:
            raise ToolError("--start-offset needs DescribeProducers, which quafka does not serve yet: give "
                            "--producer-id, --producer-epoch and --coordinator-epoch")
        if args.producer_id is None or args.producer_epoch is None:
            raise ToolError("abort needs --producer-id and --producer-epoch (and --coordinator-epoch)")
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
        else:
            admin.abort_transaction(args.topic, args.partition, args.producer_id, args.producer_epoch,
                                    args.coordinator_epoch)
            print(f"Aborted the transaction of producer {args.producer_id} (epoch {args.producer_epoch}) "
                  f"on {args.topic}-{args.partition}.")
    return None
