"""Cluster metadata as an image built by replaying records.

Records are the truth: every change to topics, their partition counts and configs, dynamic broker
configs and producer-id allocation is first written as a record to the metadata journal (by the
server, durably), then applied here with `replay`. On start-up the server replays the journal and
the image is back where it was. Nothing here does I/O or reads a clock; topic ids come in as
32-character hex strings from the caller's id source.

Record shapes (JSON objects, `type` first):

    {"type": "topic", "name": str, "topic_id": hex, "partitions": int, "configs": {str: str}}
    {"type": "partitions", "name": str, "count": int}
    {"type": "topic_configs", "name": str, "configs": {str: str}}      # full replacement
    {"type": "remove_topic", "name": str}
    {"type": "broker_configs", "resource": str, "configs": {str: str}}  # "" = cluster default
    {"type": "producer_ids", "next": int}                               # ids below are used
    {"type": "group_configs", "group": str, "configs": {str: str}}      # later issues
    {"type": "feature_level", "feature": str, "level": int}             # kafka-features.sh / UpdateFeatures
    {"type": "client_quota", "entity": [[type, name|null], ...], "quotas": {str: float}}  # full replacement
    {"type": "acl", "id": hex, "resource_type": "TOPIC", "name": str, "pattern_type": "LITERAL",
     "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}  # CreateAcls
    {"type": "remove_acl", "id": hex}                                   # DeleteAcls
    {"type": "user_scram_credential", "user": str, "mechanism": "SCRAM-SHA-256" | "SCRAM-SHA-512",
     "salt": base64, "stored_key": base64, "server_key": base64, "iterations": int}  # never a password
    {"type": "remove_user_scram_credential", "user": str, "mechanism": str}
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from . import acl as acls
from .elr import ELR_SUPPORTED
from .scram import SCRAM_MECHANISMS, ScramCredential

METADATA_RECORD_TYPES = (
    "topic",
    "partitions",
    "topic_configs",
    "remove_topic",
    "broker_configs",
    "producer_ids",
    "group_configs",
    "feature_level",
    # -- client quotas (AlterClientQuotas; Kafka's ClientQuotaRecord)
    "client_quota",
    # ACLs (issue 29): Kafka's AccessControlEntryRecord / RemoveAccessControlEntryRecord, one id per ACL
    "acl",
    "remove_acl",
    # -- SCRAM credentials (Kafka's UserScramCredentialRecord / RemoveUserScramCredentialRecord)
    "user_scram_credential",
    "remove_user_scram_credential",
)

# Finalized feature levels of a new cluster (Kafka 4.4 formats with share.version 2: ShareVersion
# LATEST_PRODUCTION = SV_2), and the range this broker supports (ApiVersions SupportedFeatures).
# quafka serves share groups whatever the level, so share.version 0 is refused (docs/dead-letters.md).
# transaction.version (Kafka's TransactionVersion): 2 (KIP-890 part 2: EndTxn v5 bumps the epoch,
# partitions join a transaction implicitly) as Kafka 4.2 formats; 0 and 1 are the KIP-98 protocol.
# eligible.leader.replicas.version (KIP-966, core/elr.py) is not among the defaults: a journal
# without a level for it is a cluster from before quafka had it, at 0 until upgraded; a new cluster's
# first records set it to 1 (elr.bootstrap_records).
DEFAULT_FEATURE_LEVELS = {"share.version": 2, "transaction.version": 2}
SUPPORTED_FEATURES = {"eligible.leader.replicas.version": ELR_SUPPORTED, "share.version": (1, 2),
                      "transaction.version": (0, 2)}

PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass
class TopicInfo:
    name: str
    topic_id: str  # 32 hex chars
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


class MetadataError(Exception):
    """A record that cannot be applied (corrupt journal)."""


@dataclass
class ClusterMetadata:
    cluster_id: str
    node_id: int
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    topics_by_id: dict[str, TopicInfo] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0  # first id not yet handed out in a block written to the journal
    feature_levels: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_FEATURE_LEVELS))
    feature_epoch: int = 0  # level changes replayed (ApiVersions' FinalizedFeaturesEpoch)
    # -- client quotas: entity (sorted (type, name or None for <default>) pairs) -> {key: value}
    client_quotas: dict[tuple, dict[str, float]] = field(default_factory=dict)
    acls: acls.AclIndex = field(default_factory=acls.AclIndex)  # by id and by resource (core/acl.py)
    # SCRAM credentials: user -> mechanism -> credential
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    replayed_records: int = 0  # 0 after start-up: the journal is empty, a new cluster (elr.bootstrap_records)

    def replay(self, record: dict) -> None:
        self.replayed_records += 1
        kind = record.get("type")
        if kind in ("user_scram_credential", "remove_user_scram_credential"):
            self._replay_scram(kind, record)
            return
        try:
            if kind == "topic":
                info = TopicInfo(record["name"], record["topic_id"], int(record["partitions"]), dict(record["configs"]))
                self.topics[info.name] = info
                self.topics_by_id[info.topic_id] = info
            elif kind == "partitions":
                self.topics[record["name"]].partitions = int(record["count"])
            elif kind == "topic_configs":
                self.topics[record["name"]].configs = dict(record["configs"])
            elif kind == "remove_topic":
                info = self.topics.pop(record["name"])
                self.topics_by_id.pop(info.topic_id, None)
            elif kind == "broker_configs":
                configs = dict(record["configs"])
                if configs:
                    self.broker_configs[record["resource"]] = configs
                else:
                    self.broker_configs.pop(record["resource"], None)
            elif kind == "producer_ids":
                self.next_producer_id = max(self.next_producer_id, int(record["next"]))
            elif kind == "group_configs":
                configs = dict(record["configs"])
                if configs:
                    self.group_configs[record["group"]] = configs
                else:
                    self.group_configs.pop(record["group"], None)
            elif kind == "feature_level":
                self.feature_levels[str(record["feature"])] = int(record["level"])
                if "epoch" in record:  # a snapshot record carries the epoch it had
                    self.feature_epoch = max(self.feature_epoch, int(record["epoch"]))
                else:
                    self.feature_epoch += 1
            # -- client quotas
            elif kind == "client_quota":
                entity = tuple(sorted((str(t), None if n is None else str(n)) for t, n in record["entity"]))
                quotas = {str(k): float(v) for k, v in record["quotas"].items()}
                if quotas:
                    self.client_quotas[entity] = quotas
                else:
                    self.client_quotas.pop(entity, None)
            # ACLs (issue 29)
            elif kind == "acl":
                self.acls.add(*acls.from_record(record))
            elif kind == "remove_acl":
                self.acls.remove(str(record["id"]))
            else:
                raise MetadataError(f"unknown metadata record type {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"cannot apply metadata record {record!r}: {exc!r}") from exc

    # -- SCRAM credentials (ScramControlManager.replay)
    def _replay_scram(self, kind: str, record: dict) -> None:
        """Apply a SCRAM credential record. A bad one is reported by type and user only: its salt
        and keys never reach an error message."""
        user = record.get("user")
        try:
            mechanism = str(record["mechanism"])
            if mechanism not in SCRAM_MECHANISMS or not isinstance(user, str):
                raise ValueError("unknown mechanism or no user")
            if kind == "remove_user_scram_credential":
                mechanisms = self.scram_credentials.get(user, {})
                if mechanism not in mechanisms:
                    raise KeyError("no such credential")
                del mechanisms[mechanism]
                if not mechanisms:
                    del self.scram_credentials[user]
                return
            credential = ScramCredential(
                base64.b64decode(record["salt"], validate=True), base64.b64decode(record["stored_key"], validate=True),
                base64.b64decode(record["server_key"], validate=True), int(record["iterations"]))
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise MetadataError(f"cannot apply metadata record of type {kind} for user {user!r}: "
                                f"{type(exc).__name__}") from None
        self.scram_credentials.setdefault(user, {})[mechanism] = credential

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram_credentials.get(user, {}).get(mechanism)

    def snapshot_records(self) -> list[dict]:
        """Records that rebuild this image from nothing (used to compact the journal)."""
        out: list[dict] = [{"type": "producer_ids", "next": self.next_producer_id}]
        for info in self.topics.values():
            out.append(
                {"type": "topic", "name": info.name, "topic_id": info.topic_id, "partitions": info.partitions,
                 "configs": dict(info.configs)}
            )
        for resource, configs in self.broker_configs.items():
            out.append({"type": "broker_configs", "resource": resource, "configs": dict(configs)})
        for group, configs in self.group_configs.items():
            out.append({"type": "group_configs", "group": group, "configs": dict(configs)})
        for feature, level in self.feature_levels.items():  # epoch 0: only the levels set as formatted
            if self.feature_epoch or level != DEFAULT_FEATURE_LEVELS.get(feature, 0):
                out.append({"type": "feature_level", "feature": feature, "level": level, "epoch": self.feature_epoch})
        # -- client quotas
        for entity, quotas in self.client_quotas.items():
            out.append(client_quota_record(entity, quotas))
        # ACLs (issue 29)
        out.extend(acls.to_record(acl_id, acl) for acl_id, acl in self.acls.items())
        # -- SCRAM credentials
        for user, mechanisms in self.scram_credentials.items():
            for mechanism, credential in mechanisms.items():
                out.append(scram_credential_record(user, mechanism, credential))
        return out


def client_quota_record(entity: tuple, quotas: dict[str, float]) -> dict:
    """The record that sets an entity's client quotas (empty `quotas`: removes them)."""
    return {"type": "client_quota", "entity": [list(part) for part in entity], "quotas": dict(quotas)}


def scram_credential_record(user: str, mechanism: str, credential: ScramCredential) -> dict:
    """The journal record of one SCRAM credential (salt and keys, never a password)."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {"type": "user_scram_credential", "user": user, "mechanism": mechanism, "salt": b64(credential.salt),
            "stored_key": b64(credential.stored_key), "server_key": b64(credential.server_key),
            "iterations": credential.iterations}


class ProducerIdAllocator:
    """Hands out producer ids from blocks whose upper bound is recorded before use.

    `next_id()` returns (id, record_or_None): when the current block is exhausted a
    `producer_ids` record must be made durable before the id is handed out, so that a restart
    never hands out an id twice.
    """

    def __init__(self, metadata: ClusterMetadata) -> None:
        self._metadata = metadata
        self._next = metadata.next_producer_id  # ids below the recorded bound may have been used

    def next_id(self) -> tuple[int, dict | None]:
        record = None
        if self._next >= self._metadata.next_producer_id:
            record = {"type": "producer_ids", "next": self._next + PRODUCER_ID_BLOCK_SIZE}
        pid = self._next
        self._next += 1
        return pid, record
