"""Partition log storage: the `Log` / `LogStore` interface and its file and memory engines.

Imports only quafka.protocol (and the standard library).
"""

from ._segment import _fsync_dir as fsync_dir
from .base import AppendInfo, BatchExtent, BatchRead, Log, LogConfig, LogEvent, LogStore
from .file_log import FileLog, FileLogStore
from .memory_log import MemoryLog, MemoryLogStore

__all__ = [
    "AppendInfo",
    "BatchExtent",
    "BatchRead",
    "FileLog",
    "FileLogStore",
    "Log",
    "LogConfig",
    "LogEvent",
    "LogStore",
    "MemoryLog",
    "MemoryLogStore",
    "fsync_dir",
]
