"""CreateAcls, DescribeAcls, DeleteAcls over loopback TCP (handlers/acls.py), as Kafka's AclApis answers
them: through confluent-kafka's AdminClient (create_acls / describe_acls / delete_acls) and, for the
errors a client library hides, raw kio requests.

Over the wire the principal is User:ANONYMOUS (authentication is another part of issue 29): the
admin is ANONYMOUS made a super user; without that, ANONYMOUS needs ALTER/DESCRIBE on the CLUSTER."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka import KafkaException
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.static.primitive import i8

from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.broker.core.acl_types import AclOperation as Op
from quafka.broker.core.acl_types import AclPermissionType as Perm
from quafka.broker.core.acl_types import PatternType as PT
from quafka.broker.core.acl_types import ResourceType as RT
from quafka.protocol.errors import ErrorCode
from support import RawClient

pytestmark = pytest.mark.timeout(60)

ADMIN = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)


def acl(rtype, name, principal="User:alice", op=AclOperation.READ, perm=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def creation(rtype=RT.TOPIC, name="t", pattern=PT.LITERAL, principal="User:alice", host="*", op=Op.READ,
             perm=Perm.ALLOW):
    return AclCreation(resource_type=i8(rtype), resource_name=name, resource_pattern_type=i8(pattern),
                       principal=principal, host=host, operation=i8(op), permission_type=i8(perm))


def describe_request(rtype=RT.ANY, name=None, pattern=PT.ANY, principal=None, host=None, op=Op.ANY, perm=Perm.ANY):
    return DescribeAclsRequest(resource_type_filter=i8(rtype), resource_name_filter=name, pattern_type_filter=i8(pattern),
                               principal_filter=principal, host_filter=host, operation=i8(op), permission_type=i8(perm))


def delete_filter(rtype=RT.ANY, name=None, pattern=PT.ANY, principal=None, host=None, op=Op.ANY, perm=Perm.ANY):
    return DeleteAclsFilter(resource_type_filter=i8(rtype), resource_name_filter=name, pattern_type_filter=i8(pattern),
                            principal_filter=principal, host_filter=host, operation=i8(op), permission_type=i8(perm))


def results(futures: dict) -> dict:
    out = {}
    for key, future in futures.items():
        try:
            out[str(key)] = future.result(timeout=10)
        except KafkaException as exc:
            out[str(key)] = exc.args[0].name()
    return out


def test_create_describe_delete_with_confluent_kafka(make_broker):
    broker = make_broker(config=ADMIN)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    read = acl(ResourceType.TOPIC, "orders")
    prefixed = acl(ResourceType.GROUP, "billing-", op=AclOperation.ALL, pattern=ResourcePatternType.PREFIXED)
    deny = acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.WRITE, AclPermissionType.DENY, host="10.0.0.1")
    cluster = acl(ResourceType.BROKER, "kafka-cluster", "User:ops", AclOperation.ALTER)
    bad_cluster = acl(ResourceType.BROKER, "other", "User:ops", AclOperation.ALTER)
    created = results(admin.create_acls([read, prefixed, deny, cluster, bad_cluster]))
    assert created == {str(read): None, str(prefixed): None, str(deny): None, str(cluster): None,
                       str(bad_cluster): "INVALID_REQUEST"}
    assert sorted(map(str, admin.describe_acls(ANY).result(timeout=10))) == sorted(map(str, [read, prefixed, deny, cluster]))
    # MATCH: what applies to group billing-eu (the prefix), not the topic ACLs
    match = AclBindingFilter(ResourceType.GROUP, "billing-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [str(b) for b in admin.describe_acls(match).result(timeout=10)] == [str(prefixed)]
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert [str(b) for b in admin.describe_acls(by_principal).result(timeout=10)] == [str(deny)]
    deleted = admin.delete_acls([by_principal])[by_principal].result(timeout=10)
    assert [str(b) for b in deleted] == [str(deny)]
    assert len(admin.describe_acls(ANY).result(timeout=10)) == 3
    assert len(broker.server.authorizer.index) == 3


def test_acl_apis_without_an_authorizer_answer_security_disabled(make_broker):
    broker = make_broker()
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=(creation(),)))
        assert [r.error_code for r in resp.results] == [ErrorCode.security_disabled]
        resp = raw.request(describe_request())
        assert resp.error_code == ErrorCode.security_disabled and resp.resources == ()
        resp = raw.request(DeleteAclsRequest(filters=(delete_filter(),)))
        assert [r.error_code for r in resp.filter_results] == [ErrorCode.security_disabled]


def test_acl_apis_need_the_cluster_operation(make_broker):
    """AclApis: ALTER on the CLUSTER to create or delete, DESCRIBE to describe (ANONYMOUS is no super user)."""
    broker = make_broker(config={"authorizer.class.name": STANDARD_AUTHORIZER})
    auth = broker.server.authorizer
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=(creation(), creation(name="u"))))
        assert [r.error_code for r in resp.results] == [ErrorCode.cluster_authorization_failed] * 2
        assert raw.request(describe_request()).error_code == ErrorCode.cluster_authorization_failed
        resp = raw.request(DeleteAclsRequest(filters=(delete_filter(),)))
        assert [r.error_code for r in resp.filter_results] == [ErrorCode.cluster_authorization_failed]
        assert len(auth.index) == 0
        # DESCRIBE on the cluster (implied by ALTER) lets ANONYMOUS describe, ALTER lets it create
        from quafka.broker.core.acl import binding
        broker.call(auth.create_acls, [binding(RT.CLUSTER, "kafka-cluster", PT.LITERAL, "User:ANONYMOUS", "*",
                                               Op.DESCRIBE, Perm.ALLOW)])
        resp = raw.request(describe_request())
        assert resp.error_code == ErrorCode.none and [r.resource_type for r in resp.resources] == [RT.CLUSTER]
        resp = raw.request(CreateAclsRequest(creations=(creation(),)))
        assert [r.error_code for r in resp.results] == [ErrorCode.cluster_authorization_failed]
        broker.call(auth.create_acls, [binding(RT.CLUSTER, "kafka-cluster", PT.LITERAL, "User:ANONYMOUS", "*",
                                               Op.ALTER, Perm.ALLOW)])
        resp = raw.request(CreateAclsRequest(creations=(creation(),)))
        assert [r.error_code for r in resp.results] == [ErrorCode.none]


@pytest.mark.parametrize("bad,message", [
    (creation(pattern=PT.MATCH), "Invalid patternType MATCH"),
    (creation(pattern=PT.ANY), "Invalid patternType ANY"),
    (creation(rtype=RT.ANY), "Invalid resourceType ANY"),
    (creation(rtype=99), "Invalid resourceType UNKNOWN"),  # a code no enum value has reads as UNKNOWN
    (creation(op=Op.ANY), "Invalid operation ANY"),
    (creation(perm=Perm.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (creation(name=""), "Invalid empty resource name"),
    (creation(principal="alice"), "principalType:principalName"),
])
def test_bad_bindings_fail_alone_with_invalid_request(make_broker, bad, message):
    broker = make_broker(config=ADMIN)
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=(bad, creation())))
        assert [r.error_code for r in resp.results] == [ErrorCode.invalid_request, ErrorCode.none]
        assert message in resp.results[0].error_message
        assert len(raw.request(describe_request()).resources) == 1


def test_unknown_filters_are_invalid_requests_and_a_delete_reports_per_filter(make_broker):
    broker = make_broker(config=ADMIN)
    with RawClient(broker.bootstrap_servers) as raw:
        raw.request(CreateAclsRequest(creations=(creation(name="a"), creation(name="b"),
                                                 creation(name="a", principal="User:bob"))))
        resp = raw.request(describe_request(pattern=PT.UNKNOWN))
        assert resp.error_code == ErrorCode.invalid_request and "Unknown patternFilter" in resp.error_message
        resp = raw.request(DeleteAclsRequest(filters=(delete_filter(op=Op.UNKNOWN), delete_filter(name="a"),
                                                      delete_filter(name="a", principal="User:bob"))))
        first, second, third = resp.filter_results
        assert first.error_code == ErrorCode.invalid_request and "Unknown entryFilter" in first.error_message
        # both filters report what they matched; the request removed the union once
        assert sorted(m.principal for m in second.matching_acls) == ["User:alice", "User:bob"]
        assert [m.principal for m in third.matching_acls] == ["User:bob"]
        resources = raw.request(describe_request()).resources
        assert [(r.resource_name, [a.principal for a in r.acls]) for r in resources] == [("b", ["User:alice"])]


def test_acls_survive_a_sigkill_of_the_broker(tmp_path, broker_process):
    data = str(tmp_path / "data")
    overrides = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
    proc = broker_process(data, overrides=overrides)
    with RawClient(proc.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=(creation(name="kept"), creation(name="gone"))))
        assert [r.error_code for r in resp.results] == [ErrorCode.none, ErrorCode.none]
        resp = raw.request(DeleteAclsRequest(filters=(delete_filter(name="gone"),)))
        assert len(resp.filter_results[0].matching_acls) == 1
    proc.kill()  # answered means journalled: nothing may be lost
    proc = broker_process(data, port=proc.port, overrides=overrides)
    with RawClient(proc.bootstrap_servers) as raw:
        resources = raw.request(describe_request()).resources
        assert [(r.resource_name, r.pattern_type, [(a.principal, a.operation) for a in r.acls])
                for r in resources] == [("kept", PT.LITERAL, [("User:alice", Op.READ)])]
