"""Kafka error codes (kio's ErrorCode enum, snake_case member names) and the protocol's own errors."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "ProtocolError"]


class ProtocolError(Exception):
    """A frame that cannot be served: the connection that sent it is closed."""
