"""The streaming runner ends with its driver, and closes its share session on the way out.

Spark runs a Python streaming source's offset calls (``latestOffset``, ``partitions``, ``commit``)
in a runner process, ``python -m pyspark.sql.streaming.python_streaming_source_runner``, that the
driver JVM starts with a ``ProcessBuilder`` and talks to over one socket: the runner connects back
to the port (or Unix socket path) named by ``PYTHON_WORKER_FACTORY_PORT``
(``PYTHON_WORKER_FACTORY_SOCK_PATH``) and then reads call after call from it
(``PythonStreamingSourceRunner`` and ``PythonWorkerFactory.createSimpleWorker`` in Spark). quafka's
source holds the query's ShareConsumer in that process, and the records it acquired stay locked —
out of reach of every other member of the share group — until the consumer acknowledges or
releases them, or until their acquisition locks expire (``share.record.lock.duration.ms``,
KIP-932). A runner that outlives its driver therefore keeps records away from the group, and a
runner that dies without closing keeps them away until the locks expire. So the runner ends, and
closes its ShareConsumer first (``close()`` releases what is not acknowledged), in each of these
cases:

- **SIGTERM**: ``query.stop()`` stops the runner with ``PythonWorkerFactory.stopWorker``, which
  destroys the process (SIGTERM) and closes the socket. The handler hands the close to a thread of
  its own and waits at most ``CLOSE_S`` (the handler runs in the main thread between two
  bytecodes, perhaps while that thread holds a lock ``close()`` needs), then lets SIGTERM end the
  process; a second SIGTERM ends it at once.
- **the parent exits** (the JVM is killed, crashes, or exits without stopping the query): the
  runner is re-parented (to init or a subreaper), which a watchdog thread sees as a change of
  ``os.getppid()``.
- **the JVM closes its end of the socket**: the watchdog polls a duplicate of the runner's
  connection for the peer's hang-up (``POLLRDHUP``). pyspark's own loop notices the closed socket
  too, but only once the main thread is back to reading the next call; the watchdog depends on no
  state of the main thread, which is exactly what a runner stuck in a call (or in a signal
  handler, as the runner of issue 14 that outlived its driver) lacks.

On the last two the watchdog closes the consumer on a thread for at most ``CLOSE_S`` and ends the
process with ``os._exit``: nobody is left to report to. What the close could not release by then,
the broker's lock expiry does.

``prctl(PR_SET_PDEATHSIG)`` is not used: Linux sends that signal when the *thread* that created
the process exits, not the process, and in the JVM that thread is one of Spark's (the query's
stream execution thread), so it would tie the runner to a thread's life rather than the driver's.

The watchdog runs only inside a Spark Python worker (the ``PYTHON_WORKER_FACTORY_*`` environment
the JVM sets): a process that drives a reader by hand (a benchmark, a unit test) has no driver to
end with. The SIGTERM handler is installed wherever the reader runs on the main thread.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import stat
import sys
import threading
import weakref
from typing import Callable

__all__ = ["CLOSE_S", "WATCH_INTERVAL_S", "end_with_driver"]

log = logging.getLogger(__name__)

CLOSE_S = 3.0  # how long SIGTERM and the watchdog wait for close(); what it could not release, lock expiry does
WATCH_INTERVAL_S = 0.25  # the watchdog's poll of the parent pid (the socket's hang-up wakes it at once)
EXIT_DRIVER_GONE = 1  # the runner's exit status when the watchdog ends it

_closers: list[weakref.WeakMethod] = []  # bound close() methods of the readers of this process
_guard = threading.Lock()
_sigterm_installed = False
_watchdog: threading.Thread | None = None


def end_with_driver(close: Callable[[], None]) -> None:
    """Register ``close`` (a bound method: it is held weakly) to run when the runner ends, and arm
    the SIGTERM handler and (in a Spark Python worker) the watchdog, once per process."""
    global _watchdog
    with _guard:
        _closers[:] = [ref for ref in _closers if ref() is not None] + [weakref.WeakMethod(close)]
        _install_sigterm()
        if _watchdog is None and _in_spark_worker():
            _watchdog = threading.Thread(target=_watch, args=(os.getppid(), driver_socket()),
                                         name="quafka-runner-watchdog", daemon=True)
            _watchdog.start()


def _close_all() -> None:
    for ref in list(_closers):
        close = ref()
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - the next reader still closes
                log.exception("quafka stream: closing a reader failed")


def _close_bounded() -> None:
    """close() of every reader on a thread of its own, waited for at most CLOSE_S."""
    closer = threading.Thread(target=_close_all, name="quafka-share-close", daemon=True)
    closer.start()
    closer.join(CLOSE_S)


# ---------------------------------------------------------------------------------- SIGTERM

def _install_sigterm() -> None:
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):  # noqa: ARG001
        # The previous disposition comes back first, so a second SIGTERM (Spark sends one on stop
        # and the JVM another as it exits) ends the process instead of running this handler again
        # inside the first; the close runs on its own thread (see the module docstring).
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        _close_bounded()
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
        _sigterm_installed = True
    except ValueError:  # not the main thread of the main interpreter
        pass


# ---------------------------------------------------------------------------------- the watchdog

def _in_spark_worker() -> bool:
    return bool(os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH") or os.environ.get("PYTHON_WORKER_FACTORY_PORT"))


def driver_socket() -> socket.socket | None:
    """A duplicate of this process's connection to the JVM: the socket whose peer is the port
    (``PYTHON_WORKER_FACTORY_PORT``, on loopback) or Unix socket path
    (``PYTHON_WORKER_FACTORY_SOCK_PATH``) pyspark connected to. None when there is none."""
    path = os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH")
    port = os.environ.get("PYTHON_WORKER_FACTORY_PORT")
    if not path and not port:
        return None
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        fds = sorted(int(name) for name in os.listdir(fd_dir) if name.isdigit())
    except OSError:
        return None
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            probe = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            peer = probe.getpeername()
        except OSError:
            peer = None
        finally:
            probe.detach()  # the fd stays pyspark's
        if (path and peer == path) or (port and isinstance(peer, tuple) and str(peer[1]) == port):
            try:
                return socket.socket(fileno=os.dup(fd))
            except OSError:
                return None
    return None


def _hung_up(sock: socket.socket) -> bool:
    """Without POLLRDHUP: the peer closed when a non-blocking peek reads end of stream."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _watch(parent: int, sock: socket.socket | None) -> None:
    rdhup = getattr(select, "POLLRDHUP", 0)
    poller = None
    if sock is not None and hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, (rdhup or select.POLLIN) | select.POLLHUP | select.POLLERR)
    wait = threading.Event()
    while True:
        reason = None
        if poller is not None:
            try:
                events = poller.poll(int(WATCH_INTERVAL_S * 1000))
            except OSError:  # the duplicate went bad: watch the parent alone
                poller = sock = None
                continue
            if events and (rdhup or _hung_up(sock)):
                reason = "the driver JVM closed its connection to the runner"
            elif events:
                wait.wait(WATCH_INTERVAL_S)  # data waiting for the main thread (no POLLRDHUP here)
        else:
            wait.wait(WATCH_INTERVAL_S)
            if sock is not None and _hung_up(sock):
                reason = "the driver JVM closed its connection to the runner"
        if reason is None and os.getppid() != parent:
            reason = f"the driver JVM (the runner's parent, pid {parent}) exited"
        if reason is not None:
            _end(reason)
            return


def _end(reason: str) -> None:
    try:  # stderr may be a pipe to the JVM that is gone
        print(f"quafka stream runner: {reason}; closing the share consumer and exiting", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    _close_bounded()
    os._exit(EXIT_DRIVER_GONE)
