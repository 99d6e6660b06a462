"""Fixtures of the client tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def create_topic():
    """create_topic(bootstrap, name, partitions=1): a topic made with confluent-kafka's AdminClient."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(bootstrap: str, name: str, partitions: int = 1) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        del admin

    return create
