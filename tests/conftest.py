import os
import signal
import sys
import time
import uuid

import pytest

from support import BrokerProcess, descendants, environ_has, processes

from quafka import EmbeddedBroker

SESSION_MARK = "QUAFKA_TEST_SESSION"  # in the environment of every process the session starts
LEFTOVER_GRACE_S = 10.0


def session_processes(mark: str) -> list:
    """The running processes this test process started: its descendants, and those carrying its
    mark in their environment — which finds them after their parent died and they were re-parented
    (a Spark runner whose JVM was killed), and, under xdist, never another worker's."""
    table = processes()
    me = os.getpid()
    found = {p.pid: p for p in descendants(me, table)}
    for p in table:
        if p.pid != me and p.pid not in found and p.state != "Z" and environ_has(p.pid, SESSION_MARK, mark):
            found[p.pid] = p
    return sorted(found.values(), key=lambda p: p.pid)


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session():
    """Fails the run when a process started by the tests survives them (issue 14: a Spark runner
    outlived `make test` by an hour). Set up before every other fixture, so torn down after them
    all (the Spark fixture stops its JVM, the broker fixtures their processes); then whatever the
    session started gets LEFTOVER_GRACE_S to exit, and what is left is listed, killed, and fails the
    session as an error at the teardown of its last test. Each xdist worker checks its own. Linux
    only (/proc)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    mark = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[SESSION_MARK] = mark
    yield
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = session_processes(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = session_processes(mark)
    if not left:
        return
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    listing = "\n".join(f"  pid {p.pid} (parent {p.ppid}): {p.cmdline[:300]}" for p in left)
    pytest.fail(f"{len(left)} process(es) started by the tests outlived them by {LEFTOVER_GRACE_S:.0f} s "
                f"(now killed):\n{listing}", pytrace=False)


@pytest.fixture
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def make_broker():
    """Start embedded brokers with custom config/data dirs; all are stopped at the end."""
    started = []

    def start(data_dir=None, config=None):
        b = EmbeddedBroker(data_dir=data_dir, config=config).start()
        started.append(b)
        return b

    yield start
    for b in reversed(started):
        b.stop()


@pytest.fixture
def broker_process():
    """Start `quafka broker` child processes; any still running are killed at teardown."""
    started = []

    def start(data_dir, **kwargs):
        b = BrokerProcess(data_dir, **kwargs).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.ensure_stopped()

