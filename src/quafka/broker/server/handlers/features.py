"""UpdateFeatures (key 57): `kafka-features.sh upgrade|downgrade` for the features quafka has.

quafka has three features. `share.version` (Kafka's ShareVersion): 1 serves share groups (KIP-932),
2 adds their dead-letter queues (KIP-1191, Kafka 4.4). `transaction.version` (Kafka's
TransactionVersion): 2 lets clients use KIP-890 part 2 (EndTxn v5, implicit AddPartitionsToTxn);
0 and 1 keep them on the KIP-98 protocol. A new cluster starts at 2 for both, as a Kafka 4.4
cluster is formatted. `eligible.leader.replicas.version` (Kafka's EligibleLeaderReplicasVersion,
KIP-966): 1 on a new cluster, which keeps a cluster-level `min.insync.replicas`; upgrading to 1
writes that config first (BrokerState.set_feature_level, core/elr.py), downgrading to 0 only the
feature record. ApiVersions advertises the supported range and the finalized level, which is
where clients (`kafka-features.sh describe`, `Admin.describeFeatures`) read it.

Following Kafka's `FeatureControlManager.updateFeatures`: every update of a request is checked
before any is applied (all or nothing); a lower level needs a downgrade type (v1+; `AllowDowngrade`
in v0); a level outside the supported range, an unknown feature or upgrade type fails with
INVALID_UPDATE_VERSION. Deviation: `share.version` 0 (share groups off) is refused, as quafka serves
share groups whatever the level (docs/dead-letters.md).
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation
from quafka.broker.core.metadata import SUPPORTED_FEATURES
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, make, make_items, response_class

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _check(state, feature: str, level: int, upgrade_type: int) -> str | None:
    """None when the update may be applied, else why not."""
    supported = SUPPORTED_FEATURES.get(feature)
    if supported is None:
        return f"Invalid update version {level} for feature {feature}. The controller does not support this feature."
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"Invalid upgrade type {upgrade_type} for feature {feature}."
    lo, hi = supported
    if not lo <= level <= hi:
        extra = " (quafka serves share groups at every level; 0 cannot be set)" \
            if level == 0 and feature == "share.version" else ""
        return (f"Invalid update version {level} for feature {feature}. Local controller {state.node_id} only "
                f"supports versions {lo}-{hi}{extra}")
    current = state.feature_level(feature)
    if level < current and upgrade_type == UPGRADE:
        return ("Invalid update version {0} for feature {1}. Can't downgrade the version of this feature without "
                "setting the upgrade type to either safe or unsafe downgrade.").format(level, feature)
    return None


@handles(57, 0, 2)
async def handle_update_features(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(57, ctx.api_version)
    # ControllerApis.handleUpdateFeatures: ALTER on the CLUSTER (UpdateFeaturesResponse.createWithErrors:
    # the error at the top level, no results)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", results=())
    results = []
    for update in req.feature_updates:
        if ctx.api_version == 0:
            upgrade_type = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
        else:
            upgrade_type = update.upgrade_type
        results.append((update.feature, int(update.max_version_level), _check(
            state, update.feature, int(update.max_version_level), upgrade_type)))
    names = [feature for feature, _level, _why in results]
    if len(set(names)) != len(names):  # Kafka: INVALID_REQUEST for the request
        duplicate = next(n for n in names if names.count(n) > 1)
        message = f"Feature {duplicate} was specified more than once."
        results = [(feature, level, message) for feature, level, _why in results]
        if ctx.api_version < 2:
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                        error_message=message, results=make_items(resp_cls, "results", [
                            {"feature": feature, "error_code": ErrorCode.invalid_request, "error_message": message}
                            for feature, _level, _why in results]))
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, error_message=message)
    failed = [r for r in results if r[2] is not None]
    if not failed and not getattr(req, "validate_only", False):  # (v1+)
        for feature, level, _ in results:
            if state.feature_level(feature) != level:
                state.set_feature_level(feature, level)
    top_error, top_message = ErrorCode.none, None
    if ctx.api_version >= 2 and failed:
        top_error, top_message = ErrorCode.invalid_update_version, failed[0][2]
    items = [{"feature": feature, "error_code": ErrorCode.invalid_update_version if why else ErrorCode.none,
              "error_message": why} for feature, _level, why in results]
    if failed:  # nothing was applied: the others did not fail on their own, but were not applied either
        items = [i if i["error_message"] else {**i, "error_code": ErrorCode.invalid_update_version,
                                                   "error_message": "Not applied: another update of the request failed."}
                 for i in items]
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=top_error, error_message=top_message,
                results=make_items(resp_cls, "results", items) if ctx.api_version < 2 else ())
