#!/usr/bin/env python3
"""Group costs at size: what one group request costs the broker's pure group machines (no I/O, no
event loop, no client) at 10, 100 and 1,000 members (issue 28, item 6).

Rows (each the best of --repeat runs; µs are wall-clock time on one core):

- KIP-848 steady heartbeat: a ConsumerGroupHeartbeat that changes nothing (member epoch current,
  no subscription fields, no owned partitions) in a stable group; every member names 10 of 200
  topics ("literal"), or every member subscribes with the regex `t\\d+` matching all 200 topics
  ("regex"). µs per heartbeat of the coordinator (ConsumerGroupCoordinator.heartbeat), and with the
  records step the shell runs after it (the group's image and its diff against the last image
  written to __consumer_offsets), both as the code under test has them;
- share steady heartbeat: the same for a ShareGroupHeartbeat (every member subscribes to the 200
  topics), coordinator and records step;
- KIP-848 rebalance: one more member joins a stable group and every member heartbeats (reporting
  what it owns) until the group is stable again; ms for the whole rebalance;
- classic rebalance: the leader of a stable classic group rejoins, every other member rejoins
  (JoinGroup), every member sends SyncGroup (the leader with every member's assignment) and the
  group record's append completes; ms for the whole rebalance.

Groups are built from a computed target and put in with the coordinators' `restore` (what start-up
does), so that the 1,000-member groups need no 1,000 joins.

`--save FILE` keeps the results as JSON; `--update-docs --before FILE` writes the "Group costs at
size" section of docs/benchmarks.md (between `<!-- group-costs:begin -->` and
`<!-- group-costs:end -->`) with the saved results as the "before" column and this run as "after".
Run the "before" against another tree with PYTHONPATH=<that tree>/src.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import quafka  # noqa: E402
from quafka.broker.core import consumer_group_images, group_records  # noqa: E402
from quafka.broker.core.classic_group import ClassicGroupConfig, ClassicGroupCoordinator  # noqa: E402
from quafka.broker.core.classic_group_model import join_timer_key  # noqa: E402
from quafka.broker.core.consumer_group import ConsumerGroupCoordinator  # noqa: E402
from quafka.broker.core.consumer_group_assignors import MemberSpec, assign  # noqa: E402
from quafka.broker.core.consumer_group_model import ConsumerGroup, ConsumerGroupMember  # noqa: E402
from quafka.broker.core.consumer_group_reconcile import AssignmentState, MemberState  # noqa: E402
from quafka.broker.core.share_assignor import assign as share_assign  # noqa: E402
from quafka.broker.core.share_group import (  # noqa: E402
    ShareGroup,
    ShareGroupCoordinator,
    ShareGroupMember,
    StaticGroupSettings,
    metadata_hash,
)
from quafka.protocol.errors import ErrorCode  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC_PATH = REPO / "docs" / "benchmarks.md"
BEGIN_MARK, END_MARK = "<!-- group-costs:begin -->", "<!-- group-costs:end -->"
GROUP = "g"
REGEX = r"t\d+"
LITERAL_TOPICS_PER_MEMBER = 10


def topics_of(count: int, partitions: int) -> dict[str, tuple[str, int]]:
    return {f"t{i:03d}": (f"id-{i:03d}", partitions) for i in range(count)}


BUDGET_S = 2.0  # --budget


def _mean_us(fn, calls: int) -> float:
    """Mean µs of fn(i) over `calls` calls, or fewer (at least 20) when they take over BUDGET_S;
    the garbage collector is off meanwhile (its passes cost with the heap, not with the request)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        done = 0
        while done < calls:
            fn(done)
            done += 1
            if done >= 20 and done % 10 == 0 and time.perf_counter() - start > BUDGET_S:
                break
        return (time.perf_counter() - start) / done * 1e6
    finally:
        gc.enable()


# --------------------------------------------------------------------------- KIP-848


def consumer_group(members: int, topics: dict[str, tuple[str, int]], regex: bool) -> ConsumerGroupCoordinator:
    """A coordinator holding one stable group of `members` members (restored, as at start-up)."""
    coordinator = ConsumerGroupCoordinator(topics=topics)
    names = sorted(topics)
    group = ConsumerGroup(GROUP, group_epoch=1, assignment_epoch=1)
    subscribed: set[str] = set()
    specs = {}
    for i in range(members):
        member_id = f"m{i:05d}"
        m = ConsumerGroupMember(member_id, rebalance_timeout_ms=300000)
        if regex:
            m.subscribed_topic_regex = REGEX
            mine = tuple(names)
        else:
            mine = tuple(sorted(names[(i + k) % len(names)] for k in range(LITERAL_TOPICS_PER_MEMBER)))
            m.subscribed_topic_names = mine
        subscribed.update(mine)
        group.members[member_id] = m
        specs[member_id] = MemberSpec(mine)
    metadata = {t: topics[t] for t in sorted(subscribed)}
    target = assign("uniform", specs, metadata)
    for member_id, m in group.members.items():
        parts = {t: frozenset(ps) for t, ps in target[member_id].items() if ps}
        group.target[member_id] = parts
        m.current = AssignmentState(MemberState.STABLE, 1, 0, parts, {})
    group.metadata_hash = metadata_hash(metadata)
    coordinator.restore(group, 0)
    assert coordinator.group(GROUP).group_epoch == 1, "the restored group should need no new epoch"
    return coordinator


def _consumer_records_step(coordinator: ConsumerGroupCoordinator):
    """What the shell does after a heartbeat: the records that bring __consumer_offsets in line."""
    tracker_cls = getattr(consumer_group_images, "ConsumerGroupImageTracker", None)
    if tracker_cls is not None:  # the incremental tracker (issue 28)
        tracker = tracker_cls()
        tracker.records(GROUP, coordinator.group(GROUP))
        tracker.written(GROUP)

        def step() -> int:
            records = tracker.records(GROUP, coordinator.group(GROUP))
            tracker.written(GROUP)
            return len(records)
        return step
    last = consumer_group_images.image_of(coordinator.group(GROUP))

    def step_full() -> int:
        nonlocal last
        image = consumer_group_images.image_of(coordinator.group(GROUP))
        records = consumer_group_images.diff(last, image)
        last = image
        return len(records)
    return step_full


def kip848_steady(members: int, topics: dict, regex: bool, calls: int, records_step: bool) -> float:
    coordinator = consumer_group(members, topics, regex)
    group = coordinator.group(GROUP)
    ids = sorted(group.members)
    epochs = {m: group.members[m].member_epoch for m in ids}
    step = _consumer_records_step(coordinator) if records_step else None

    def one(i: int) -> None:
        member_id = ids[i % len(ids)]
        result, _effects = coordinator.heartbeat(GROUP, member_id, epochs[member_id], now_ms=i)
        assert result.error is ErrorCode.none and result.assignment is None, result
        if step is not None:
            step()
    one(0)
    assert coordinator.group(GROUP).group_epoch == 1 and coordinator.rebalances == 0, "not a steady state"
    return _mean_us(one, calls)


def kip848_rebalance(members: int, topics: dict) -> float:
    """ms: one member joins a stable group; everyone heartbeats (with what it owns) until stable."""
    coordinator = consumer_group(members, topics, regex=False)
    names = sorted(topics)
    t0 = time.perf_counter()
    result, _ = coordinator.heartbeat(GROUP, "new-member", 0, rebalance_timeout_ms=300000,
                                      subscribed_topic_names=names[:LITERAL_TOPICS_PER_MEMBER],
                                      topic_partitions={}, now_ms=1)
    assert result.error is ErrorCode.none, result
    group = coordinator.group(GROUP)
    now = 2
    for _round in range(10):
        if all(m.current.is_reconciled_to(group.assignment_epoch) for m in group.members.values()):
            break
        for member_id in sorted(group.members):
            m = group.members[member_id]
            owned = {t: sorted(ps) for t, ps in m.assigned.items()}
            result, _ = coordinator.heartbeat(GROUP, member_id, m.member_epoch, topic_partitions=owned, now_ms=now)
            assert result.error is ErrorCode.none, result
            now += 1
    else:
        raise AssertionError("the KIP-848 rebalance did not converge in 10 rounds")
    return (time.perf_counter() - t0) * 1e3


# --------------------------------------------------------------------------- share groups


def share_group(members: int, topics: dict[str, tuple[str, int]]) -> ShareGroupCoordinator:
    coordinator = ShareGroupCoordinator(max_group_size=10**6, topics=topics,
                                        settings=lambda _g: StaticGroupSettings(assignment_interval_ms=0))
    names = tuple(sorted(topics))
    group = ShareGroup(GROUP, group_epoch=1, assignment_epoch=1, last_assignment_ms=0)
    subs = {}
    for i in range(members):
        member_id = f"m{i:05d}"
        group.members[member_id] = ShareGroupMember(member_id, member_epoch=1, previous_member_epoch=0,
                                                    subscribed_topic_names=names)
        subs[member_id] = names
    metadata = {t: topics[t] for t in names}
    target = share_assign(subs, metadata, {})
    for member_id, m in group.members.items():
        group.target[member_id] = {t: tuple(ps) for t, ps in target[member_id].items()}
        m.assignment = dict(group.target[member_id])
    group.subscribed_metadata = metadata
    group.metadata_hash = metadata_hash(metadata)
    coordinator.restore(group, 0)
    assert coordinator.group(GROUP).group_epoch == 1
    return coordinator


def _share_records_step(coordinator: ShareGroupCoordinator):
    tracker_cls = getattr(group_records, "ShareGroupImageTracker", None)
    if tracker_cls is not None:  # the incremental tracker (issue 28)
        tracker = tracker_cls()
        tracker.records(GROUP, coordinator.group(GROUP), None)
        tracker.written(GROUP)

        def step() -> int:
            records = tracker.records(GROUP, coordinator.group(GROUP), None)
            tracker.written(GROUP)
            return len(records)
        return step
    last = group_records.image_of(coordinator.group(GROUP), None)

    def step_full() -> int:
        nonlocal last
        image = group_records.image_of(coordinator.group(GROUP), None)
        records = group_records.diff(last, image)
        last = image
        return len(records)
    return step_full


def share_steady(members: int, topics: dict, calls: int, records_step: bool) -> float:
    coordinator = share_group(members, topics)
    group = coordinator.group(GROUP)
    ids = sorted(group.members)
    step = _share_records_step(coordinator) if records_step else None

    def one(i: int) -> None:
        result, _effects = coordinator.heartbeat(GROUP, ids[i % len(ids)], 1, now_ms=i)
        assert result.error is ErrorCode.none and result.assignment is None, result
        if step is not None:
            step()
    one(0)
    return _mean_us(one, calls)


# --------------------------------------------------------------------------- classic groups


def classic_rebalance(members: int) -> float:
    """ms: the leader of a stable group rejoins; every member rejoins and syncs; the record is stored."""
    counter = iter(range(10**9))
    coordinator = ClassicGroupCoordinator(lambda prefix: f"{prefix}-{next(counter):06d}",
                                          ClassicGroupConfig(initial_rebalance_delay_ms=0))
    protocols = [("range", b"r" * 40), ("cooperative-sticky", b"c" * 40)]
    token = iter(range(1, 10**9))
    member_ids: list[str] = []
    now = 0

    def join(member_id: str) -> list:
        return coordinator.join_group(token=next(token), group_id=GROUP, member_id=member_id,
                                      protocol_type="consumer", protocols=protocols, session_timeout_ms=45000,
                                      rebalance_timeout_ms=300000, client_id="c", api_version=3, now_ms=now)

    def complete_appends(effects: list) -> None:
        for e in effects:
            if getattr(e, "append_id", None) is not None:
                coordinator.on_append_complete(e.append_id, ErrorCode.none, now)

    def sync_all() -> None:
        group = coordinator.group(GROUP)
        leader = group.leader_id
        effects = []
        for member_id in member_ids:
            assignments = {m: b"a" * 20 for m in member_ids} if member_id == leader else None
            effects += coordinator.sync_group(token=next(token), group_id=GROUP, member_id=member_id,
                                              generation_id=group.generation_id, assignments=assignments,
                                              now_ms=now)
        complete_appends(effects)

    # the initial group: every member joins during the initial delay, which then completes
    for _ in range(members):
        effects = join("")
        complete_appends(effects)
        member_ids.append(next(reversed(coordinator.group(GROUP).members)))  # members are in join order
    while coordinator.group(GROUP).state.value == "PreparingRebalance":  # the initial delay, extended once
        complete_appends(coordinator.on_timer(join_timer_key(GROUP), now))
    sync_all()
    group = coordinator.group(GROUP)
    assert group.state.value == "Stable" and len(group.members) == members, group.state
    generation = group.generation_id

    now = 1
    t0 = time.perf_counter()
    leader = group.leader_id
    join(leader)
    for member_id in member_ids:
        if member_id != leader:
            join(member_id)
    sync_all()
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    assert group.state.value == "Stable" and group.generation_id == generation + 1, group.state
    return elapsed_ms


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    topics = topics_of(args.topics, args.partitions)
    out: dict[str, dict[str, float]] = {}

    def best(label: str, size: int, fn) -> None:
        value = min(fn() for _ in range(args.repeat))
        out.setdefault(label, {})[str(size)] = value
        print(f"  {label:<58} {size:>5} members: {value:10.1f}", flush=True)

    kip848_steady(10, topics, False, 3000, True)  # warm-up: the first run of a process is slower
    share_steady(10, topics, 3000, True)
    for n in args.members:
        calls = max(args.heartbeats, 3 * n)
        best("KIP-848 steady heartbeat, literal: coordinator (µs)", n,
             lambda: kip848_steady(n, topics, False, calls, False))
        best("KIP-848 steady heartbeat, literal: + records step (µs)", n,
             lambda: kip848_steady(n, topics, False, calls, True))
        best("KIP-848 steady heartbeat, regex: coordinator (µs)", n,
             lambda: kip848_steady(n, topics, True, calls, False))
        best("KIP-848 steady heartbeat, regex: + records step (µs)", n,
             lambda: kip848_steady(n, topics, True, calls, True))
        best("share steady heartbeat: coordinator (µs)", n, lambda: share_steady(n, topics, calls, False))
        best("share steady heartbeat: + records step (µs)", n, lambda: share_steady(n, topics, calls, True))
        best("KIP-848 rebalance, one member joins (ms)", n, lambda: kip848_rebalance(n, topics))
        best("classic rebalance, leader rejoins (ms)", n, lambda: classic_rebalance(n))
    return out


def render(before: dict | None, after: dict, members: list[int], meta: dict) -> str:
    sizes = [str(n) for n in members]
    head = ["measurement"]
    for s in sizes:
        head += [f"{s}: before", f"{s}: after"] if before is not None else [f"{s} members"]
    rows = []
    for label, values in after.items():
        row = [label]
        for s in sizes:
            if before is not None:
                b = before.get(label, {}).get(s)
                row.append("—" if b is None else f"{b:,.1f}")
            row.append(f"{values.get(s, float('nan')):,.1f}")
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([
        BEGIN_MARK,
        "# Group costs at size (`benchmarks/group_heartbeat_cost.py`, issue 28)",
        "",
        "What one group request costs the pure group machines at 10, 100 and 1,000 members: a",
        "KIP-848 ConsumerGroupHeartbeat that changes nothing (members naming 10 of 200 topics, or",
        f"all subscribing with the regex `{REGEX}` over 200 topics of {meta['partitions']} partitions), the same with the",
        "records step the shell runs after every heartbeat (image and diff for __consumer_offsets),",
        "a ShareGroupHeartbeat that changes nothing, a KIP-848 rebalance (one member joins, everyone",
        "heartbeats until stable) and a classic rebalance (the leader rejoins, everyone rejoins and",
        "syncs). Best of " + str(meta["repeat"]) + " runs; \"before\" is " + meta.get("before_commit", "?") +
        ", \"after\" " + meta["commit"] + ". Run: `python benchmarks/group_heartbeat_cost.py --save FILE` on",
        "each tree, then `--update-docs --before FILE`.",
        "",
        f"Machine: {meta['machine']}.",
        "",
        *lines,
        "",
        END_MARK,
        "",
    ])


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(Path(quafka.__file__).resolve().parent), "describe", "--always",
                               "--dirty"], capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", default="10,100,1000", help="group sizes, comma-separated (default 10,100,1000)")
    ap.add_argument("--topics", type=int, default=200, help="topics in the cluster (default 200)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions per topic (default 8)")
    ap.add_argument("--heartbeats", type=int, default=3000,
                    help="heartbeats per steady-state measurement (at least 3 per member; default 3000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, the best kept (default 3)")
    ap.add_argument("--budget", type=float, default=BUDGET_S,
                    help="seconds one steady-state run may take; slower ones stop early, after at least 20 "
                         "heartbeats (default %(default)s)")
    ap.add_argument("--save", metavar="FILE", help="keep the results (JSON)")
    ap.add_argument("--before", metavar="FILE", help="results saved by --save on the tree before the change")
    ap.add_argument("--update-docs", action="store_true", help="rewrite this script's section of the doc")
    ap.add_argument("--doc", default=str(DOC_PATH.relative_to(REPO)), help="the doc to rewrite (default %(default)s)")
    args = ap.parse_args(argv)
    args.members = [int(x) for x in args.members.split(",")]
    globals()["BUDGET_S"] = args.budget
    print(f"quafka from {Path(quafka.__file__).resolve().parent.parent.name}/quafka, commit {_commit()}", flush=True)
    results = run(args)
    meta = {"commit": _commit(), "partitions": args.partitions, "repeat": args.repeat,
            "machine": f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}"}
    if args.save:
        Path(args.save).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    before = None
    if args.before:
        saved = json.loads(Path(args.before).read_text())
        before = saved["results"]
        meta["before_commit"] = saved["meta"]["commit"]
    text = render(before, results, args.members, meta)
    print()
    print(text)
    if args.update_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from _bench import replace_marked_section
        doc = Path(args.doc)
        replace_marked_section(text, doc if doc.is_absolute() else REPO / doc, BEGIN_MARK, END_MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
