"""Command line: run seeds of the simulator and print a summary (see docs/testing.md).

    .venv/bin/python -m tests.sim --seed 1234 --steps 400      # one seed (replay)
    .venv/bin/python -m tests.sim --seeds 50                   # seeds 0..49
    .venv/bin/python -m tests.sim --hours 24 --budget 600      # a campaign: 24 simulated hours or 10 min
    .venv/bin/python -m tests.sim --seeds 20 --plant ack-before-append
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time


def _reexec_with_fixed_hash_seed() -> None:
    """String hashing is salted per process; set iteration order can then differ between runs.
    Fix it so that a seed replays exactly."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "tests.sim", *sys.argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, help="run this many seeds, from --first")
    parser.add_argument("--first", type=int, default=0, help="first seed of --seeds / --hours (default 0)")
    parser.add_argument("--steps", type=int, default=500, help="steps per seed (default 500)")
    parser.add_argument("--hours", type=float, help="campaign: run seeds until this many simulated hours in total")
    parser.add_argument("--budget", type=float, help="campaign: stop starting seeds after this many wall seconds")
    parser.add_argument("--seed-hours", type=float, help="stop each seed after this much simulated time")
    parser.add_argument("--plant", help="plant a bug (tests/sim/plants.py: PLANTS)")
    parser.add_argument("--areas", help="comma-separated areas of the world beyond share groups (default all: "
                                        "consumer-groups,dlq,parked-drops,transactions); 'none': the world of the seeds found "
                                        "before them (KNOWN_BUGS)")
    parser.add_argument("--check", action="append", default=[],
                        help="enforce an invariant of oracle.PENDING (counted, not enforced, by default)")
    parser.add_argument("--trace", type=int, default=40, help="events shown on a violation (default 40)")
    parser.add_argument("--full-trace", action="store_true", help="print every event of the run (one seed)")
    parser.add_argument("--intensity", type=float, default=1.0, help="scale every fault probability")
    parser.add_argument("--unsafe-power", action="store_true",
                        help="inject power losses with flush off too (acknowledged records may then be lost, as in "
                             "Kafka without replication): shows which invariants need log.flush.interval.messages")
    parser.add_argument("--lenient", action="store_true",
                        help="report unexpected exceptions inside the broker instead of failing on them")
    parser.add_argument("--verbose", action="store_true", help="let the broker's log through")
    parser.add_argument("--keep-going", action="store_true", help="with several seeds, do not stop at a violation")
    args = parser.parse_args(argv)
    _reexec_with_fixed_hash_seed()

    from .runner import AREAS, Simulation

    areas = AREAS if args.areas is None else tuple(a for a in args.areas.split(",") if a and a != "none")

    if args.seed is not None:
        seeds = iter([args.seed])
    elif args.seeds is not None:
        seeds = iter(range(args.first, args.first + args.seeds))
    elif args.hours is not None or args.budget is not None:
        seeds = iter(range(args.first, 2**31))
    else:
        seeds = iter(range(args.first, args.first + 10))

    started = time.perf_counter()
    totals: collections.Counter[str] = collections.Counter()
    runs = steps = 0
    sim_seconds = 0.0
    failures = []
    anomalies = 0
    commits = dead_letters = 0
    txns: collections.Counter[str] = collections.Counter()
    pending: dict[str, list[int]] = {}
    for seed in seeds:
        if args.budget is not None and time.perf_counter() - started >= args.budget:
            break
        if args.hours is not None and sim_seconds >= args.hours * 3600.0:
            break
        sim = Simulation(seed, args.steps, plant=args.plant, hours=args.seed_hours, trace_len=args.trace,
                         full_trace=args.full_trace, intensity=args.intensity, strict_exceptions=not args.lenient,
                         verbose=args.verbose, unsafe_power=args.unsafe_power, areas=areas,
                         pending_checks=tuple(args.check))
        result = sim.run()
        runs += 1
        steps += result.steps
        sim_seconds += result.sim_seconds
        totals.update(result.faults)
        anomalies += len(result.anomalies)
        commits += result.commits_acked
        dead_letters += result.dead_letters
        txns.update(result.txns)
        for name in result.pending:
            pending.setdefault(name, []).append(seed)
        status = "ok" if result.ok else ("VIOLATION " + result.violation.invariant if result.violation else "ERROR")
        print(f"seed {seed}: {status}  steps {result.steps}  simulated {result.sim_seconds / 60:.1f} min  "
              f"wall {result.wall_seconds:.1f} s  crashes {result.faults.get('crashes', 0)}  "
              f"acked records {result.acked_records}  deliveries {result.deliveries}  commits {result.commits_acked}  "
              f"dead letters {result.dead_letters}  transactions {sum(result.txns.values())}  "
              f"digest {result.digest:016x}", flush=True)
        for name, text in sorted(result.pending.items()):
            print(f"  pending invariant {name} (not enforced): {text}", flush=True)
        if args.full_trace and sim.world.full_trace is not None:
            print("\n".join(sim.world.full_trace))
        if args.lenient and result.anomalies:
            for text in result.anomalies[:3]:
                print("  anomaly:", text.splitlines()[0])
        if not result.ok:
            print(result.report, flush=True)
            failures.append((seed, result))
            if not args.keep_going:
                break

    wall = time.perf_counter() - started
    print()
    print(f"seeds {runs}  steps {steps}  simulated {sim_seconds / 3600:.2f} h  wall {wall:.0f} s"
          + (f"  plant {args.plant}" if args.plant else ""))
    fault_keys = sorted(k for k in totals if k not in ("checks",))
    print("faults and events: " + ", ".join(f"{k} {totals[k]}" for k in fault_keys))
    print(f"acknowledged commits {commits}  dead letters {dead_letters}  transactions (EndTxn outcome the "
          f"client saw) {dict(sorted(txns.items()))}")
    if anomalies:
        print(f"unexpected exceptions (lenient): {anomalies}")
    for name, hit in sorted(pending.items()):
        print(f"pending invariant {name} (not enforced; --check {name}): seeds {hit[:20]}"
              + (f" ... ({len(hit)} in all)" if len(hit) > 20 else ""))
    print(f"violations: {len(failures)}" + "".join(
        f"\n  seed {seed}: {r.violation.invariant if r.violation else 'simulator error: ' + str(r.error)}  replay: "
        f"PYTHONHASHSEED=0 .venv/bin/python -m tests.sim --seed {seed} --steps {args.steps}"
        + (f" --intensity {args.intensity:g}" if args.intensity != 1.0 else "")
        + (" --unsafe-power" if args.unsafe_power else "")
        + (f" --plant {args.plant}" if args.plant else "") for seed, r in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
