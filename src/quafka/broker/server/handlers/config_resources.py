"""ListConfigResources (key 74; KIP-1142), v0-v1: the resources that have configs.

v0 is Kafka's former ListClientMetricsResources (client-metrics resources only); v1 takes a list of
resource types, empty meaning all of them. As `KafkaApis.handleListConfigResources`: DESCRIBE_CONFIGS
on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED and nothing listed; a type outside the ones the
version knows (v0: CLIENT_METRICS 16; v1: TOPIC 2, BROKER 4, BROKER_LOGGER 8, CLIENT_METRICS 16,
GROUP 32, `ListConfigResourcesRequest.supportedResourceTypes`) UNSUPPORTED_VERSION and nothing
listed. What is listed, in Kafka's order: GROUP, each group with configs set (Kafka's
`GroupConfigManager.groupIds`); CLIENT_METRICS, none (quafka has no client-metrics
subscriptions); BROKER, this node; TOPIC, every topic, internal ones too.

Departure: Kafka lists each broker as a BROKER_LOGGER resource too. quafka does not serve
BROKER_LOGGER configs (DescribeConfigs answers INVALID_REQUEST for type 8), so it lists none rather
than name a resource nothing can describe.
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = {0: frozenset({CLIENT_METRICS}), 1: frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP})}


def _listed(state, types: frozenset[int]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    if GROUP in types:
        out += [(group, GROUP) for group, configs in sorted(state.metadata.group_configs.items()) if configs]
    if BROKER in types:
        out.append((str(state.node_id), BROKER))
    if TOPIC in types:
        out += [(name, TOPIC) for name in sorted(state.topics)]
    return out


@handles(74, 0, 1)
async def handle_list_config_resources(ctx, req):
    resp_cls = response_class(74, ctx.api_version)
    resource_cls = item_class(resp_cls, "config_resources")
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    config_resources=())
    supported = SUPPORTED[ctx.api_version]
    asked = frozenset(getattr(req, "resource_types", ())) or supported
    if not asked <= supported:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_version,
                    config_resources=())
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, config_resources=tuple(
        make(resource_cls, resource_name=name, resource_type=rtype) for name, rtype in _listed(ctx.server.state, asked)))
