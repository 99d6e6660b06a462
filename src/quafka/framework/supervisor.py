"""``quafka worker --processes N``: the supervisor runs N worker processes, restarts one that dies,
and stops them all on a signal or a crash loop.

Why a supervisor (option A of the framework study, Karafka's swarm mode) rather than leaving
restarts to systemd or Kubernetes: a worker process fails fast (any dead worker thread stops it),
so without restarts ``--processes 4`` quietly shrinks to 3, 2, ... while the service manager sees
a healthy parent. The supervisor keeps the capacity, says what happened, and gives up loudly:

- **Reaping.** Each child is looked at as soon as it exits (SIGCHLD wakes the loop; it never waits
  for the children in order), and its end is logged with its exit status or signal.
- **Restarts.** A child that exits while no stop was asked is restarted after a delay:
  ``restart_delay_s`` the first time, doubled for each further restart of the same child within
  ``restart_window_s``, up to ``MAX_RESTART_DELAY_S``. A child exiting by itself with status 0
  counts as a crash too: a worker process returns 0 only after a stop, and the supervisor did not
  ask for one (someone signalled the child directly, or the app's code called ``sys.exit(0)``).
  The new child gets the same ``QUAFKA_WORKER_INDEX``, so its metrics port is the old one's.
- **Crash loop.** A child that would be restarted more than ``max_restarts`` times within
  ``restart_window_s`` is not: the supervisor stops every child gracefully and exits with
  ``EXIT_CRASH_LOOP``, naming the limit. ``max_restarts=0`` is the no-supervision policy: the first
  child that dies stops the worker (for a service manager that restarts the whole unit).
- **Signals.** SIGTERM and SIGINT are passed on as SIGTERM (children run in sessions of their own,
  so a terminal's Ctrl-C reaches the supervisor only): the first stops the children gracefully,
  a second is passed on again and makes them force their stop. During a stop nothing restarts.
  A child still running ``shutdown_timeout_s`` + ``KILL_GRACE_S`` after the first SIGTERM gets
  SIGKILL. SIGTTIN is passed on: each child writes every thread's stack to stderr.
- **Ending with the supervisor.** Each child gets the supervisor's pid and the read end of a pipe
  only the supervisor can write to (``parent_watch``): a child whose supervisor died by any means
  (``kill -9`` included) stops gracefully by itself.

The handlers only record the signal and wake the loop through ``signal.set_wakeup_fd``; the loop
acts. The children are started by exec (``python -m quafka.cli.main worker ...``), never forked: a
forked Kafka client is not safe to use.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .parent_watch import ENV_FD, ENV_PID

__all__ = ["EXIT_CRASH_LOOP", "KILL_GRACE_S", "MAX_RESTART_DELAY_S", "RestartPolicy", "Supervisor", "run_processes"]

log = logging.getLogger("quafka.framework.supervisor")

EXIT_CRASH_LOOP = 3  # the supervisor's status when it gave up on a child that kept dying
MAX_RESTART_DELAY_S = 30.0  # the backoff's cap (unless restart_delay_s is larger)
KILL_GRACE_S = 15.0  # beyond the shutdown timeout, before a child that does not stop gets SIGKILL
LOOP_INTERVAL_S = 0.5  # the loop's longest sleep (signals and SIGCHLD wake it at once)


@dataclass(frozen=True)
class RestartPolicy:
    """When the supervisor restarts a child that died, and when it gives up."""

    restart_delay_s: float = 1.0
    max_restarts: int = 5
    restart_window_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.restart_delay_s >= 0:
            raise ValueError(f"restart delay must be >= 0 seconds, got {self.restart_delay_s}")
        if self.max_restarts < 0:
            raise ValueError(f"max restarts must be >= 0, got {self.max_restarts}")
        if not self.restart_window_s > 0:
            raise ValueError(f"restart window must be > 0 seconds, got {self.restart_window_s}")

    def delay_s(self, restart: int) -> float:
        """The wait before the ``restart``-th restart (1-based) within the window."""
        cap = max(MAX_RESTART_DELAY_S, self.restart_delay_s)
        return min(self.restart_delay_s * 2 ** min(restart - 1, 30), cap)


@dataclass
class _Child:
    index: int
    process: subprocess.Popen | None = None
    restart_at: float | None = None  # monotonic time of a pending restart
    restarts: deque = field(default_factory=deque)  # monotonic times of its restarts within the window
    status: int = 0  # the last exit status (signal N as 128+N)


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


class Supervisor:
    """Runs ``processes`` children (``python -m quafka.cli.main`` + ``argv``) under ``policy``."""

    def __init__(self, argv: Sequence[str], processes: int, *, env: dict[str, str] | None = None,
                 policy: RestartPolicy | None = None, shutdown_timeout_s: float = 30.0) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        if shutdown_timeout_s < 0:
            raise ValueError(f"shutdown timeout must be >= 0 seconds, got {shutdown_timeout_s}")
        self.argv = list(argv)
        self.env = dict(env or {})
        self.policy = policy or RestartPolicy()
        self.shutdown_timeout_s = shutdown_timeout_s
        self.children = [_Child(index) for index in range(processes)]
        self._signals: list[int] = []  # appended by the handlers, taken by the loop
        self._stop_signals = 0
        self._stopping_since: float | None = None
        self._killed = False
        self._crash_loop: str | None = None
        self._pipe_read = self._pipe_write = -1
        self._handling_signals = False  # run() on the main thread: the handlers are the supervisor's

    # ------------------------------------------------------------------ children

    def _spawn(self, child: _Child) -> None:
        child_env = {**os.environ, **self.env, "QUAFKA_WORKER_INDEX": str(child.index),
                     ENV_PID: str(os.getpid()), ENV_FD: str(self._pipe_read)}
        # SIGTTIN's default action suspends a process: the child starts with it ignored (kept across
        # exec) until the worker's handler replaces it, so that one passed on early is lost rather
        # than stopping the child
        ttin = getattr(signal, "SIGTTIN", None) if self._handling_signals else None
        previous = signal.signal(ttin, signal.SIG_IGN) if ttin is not None else None
        try:
            # a session of its own: a terminal's Ctrl-C (or a service manager's signal to the group)
            # reaches the supervisor only, which passes one SIGTERM on per signal it gets
            child.process = subprocess.Popen([sys.executable, "-m", "quafka.cli.main", *self.argv], env=child_env,
                                             start_new_session=True, pass_fds=(self._pipe_read,))
        finally:
            if ttin is not None:
                signal.signal(ttin, previous)
        child.restart_at = None
        log.info("worker process %d started (pid %d)", child.index, child.process.pid)

    def _alive(self) -> list[_Child]:
        return [c for c in self.children if c.process is not None and c.process.returncode is None]

    def _send(self, signum: int) -> None:
        for child in self._alive():
            try:
                child.process.send_signal(signum)
            except ProcessLookupError:  # exited meanwhile: reaped on the next turn
                pass

    def _reap(self) -> None:
        now = time.monotonic()
        for child in self.children:
            process = child.process
            if process is None or process.returncode is not None or process.poll() is None:
                continue
            code = process.returncode
            child.status = code if code >= 0 else 128 - code
            what = f"worker process {child.index} (pid {process.pid}) {describe_status(code)}"
            if self._stopping_since is not None:
                (log.info if code == 0 else log.warning)("%s", what)
                continue
            while child.restarts and now - child.restarts[0] > self.policy.restart_window_s:
                child.restarts.popleft()
            restart = len(child.restarts) + 1
            if restart > self.policy.max_restarts:
                self._crash_loop = (f"{what}; it was restarted {len(child.restarts)} times within "
                                    f"{self.policy.restart_window_s:g} s, the limit (--max-restarts "
                                    f"{self.policy.max_restarts}, --restart-window "
                                    f"{self.policy.restart_window_s:g}): stopping every worker process")
                log.error("%s", self._crash_loop)
                self._begin_stop()
                return
            delay_s = self.policy.delay_s(restart)
            child.restarts.append(now)
            child.restart_at = now + delay_s
            log.warning("%s; restarting in %.1f s (restart %d of %d within %g s)", what, delay_s, restart,
                        self.policy.max_restarts, self.policy.restart_window_s)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None and child.restart_at <= now and self._stopping_since is None:
                try:
                    self._spawn(child)
                except OSError as exc:  # counted as another death of this child
                    log.error("worker process %d could not be started: %s", child.index, exc)
                    child.restart_at = None
                    child.process = None
                    self._crash_loop = f"worker process {child.index} could not be started ({exc})"
                    self._begin_stop()

    # ------------------------------------------------------------------ signals and stopping

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals.append(signum)  # only recorded: the loop acts (set_wakeup_fd woke it)

    def _begin_stop(self) -> None:
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            for child in self.children:
                child.restart_at = None
        self._send(signal.SIGTERM)

    def _act_on_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum in (signal.SIGTERM, signal.SIGINT):
                self._stop_signals += 1
                if self._stop_signals == 1:
                    log.info("signal %d: stopping %d worker processes (running jobs may finish within %.0f s; "
                             "a second signal forces)", signum, len(self._alive()), self.shutdown_timeout_s)
                else:
                    log.warning("signal %d again: passing it on, the worker processes force their stop", signum)
                self._begin_stop()
            elif signum == getattr(signal, "SIGTTIN", None):
                self._send(signal.SIGTTIN)  # each child dumps its threads' stacks to stderr

    def _kill_late(self) -> None:
        if self._stopping_since is None or self._killed:
            return
        if time.monotonic() - self._stopping_since < self.shutdown_timeout_s + KILL_GRACE_S:
            return
        late = self._alive()
        if late:
            log.error("%d worker processes still running %.0f s after the stop began: killing %s", len(late),
                      self.shutdown_timeout_s + KILL_GRACE_S, ", ".join(str(c.process.pid) for c in late))
            self._send(signal.SIGKILL)
        self._killed = True

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Start the children and supervise them until they have all stopped; the exit status:
        ``EXIT_CRASH_LOOP`` after a crash loop, else the highest of the children's last ones."""
        self._pipe_read, self._pipe_write = os.pipe()  # the write end stays here: its close is the children's cue
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous: dict[int, Any] = {}
        previous_wakeup = None
        self._handling_signals = threading.current_thread() is threading.main_thread()
        if self._handling_signals:
            previous_wakeup = signal.set_wakeup_fd(wake_write)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, getattr(signal, "SIGTTIN", None)):
                if sig is not None:
                    previous[sig] = signal.signal(sig, self._on_signal)
        try:
            for child in self.children:
                self._spawn(child)
            while True:
                self._act_on_signals()
                self._reap()
                self._restart_due()
                self._kill_late()
                if self._stopping_since is not None and not self._alive():
                    break
                if not self._alive() and not any(c.restart_at is not None for c in self.children):
                    break  # nothing running and nothing to restart (cannot happen with a policy; a guard)
                select.select([wake_read], [], [], self._sleep_s())
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
        except BaseException:
            log.exception("the supervisor failed: stopping every worker process")
            self._send(signal.SIGTERM)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if previous_wakeup is not None:
                signal.set_wakeup_fd(previous_wakeup)
            for fd in (wake_read, wake_write, self._pipe_read, self._pipe_write):
                os.close(fd)
        if self._crash_loop is not None:
            log.error("worker stopped after a crash loop (status %d): %s", EXIT_CRASH_LOOP, self._crash_loop)
            return EXIT_CRASH_LOOP
        return max(c.status for c in self.children)

    def _sleep_s(self) -> float:
        due = [c.restart_at for c in self.children if c.restart_at is not None]
        return max(0.0, min([LOOP_INTERVAL_S] + [at - time.monotonic() for at in due]))


def run_processes(argv: Sequence[str], processes: int, *, env: dict[str, str] | None = None,
                  restart_delay_s: float = 1.0, max_restarts: int = 5, restart_window_s: float = 60.0,
                  shutdown_timeout_s: float = 30.0) -> int:
    """Run and supervise ``processes`` worker processes (``python -m quafka.cli.main`` + ``argv``):
    restart one that dies (see the module docstring), pass SIGTERM/SIGINT on. The exit status is
    ``EXIT_CRASH_LOOP`` after a crash loop, else the highest of the children's."""
    policy = RestartPolicy(restart_delay_s=restart_delay_s, max_restarts=max_restarts,
                           restart_window_s=restart_window_s)
    return Supervisor(argv, processes, env=env, policy=policy, shutdown_timeout_s=shutdown_timeout_s).run()
