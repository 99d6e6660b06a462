"""One broker per data directory: an exclusive lock on `<dir>/.lock`, held for the broker's life.

Kafka's LogManager locks every log directory before it reads anything in it (`LogManager.lockLogDirs`,
a `FileLock` on the file `.lock`) and refuses to start when another process holds the lock:
"Failed to acquire lock on file .lock in <dir>. A Kafka instance in another process or thread is
using this directory." quafka does the same with `fcntl.flock(LOCK_EX | LOCK_NB)`:

- the lock belongs to the open file description, so the kernel drops it when the holder's process
  ends in any way (SIGKILL included): a crashed broker never blocks a restart, and the pid left in
  the file by a dead holder means nothing;
- a second open + flock in the *same* process conflicts too (another open file description), so
  two embedded brokers on one directory in one process are refused as well;
- after locking, the holder writes its pid into the file, so that the refusal can name the process
  holding the directory (and its command line, read from /proc where there is one).

The descriptor is close-on-exec (Python's default), so processes the broker starts do not inherit
the lock. Memory-only brokers have no directory and take no lock.
"""

from __future__ import annotations

import errno
import fcntl
import os

LOCK_FILE = ".lock"
_CMDLINE_MAX_CHARS = 200


class DirectoryLockedError(OSError):
    """Another process (or another broker in this process) holds the directory's lock.

    An OSError so that start-up paths that report OSErrors (`quafka broker`: "cannot start: ...")
    report it as they are."""

    def __init__(self, directory: str, message: str, holder_pid: int | None) -> None:
        super().__init__(message)
        self.directory = directory
        self.holder_pid = holder_pid

    def __str__(self) -> str:
        return str(self.args[0])


class DirLock:
    """The lock of one directory. `acquire()` takes it or raises DirectoryLockedError; `release()`
    gives it up (idempotent). The lock file itself stays (as Kafka's `.lock` does)."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.path = os.path.join(self.directory, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "DirLock":
        if self._fd is not None:
            return self
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            pid = read_holder_pid(self.path)
            raise DirectoryLockedError(self.directory, locked_message(self.directory, pid), pid) from None
        try:  # name ourselves as the holder (a stale pid from a dead holder is overwritten)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __del__(self) -> None:  # a broker that failed half-way through start-up and was dropped
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def lock_dirs(directories: list[str]) -> list[DirLock]:
    """Lock every directory (in order, each once); on a refusal release those already taken."""
    locks: list[DirLock] = []
    seen: set[str] = set()
    try:
        for directory in directories:
            lock = DirLock(directory)
            if lock.directory in seen:
                continue
            seen.add(lock.directory)
            locks.append(lock.acquire())
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


def read_holder_pid(path: str) -> int | None:
    """The pid the holder wrote into the lock file (None if none is there yet)."""
    try:
        with open(path, "rb") as f:
            text = f.read(64).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def process_command_line(pid: int) -> str | None:
    """The command line of `pid` from /proc (None where there is no /proc or no such process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    if len(text) > _CMDLINE_MAX_CHARS:
        text = text[: _CMDLINE_MAX_CHARS - 3] + "..."
    return text or None


def locked_message(directory: str, pid: int | None) -> str:
    """Kafka's wording, naming the process that holds the directory."""
    if pid is None:
        holder = "A quafka broker in another process or thread (its pid is not written yet) is"
    elif pid == os.getpid():
        holder = f"Another quafka broker in this process (pid {pid}) is"
    else:
        cmdline = process_command_line(pid)
        holder = f"A quafka broker in process {pid}" + (f" ({cmdline})" if cmdline else "") + " is"
    return (f"Failed to acquire lock on file {LOCK_FILE} in {directory}. {holder} using this directory; "
            f"stop it, or give this broker another log.dirs.")
