"""The `quafka` command: one subcommand per module of this package (each has ``add_parser``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

#: Subcommand modules, in --help order.
COMMANDS = ("broker", "topics", "configs", "share_groups", "console_share_consumer", "console_producer",
            "perf", "demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quafka",
        description="quafka: Queues for Kafka (KIP-932 share groups) — broker and tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"quafka.cli.{name}") is None:
            continue  # TEMPORARY while issue 6's tools are being written
        importlib.import_module(f"quafka.cli.{name}").add_parser(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
