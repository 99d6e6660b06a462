"""quafka: Queues for Kafka (KIP-932 share groups) in Python."""

__version__ = "0.1.0"

__all__ = ["EmbeddedBroker", "__version__"]


def __getattr__(name: str):
    if name == "EmbeddedBroker":
        from .broker.server.embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(name)
