"""The broker's live state: metadata image, open partition logs, producer state; and the
operations that change them (each one journals its records before it is visible).

Handlers (one module per API family under `handlers/`) call into this object; it is used from
the event loop thread only.
"""

from __future__ import annotations

import functools
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from quafka.broker import config as cfg
from quafka.broker.core import elr
from quafka.broker.core.metadata import ClusterMetadata, ProducerIdAllocator, TopicInfo, client_quota_record
from quafka.broker.core.producer_state import CompletedTxn, ProducerStateTable
from quafka.broker.server.metadata_store import MetadataStore
from quafka.broker.storage import AbortedTxn, FileLogStore, Log, LogStore, MemoryLogStore
from quafka.broker.storage.dir_lock import DirLock, lock_dirs
from quafka.protocol.errors import ErrorCode
from quafka.protocol.compression import TargetCompression, target_compression
from quafka.protocol.control_batches import ControlType, InvalidControlBatch, decode_end_txn_marker

log = logging.getLogger("quafka.broker")

LEGAL_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 100000  # a sanity bound for one node
LEADER_EPOCH = 0
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__share_group_state", "__transaction_state"})


class OperationError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(slots=True)
class PartitionState:
    topic: "TopicState"
    index: int
    log: Log
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    snapshot_offset: int = -1  # offset of the newest producer snapshot written or loaded (-1: none)

    # -- transactions: what read_committed readers (Fetch, ListOffsets, share partitions) use
    @property
    def last_stable_offset(self) -> int:
        """Kafka's UnifiedLog.lastStableOffset: the first offset of the earliest open transaction,
        else the high watermark (the log end offset on one node), never below the log start offset
        (UnifiedLog.updateFirstUnstableOffset: DeleteRecords may remove an open transaction's first
        batches). Records below it are decided."""
        plog = self.log
        lso = self.producers.last_stable_offset(plog.log_end_offset)
        start = plog.log_start_offset
        return start if lso < start else lso

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, end_offset), each (producer_id,
        first_offset, last_offset = the ABORT marker's offset, last_stable_offset), sorted by first
        offset (Kafka's UnifiedLog.collectAbortedTransactions). A read_committed reader skips the
        records of `producer_id` from `first_offset` to `last_offset`."""
        return self.log.aborted_transactions(start_offset, end_offset)

    def complete_txn(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, marker_offset: int,
                     committed: bool) -> CompletedTxn | None:
        """Apply a COMMIT/ABORT marker appended at `marker_offset` (the write path, and the replay at
        start-up): the producer's transaction closes and an aborted one enters the segment's
        aborted-transaction index with the LSO after it (Kafka's UnifiedLog.append ->
        ProducerStateManager.completeTxn, LogSegment.updateTxnIndex)."""
        completed = self.producers.complete_txn(producer_id, producer_epoch, coordinator_epoch, marker_offset,
                                                not committed)
        if completed is not None and completed.is_aborted:
            self.log.append_aborted_txn(AbortedTxn(producer_id, completed.first_offset, completed.last_offset,
                                                   self.producers.last_stable_offset_after(completed)))
        return completed


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[PartitionState] = field(default_factory=list)
    max_message_bytes: int = 1048588
    log_append_time: bool = False
    # compression.type other than producer: the codec batches are rewritten into (protocol.compression)
    compression: TargetCompression | None = None
    dlq_enabled: bool = False  # errors.deadletterqueue.group.enable: share groups may dead-letter here
    compacted: bool = False  # cleanup.policy holds compact: every record needs a key (produce.py)

    @property
    def internal(self) -> bool:
        """Kafka's internal topics (written only by the coordinators; Metadata flags them)."""
        return self.name in INTERNAL_TOPICS


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise OperationError(ErrorCode.invalid_topic_exception, "Topic name is empty")
    if name in (".", ".."):
        raise OperationError(ErrorCode.invalid_topic_exception, f"Topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise OperationError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is longer than the maximum of {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not LEGAL_TOPIC_CHARS.match(name):
        raise OperationError(
            ErrorCode.invalid_topic_exception,
            f"Topic name '{name}' is illegal: it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


class BrokerState:
    def __init__(self, config: cfg.BrokerConfig, *, memory: bool, clock_ms: Callable[[], int],
                 log_store: LogStore | None = None, metadata_store: MetadataStore | None = None) -> None:
        """`log_store` / `metadata_store` replace the stores `memory` chooses (the simulator in
        tests/sim passes stores that survive a simulated crash)."""
        self.static_config = config
        self.config = config
        self.clock_ms = clock_ms
        self.node_id: int = config.node_id
        self._dir_locks: list[DirLock] = []
        log_dir = None if memory else config.log_dir
        self.store = metadata_store if metadata_store is not None else MetadataStore(log_dir, self.node_id)
        self.log_store: LogStore = log_store if log_store is not None else (
            MemoryLogStore() if memory else FileLogStore(config.log_dir))
        self.metadata: ClusterMetadata | None = None
        self.topics: dict[str, TopicState] = {}
        self.topics_by_id: dict[uuid.UUID, TopicState] = {}
        self.producer_ids: ProducerIdAllocator | None = None
        self.advertised: tuple[str, int] = ("127.0.0.1", 9092)  # the first advertised listener's endpoint
        self.advertised_by_listener: dict[str, tuple[str, int]] = {}  # every listener's (server.py)
        self.topic_listeners: list[Callable[[str, str], None]] = []  # (event, topic name)
        self.group_config_listeners: list[Callable[[str], None]] = []  # (group id)
        self._group_config_cache: dict[str, tuple[cfg.BrokerConfig, cfg.ShareGroupConfig]] = {}
        self.client_quota_listeners: list[Callable[[], None]] = []  # client quotas changed (server/quotas.py)

    # ------------------------------------------------------------------ start-up
    def endpoint_for(self, listener_name: str) -> tuple[str, int]:
        """The advertised endpoint of the listener a request came in on: Kafka answers Metadata,
        FindCoordinator and DescribeCluster with the brokers' endpoints for the request's listener
        (`MetadataCache.getAliveBrokerNodes(listenerName)`), so a client that bootstrapped on the SSL
        listener is sent to the SSL port, not to another listener's."""
        return self.advertised_by_listener.get(listener_name, self.advertised)

    def load(self) -> None:
        """Lock the data directories, replay the metadata journal and open every partition log
        (before listening). On failure the locks are released again."""
        self._lock_data_dirs()
        try:
            self._load()
        except BaseException:
            self._release_data_dirs()
            raise

    def _lock_data_dirs(self) -> None:
        """One broker per data directory, as Kafka's LogManager.lockLogDirs: an exclusive lock on
        `<dir>/.lock` in the log directory (which also holds the metadata journal; a separate
        metadata directory would be locked too) before anything in it is read: the directories
        the stores use, so a memory broker (or memory stores) takes no lock. Raises
        DirectoryLockedError naming the holder."""
        dirs = [d for d in (getattr(self.log_store, "log_dir", None), getattr(self.store, "log_dir", None)) if d]
        self._dir_locks = lock_dirs(dirs)

    def _release_data_dirs(self) -> None:
        locks, self._dir_locks = self._dir_locks, []
        for lock in locks:
            lock.release()

    def _load(self) -> None:
        self.metadata = self.store.load()
        if self.metadata.replayed_records == 0:
            # an empty journal is a new cluster: its first records, as Kafka's controller appends the
            # bootstrap records to an empty metadata log (ActivationRecordsGenerator.recordsForEmptyLog)
            records = elr.bootstrap_records(self._static_min_isr())
            self._commit(records)
            log.info("new cluster: %s=%d, cluster-level %s=%s", elr.ELR_FEATURE, elr.ELR_NEW_CLUSTER_LEVEL,
                     elr.MIN_ISR, records[0]["configs"][elr.MIN_ISR])
        self._apply_dynamic_broker_configs()
        now_ms = self.clock_ms()
        known = {(t.name, p) for t in self.metadata.topics.values() for p in range(t.partitions)}
        for topic, partition, topic_id_hex in self.log_store.existing_logs():
            info = self.metadata.topics.get(topic)
            if (topic, partition) not in known or (topic_id_hex and info and topic_id_hex != info.topic_id):
                log.warning("removing log %s-%d: its topic is not in the metadata (deleted)", topic, partition)
                self.log_store.delete_log(topic, partition)
        for info in self.metadata.topics.values():
            self._open_topic(info, now_ms)
        self.producer_ids = ProducerIdAllocator(self.metadata)

    def _open_topic(self, info: TopicInfo, now_ms: int) -> TopicState:
        topic = TopicState(info.name, uuid.UUID(hex=info.topic_id), dict(info.configs))
        self._refresh_topic_settings(topic)
        log_config = cfg.log_config(self.config, topic.configs)
        for p in range(info.partitions):
            topic.partitions.append(self._open_partition(topic, p, log_config, now_ms))
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic
        return topic

    def _open_partition(self, topic: TopicState, index: int, log_config, now_ms: int) -> PartitionState:
        plog = self.log_store.open_log(topic.name, index, topic.topic_id.hex, log_config, now_ms)
        part = PartitionState(topic, index, plog)
        self._load_producer_state(part)
        plog.roll_listener = functools.partial(self._on_roll, part)
        return part

    # ------------------------------------------------------------------ producer-state snapshots
    def _load_producer_state(self, part: PartitionState) -> None:
        """Rebuild the partition's producer state as Kafka's UnifiedLog.rebuildProducerState /
        ProducerStateManager.loadFromSnapshot: the newest readable snapshot at or below the log
        end offset (an unreadable one is deleted with a warning and an older one tried), then the
        batch headers from the snapshot's offset on; without a snapshot, from the log start. If
        headers were replayed, a snapshot is taken at the log end, so the next start begins there.

        Transactions: transactional batches open their producer's transaction, markers (control
        batches, read whole: their type is in the record key) close it. When the log reset the
        aborted-transaction index of a recovered segment (`Log.txn_index_rebuild_from`), the
        replay starts at a snapshot at or below that segment, so its ABORT markers enter the index
        again (Kafka's LogLoader.recoverSegment rebuilds it with the producer state likewise)."""
        plog = part.log
        start, end = plog.log_start_offset, plog.log_end_offset
        snapshots = plog.producer_snapshots
        replay_from = start
        rebuild_from = plog.txn_index_rebuild_from
        if snapshots is not None:
            loaded = snapshots.load_latest(end if rebuild_from is None else min(end, rebuild_from))
            if loaded is not None:
                offset, entries = loaded
                part.producers.load_snapshot(entries, start)
                part.snapshot_offset = offset
                replay_from = max(offset, start)
        replay = part.producers.replay
        for header in plog.iter_batch_headers(replay_from):
            if header.producer_id < 0:
                continue
            if header.is_control:
                self._replay_marker(part, header)
            else:
                replay(header.producer_id, header.producer_epoch, header.base_sequence,
                       header.last_offset_delta, header.base_offset, header.max_timestamp, header.is_transactional)
        plog.txn_index_rebuild_from = None
        if snapshots is not None and replay_from < end:
            self._take_producer_snapshot(part, end, sync=False)

    @staticmethod
    def _replay_marker(part: PartitionState, header) -> None:
        """A control batch met by the replay: read it and apply its COMMIT/ABORT marker."""
        plog = part.log
        if header.records_count == 0:  # a marker the log cleaner emptied (kept for its producer's epoch):
            return  # its transaction left nothing in the log (Kafka's ProducerAppendInfo.append skips it too)
        try:
            marker = decode_end_txn_marker(plog.read(header.base_offset, header.size_bytes, min_one_batch=True))
        except InvalidControlBatch as exc:  # written by this broker, so a corrupt log: skip it, loudly
            log.error("skipping the unreadable control batch at offset %d of %s-%d while loading producer state: %s",
                      header.base_offset, part.topic.name, part.index, exc)
            return
        if marker is None or marker.offset != header.base_offset:
            return
        part.complete_txn(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.offset,
                          marker.control_type == ControlType.COMMIT)

    def _take_producer_snapshot(self, part: PartitionState, offset: int, *, sync: bool) -> None:
        """Write the producer state as the snapshot at `offset` (the state after every batch below
        it). A no-op for a memory log."""
        snapshots = part.log.producer_snapshots
        if snapshots is None:
            return
        snapshots.write(offset, part.producers.snapshot_entries(), sync=sync)
        part.snapshot_offset = offset

    def _on_roll(self, part: PartitionState, new_base_offset: int) -> None:
        """A segment was rolled (Kafka's UnifiedLog.roll -> ProducerStateManager.takeSnapshot): the
        state covers every batch below the new segment, so it is the snapshot at its base offset.
        Written without fsync on the event loop (Kafka, too, defers that flush): a snapshot a
        power loss tore fails its CRC at start-up and an older one is used."""
        self._take_producer_snapshot(part, new_base_offset, sync=False)

    def _refresh_topic_settings(self, topic: TopicState) -> None:
        values = cfg.resolve_topic_configs(self.config, topic.configs)
        topic.max_message_bytes = int(values["max.message.bytes"])
        topic.log_append_time = values["message.timestamp.type"] == "LogAppendTime"
        topic.compression = target_compression(str(values["compression.type"]), int(values["compression.gzip.level"]),
                                               int(values["compression.lz4.level"]),
                                               int(values["compression.zstd.level"]))
        topic.dlq_enabled = values["errors.deadletterqueue.group.enable"] in (True, "true")
        topic.compacted = "compact" in str(values["cleanup.policy"] or "").split(",")

    def _static_min_isr(self) -> int:
        """min.insync.replicas of the broker's properties (else Kafka's default, 1): the value the
        cluster-level config gets (ConfigurationControlManager.getStaticallyConfiguredMinInsyncReplicas)."""
        return int(self.static_config.get(elr.MIN_ISR))

    def _apply_dynamic_broker_configs(self) -> None:
        assert self.metadata is not None
        self.config = self.static_config.with_dynamic(
            per_broker=self.metadata.broker_configs.get(str(self.node_id), {}),
            cluster_default=self.metadata.broker_configs.get("", {}),
        )

    def close(self) -> None:
        """Take a producer snapshot at each partition's log end (Kafka's clean-shutdown snapshot, so
        the next start replays no batch), close the logs and the journal, release the locks."""
        try:
            for topic in self.topics.values():
                for part in topic.partitions:
                    self._snapshot_on_close(part)
            self.log_store.close()
            self.store.close()
        finally:
            self._release_data_dirs()

    def _snapshot_on_close(self, part: PartitionState) -> None:
        plog = part.log
        health = getattr(plog, "health", None)
        if plog.producer_snapshots is None or getattr(plog, "closed", False):
            return
        if health is not None and not health.online:
            return  # nothing is written to a failed directory
        end = plog.log_end_offset
        if part.snapshot_offset == end or end == 0:
            # nothing new since the last snapshot, or an empty log (no producer to remember): as
            # Kafka's ProducerStateManager.takeSnapshot writes only past its last snapshot's offset
            # (which is 0 for a fresh log). A broker with 50 empty __consumer_offsets partitions
            # otherwise fsyncs 50 snapshot files (and their directory) at every clean stop.
            return
        try:
            self._take_producer_snapshot(part, end, sync=True)
        except OSError as exc:  # the next start replays from an older snapshot
            log.warning("could not write the producer snapshot of %s-%d at offset %d: %s",
                        part.topic.name, part.index, end, exc)

    def _commit(self, records: list[dict]) -> None:
        """Append to the metadata journal, which lives in the log directory: refused while the
        directory is offline; a failure takes it offline (the broker stops, as Kafka halts when its
        metadata log directory fails: ReplicaManager.handleLogDirFailure) and propagates."""
        health = self.log_store.health
        if not health.online:
            raise health.offline_error()
        try:
            self.store.commit(records)
        except OSError as exc:
            health.fail(exc, "append to the metadata journal")
            raise

    # ------------------------------------------------------------------ lookups
    def partition(self, topic: str, index: int) -> PartitionState | None:
        t = self.topics.get(topic)
        if t is None or index < 0 or index >= len(t.partitions):
            return None
        return t.partitions[index]

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str], *, validate_only: bool = False,
                     assignments: bool = False) -> TopicState | None:
        validate_topic_name(name)
        if name in self.topics:
            raise OperationError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise OperationError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
                )
        if num_partitions == -1:
            num_partitions = int(self.config.get("num.partitions"))
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
            raise OperationError(
                ErrorCode.invalid_partitions,
                f"Number of partitions must be in [1, {MAX_PARTITIONS}], got {num_partitions}.",
            )
        if replication_factor not in (-1, 1):
            raise OperationError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        try:
            clean = cfg.validate_topic_configs(configs)
        except cfg.ConfigError as exc:
            raise OperationError(ErrorCode.invalid_config, str(exc)) from exc
        if validate_only:
            return None
        topic_id = uuid.uuid4()
        self._commit([
            {"type": "topic", "name": name, "topic_id": topic_id.hex, "partitions": num_partitions, "configs": clean}
        ])
        assert self.metadata is not None
        topic = self._open_topic(self.metadata.topics[name], self.clock_ms())
        self._notify_topic("created", name)
        return topic

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        """The internal topic `name` (`__share_group_state`, `__consumer_offsets`), created on first
        use with `num_partitions` partitions and `configs`; an existing one is kept as it is (its
        partition count never changes, as Kafka's)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        topic = self.create_topic(name, num_partitions, -1, configs)
        assert topic is not None
        log.info("created internal topic %s with %d partitions", name, num_partitions)
        return topic

    def maybe_auto_create(self, name: str) -> TopicState | None:
        if not self.config.get("auto.create.topics.enable"):
            return None
        try:
            return self.create_topic(name, -1, -1, {})
        except OperationError:
            return self.topics.get(name)

    def delete_topic(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise OperationError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        if not self.config.get("delete.topic.enable"):
            raise OperationError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
        self._commit([{"type": "remove_topic", "name": name}])
        del self.topics[name]
        self.topics_by_id.pop(topic.topic_id, None)
        for part in topic.partitions:
            self.log_store.delete_log(name, part.index)
        self._notify_topic("deleted", name)

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise OperationError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise OperationError(
                ErrorCode.invalid_partitions,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise OperationError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        if count > MAX_PARTITIONS:
            raise OperationError(ErrorCode.invalid_partitions, f"Number of partitions must be at most {MAX_PARTITIONS}.")
        if validate_only:
            return
        self._commit([{"type": "partitions", "name": name, "count": count}])
        log_config = cfg.log_config(self.config, topic.configs)
        now_ms = self.clock_ms()
        for p in range(current, count):
            topic.partitions.append(self._open_partition(topic, p, log_config, now_ms))
        self._notify_topic("partitions", name)

    def set_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise OperationError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        try:
            clean = cfg.validate_topic_configs(configs)
        except cfg.ConfigError as exc:
            raise OperationError(ErrorCode.invalid_config, str(exc)) from exc
        if validate_only:
            return
        self._commit([{"type": "topic_configs", "name": name, "configs": clean}])
        topic.configs = dict(clean)
        self._reconfigure_topic(topic)

    def _reconfigure_topic(self, topic: TopicState) -> None:
        self._refresh_topic_settings(topic)
        log_config = cfg.log_config(self.config, topic.configs)
        for part in topic.partitions:
            part.log.update_config(log_config)

    def set_broker_configs(self, resource: str, configs: dict[str, str], *, validate_only: bool = False,
                           named: Iterable[str] = ()) -> None:
        """Replace the dynamic configs of `resource` (str(node id), or "" for the cluster default).
        `named`: the keys the request names (IncrementalAlterConfigs), which Kafka writes a record for
        even when their value does not change; with the keys whose value does, they are what the ELR
        rules check (core/elr.py: INVALID_CONFIG)."""
        if resource not in ("", str(self.node_id)):
            raise OperationError(ErrorCode.invalid_request, f"Unexpected broker id, expected {self.node_id} or empty string, but received {resource}")
        assert self.metadata is not None
        current = self.metadata.broker_configs.get(resource, {})
        altered = {k: configs.get(k) for k in {*named, *current, *configs} if configs.get(k) != current.get(k)
                   or k in named}
        why = elr.alter_error(resource, altered, self.feature_level(elr.ELR_FEATURE))
        if why is not None:
            raise OperationError(ErrorCode.invalid_config, why)
        per_broker = dict(self.metadata.broker_configs.get(str(self.node_id), {}))
        default = dict(self.metadata.broker_configs.get("", {}))
        if resource == "":
            default = dict(configs)
        else:
            per_broker = dict(configs)
        try:
            new_config = self.static_config.with_dynamic(per_broker=per_broker, cluster_default=default)
        except cfg.ConfigError as exc:
            # Kafka answers INVALID_REQUEST for keys that cannot change dynamically (or not at this
            # level) and INVALID_CONFIG for bad values.
            code = ErrorCode.invalid_request if exc.reason in ("read-only", "per-broker") else ErrorCode.invalid_config
            raise OperationError(code, str(exc)) from exc
        if validate_only:
            return
        self._commit([{"type": "broker_configs", "resource": resource, "configs": dict(configs)}])
        self.config = new_config
        for topic in self.topics.values():
            self._reconfigure_topic(topic)

    # ------------------------------------------------------------------ group configs
    def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's config overrides (GROUP resource), as stored."""
        assert self.metadata is not None
        return dict(self.metadata.group_configs.get(group_id, {}))

    def group_config(self, group_id: str) -> "cfg.ShareGroupConfig":
        """The group's effective share configuration (overrides, else broker defaults). Resolved
        once per group and cached (every ShareFetch asks); the entry is dropped when the group's
        configs change, and is stale as soon as the broker config object is replaced (a dynamic
        broker config changed a default)."""
        cached = self._group_config_cache.get(group_id)
        if cached is not None and cached[0] is self.config:
            return cached[1]
        resolved = cfg.resolve_group_config(self.config, self.group_configs(group_id))
        self._group_config_cache[group_id] = (self.config, resolved)
        return resolved

    def set_group_configs(self, group_id: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace the group's config overrides (validated against the broker's bounds)."""
        if not group_id:
            raise OperationError(ErrorCode.invalid_request, "Group id must not be empty")
        try:
            clean = cfg.validate_group_configs(self.config, configs)
        except cfg.ConfigError as exc:
            raise OperationError(ErrorCode.invalid_config, str(exc)) from exc
        if validate_only:
            return
        self._commit([{"type": "group_configs", "group": group_id, "configs": clean}])
        self._group_config_cache.pop(group_id, None)
        for listener in list(self.group_config_listeners):
            listener(group_id)

    def dynamic_broker_configs(self, resource: str) -> dict[str, str]:
        assert self.metadata is not None
        return dict(self.metadata.broker_configs.get(resource, {}))

    # ------------------------------------------------------------------ features
    def feature_level(self, feature: str) -> int:
        """The finalized level of a feature (0 when the cluster does not have it)."""
        assert self.metadata is not None
        return self.metadata.feature_levels.get(feature, 0)

    @property
    def feature_epoch(self) -> int:
        """ApiVersions' FinalizedFeaturesEpoch: grows with every level change (0 as formatted)."""
        assert self.metadata is not None
        return self.metadata.feature_epoch

    @property
    def share_version(self) -> int:
        return self.feature_level("share.version")

    def set_feature_level(self, feature: str, level: int) -> None:
        """Record a new finalized level (validated by the UpdateFeatures handler). The resolved
        group configs are dropped: what depends on them and on a feature (a group's dead-letter
        queue needs share.version 2) is worked out again. Turning ELR on first writes, in the same
        append, the broker configs it needs (core/elr.py)."""
        assert self.metadata is not None
        records: list[dict] = []
        if feature == elr.ELR_FEATURE and elr.enabled(level):
            records = elr.safety_records(self.metadata.broker_configs, self._static_min_isr())
            if records:
                log.info("%s=%d: writing %s first", feature, level,
                         ", ".join(f"broker resource {r['resource']!r}" for r in records))
        self._commit(records + [{"type": "feature_level", "feature": feature, "level": level}])
        self._group_config_cache.clear()
        if records:
            self._apply_dynamic_broker_configs()
            for topic in self.topics.values():
                self._reconfigure_topic(topic)

    # ------------------------------------------------------------------ client quotas
    @property
    def client_quotas(self) -> dict[tuple, dict[str, float]]:
        """Every entity's client quotas, as replayed from the journal (read-only)."""
        assert self.metadata is not None
        return self.metadata.client_quotas

    def set_client_quotas(self, changes: dict[tuple, dict[str, float]]) -> None:
        """Record each entity's new quotas (a full replacement; empty removes them), as one journal
        append (validated by the AlterClientQuotas handler), then tell the listeners."""
        if not changes:
            return
        self._commit([client_quota_record(entity, quotas) for entity, quotas in changes.items()])
        for listener in list(self.client_quota_listeners):
            listener()

    # ------------------------------------------------------------------ SCRAM credentials
    def commit_metadata(self, records: list[dict]) -> None:
        """Make records of the metadata image durable, then apply them (SCRAM credentials:
        handlers/scram_credentials.py builds them)."""
        self._commit(records)

    # ------------------------------------------------------------------ producers
    def allocate_producer_id(self) -> int:
        assert self.producer_ids is not None
        pid, record = self.producer_ids.next_id()
        if record is not None:
            self._commit([record])
        return pid

    # ------------------------------------------------------------------ listeners
    def _notify_topic(self, event: str, name: str) -> None:
        for listener in list(self.topic_listeners):
            listener(event, name)
