"""The simulator in CI: a fixed slice of seeds (seeds 0-39: about 10 s on an idle 2-core machine,
25-40 s under `make test`), the planted bugs that slice must catch, and the seeds that found real
bugs (regressions). The slice was 80 seeds; 40 keep every planted bug caught (each by seed 2 at the
latest, see test_ci_slice_catches_the_planted_bug) and halve the time; `make sim SEEDS=n` runs more.

Run one seed as CI does: `PYTHONHASHSEED=0 .venv/bin/python -m tests.sim --seed N --steps 500`
(see docs/testing.md, "Simulator").
"""

from __future__ import annotations

import pytest

from sim.plants import CI_PLANTS, PLANTS
from sim.runner import AREAS, AREAS_BEFORE_TXN, Simulation

CI_SEEDS = range(0, 40)
CI_STEPS = 500

pytestmark = pytest.mark.xdist_group("sim")


def _run(seed: int, steps: int = CI_STEPS, **kwargs):
    return Simulation(seed, steps, **kwargs).run()


def test_ci_slice_of_seeds_keeps_every_invariant():
    # Seeds 2 (committed-offset-lost) and 3 (partition-owned-twice) of this slice broke when log
    # compaction came in: the simulated disk cut a compacted log at its first offset gap on recovery
    # (a simulator bug, fixed in disk.py; tests/sim/test_disk_model.py is its focused test).
    failures = []
    for seed in CI_SEEDS:
        result = _run(seed)
        if not result.ok:
            failures.append(result.report)
            break  # the first one, with its trace and replay command, is what a reader needs
    assert not failures, "\n\n".join(failures)


# Planted bugs of transactions run in the whole world; the others in the world they were tuned in,
# before transactions (whose actors change what a seed does: fetch-for-gone-client is not caught
# within the slice with them).
TXN_PLANTS = ("marker-first-partition-only", "lso-at-high-watermark", "aborted-list-empty")


@pytest.mark.parametrize("plant", CI_PLANTS)
def test_ci_slice_catches_the_planted_bug(plant):
    """The same seeds with a bug planted: a violation must be reported within the slice (with
    PYTHONHASHSEED=0: assign-unreleased, dead-letter-skipped, forget-accept-on-restart and
    marker-first-partition-only at seed 0, ack-before-append and fetch-for-gone-client at seed 1,
    commit-before-durable at seed 2)."""
    areas = AREAS if plant in TXN_PLANTS else AREAS_BEFORE_TXN
    for seed in CI_SEEDS:
        result = _run(seed, plant=plant, pending_checks=PLANTS[plant], areas=areas)
        assert result.error is None, result.report
        if result.violation is not None:
            assert result.violation.invariant in PLANTS[plant], result.report
            assert f"--seed {seed}" in result.report and f"--plant {plant}" in result.report
            return
    pytest.fail(f"no seed of the CI slice caught the planted bug {plant}")


@pytest.mark.parametrize("seed", [3, 0])  # seed 0 has transactional producers (crashes at EndTxn steps)
def test_a_seed_replays_exactly(seed):
    first, second = _run(seed, 300), _run(seed, 300)
    assert first.ok and second.ok
    assert seed != 0 or sum(first.txns.values()) > 0
    assert first.digest == second.digest and first.steps == second.steps and first.faults == second.faults


# Seeds that found real bugs, kept as regressions: (seed, steps, intensity, the invariant they broke).
KNOWN_BUGS = [
    # DescribeShareGroupOffsets answered a start offset from share-state records appended but not yet
    # fsynced (whose fsync then failed); after the restart it was lower. Fixed: read_summary waits for
    # the fsync (share_state.ShareCoordinatorService.read_summary).
    pytest.param(1125, 1000, 2.0, "start-offset-backwards", id="describe-before-fsync"),
    # AlterShareGroupOffsets for some partitions of a topic dropped every share partition of that topic
    # in the group, forgetting the others' acquisitions. Fixed: SharePartitionManager.drop_partitions.
    pytest.param(1268, 1000, 2.0, "delivery-count-regressed", id="alter-drops-other-partitions"),
    # ShareGroupCoordinator.restore took the current topic metadata as the group's, so a topic re-created
    # just before a crash was never assigned. Fixed: record 11's MetadataHash compared on restore.
    pytest.param(1109, 1000, 2.0, "record-never-delivered", id="restore-ignores-topic-change"),
    # A heartbeat and a ShareFetch raced to initialise a newly assigned partition; the second
    # initialisation fenced the first's writes. Fixed: ShareCoordinatorService.initialize_if_absent.
    pytest.param(200685, 1000, 1.0, "delivery-count-regressed", id="double-initialise"),
    # The retry of a produce whose fsync failed was answered success by the duplicate-sequence check.
    # Fixed: produce refuses while the log directory is offline; a duplicate waits for its fsync.
    pytest.param(100518, 1000, 1.0, "acked-record-lost", id="duplicate-after-failed-fsync"),
    # The first heartbeat of a group created __consumer_offsets; the topic's creation ran a nested
    # append of the group's records that failed and reloaded the group (gone: never stored), and the
    # outer append then found nothing to write and answered the join with success. Fixed: an append
    # on an offline log directory raises (share_groups.ShareGroupService._append).
    pytest.param(300597, 1000, 1.0, "record-never-delivered", id="join-answered-after-failed-append"),
]


@pytest.mark.parametrize("seed,steps,intensity,invariant", KNOWN_BUGS)
def test_seed_that_found_a_bug(seed, steps, intensity, invariant):
    # the world these seeds had when they found their bug: share groups only (runner.AREAS off)
    result = _run(seed, steps, intensity=intensity, areas=())
    assert result.ok, f"regression of the bug that broke {invariant}:\n{result.report}"


# Seeds found with the whole world (consumer groups, DLQs, parked-fetch drops: runner.AREAS on).
KNOWN_BUGS_ALL_AREAS = [
    # A parked ShareFetch whose MaxWaitMs passed acquired on its last try and left those records
    # marked as not yet sent (session.unsent); when the session later ended they were handed back
    # with their count lowered although the client had received them. Fixed: the last try's
    # records are answered at once and never marked (share_partitions.SharePartitionManager.wait).
    pytest.param(1000399, 1000, 1.0, "delivery-count-regressed", id="last-try-marked-unsent"),
    # A ShareFetch answered AcquisitionLockTimeoutMs from the group config read when it arrived, but
    # acquired with the one read after its acknowledgements' write: the group's lock had been lowered
    # meanwhile (15 s to 2 s), the client acknowledged after the real lock expired at the delivery
    # limit, and its ACCEPT of the dead-lettered record was answered NONE. Fixed: the response reports
    # the lock the records were acquired with (share_partitions.FetchedPartition.lock_duration_ms).
    pytest.param(500082, 1000, 1.0, "dead-lettered-and-accepted", id="lock-reported-from-stale-config"),
]


@pytest.mark.parametrize("seed,steps,intensity,invariant", KNOWN_BUGS_ALL_AREAS)
def test_seed_that_found_a_bug_in_the_whole_world(seed, steps, intensity, invariant):
    # the world these seeds had when they found their bug: before transactions (runner.AREAS_BEFORE_TXN)
    result = _run(seed, steps, intensity=intensity, areas=AREAS_BEFORE_TXN)
    assert result.ok, f"regression of the bug that broke {invariant}:\n{result.report}"
