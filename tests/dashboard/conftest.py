"""Fixtures of the dashboard's tests.

Without a browser: a broker with a share group in the middle of work (two consumers holding records, a
rejected record dead-lettered, an acknowledged one, a record released into a long backoff), records
whose keys, values and headers hold markup and invalid UTF-8, a group whose id is markup; and a way
to drive the dashboard's ASGI app with httpx (``Dash``) on a fresh event loop per call.

In headless Chromium (issue 30, acceptance 1-3 and 5; the test_browser_*.py files): one Chromium
per session (``chromium``/``browser``, support/browser.py), one broker holding the scripted
scenario of support/dashboard_scenario.py (``scenario_broker``) and two dashboards against it,
read-only and with actions (``dashboards``). Chromium and chromedriver are Debian's packages,
installed by `make test` (the Makefile's `browser` target, docs/testing.md); when they are missing
the browser tests FAIL with the reason the Makefile recorded, they never skip. Each browser test
module sets `pytestmark = pytest.mark.xdist_group("browser")`, so under `-n 2 --dist loadgroup` one
worker runs them all: one Chromium and one scenario broker per run. The session fixture quits the
driver and waits until every process below chromedriver is gone, so none outlives the session
(tests/conftest.py's `no_process_outlives_the_session` checks it too).
"""

from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest

from support import dashboard_scenario, set_group_configs, wait_until
from support.browser import Browser, browser_missing_reason, start_chromium, stop_chromium
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


@pytest.fixture(scope="session")
def chromium():
    """The session's headless Chromium (a Selenium WebDriver); fails, never skips, without it."""
    reason = browser_missing_reason()
    if reason is not None:
        pytest.fail(reason, pytrace=False)
    driver = start_chromium()
    yield driver
    left = stop_chromium(driver)
    assert not left, f"Chromium processes outlived driver.quit() (killed): {left}"


@pytest.fixture
def browser(chromium):
    """The session's Chromium for one test: its console log and dialogs start empty, and the test
    ends with neither a dialog nor a console error."""
    chromium.get("about:blank")
    chromium.get_log("browser")  # drop what earlier tests left
    b = Browser(chromium)
    yield b
    b.assert_clean()


@pytest.fixture(scope="session")
def scenario_broker():
    """One broker for the dashboard's browser tests, holding the scripted scenario (support/dashboard_scenario.py)."""
    from quafka import EmbeddedBroker

    with EmbeddedBroker(config=dashboard_scenario.BROKER_CONFIG) as broker:
        built = dashboard_scenario.build(broker.bootstrap_servers)
        try:
            yield broker
        finally:
            built.close()


class Dashboards:
    """Two dashboards against the scenario broker, on one event loop thread (as `quafka dashboard`
    runs, standalone): `readonly` (the default: no actions) and `actions`
    (quafka.dashboard.actions.enable / --enable-actions)."""

    def __init__(self, bootstrap: str) -> None:
        import asyncio
        import threading

        from quafka.dashboard.server import DashboardServer
        from quafka.dashboard.settings import DashboardSettings

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dashboards", daemon=True)
        self.thread.start()
        self.servers = []
        for actions in (False, True):
            settings = DashboardSettings({"bootstrap.servers": bootstrap}, listen="http://127.0.0.1:0",
                                         actions_enabled=actions)
            self.servers.append(self.run(DashboardServer(settings).start()))
        self.readonly, self.actions = (s.url.rstrip("/") for s in self.servers)

    def run(self, coro, timeout_s: float = 20.0):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        import asyncio

        async def cancel_the_rest() -> None:  # e.g. a stream's handler still answering a browser
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            for server in self.servers:
                self.run(server.close())
        finally:
            self.run(cancel_the_rest())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


@pytest.fixture(scope="session")
def dashboards(scenario_broker):
    d = Dashboards(scenario_broker.bootstrap_servers)
    yield d
    d.close()


@pytest.fixture
def admin(scenario_broker):
    from quafka.client import Admin

    with Admin({"bootstrap.servers": scenario_broker.bootstrap_servers}) as a:
        yield a
