"""Partition log storage: the `Log` / `LogStore` interface and its file and memory engines.

Imports only quafka.protocol (and the standard library).
"""

from ._segment import _fsync_dir as fsync_dir
from .base import (
    AbortedTxn,
    AppendInfo,
    BatchExtent,
    BatchRead,
    FlushTicket,
    Log,
    LogConfig,
    LogDirHealth,
    LogDirOfflineError,
    LogEvent,
    LogStore,
)
from .file_log import FileLog, FileLogStore
from .memory_log import MemoryLog, MemoryLogStore

__all__ = [
    "AbortedTxn",
    "AppendInfo",
    "BatchExtent",
    "BatchRead",
    "FileLog",
    "FileLogStore",
    "FlushTicket",
    "Log",
    "LogConfig",
    "LogDirHealth",
    "LogDirOfflineError",
    "LogEvent",
    "LogStore",
    "MemoryLog",
    "MemoryLogStore",
    "fsync_dir",
]
