"""The `quafka` command: one subcommand per module of this package (each has ``add_parser``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from ..protocol.kio_import import import_kio_without_test_strategies
from ._common import kafka_parser_errors

#: Subcommand modules, in --help order.
COMMANDS = ("broker", "topics", "configs", "features", "acls", "consumer_groups", "share_groups", "transactions",
            "console_share_consumer", "console_producer", "perf", "worker", "enqueue", "demo", "dashboard")


def main(argv: list[str] | None = None) -> int:
    import_kio_without_test_strategies()  # the broker and every tool: ~0.5 s less at start where hypothesis is installed
    parser = argparse.ArgumentParser(
        prog="quafka",
        description="quafka: Queues for Kafka (KIP-932 share groups) — broker and tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"quafka.cli.{name}").add_parser(sub)
    _kafka_errors_everywhere(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    return args.func(args)


def _kafka_errors_everywhere(sub) -> None:
    """Bad options of any subcommand: one line and exit code 1, as Kafka's tools (not argparse's 2)."""
    for parser in set(sub.choices.values()):
        if not getattr(parser, "_kafka_errors", False):
            kafka_parser_errors(parser)
            parser._kafka_errors = True
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _kafka_errors_everywhere(action)


if __name__ == "__main__":
    sys.exit(main())
