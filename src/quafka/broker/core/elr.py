"""Eligible leader replicas (KIP-966): the `eligible.leader.replicas.version` feature and the
cluster-level `min.insync.replicas` it keeps.

quafka is one node, so there is never a replica outside the ISR to track: DescribeTopicPartitions
reports every partition's ELR and last known ELR empty, and nothing here elects anything. What a
client sees of ELR on a Kafka 4.1+ cluster is the feature level and the config rules that come
with it, and those are what this module decides (pure: records in, records or an error out):

- A new cluster is formatted at level 1 (Kafka formats new clusters with ELR on from 4.1,
  `EligibleLeaderReplicasVersion.LATEST_PRODUCTION`), and its first records set the cluster-level
  `min.insync.replicas` to the broker's static value (`ActivationRecordsGenerator.recordsForEmptyLog`:
  with ELR in the bootstrap features, a ConfigRecord for the default broker resource "" is
  appended). A metadata journal that already holds records and no level for the feature is a
  cluster from before quafka had it: it stays at 0 until upgraded, as Kafka leaves an upgraded
  cluster at ELR 0 until `kafka-features.sh upgrade --feature eligible.leader.replicas.version=1`.
- Upgrading to 1 writes, before the feature record and in the same journal append, the cluster-level
  `min.insync.replicas` when it is missing (the static value) and removes a per-broker one
  (`ConfigurationControlManager.maybeGenerateElrSafetyRecords`, called from its `updateFeatures`
  whenever the request sets the feature above 0).
- While the level is 1 or more, removing the cluster-level `min.insync.replicas` and setting or
  deleting a per-broker one are refused with INVALID_CONFIG and Kafka's messages
  (`ConfigurationControlManager.validateAlterConfig`: `isDisallowedClusterMinIsrTransition`,
  `isDisallowedBrokerMinIsrTransition`). Updating the cluster-level value is allowed; on Kafka it
  clears every partition's ELR (`createClearElrRecordsAsNeeded`), and quafka's are always empty.
- Downgrading to 0 (a downgrade type is needed, as for any feature) writes only the feature record
  (`FeatureControlManager.updateFeature`): the cluster-level config stays, and may be removed
  afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping

ELR_FEATURE = "eligible.leader.replicas.version"
ELR_SUPPORTED = (0, 1)
ELR_NEW_CLUSTER_LEVEL = 1  # a Kafka 4.1+ cluster is formatted with ELR on
MIN_ISR = "min.insync.replicas"
CLUSTER_RESOURCE = ""  # the default broker resource: cluster-level dynamic broker configs

CLUSTER_MIN_ISR_REMOVAL_ERROR = f"Cluster-level {MIN_ISR} cannot be removed while ELR is enabled."
BROKER_MIN_ISR_ALTER_ERROR = f"Broker-level {MIN_ISR} cannot be altered while ELR is enabled."


def enabled(level: int) -> bool:
    """FeatureControlManager.isElrFeatureEnabled: level 1 or more."""
    return level >= 1


def safety_records(broker_configs: Mapping[str, Mapping[str, str]], static_min_isr: int) -> list[dict]:
    """The journal records that make it safe to turn ELR on, given every broker resource's dynamic
    configs ("" = cluster level): the cluster-level `min.insync.replicas` set to the static value
    when it has none, and each per-broker one removed. Each record replaces a resource's whole set,
    as quafka's `broker_configs` records do. Empty when nothing is needed."""
    records: list[dict] = []
    cluster = broker_configs.get(CLUSTER_RESOURCE, {})
    if MIN_ISR not in cluster:
        records.append({"type": "broker_configs", "resource": CLUSTER_RESOURCE,
                        "configs": {**cluster, MIN_ISR: str(static_min_isr)}})
    for resource, configs in sorted(broker_configs.items()):
        if resource != CLUSTER_RESOURCE and MIN_ISR in configs:
            records.append({"type": "broker_configs", "resource": resource,
                            "configs": {k: v for k, v in configs.items() if k != MIN_ISR}})
    return records


def bootstrap_records(static_min_isr: int) -> list[dict]:
    """The records a new cluster's empty journal starts with: the cluster-level
    `min.insync.replicas`, then the feature at its new-cluster level. The feature record carries
    epoch 0, so ApiVersions' FinalizedFeaturesEpoch stays 0 (as formatted) on a new cluster."""
    return [
        {"type": "broker_configs", "resource": CLUSTER_RESOURCE, "configs": {MIN_ISR: str(static_min_isr)}},
        {"type": "feature_level", "feature": ELR_FEATURE, "level": ELR_NEW_CLUSTER_LEVEL, "epoch": 0},
    ]


def alter_error(resource: str, altered: Mapping[str, str | None], level: int) -> str | None:
    """Why a change of broker resource `resource` ("" = cluster level) is refused while ELR is on,
    or None. `altered` holds every key the change writes (None: removed), the explicit ones and the
    ones a legacy AlterConfigs drops implicitly."""
    if not enabled(level) or MIN_ISR not in altered:
        return None
    if resource != CLUSTER_RESOURCE:
        return BROKER_MIN_ISR_ALTER_ERROR
    if altered[MIN_ISR] is None:
        return CLUSTER_MIN_ISR_REMOVAL_ERROR
    return None
