"""`quafka features`: describe, upgrade and downgrade feature levels, as kafka-features.sh.

quafka has two features: `share.version` (1: share groups; 2: their dead-letter queues, Kafka 4.4)
and `transaction.version` (2: KIP-890 transactions, as Kafka 4.2 formats; 0/1: the KIP-98 protocol).
Output follows Kafka 4.4's FeatureCommand: ``describe`` prints one line per supported feature,
``Feature: F<TAB>SupportedMinVersion: a<TAB>SupportedMaxVersion: b<TAB>FinalizedVersionLevel: n
<TAB>Epoch: e``; ``upgrade``/``downgrade`` print ``F was upgraded to N.`` (``F can be upgraded to
N.`` with ``--dry-run``) or ``Could not upgrade F to N. <why>``, then fail with ``K out of M
operation(s) failed.``. ``--release-version``, ``--metadata``, ``disable``, ``version-mapping``
and ``feature-dependencies`` are not offered: quafka has no metadata.version to map.
"""

from __future__ import annotations

import argparse

from ._common import ToolError, add_bootstrap, kafka_parser_errors, open_admin, run_tool

EXAMPLES = """
examples:
  quafka features describe
  quafka features downgrade --feature share.version=1     # no dead-letter queues (as Kafka 4.2/4.3)
  quafka features upgrade --feature share.version=2 --dry-run
  quafka features upgrade --feature share.version=2
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "features",
        help="describe, upgrade and downgrade feature levels such as share.version (kafka-features)",
        description="Describe the features the broker supports and their finalized levels, and upgrade or "
                    "downgrade them, with kafka-features.sh's commands and output.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    commands = p.add_subparsers(dest="feature_command", metavar="COMMAND")
    describe = commands.add_parser("describe", help="describe the current active feature flags")
    kafka_parser_errors(describe)
    for name, verb in (("upgrade", "Upgrade"), ("downgrade", "Downgrade")):
        c = commands.add_parser(name, help=f"{verb.lower()} one or more feature flags")
        c.add_argument("--feature", action="append", default=[], metavar="FEATURE=LEVEL",
                       help=f"a feature {name} to perform, in feature=level format, e.g. share.version=2 "
                            "(repeatable)")
        c.add_argument("--dry-run", action="store_true", help=f"validate this {name}, but do not perform it")
        if name == "downgrade":
            c.add_argument("--unsafe", action="store_true",
                           help="perform this downgrade even if it may irreversibly destroy metadata")
        kafka_parser_errors(c)
    kafka_parser_errors(p)
    p.set_defaults(func=run)


def parse_features(specs: list[str], op: str) -> dict[str, int]:
    levels: dict[str, int] = {}
    for spec in specs:
        name, sep, level = spec.partition("=")
        if not sep or not name.strip() or not level.strip().lstrip("-").isdigit():
            raise ToolError(f"Can't parse feature={spec!r}: expected feature=level, e.g. share.version=2")
        if name.strip() in levels:
            raise ToolError(f"Feature {name.strip()} was specified more than once.")
        levels[name.strip()] = int(level)
    if not levels:
        raise ToolError(f"You must specify at least one feature to {op}")
    return levels


def run(args: argparse.Namespace) -> int:
    return run_tool("features", lambda: _run(args))


def _run(args: argparse.Namespace) -> int | None:
    op = args.feature_command
    if op is None:
        raise ToolError("a command is required: describe, upgrade or downgrade (see quafka features --help)")
    levels = parse_features(args.feature, op) if op != "describe" else {}  # before connecting
    with open_admin(args) as admin:
        if op == "describe":
            meta = admin.describe_features()
            for name in sorted(meta.supported):
                lo, hi = meta.supported[name]
                level = meta.finalized.get(name, (0, 0))[1]
                print(f"Feature: {name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
                      f"FinalizedVersionLevel: {level}\tEpoch: {meta.finalized_epoch}")
            return None
        kind = "upgrade" if op == "upgrade" else ("unsafe_downgrade" if args.unsafe else "safe_downgrade")
        results = admin.update_features(levels, kind, validate_only=args.dry_run)
    failures = 0
    for name in sorted(results):
        error = results[name]
        if error is not None:
            print(f"{'Can not' if args.dry_run else 'Could not'} {op} {name} to {levels[name]}. {error.message}")
            failures += 1
        else:
            print(f"{name}{' can be ' if args.dry_run else ' was '}{op}d to {levels[name]}.")
    if failures:
        raise ToolError(f"{failures} out of {len(levels)} operation(s) failed.")
    return None
