"""ApiVersions (key 18): the version ranges of every registered handler, and (v3+) the features
the broker supports and their finalized levels (`share.version`, `transaction.version`,
`eligible.leader.replicas.version`; handlers/features.py). A level of 0 is not finalized: it is left
out, as Kafka leaves out a feature whose FeatureLevelRecord removed it."""

from __future__ import annotations

from quafka.broker.core.metadata import SUPPORTED_FEATURES
from quafka.protocol.errors import ErrorCode

from ..registry import handles
from ._util import NO_THROTTLE, make, make_items, response_class


@handles(18, 0, 4)
async def handle_api_versions(ctx, req):
    resp_cls = response_class(18, ctx.api_version)
    keys = [
        {"api_key": key, "min_version": lo, "max_version": hi}
        for key, lo, hi in ctx.server.advertised_ranges
    ]
    state = ctx.server.state
    supported = [{"name": name, "min_version": lo, "max_version": hi} for name, (lo, hi) in SUPPORTED_FEATURES.items()]
    finalized = [{"name": name, "max_version_level": level, "min_version_level": level}
                 for name, level in sorted(state.metadata.feature_levels.items()) if level > 0]
    has_features = ctx.api_version >= 3
    return make(
        resp_cls,
        error_code=ErrorCode.none,
        api_keys=make_items(resp_cls, "api_keys", keys),
        throttle_time=NO_THROTTLE,
        supported_features=make_items(resp_cls, "supported_features", supported) if has_features else (),
        # grows with every level change (0: as formatted), like the metadata offset Kafka sends
        finalized_features_epoch=state.feature_epoch if has_features else -1,
        finalized_features=make_items(resp_cls, "finalized_features", finalized) if has_features else (),
        zk_migration_ready=False,
    )
