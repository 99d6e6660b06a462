"""server/authorizer.py on a running broker: the StandardAuthorizer set from `authorizer.class.name`,
answering from the ACL records of the metadata journal (replayed again after a restart), deciding by
the connection's ClientSession (principal, client host), logging denials on `quafka.authorizer` at
most DENIAL_LOG_LINES_PER_S a second, counting decisions in the metrics.

Principals other than User:ANONYMOUS come from a ClientSession built here (authentication is
another part of issue 29); the wire tests are in test_acls_api.py."""

from __future__ import annotations

import logging
import tempfile

import pytest

from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.broker.core.acl import ANY_FILTER, binding
from quafka.broker.core.acl_types import AclOperation as Op
from quafka.broker.core.acl_types import AclPermissionType as Perm
from quafka.broker.core.acl_types import PatternType as PT
from quafka.broker.core.acl_types import ResourceType as RT
from quafka.broker.server import authorizer as authorizer_module
from quafka.broker.server.embedded import EmbeddedBroker
from quafka.broker.server.session import ClientSession

pytestmark = pytest.mark.timeout(60)

ACL_CONFIG = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}


def session(name: str, host: str = "10.0.0.1") -> ClientSession:
    return ClientSession(client_host=host, principal_name=name)


def test_no_authorizer_class_means_no_authorizer():
    with EmbeddedBroker() as broker:
        assert broker.server.authorizer is None


def test_decisions_follow_the_journal_acls_and_survive_a_restart():
    read_t = binding(RT.TOPIC, "t", PT.LITERAL, "User:alice", "*", Op.READ, Perm.ALLOW)
    deny_host = binding(RT.TOPIC, "t", PT.LITERAL, "User:alice", "10.0.0.9", Op.READ, Perm.DENY)
    with tempfile.TemporaryDirectory() as data:
        with EmbeddedBroker(data, config=ACL_CONFIG) as broker:
            auth = broker.server.authorizer
            assert broker.call(auth.create_acls, [read_t, deny_host, read_t]) == [None, None, None]
            assert len(auth.index) == 2  # the duplicate made no second ACL (Kafka's existingAcls)
        with EmbeddedBroker(data, config=ACL_CONFIG) as broker:
            auth = broker.server.authorizer
            assert sorted(map(str, auth.acls(ANY_FILTER))) == \
                sorted(map(str, [read_t, deny_host]))
            ask = lambda s, op=Op.READ, name="t": broker.call(auth.authorize, s, op, RT.TOPIC, name)  # noqa: E731
            assert ask(session("alice"))
            assert ask(session("alice"), Op.DESCRIBE)  # implied by READ
            assert not ask(session("alice"), Op.WRITE)
            assert not ask(session("alice", "10.0.0.9"))  # the host DENY
            assert not ask(session("bob"))
            assert not ask(session("alice"), name="u")  # no ACL, allow.everyone.if.no.acl.found=false
            assert ask(session("admin"), Op.DELETE, "u")  # super user
            metrics = broker.server.metrics
            assert (metrics.authorization_allowed, metrics.authorization_denied) == (3, 4)


def test_allow_everyone_if_no_acl_found_allows_only_resources_without_acls():
    config = {**ACL_CONFIG, "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedBroker(config=config) as broker:
        auth = broker.server.authorizer
        broker.call(auth.create_acls, [binding(RT.GROUP, "g", PT.PREFIXED, "User:bob", "*", Op.READ, Perm.ALLOW)])
        assert broker.call(auth.authorize, session("alice"), Op.READ, RT.GROUP, "other")
        assert not broker.call(auth.authorize, session("alice"), Op.READ, RT.GROUP, "g1")
        assert broker.call(auth.authorize, session("bob"), Op.READ, RT.GROUP, "g1")


def test_denials_are_logged_with_a_cap_per_second(caplog, monkeypatch):
    now = [100.0]
    with EmbeddedBroker(config=ACL_CONFIG) as broker:
        auth = broker.server.authorizer
        monkeypatch.setattr(auth, "_clock_s", lambda: now[0])
        caplog.set_level(logging.INFO, logger="quafka.authorizer")
        cap = authorizer_module.DENIAL_LOG_LINES_PER_S
        for _ in range(cap + 30):
            assert not broker.call(auth.authorize, session("mallory", "10.1.1.1"), Op.WRITE, RT.TOPIC, "t")
        lines = [r.getMessage() for r in caplog.records if r.name == "quafka.authorizer"]
        assert len(lines) == cap
        assert lines[0] == ("Principal = User:mallory is Denied operation = WRITE from host = 10.1.1.1 on resource = "
                            "Topic:LITERAL:t based on rule DefaultDeny")
        assert broker.server.metrics.authorizer_log_lines_suppressed == 30
        now[0] += 1.0
        caplog.clear()
        assert not broker.call(auth.authorize, session("mallory"), Op.WRITE, RT.TOPIC, "t")
        lines = [r.getMessage() for r in caplog.records if r.name == "quafka.authorizer"]
        assert lines[0].startswith("30 more authorization denials were not logged") and len(lines) == 2
