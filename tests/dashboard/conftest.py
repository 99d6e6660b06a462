"""Fixtures of the dashboard's tests without a browser: a broker with a share group in the middle
of work (two consumers holding records, a rejected record dead-lettered, an acknowledged one, a
record released into a long backoff), records whose keys, values and headers hold markup and
invalid UTF-8, a group whose id is markup; and a way to drive the dashboard's ASGI app with httpx
(``Dash``) on a fresh event loop per call."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, produce
from support.share_client import create_topic

from quafka import EmbeddedBroker
from quafka.client import AcknowledgeType, ShareConsumer

TOPIC = "jobs"
DLQ = "dlq.jobs"
GROUP = "workers"
XSS = "<img src=x onerror=alert(1)>"
MARKUP_KEY = b"<b>key</b>\xff\xfe"
MARKUP_VALUE = b"<script>alert('v')</script>"
BAD_HEADER = ("<i>h</i>", b"\xc3\x28<u>")
BACKOFF_MS = 600_000


def share_consumer(bootstrap: str, group: str, client_id: str, max_records: int) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                          "share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit",
                          "max.poll.records": max_records})


def poll_until(c: ShareConsumer, count: int, timeout_s: float = 15.0) -> list:
    got: list = []
    wait_until(lambda: got.extend(c.poll(0.2)) or len(got) >= count, timeout_s, message=f"{count} records")
    return got


class Scenario:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self.consumers: list[ShareConsumer] = []

    def setup(self) -> "Scenario":
        bs = self.bootstrap
        create_topic(bs, TOPIC, 1)
        create_topic(bs, DLQ, 1, DLQ_TOPIC_CONFIGS)
        for group in (GROUP, XSS):
            set_group_configs(bs, group, {"share.auto.offset.reset": "earliest",
                                          "errors.deadletterqueue.topic.name": DLQ,
                                          "quafka.share.redelivery.backoff.ms": str(BACKOFF_MS)})
        produce(bs, TOPIC, [(MARKUP_KEY, MARKUP_VALUE, [BAD_HEADER])]
                + [(b"k%d" % i, b"job-%d" % i, []) for i in range(1, 12)])
        first = self._consumer(GROUP, "alpha", 4)
        held = poll_until(first, 4)
        first.acknowledge(held[0], AcknowledgeType.ACCEPT)
        first.acknowledge(held[1], AcknowledgeType.REJECT)  # dead-lettered: the DLQ gets a letter
        first.acknowledge(held[2], AcknowledgeType.RELEASE)  # back to AVAILABLE, waiting out the backoff
        assert all(e is None for e in first.commit_sync().values())
        second = self._consumer(GROUP, "beta", 3)
        self.beta_held = poll_until(second, 3)  # offsets 4-6, held by beta; alpha still holds 3
        xss = self._consumer(XSS, "<script>client</script>", 2)
        poll_until(xss, 2)
        return self

    def _consumer(self, group: str, client_id: str, max_records: int) -> ShareConsumer:
        c = share_consumer(self.bootstrap, group, client_id, max_records)
        c.subscribe([TOPIC])
        self.consumers.append(c)
        return c

    def close(self) -> None:
        for c in self.consumers:
            with suppress(Exception):
                c.close()


@pytest.fixture(scope="module")
def scenario():
    with EmbeddedBroker() as broker:
        s = Scenario(broker)
        try:
            yield s.setup()
        finally:
            s.close()


class Dash:
    """Drives a fresh dashboard app (its own Source) over httpx.ASGITransport, one event loop per
    ``run``. ``host`` is the Host header (TrustedHostMiddleware checks it)."""

    def __init__(self, bootstrap: str, **settings) -> None:
        from quafka.dashboard.settings import DashboardSettings

        self.settings = DashboardSettings({"bootstrap.servers": bootstrap}, **settings)

    def run(self, scenario_fn):
        import httpx

        from quafka.dashboard.app import create_app

        async def main():
            app = create_app(self.settings)
            try:
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                             base_url="http://127.0.0.1:8080") as client:
                    return await scenario_fn(client, app)
            finally:
                await app.state.dashboard.hub.close()
                await app.state.dashboard.source.close()

        return asyncio.run(main())

    def get(self, url: str, **kwargs):
        async def go(client, _app):
            return await client.get(url, **kwargs)

        return self.run(go)
