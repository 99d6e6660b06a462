"""Supervision of `quafka worker --processes N` (issue 26, acceptance 2), run as a user runs it: the
supervisor and its worker processes are real `quafka worker` processes (examples/job_processor.py
with "ok" jobs, or an app written into the test's directory), against a `quafka broker` process
reached over loopback TCP; jobs are produced with confluent-kafka.

"Accepted twice" is read from the example's journals (one file per worker process, a `done` line
written when the job returns, just before its ACCEPT is sent): a job may run again only when the
process that ran it was killed before its ACCEPT left, so a job seen twice must have its first run
in the killed process's journal and its second on a later delivery; a worker holds one record at a
time (max_poll_records=1), so at most --concurrency jobs of the killed process run again. The
group's start offset passing every job says each was accepted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from support import descendants, process_info, process_running, wait_until
from support.framework_jobs import create_topic, share_group_from_earliest

from confluent_kafka import Producer

from quafka.client import Admin
from quafka.framework import App, Consumer, Worker

REPO = Path(__file__).resolve().parents[2]
# the records' lock: 5 s, so that a job finished on a busy 2-core machine is acknowledged well
# within it (a killed process's records come back after it)
LOCK_MS = 5000
BROKER = {"group.share.min.record.lock.duration.ms": str(LOCK_MS), "group.share.record.lock.duration.ms": str(LOCK_MS),
          "group.share.assignment.interval.ms": "0"}
CONCURRENCY = 2
# the group's redelivery backoff, which the broker applies to the records a killed or stopped
# process held too (the example's default is 30 s)
BACKOFF_MS = 1500
TOTAL = 5000


class Supervised:
    """`quafka worker ... --processes N` with its stderr (its own and its children's) collected."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "quafka", "worker", *args], cwd=cwd, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.decode(errors="replace"))

    def log(self) -> str:
        return "".join(list(self.lines))

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def children(self) -> list[int]:
        """The worker processes (the supervisor's children that are running)."""
        return sorted(p.pid for p in descendants(self.proc.pid) if p.ppid == self.proc.pid)

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout_s)
        self._reader.join(10)  # end of file: every child has exited too
        return status

    def ensure_stopped(self) -> None:
        for pid in [self.proc.pid] + [p.pid for p in descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)


def set_up(broker_process, tmp_path: Path) -> tuple[str, dict[str, str], Path]:
    """A broker process, a topic of TOTAL ok jobs, its group from the earliest offset, a journal dir."""
    broker = broker_process(str(tmp_path / "data"), overrides=BROKER)
    bootstrap = broker.bootstrap_servers
    names = {"topic": "jobs-sv", "group": "job-workers-sv", "dlq": "dlq.jobs-sv"}
    create_topic(bootstrap, names["topic"])
    share_group_from_earliest(bootstrap, names["group"])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for job_id in range(TOTAL):
        producer.produce(names["topic"], value=json.dumps({"id": job_id, "kind": "ok"}).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    journal = tmp_path / "journal"
    journal.mkdir()
    return bootstrap, names, journal


def start_example(bootstrap: str, names: dict[str, str], journal: Path, processes: int = 2) -> Supervised:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBS_")}, "JOBS_LOCK_MS": str(LOCK_MS),
           "JOBS_BACKOFF_MS": str(BACKOFF_MS), "QUAFKA_BOOTSTRAP": bootstrap, "JOBS_TOPIC": names["topic"], "JOBS_GROUP": names["group"],
           "JOBS_DLQ": names["dlq"], "JOBS_JOURNAL": str(journal),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return Supervised(["examples.job_processor:app", "--processes", str(processes), "--concurrency", str(CONCURRENCY),
                       "--log-interval", "5", "--shutdown-timeout", "10"], env, REPO)


def runs(journal: Path) -> list[tuple[int, int, int]]:
    """(job id, delivery attempt, pid of the process that ran it) per `done` line."""
    out = []
    for path in journal.glob("*.log"):
        pid = int(path.stem)
        for line in path.read_text().splitlines():
            what, job_id, _kind, attempt, *_ = line.split()
            if what == "done":
                out.append((int(job_id), int(attempt), pid))
    return out


def done_ids(journal: Path) -> set[int]:
    return {job_id for job_id, _, _ in runs(journal)}


def check_each_job_accepted_once(bootstrap: str, names: dict[str, str], journal: Path, killed: set[int]) -> int:
    """Every job ran; one that ran twice ran first in a killed process, before its ACCEPT left, and
    again on a later delivery; the group's start offset passed every job. The jobs that ran twice."""
    by_job: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for job_id, attempt, pid in runs(journal):
        by_job[job_id].append((attempt, pid))
    assert set(by_job) == set(range(TOTAL))
    again = {job_id: sorted(r) for job_id, r in by_job.items() if len(r) > 1}
    for job_id, (first, second, *more) in again.items():
        assert more == [] and first[1] in killed and second[0] > first[0], (job_id, again[job_id], killed, [
            (path.stem, line) for path in journal.glob("*.log") for line in path.read_text().splitlines()
            if line.split()[1] == str(job_id)])
    assert len(again) <= CONCURRENCY * len(killed), again
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_share_group_offsets(names["group"], [names["topic"]])
    assert offsets[(names["topic"], 0)][0] == TOTAL  # every job acknowledged, nothing left in flight
    return len(again)


def test_kill_9_of_a_worker_process_restarts_it_within_5_s_and_no_accepted_job_runs_again(broker_process, tmp_path):
    bootstrap, names, journal = set_up(broker_process, tmp_path)
    supervised = start_example(bootstrap, names, journal)
    try:
        first = wait_until(lambda: len(supervised.children()) == 2 and supervised.children(), 20,
                           message="two worker processes")
        wait_until(lambda: supervised.proc.poll() is not None or len(done_ids(journal)) >= TOTAL // 4, 60,
                   interval_s=0.1, message="a quarter of the jobs done")
        victim = first[0]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        replaced = wait_until(lambda: [p for p in supervised.children() if p not in first], 5, interval_s=0.05,
                              message="a new worker process")
        assert time.monotonic() - killed_at < 5
        wait_until(lambda: supervised.logged(f"(pid {victim}) killed by SIGKILL; restarting in 1.0 s "
                                             f"(restart 1 of 5 within 60 s)"), 5, message="the restart logged")
        wait_until(lambda: process_running(replaced[0]) and supervised.logged(f"started (pid {replaced[0]})"), 5,
                   message="the new process's start logged")
        # SIGTTIN: every worker process writes its threads' stacks to the shared stderr
        supervised.proc.send_signal(signal.SIGTTIN)
        wait_until(lambda: sum("most recent call first" in line for line in list(supervised.lines)) >= 2, 10,
                   message="stack dumps")
        wait_until(lambda: supervised.proc.poll() is not None or len(done_ids(journal)) == TOTAL, 90, interval_s=0.2,
                   message="every job done")
        assert supervised.proc.poll() is None, supervised.log()[-3000:]
        assert supervised.stop() == 0, supervised.log()[-3000:]
    finally:
        supervised.ensure_stopped()
    check_each_job_accepted_once(bootstrap, names, journal, killed={victim})


def test_kill_9_of_the_supervisor_stops_every_worker_process_within_5_s(broker_process, tmp_path):
    bootstrap, names, journal = set_up(broker_process, tmp_path)
    supervised = start_example(bootstrap, names, journal, processes=3)
    try:
        children = wait_until(lambda: len(supervised.children()) == 3 and supervised.children(), 20,
                              message="three worker processes")
        wait_until(lambda: supervised.proc.poll() is not None or len(done_ids(journal)) >= TOTAL // 4, 60,
                   interval_s=0.1, message="a quarter of the jobs done")
        supervisor = supervised.proc.pid
        supervised.proc.kill()
        supervised.proc.wait(5)
        gone_by = time.monotonic() + 5
        wait_until(lambda: not any(process_running(pid) for pid in children), 5, interval_s=0.05,
                   message="every worker process gone")
        assert time.monotonic() <= gone_by
        supervised._reader.join(5)
        assert sum(f"parent process {supervisor} is gone; stopping" in line for line in supervised.lines) == 3
        halfway = len(done_ids(journal))
        assert halfway < TOTAL, "the jobs ran out before the kill"
    finally:
        supervised.ensure_stopped()
    # a new supervisor does the rest; the stopped children stopped gracefully: no job ran twice
    again = start_example(bootstrap, names, journal)
    try:
        wait_until(lambda: again.proc.poll() is not None or len(done_ids(journal)) == TOTAL, 90, interval_s=0.2,
                   message="every job done")
        assert again.stop() == 0, again.log()[-3000:]
    finally:
        again.ensure_stopped()
    assert check_each_job_accepted_once(bootstrap, names, journal, killed=set()) == 0


CRASHING_APP = '''
import os
from quafka.framework import App, Consumer

class NeedsADatabase(Consumer):
    def initialized(self):
        raise RuntimeError("cannot reach the database")

    def consume_one(self, message):
        pass

app = App({"bootstrap.servers": os.environ["QUAFKA_BOOTSTRAP"]})
app.share_group("crashers").topic("crash-jobs", NeedsADatabase)
'''


def test_a_crash_loop_stops_the_supervisor_with_the_limit_named_and_status_3(broker_process, tmp_path):
    broker = broker_process(str(tmp_path / "data"), overrides=BROKER)
    create_topic(broker.bootstrap_servers, "crash-jobs")
    (tmp_path / "crashing_app.py").write_text(CRASHING_APP)
    env = {**os.environ, "QUAFKA_BOOTSTRAP": broker.bootstrap_servers}
    supervised = Supervised(["crashing_app:app", "--processes", "2", "--restart-delay", "0.1", "--max-restarts", "2",
                             "--restart-window", "60"], env, tmp_path)
    try:
        status = supervised.proc.wait(60)
        supervised._reader.join(10)
    finally:
        supervised.ensure_stopped()
    log = supervised.log()
    assert status == 3, log[-3000:]
    assert "restarting in 0.1 s (restart 1 of 2 within 60 s)" in log
    assert "restarting in 0.2 s (restart 2 of 2 within 60 s)" in log
    assert "exited with status 1; it was restarted 2 times within 60 s, the limit (--max-restarts 2, " \
           "--restart-window 60): stopping every worker process" in log
    assert "worker stopped after a crash loop (status 3)" in log
    assert "cannot reach the database" in log  # the children's own reason, in the same stderr


SLOW_POOL_APP = '''
import os, time
from quafka.framework import App, Consumer

class NeverReturns(Consumer):
    def consume_one(self, message):
        with open(os.environ["POOL_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)

app = App({"bootstrap.servers": os.environ["QUAFKA_BOOTSTRAP"]})
app.share_group("pool-workers").topic("pool-jobs", NeverReturns, executor="process", max_poll_records=1)
'''


def test_a_forced_stop_terminates_the_process_pool(broker_process, tmp_path):
    """The job never returns: the shutdown deadline forces the stop, and the pool process running
    it ends with the worker process instead of outliving it."""
    broker = broker_process(str(tmp_path / "data"), overrides=BROKER)
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "pool-jobs")
    share_group_from_earliest(bootstrap, "pool-workers")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("pool-jobs", value=b"forever")
    assert producer.flush(30) == 0
    (tmp_path / "slow_pool_app.py").write_text(SLOW_POOL_APP)
    pid_file = tmp_path / "pool.pid"
    env = {**os.environ, "QUAFKA_BOOTSTRAP": bootstrap, "POOL_PID_FILE": str(pid_file)}
    worker = Supervised(["slow_pool_app:app", "--shutdown-timeout", "1"], env, tmp_path)
    try:
        wait_until(lambda: worker.proc.poll() is not None or (pid_file.exists() and pid_file.read_text()), 60,
                   message="the job running in a pool process")
        pool_pid = int(pid_file.read_text())
        assert process_info(pool_pid) is not None and process_info(pool_pid).ppid == worker.proc.pid
        worker.proc.send_signal(signal.SIGTERM)
        status = worker.proc.wait(30)
        wait_until(lambda: not process_running(pool_pid), 5, message="the pool process gone")
        worker._reader.join(10)
    finally:
        worker.ensure_stopped()
    assert status == 1, worker.log()[-3000:]
    assert "closing their consumers" in worker.log() and "process pool: 1 processes terminated" in worker.log(), \
        worker.log()[-4000:]


def test_restart_options_are_checked(tmp_path):
    def refused(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "quafka", "worker", "examples.job_processor:app", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        return done.stderr

    assert "--max-restarts must be >= 0, got -1" in refused("--processes", "2", "--max-restarts", "-1")
    assert "--restart-window must be > 0 seconds, got 0.0" in refused("--processes", "2", "--restart-window", "0")
    assert "--restart-delay must be >= 0 seconds, got -1.0" in refused("--processes", "2", "--restart-delay", "-1")
    assert "--restart-delay: only with --processes 2 or more" in refused("--restart-delay", "2")


class Idle(Consumer):
    def consume_one(self, message):
        pass


class NoSetInHandler:
    """Stands in for the stop event, noting whether anything set it."""

    def __init__(self) -> None:
        self.flag = False

    def set(self) -> None:
        self.flag = True

    def is_set(self) -> bool:
        return self.flag


def test_the_signal_handler_only_records_the_signal_and_the_main_loop_acts():
    app = App({"bootstrap.servers": "127.0.0.1:1"})  # never connects: the worker is not started
    app.share_group("g").topic("t", Idle)
    worker = Worker(app, handle_signals=False)
    stops = []
    worker.stop = lambda: stops.append("stop")  # type: ignore[method-assign]
    worker.runtime.stopping = NoSetInHandler()  # type: ignore[assignment]
    worker._on_signal(signal.SIGTERM, None)
    worker._on_signal(signal.SIGTERM, None)
    assert stops == [] and not worker.runtime.stopping.is_set() and not worker._forced.is_set()
    worker._act_on_signals()  # what wait() and _shutdown() do every SIGNAL_CHECK_S
    assert stops == ["stop", "stop"] and worker._forced.is_set()  # the second one forced


@pytest.mark.parametrize("bad", [{"restart_delay_s": -1}, {"max_restarts": -1}, {"restart_window_s": 0}])
def test_run_processes_refuses_bad_restart_settings(bad):
    from quafka.framework import run_processes

    with pytest.raises(ValueError):
        run_processes(["worker", "x:app"], 2, **bad)
