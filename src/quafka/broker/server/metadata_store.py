"""Durable cluster metadata under `log.dirs`.

Layout (documented in docs/storage.md):

    <log.dirs>/meta.properties                   version, cluster.id, node.id (Kafka's file name)
    <log.dirs>/__quafka_metadata/journal.log     one record per line: "<crc32c hex8> <json>\\n"

Every change is appended to the journal and fsynced before the request that caused it is
answered; then it is replayed into the in-memory `ClusterMetadata` image. On start-up the journal
is read up to the first line that is incomplete or fails its checksum (a torn tail from a crash is
cut off) and replayed before any listener opens. When the journal holds more than
`COMPACT_AFTER_RECORDS` records it is rewritten as a snapshot of the image (write a temporary
file, fsync, rename, fsync the directory), so replay stays short.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid

import crc32c

from quafka.broker.core.metadata import ClusterMetadata
from quafka.broker.storage import fsync_dir
from quafka.broker.storage._segment import _write_all

log = logging.getLogger("quafka.metadata")

COMPACT_AFTER_RECORDS = 2000
META_PROPERTIES = "meta.properties"
JOURNAL_DIR = "__quafka_metadata"
JOURNAL_FILE = "journal.log"


class MetadataStoreError(Exception):
    pass


def new_cluster_id() -> str:
    """22-character URL-safe base64 of a random UUID, as Kafka's cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _encode_line(record: dict) -> bytes:
    body = json.dumps(record, separators=(",", ":"), sort_keys=False).encode()
    return b"%08x " % crc32c.crc32c(body) + body + b"\n"


class MetadataStore:
    """The journal and meta.properties of one broker (memory-only when `log_dir` is None)."""

    def __init__(self, log_dir: str | None, node_id: int) -> None:
        self.log_dir = log_dir
        self.node_id = node_id
        self._fd: int | None = None
        self._records_in_journal = 0
        self.metadata: ClusterMetadata | None = None

    # ------------------------------------------------------------------ start-up
    def load(self) -> ClusterMetadata:
        if self.log_dir is None:
            self.metadata = ClusterMetadata(cluster_id=new_cluster_id(), node_id=self.node_id)
            return self.metadata
        os.makedirs(self.log_dir, exist_ok=True)
        cluster_id = self._load_or_write_meta_properties()
        self.metadata = ClusterMetadata(cluster_id=cluster_id, node_id=self.node_id)
        journal_dir = os.path.join(self.log_dir, JOURNAL_DIR)
        os.makedirs(journal_dir, exist_ok=True)
        path = os.path.join(journal_dir, JOURNAL_FILE)
        good_bytes = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
                    break
                body = line[9:-1]
                try:
                    if int(line[:8], 16) != crc32c.crc32c(body):
                        break
                    record = json.loads(body)
                except ValueError:
                    break
                self.metadata.replay(record)
                self._records_in_journal += 1
                good_bytes += len(line)
            if good_bytes != len(data):
                log.warning("metadata journal %s: cut a torn tail of %d bytes", path, len(data) - good_bytes)
                with open(path, "r+b") as f:
                    f.truncate(good_bytes)
                    os.fsync(f.fileno())
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(journal_dir)
        if self._records_in_journal > COMPACT_AFTER_RECORDS:
            self._compact()
        return self.metadata

    def _load_or_write_meta_properties(self) -> str:
        path = os.path.join(self.log_dir, META_PROPERTIES)
        if os.path.exists(path):
            props: dict[str, str] = {}
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#") and "=" in line:
                        k, v = line.split("=", 1)
                        props[k.strip()] = v.strip()
            stored = props.get("node.id")
            if stored is not None and int(stored) != self.node_id:
                raise MetadataStoreError(
                    f"Stored node id {stored} in {path} doesn't match the configured node.id {self.node_id}; "
                    f"use node.id={stored} or a different log.dirs"
                )
            if "cluster.id" not in props:
                raise MetadataStoreError(f"{path} has no cluster.id")
            return props["cluster.id"]
        cluster_id = new_cluster_id()
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("#\n#quafka broker metadata\nversion=1\n")
            f.write(f"cluster.id={cluster_id}\nnode.id={self.node_id}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.log_dir)
        return cluster_id

    # ------------------------------------------------------------------ changes
    def commit(self, records: list[dict]) -> None:
        """Make `records` durable, then apply them to the image."""
        assert self.metadata is not None
        if self._fd is not None:
            size = os.fstat(self._fd).st_size
            try:
                _write_all(self._fd, b"".join(_encode_line(r) for r in records))
                os.fsync(self._fd)
            except OSError:  # a short write left a torn line: cut it, or the next record follows it
                try:
                    os.ftruncate(self._fd, size)
                except OSError:
                    pass  # the torn tail is cut at the next start (nothing is appended after it)
                raise
            self._records_in_journal += len(records)
        for record in records:
            self.metadata.replay(record)
        if self._fd is not None and self._records_in_journal > COMPACT_AFTER_RECORDS:
            self._compact()

    def _compact(self) -> None:
        assert self.metadata is not None and self.log_dir is not None
        journal_dir = os.path.join(self.log_dir, JOURNAL_DIR)
        path = os.path.join(journal_dir, JOURNAL_FILE)
        records = self.metadata.snapshot_records()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(_encode_line(r) for r in records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(journal_dir)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._records_in_journal = len(records)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
