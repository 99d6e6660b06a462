"""Disk faults for tests: OSErrors injected into the os calls of quafka's storage modules.

`DiskFaults(root).install(monkeypatch)` replaces the `os` module global of the storage modules
(`quafka.broker.storage._segment`, `.file_log`, `.producer_snapshot`, and the metadata journal's
`quafka.broker.server.metadata_store` — each does `import os` and calls `os.write`, `os.pread`,
`os.fdatasync`, ... through it) with a proxy. The proxy passes every
call through to the real `os` unless a rule armed with `fail(...)` matches it, and a rule only
matches files under `root` (the test's data directory): descriptors are resolved to their path
through /proc/self/fd, so the fsync worker thread's duplicated descriptors match too. Nothing else
in the process (sockets, the event loop, pytest) is touched.

    faults = DiskFaults(data_dir).install(monkeypatch)
    faults.fail("write", errno.EIO, where="/orders-0/")   # the next segment writes fail
    ...
    faults.heal()                                          # the disk is healthy again

Calls: "write" (os.write), "pread" (os.pread), "fsync" (os.fsync and os.fdatasync), "open" (os.open;
with `writes_only`, only opens that may create or modify a file), "mkdir" (os.makedirs / os.mkdir
of a directory that does not exist yet), "unlink", "replace", "rename". `read_only(where)` arms
what a read-only file system refuses (EROFS). Every injected failure is recorded in `hits`.
"""

from __future__ import annotations

import errno as errno_mod
import importlib
import os
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

PATCHED_MODULES = (
    "quafka.broker.storage._segment",
    "quafka.broker.storage.file_log",
    "quafka.broker.storage.producer_snapshot",
    "quafka.broker.server.metadata_store",  # the metadata journal, in the same log directory
)
_MODIFYING_OPEN_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Hit(NamedTuple):
    call: str
    path: str
    errno: int
    thread: str


@dataclass
class Rule:
    call: str
    errno: int
    where: str = ""  # a substring of the path the rule applies to ("" = anything under root)
    partial: bool = False  # write: the first matching call writes half its bytes and returns short
    writes_only: bool = False  # open: only flags that may create or modify a file
    _partial_done: bool = field(default=False, repr=False)


def fd_path(fd: int) -> str:
    """The path an open descriptor refers to ("... (deleted)" for an unlinked file; "" if unknown)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class DiskFaults:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self.rules: list[Rule] = []
        self.hits: list[Hit] = []
        self._lock = threading.Lock()

    def install(self, monkeypatch) -> "DiskFaults":
        proxy = _FaultyOs(self)
        for name in PATCHED_MODULES:
            module = importlib.import_module(name)
            assert getattr(module, "os", None) is os, f"{name} no longer calls os.* through its `os` global"
            monkeypatch.setattr(module, "os", proxy)
        return self

    # -- arming
    def fail(self, call: str, errno: int, *, where: str = "", partial: bool = False,
             writes_only: bool = False) -> Rule:
        rule = Rule(call, errno, where, partial, writes_only)
        with self._lock:
            self.rules.append(rule)
        return rule

    def read_only(self, where: str = "") -> None:
        """What a read-only file system refuses under `where`: creating or opening files for
        writing, creating directories, unlinking and renaming (EROFS)."""
        self.fail("open", errno_mod.EROFS, where=where, writes_only=True)
        for call in ("mkdir", "unlink", "replace", "rename"):
            self.fail(call, errno_mod.EROFS, where=where)

    def heal(self) -> None:
        with self._lock:
            self.rules.clear()

    # -- matching
    def _under_root(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def _match(self, call: str, path: str, flags: int = 0) -> Rule | None:
        path = os.path.abspath(path) if path and not path.startswith("/") else path
        if not path or not self._under_root(path):
            return None
        with self._lock:
            for rule in self.rules:
                if rule.call != call or rule.where not in path:
                    continue
                if rule.writes_only and not flags & _MODIFYING_OPEN_FLAGS:
                    continue
                return rule
        return None

    def _raise(self, rule: Rule, call: str, path: str):
        with self._lock:
            self.hits.append(Hit(call, path, rule.errno, threading.current_thread().name))
        raise OSError(rule.errno, os.strerror(rule.errno), path)


class _FaultyOs:
    """The `os` module as the storage modules see it while faults are installed."""

    def __init__(self, faults: DiskFaults) -> None:
        self._faults = faults

    def __getattr__(self, name: str):
        return getattr(os, name)

    # -- descriptor calls
    def write(self, fd: int, data) -> int:
        path = fd_path(fd)
        rule = self._faults._match("write", path)
        if rule is None:
            return os.write(fd, data)
        if rule.partial and not rule._partial_done:  # a short write, as a disk filling up gives
            rule._partial_done = True
            return os.write(fd, memoryview(data)[: max(len(data) // 2, 1)])
        self._faults._raise(rule, "write", path)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        path = fd_path(fd)
        rule = self._faults._match("pread", path)
        if rule is not None:
            self._faults._raise(rule, "pread", path)
        return os.pread(fd, n, offset)

    def fsync(self, fd: int) -> None:
        self._sync(os.fsync, fd)

    def fdatasync(self, fd: int) -> None:
        self._sync(os.fdatasync, fd)

    def _sync(self, real, fd: int) -> None:
        path = fd_path(fd)
        rule = self._faults._match("fsync", path)
        if rule is not None:
            self._faults._raise(rule, "fsync", path)
        real(fd)

    # -- path calls
    def open(self, path, flags: int, mode: int = 0o777, *, dir_fd=None) -> int:
        path_s = os.fspath(path)
        rule = self._faults._match("open", path_s, flags)
        if rule is not None:
            self._faults._raise(rule, "open", path_s)
        return os.open(path, flags, mode, dir_fd=dir_fd)

    def makedirs(self, name, mode: int = 0o777, exist_ok: bool = False) -> None:
        self._check_mkdir(os.fspath(name))
        os.makedirs(name, mode, exist_ok)

    def mkdir(self, path, mode: int = 0o777, *, dir_fd=None) -> None:
        self._check_mkdir(os.fspath(path))
        os.mkdir(path, mode, dir_fd=dir_fd)

    def _check_mkdir(self, path: str) -> None:
        if os.path.isdir(path):  # mkdir of an existing directory is EEXIST even on a read-only fs
            return
        rule = self._faults._match("mkdir", path)
        if rule is not None:
            self._faults._raise(rule, "mkdir", path)

    def unlink(self, path, *, dir_fd=None) -> None:
        self._check_path("unlink", os.fspath(path))
        os.unlink(path, dir_fd=dir_fd)

    def replace(self, src, dst, **kwargs) -> None:
        self._check_path("replace", os.fspath(src))
        os.replace(src, dst, **kwargs)

    def rename(self, src, dst, **kwargs) -> None:
        self._check_path("rename", os.fspath(src))
        os.rename(src, dst, **kwargs)

    def _check_path(self, call: str, path: str) -> None:
        rule = self._faults._match(call, path)
        if rule is not None:
            self._faults._raise(rule, call, path)
