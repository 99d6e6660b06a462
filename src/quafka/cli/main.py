"""The `quafka` command."""

from __future__ import annotations

import argparse
import sys

from . import broker as broker_cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quafka",
        description="quafka: Queues for Kafka (KIP-932 share groups) — broker and tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    broker_cmd.add_parser(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
