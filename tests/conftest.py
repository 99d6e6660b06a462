import pytest

from quafka import EmbeddedBroker


@pytest.fixture
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def make_broker():
    """Start embedded brokers with custom config/data dirs; all are stopped at the end."""
    started = []

    def start(data_dir=None, config=None):
        b = EmbeddedBroker(data_dir=data_dir, config=config).start()
        started.append(b)
        return b

    yield start
    for b in reversed(started):
        b.stop()
