"""A supervised worker process ends with its supervisor, however the supervisor ends.

``quafka worker --processes N`` (``supervisor.run_processes``) starts each worker process by exec,
in a session of its own, so that a terminal's Ctrl-C reaches the supervisor only. The price is that
nothing stops the children when the supervisor dies without passing a signal on (``kill -9``, an
out-of-memory kill, a crash): re-parented to init, they would go on taking jobs out of reach of
anyone. So the supervisor hands each child two things:

- its pid, in ``QUAFKA_SUPERVISOR_PID``; the watchdog compares ``os.getppid()`` with it (a child
  is re-parented when its parent exits);
- the read end of a pipe whose write end only the supervisor holds (``os.pipe`` ends are not
  inherited, and the read end is passed with ``pass_fds``), its number in ``QUAFKA_SUPERVISOR_FD``.
  The kernel closes the write end when the supervisor exits by any means, and the watchdog's
  ``poll`` sees end of file at once, without waiting for its next look at the parent pid.

When either says the supervisor is gone, the watchdog logs it and stops the worker gracefully
(``Worker.stop``): running jobs finish within the shutdown timeout and the consumers close, which
frees their records (a closed share session) or partitions (a member that leaves) at once instead
of at the lock or session expiry. Karafka's swarm nodes ``exit!`` at once on the same discovery;
quafka stops as on SIGTERM instead. Should the stop hang past the shutdown timeout and a grace,
the watchdog ends the process with ``os._exit`` (after terminating the process pool, whose
processes run user code).

``prctl(PR_SET_PDEATHSIG)`` is not used, for the reason ``quafka.spark.lifetime`` gives: Linux
sends it when the *thread* that started the child exits, not the process. This module is that
module's idea for the framework (the framework does not import the Spark code).

The watchdog runs only when the supervisor's environment is present; the variables are removed
from this process's environment once read, so that a process the worker starts does not take
them for its own.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
from typing import Callable

__all__ = ["ENV_FD", "ENV_PID", "EXIT_PARENT_GONE", "FORCE_GRACE_S", "WATCH_INTERVAL_S", "watch_parent"]

log = logging.getLogger("quafka.framework")

ENV_PID = "QUAFKA_SUPERVISOR_PID"  # the supervisor's pid
ENV_FD = "QUAFKA_SUPERVISOR_FD"  # the read end of the supervisor's pipe, in this process
WATCH_INTERVAL_S = 0.25  # the watchdog's look at os.getppid() (the pipe's end of file wakes it at once)
FORCE_GRACE_S = 15.0  # beyond the shutdown timeout, before the watchdog ends a stop that hangs
EXIT_PARENT_GONE = 1  # the status of a process the watchdog had to end


def supervisor_from_environment() -> tuple[int, int] | None:
    """(supervisor pid, pipe fd) when started by the supervisor, else None; removes both variables."""
    pid, fd = os.environ.pop(ENV_PID, None), os.environ.pop(ENV_FD, None)
    if pid is None or fd is None:
        return None
    try:
        return int(pid), int(fd)
    except ValueError:
        log.error("ignoring a malformed supervisor environment (%s=%r, %s=%r): this process will not end "
                  "with its supervisor", ENV_PID, pid, ENV_FD, fd)
        return None


def watch_parent(stop: Callable[[], None], *, force_after_s: float, before_exit: Callable[[], None] | None = None
                 ) -> threading.Thread | None:
    """In a process the supervisor started: a daemon thread that calls ``stop`` once the supervisor
    is gone, and ends the process (``before_exit`` first) if it still runs ``force_after_s`` later.
    None (nothing started) outside a supervised process."""
    found = supervisor_from_environment()
    if found is None:
        return None
    parent, fd = found
    try:
        os.set_inheritable(fd, False)  # a process this one starts does not keep the pipe open
    except OSError as exc:
        log.error("the supervisor's pipe (fd %d) is unusable (%s): watching its pid %d only", fd, exc, parent)
        fd = -1
    thread = threading.Thread(target=_watch, args=(parent, fd, stop, force_after_s, before_exit),
                              name="quafka-parent-watch", daemon=True)
    thread.start()
    return thread


def _parent_gone(parent: int, poller: select.poll | None) -> bool:
    if poller is not None:
        try:
            if poller.poll(int(WATCH_INTERVAL_S * 1000)):  # end of file (or an error): the write end closed
                return True
        except OSError:
            return True
    else:
        threading.Event().wait(WATCH_INTERVAL_S)
    return os.getppid() != parent


def _watch(parent: int, fd: int, stop: Callable[[], None], force_after_s: float,
           before_exit: Callable[[], None] | None) -> None:
    poller = None
    if fd >= 0:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while not _parent_gone(parent, poller):
        pass
    log.warning("parent process %d is gone; stopping (running jobs may finish within %.0f s)", parent,
                max(force_after_s - FORCE_GRACE_S, 0))
    try:
        stop()
    except Exception:  # noqa: BLE001 - the forced exit below still ends the process
        log.exception("stopping after the parent process %d went failed", parent)
    threading.Event().wait(force_after_s)
    log.error("parent process %d is gone and the stop did not end within %.0f s: exiting", parent, force_after_s)
    if before_exit is not None:
        try:
            before_exit()
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("before exiting")
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(EXIT_PARENT_GONE)
