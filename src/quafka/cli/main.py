"""The `quafka` command: one subcommand per module of this package (each has ``add_parser``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from ._common import kafka_parser_errors

#: Subcommand modules, in --help order.
COMMANDS = ("broker", "topics", "configs", "features", "acls", "consumer_groups", "share_groups", "transactions",
            "console_share_consumer", "console_producer", "perf", "worker", "enqueue", "demo", "dashboard")


def main(argv: list[str] | None = None) -> int:
    _import_kio_without_test_strategies()
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


def _import_kio_without_test_strategies() -> None:
    """Import kio (the protocol schemas) as if hypothesis were not installed, in a process that has
    imported neither yet (the `quafka` command, `python -m quafka`).

    Where hypothesis is installed (a development or test environment), kio imports it and registers
    a test strategy for each of its protocol types (kio/static/_phantom.py: PhantomMeta subclasses
    call ``__hypothesis_hook__``): ~0.5 s of imports (hypothesis, then pytest through trio.testing)
    in every broker start and every tool command, for strategies only property tests use. Kio takes
    an ImportError as "not installed"; the entry is removed again afterwards, so hypothesis itself
    stays importable in this process."""
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` raises ImportError
    try:
        importlib.import_module("kio.serial")
    finally:
        del sys.modules["hypothesis"]


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
