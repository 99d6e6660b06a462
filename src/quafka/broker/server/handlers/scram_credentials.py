"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): the SCRAM
credentials `kafka-configs.sh --entity-type users` and `Admin.describeUserScramCredentials` /
`alterUserScramCredentials` read and write (KIP-554). The rules are the core's
(core/scram_credentials.py, after Kafka's ScramControlManager and ScramImage); an alteration is
answered only once its records are durable in the metadata journal. Describe needs DESCRIBE on the
CLUSTER (KafkaApis.handleDescribeUserScramCredentialsRequest), Alter needs ALTER on the CLUSTER
(ControllerApis.handleAlterUserScramCredentials): CLUSTER_AUTHORIZATION_FAILED otherwise.
"""

from __future__ import annotations

import logging

from quafka.broker.core.acl_types import AclOperation
from quafka.broker.core.scram_credentials import Deletion, Upsertion, describe, plan_alter
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, make_items, response_class

log = logging.getLogger("quafka.sasl")


@handles(50, 0, 0)
async def handle_describe_user_scram_credentials(ctx, req):
    resp_cls = response_class(50, ctx.api_version)
    users = None if req.users is None else [u.name for u in req.users]
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):  # KafkaApis: DESCRIBE on the CLUSTER
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message=None, results=())
    result_cls = item_class(resp_cls, "results")
    results = [{"user": user, "error_code": ErrorCode(code), "error_message": message,
                "credential_infos": make_items(result_cls, "credential_infos",
                                               [{"mechanism": m, "iterations": i} for m, i in infos])}
               for user, code, message, infos in describe(ctx.server.state.metadata, users)]
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                results=make_items(resp_cls, "results", results))


@handles(51, 0, 0)
async def handle_alter_user_scram_credentials(ctx, req):
    resp_cls = response_class(51, ctx.api_version)
    state = ctx.server.state
    if not authorize_cluster(ctx, AclOperation.ALTER):  # ControllerApis: ALTER on the CLUSTER, every user refused
        names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
        return make(resp_cls, throttle_time=NO_THROTTLE, results=make_items(resp_cls, "results", [
            {"user": name, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None}
            for name in dict.fromkeys(names)]))
    deletions = [Deletion(d.name, int(d.mechanism)) for d in req.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
                  for u in req.upsertions]
    results, records = plan_alter(state.metadata, deletions, upsertions)
    if records:
        try:
            state.commit_metadata(records)
        except Exception as exc:  # noqa: BLE001 - the log directory failed: every change of the request fails
            log.error("could not write SCRAM credential changes from %s to the metadata journal: %s", ctx.peer, exc)
            failed = {r.get("user") for r in records}
            results = [(user, ErrorCode.kafka_storage_error if user in failed else code,
                        "The metadata journal could not be written" if user in failed else message)
                       for user, code, message in results]
    for user, code, message in results:
        if code:
            log.info("AlterUserScramCredentials from %s (%s): user %r refused: %s", ctx.peer, ctx.session.principal,
                     user, message)
        else:
            log.info("AlterUserScramCredentials from %s (%s): credential of user %r changed", ctx.peer,
                     ctx.session.principal, user)
    return make(resp_cls, throttle_time=NO_THROTTLE, results=make_items(resp_cls, "results", [
        {"user": user, "error_code": ErrorCode(code), "error_message": message} for user, code, message in results]))
