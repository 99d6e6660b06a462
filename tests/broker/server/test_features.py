"""`share.version` as Kafka 4.4 has it: advertised in ApiVersions (SupportedFeatures,
FinalizedFeatures), set with UpdateFeatures (kafka-features.sh upgrade/downgrade), all or nothing,
durable across a restart (Kafka's FeatureControlManager.updateFeatures; ShareVersion). And
`eligible.leader.replicas.version` (KIP-966, core/elr.py): 1 on a new cluster, 0 on a data directory
from before quafka had it, and the cluster-level min.insync.replicas that comes with 1."""

from __future__ import annotations

import datetime

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.update_features.v0.request import FeatureUpdateKey as UpdateV0, UpdateFeaturesRequest as RequestV0
from kio.schema.update_features.v1.request import FeatureUpdateKey as UpdateV1, UpdateFeaturesRequest as RequestV1
from kio.schema.update_features.v2.request import FeatureUpdateKey as UpdateV2, UpdateFeaturesRequest as RequestV2

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from support import RawClient

from quafka.protocol.errors import ErrorCode

TIMEOUT = datetime.timedelta(seconds=5)
BROKER = 4
SET, DELETE = 0, 1


def features(raw: RawClient) -> tuple[dict, dict, int]:
    resp = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
    return supported, finalized, resp.finalized_features_epoch


def update(raw: RawClient, feature: str, level: int, upgrade_type: int = 1, validate_only: bool = False):
    return raw.request(RequestV1(timeout=TIMEOUT, validate_only=validate_only, feature_updates=(
        UpdateV1(feature=feature, max_version_level=level, upgrade_type=upgrade_type),)))


def test_a_new_cluster_is_at_share_version_2(broker):
    # eligible.leader.replicas.version: a Kafka 4.1+ cluster is formatted with ELR on
    with RawClient(broker.bootstrap_servers) as raw:
        supported, finalized, epoch = features(raw)
    assert supported == {"eligible.leader.replicas.version": (0, 1), "share.version": (1, 2),
                         "transaction.version": (0, 2)}
    assert finalized == {"eligible.leader.replicas.version": (1, 1), "share.version": (2, 2),
                         "transaction.version": (2, 2)}
    assert epoch == 0


def test_downgrade_needs_a_downgrade_type_and_is_durable(make_broker, tmp_path):
    broker = make_broker(data_dir=str(tmp_path))
    with RawClient(broker.bootstrap_servers) as raw:
        refused = update(raw, "share.version", 1)
        assert refused.results[0].error_code == ErrorCode.invalid_update_version
        assert "downgrade" in refused.results[0].error_message
        assert update(raw, "share.version", 1, upgrade_type=2, validate_only=True).results[0].error_code == 0
        assert features(raw)[1]["share.version"] == (2, 2)  # validate_only changed nothing
        assert update(raw, "share.version", 1, upgrade_type=2).results[0].error_code == ErrorCode.none
        assert (features(raw)[1]["share.version"], features(raw)[2]) == ((1, 1), 1)
    broker.stop()
    again = make_broker(data_dir=str(tmp_path))
    with RawClient(again.bootstrap_servers) as raw:
        assert (features(raw)[1]["share.version"], features(raw)[2]) == ((1, 1), 1)
        assert update(raw, "share.version", 2).results[0].error_code == ErrorCode.none
        assert (features(raw)[1]["share.version"], features(raw)[2]) == ((2, 2), 2)


def test_bad_updates_are_refused_all_or_nothing(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        for feature, level in (("share.version", 3), ("share.version", 0), ("no.such.version", 1)):
            got = update(raw, feature, level, upgrade_type=2)
            assert got.results[0].error_code == ErrorCode.invalid_update_version, (feature, level)
            assert feature in got.results[0].error_message
        both = raw.request(RequestV1(timeout=TIMEOUT, validate_only=False, feature_updates=(
            UpdateV1(feature="share.version", max_version_level=1, upgrade_type=2),
            UpdateV1(feature="no.such.version", max_version_level=1, upgrade_type=1))))
        assert [r.error_code for r in both.results] == [ErrorCode.invalid_update_version] * 2
        assert "Not applied" in both.results[0].error_message  # valid alone, not applied with the other
        v2 = raw.request(RequestV2(timeout=TIMEOUT, validate_only=False, feature_updates=(
            UpdateV2(feature="share.version", max_version_level=7, upgrade_type=1),)))
        assert v2.error_code == ErrorCode.invalid_update_version and "only supports versions 1-2" in v2.error_message
        v0 = raw.request(RequestV0(timeout=TIMEOUT, feature_updates=(
            UpdateV0(feature="share.version", max_version_level=1, allow_downgrade=False),)))
        assert v0.results[0].error_code == ErrorCode.invalid_update_version
        twice = raw.request(RequestV1(timeout=TIMEOUT, validate_only=False, feature_updates=(
            UpdateV1(feature="share.version", max_version_level=1, upgrade_type=2),
            UpdateV1(feature="share.version", max_version_level=1, upgrade_type=2))))
        assert twice.error_code == ErrorCode.invalid_request and "more than once" in twice.error_message
        assert (features(raw)[1]["share.version"], features(raw)[2]) == ((2, 2), 0)


def test_the_epoch_survives_journal_compaction():
    from quafka.broker.core.metadata import ClusterMetadata

    image = ClusterMetadata("c", 1)
    for level in (1, 2, 1):
        image.replay({"type": "feature_level", "feature": "share.version", "level": level})
    again = ClusterMetadata("c", 1)
    for record in image.snapshot_records():
        again.replay(record)
    assert (again.feature_levels, again.feature_epoch) == ({"share.version": 1, "transaction.version": 2}, 3)
    assert ClusterMetadata("c", 1).snapshot_records() == [{"type": "producer_ids", "next": 0}]


def alter(raw, resource_type, name, *configs):
    return raw.request(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=tuple(AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs)),),
        validate_only=False)).responses[0]


def describe(raw, resource_type, name):
    return raw.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None),),
        include_synonyms=True, include_documentation=False)).results[0]


def cluster_min_isr(raw: RawClient) -> str | None:
    result = describe(raw, BROKER, "")
    return next((c.value for c in result.configs if c.name == "min.insync.replicas"), None)


def test_elr_downgrade_keeps_the_config_and_upgrade_writes_it_again(make_broker, tmp_path):
    """FeatureControlManager.updateFeature: a downgrade to 0 needs a downgrade type and writes only the
    feature record; ConfigurationControlManager.updateFeatures: an upgrade to 1 writes the missing
    cluster-level min.insync.replicas (the static value) first and removes a per-broker one."""
    elr = "eligible.leader.replicas.version"
    broker = make_broker(data_dir=str(tmp_path), config={"min.insync.replicas": 3})
    with RawClient(broker.bootstrap_servers) as raw:
        assert cluster_min_isr(raw) == "3"
        refused = update(raw, elr, 0)
        assert refused.results[0].error_code == ErrorCode.invalid_update_version and "downgrade" in refused.results[0].error_message
        assert update(raw, elr, 0, upgrade_type=2).results[0].error_code == ErrorCode.none
        supported, finalized, epoch = features(raw)
        assert (elr in finalized, supported[elr], epoch) == (False, (0, 1), 1)
        assert cluster_min_isr(raw) == "3"  # a downgrade leaves the config
        # with ELR off, the cluster-level one may go and a per-broker one may be set
        assert alter(raw, BROKER, "", ("min.insync.replicas", DELETE, None)).error_code == ErrorCode.none
        assert alter(raw, BROKER, "1", ("min.insync.replicas", SET, "2")).error_code == ErrorCode.none
        assert cluster_min_isr(raw) is None
    broker.stop()
    again = make_broker(data_dir=str(tmp_path), config={"min.insync.replicas": 3})
    with RawClient(again.bootstrap_servers) as raw:
        assert elr not in features(raw)[1] and cluster_min_isr(raw) is None  # durable, not bootstrapped again
        assert update(raw, elr, 1).results[0].error_code == ErrorCode.none
        assert features(raw)[1][elr] == (1, 1)
        assert cluster_min_isr(raw) == "3"
        node = next(c for c in describe(raw, BROKER, "1").configs if c.name == "min.insync.replicas")
        assert (node.value, node.config_source) == ("3", 3)  # the per-broker 2 was removed: DYNAMIC_DEFAULT
    again.stop()
    third = make_broker(data_dir=str(tmp_path))
    with RawClient(third.bootstrap_servers) as raw:
        assert (features(raw)[1][elr], cluster_min_isr(raw)) == ((1, 1), "3")


def test_a_data_dir_from_before_elr_stays_at_0_until_upgraded(make_broker, tmp_path):
    """A journal with records and no level for the feature: a cluster upgraded to a quafka that has
    it, which Kafka leaves at ELR 0 (ActivationRecordsGenerator writes bootstrap records only to an
    empty log)."""
    from quafka.broker.server.metadata_store import MetadataStore

    store = MetadataStore(str(tmp_path), 1)
    store.load()
    store.commit([{"type": "producer_ids", "next": 1000}])
    store.close()
    broker = make_broker(data_dir=str(tmp_path))
    with RawClient(broker.bootstrap_servers) as raw:
        assert "eligible.leader.replicas.version" not in features(raw)[1]
        assert cluster_min_isr(raw) is None
        # nothing to protect at level 0: a per-broker one may be set
        assert alter(raw, BROKER, "1", ("min.insync.replicas", SET, "2")).error_code == ErrorCode.none
        assert update(raw, "eligible.leader.replicas.version", 1).results[0].error_code == ErrorCode.none
        assert cluster_min_isr(raw) == "1"
        assert describe(raw, BROKER, "1").configs and not any(
            c.name == "min.insync.replicas" and c.config_source == 1 for c in describe(raw, BROKER, "1").configs)
        refused = alter(raw, BROKER, "", ("min.insync.replicas", DELETE, None))
        assert refused.error_code == ErrorCode.invalid_config


def test_the_epoch_survives_journal_compaction_with_the_formatted_elr_level():
    from quafka.broker.core import elr
    from quafka.broker.core.metadata import ClusterMetadata

    image = ClusterMetadata("c", 1)
    for record in elr.bootstrap_records(2):
        image.replay(record)
    again = ClusterMetadata("c", 1)
    for record in image.snapshot_records():
        again.replay(record)
    assert (again.feature_levels[elr.ELR_FEATURE], again.feature_epoch) == (1, 0)
    assert again.broker_configs == {"": {"min.insync.replicas": "2"}}
