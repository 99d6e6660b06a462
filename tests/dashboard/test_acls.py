"""The dashboard logs in as a broker user and sees what that user's ACLs allow (issue 30: "every
page and action is checked against that user's ACLs"). The broker has SASL/PLAIN and Kafka's
StandardAuthorizer (`allow.everyone.if.no.acl.found=false`); `admin` is a super user, `viewer` may
DESCRIBE group `workers` and topic `jobs` and nothing else. The dashboard never decides access
itself: the broker does, as for any client (ListGroups and Metadata leave out what the user may not
describe, KafkaApis.handleListGroupsRequest / handleTopicMetadataRequest; QuafkaAlterInFlight needs
ALTER on the group, as Kafka's AlterShareGroupOffsets does), and the page shows the refusal."""

from __future__ import annotations

import html
import re

import pytest

from support import wait_until

from quafka import EmbeddedBroker
from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.client import AclBinding, Admin, ShareConsumer
from quafka.dashboard.app import create_app
from quafka.dashboard.csrf import COOKIE, FIELD
from quafka.dashboard.settings import DashboardSettings

class _AnyId:
    def __eq__(self, other) -> bool:
        return other is not None


ANY_ID = _AnyId()
USERS = {"admin": "admin-secret", "viewer": "viewer-secret"}
BROKER = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";",
    "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": False,
}


def login(broker: EmbeddedBroker, user: str) -> dict:
    return {"bootstrap.servers": broker.listener_address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def secured():
    with EmbeddedBroker(config=BROKER) as broker:
        admin_login = login(broker, "admin")
        with Admin(admin_login) as admin:
            assert admin.create_topics({"jobs": (1, 1), "hidden": (1, 1)}) == {"jobs": ANY_ID, "hidden": ANY_ID}
            for group in ("workers", "secret"):
                admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest"})
            admin.create_acls([AclBinding("GROUP", "workers", "LITERAL", "User:viewer", "*", "DESCRIBE", "ALLOW"),
                               AclBinding("TOPIC", "jobs", "LITERAL", "User:viewer", "*", "DESCRIBE", "ALLOW")])
        from confluent_kafka import Producer
        producer = Producer({**admin_login})
        for i in range(4):
            producer.produce("jobs", value=b"job-%d" % i)
            producer.produce("hidden", value=b"x")
        assert producer.flush(30) == 0
        consumers = []
        for group, topic in (("workers", "jobs"), ("secret", "hidden")):
            c = ShareConsumer({**admin_login, "group.id": group, "share.acknowledgement.mode": "explicit"})
            c.subscribe([topic])
            got: list = []
            wait_until(lambda: got.extend(c.poll(0.2)) or got, 15, message=f"{group} holding records")
            consumers.append(c)
        try:
            yield broker
        finally:
            for c in consumers:
                c.close()


def pages(broker, urls, **settings):
    import asyncio

    import httpx

    async def main():
        app = create_app(DashboardSettings(login(broker, "viewer"), **settings))
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080") as c:
                return [await c.get(u) for u in urls] if not callable(urls) else await urls(c, app)
        finally:
            await app.state.dashboard.hub.close()
            await app.state.dashboard.source.close()

    return asyncio.run(main())


def attr(page: str, css_class: str, name: str) -> list[str]:
    return [html.unescape(v) for v in re.findall(rf'<[a-z]+ class="{css_class}[^"]*"[^>]*?\sdata-{name}="([^"]*)"', page)]


def test_pages_show_what_the_dashboards_user_may_describe_and_say_not_authorized_for_the_rest(secured):
    overview, workers, secret = (r.text for r in pages(secured, [
        "/", "/share-group?group=workers&topic=jobs&partition=0", "/share-group?group=secret"]))
    assert attr(overview, "topic", "topic") == ["jobs"]  # Metadata leaves out `hidden`
    assert attr(overview, "group", "group") == ["workers"]  # ListGroups leaves out `secret`
    assert 'data-state="acquired"' in workers and "data-kind=\"not-authorized\"" not in workers
    assert 'data-kind="not-authorized"' in secret and "secret" in secret


def test_an_action_the_user_may_not_take_is_refused_by_the_broker_and_changes_nothing(secured):
    """The confirmation page shows the broker's refusal of the dry run (validate_only) and offers no
    confirm button; a POST made anyway (with a valid CSRF token) is refused by the broker too."""
    url = "/actions/in-flight?group=workers&topic=jobs&partition=0&first=0&last=0&action=release"

    async def go(client, app):
        page = await client.get(url)
        nonce = client.cookies[COOKIE]
        fields = {FIELD: app.state.dashboard.csrf.token_for(nonce), "group": "workers", "topic": "jobs",
                  "partition": "0", "first": "0", "last": "0", "action": "release"}
        done = await client.post("/actions/in-flight", data=fields,
                                 headers={"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"})
        return page, done

    page, done = pages(secured, go, actions_enabled=True)
    text = html.unescape(page.text)
    assert page.status_code == 200 and "not authorized" in text and "GROUP_AUTHORIZATION_FAILED" in text
    assert 'id="confirm-button"' not in page.text and 'id="no-confirm"' in page.text
    assert done.status_code == 200 and "GROUP_AUTHORIZATION_FAILED" in html.unescape(done.text)  # not the 303 of success
    with Admin(login(secured, "admin")) as admin:
        [row] = admin.describe_in_flight("workers", {"jobs": [0]}, offset=0)[("jobs", 0)].ranges
    assert row.state == "ACQUIRED"  # still held by the admin's consumer
