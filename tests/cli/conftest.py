"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest

from quafka import EmbeddedBroker


@pytest.fixture(scope="module")
def bootstrap():
    """One broker for the module: every test uses its own topic and group."""
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers
