"""`share.version` as Kafka 4.4 has it: advertised in ApiVersions (SupportedFeatures,
FinalizedFeatures), set with UpdateFeatures (kafka-features.sh upgrade/downgrade), all or nothing,
durable across a restart (Kafka's FeatureControlManager.updateFeatures; ShareVersion)."""

from __future__ import annotations

import datetime

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.update_features.v0.request import FeatureUpdateKey as UpdateV0, UpdateFeaturesRequest as RequestV0
from kio.schema.update_features.v1.request import FeatureUpdateKey as UpdateV1, UpdateFeaturesRequest as RequestV1
from kio.schema.update_features.v2.request import FeatureUpdateKey as UpdateV2, UpdateFeaturesRequest as RequestV2

from support import RawClient

from quafka.protocol.errors import ErrorCode

TIMEOUT = datetime.timedelta(seconds=5)


def features(raw: RawClient) -> tuple[dict, dict, int]:
    resp = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
    return supported, finalized, resp.finalized_features_epoch


def update(raw: RawClient, feature: str, level: int, upgrade_type: int = 1, validate_only: bool = False):
    return raw.request(RequestV1(timeout=TIMEOUT, validate_only=validate_only, feature_updates=(
        UpdateV1(feature=feature, max_version_level=level, upgrade_type=upgrade_type),)))


def test_a_new_cluster_is_at_share_version_2(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        supported, finalized, epoch = features(raw)
    assert supported == {"share.version": (1, 2), "transaction.version": (0, 2)}
    assert finalized == {"share.version": (2, 2), "transaction.version": (2, 2)}
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
