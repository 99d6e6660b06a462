"""ApiVersions (key 18): the version ranges of every registered handler."""

from __future__ import annotations

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
    return make(
        resp_cls,
        error_code=ErrorCode.none,
        api_keys=make_items(resp_cls, "api_keys", keys),
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
