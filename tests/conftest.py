import pytest

from support import BrokerProcess

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


@pytest.fixture
def broker_process():
    """Start `quafka broker` child processes; any still running are killed at teardown."""
    started = []

    def start(data_dir, **kwargs):
        b = BrokerProcess(data_dir, **kwargs).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.ensure_stopped()
