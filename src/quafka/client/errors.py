"""The client's exceptions: one small hierarchy under KafkaException.

Every exception carries ``code`` (kio's ``ErrorCode`` when the broker sent one, else None) and
``retriable`` (whether repeating the same call may succeed). Messages name what went wrong and,
where it helps, what is allowed.
"""

from __future__ import annotations

from quafka.protocol.errors import ErrorCode

__all__ = [
    "AuthenticationException",
    "ConfigException",
    "CorruptRecordException",
    "ErrorCode",
    "IllegalStateException",
    "KafkaConnectionError",
    "KafkaException",
    "KafkaTimeoutError",
    "RecordDeserializationException",
    "SaslAuthenticationException",
    "SslAuthenticationException",
    "WakeupException",
    "error_for_code",
]


class KafkaException(Exception):
    """Base of every client error. ``code`` is an ErrorCode or None; ``retriable`` a bool."""

    default_retriable = False

    def __init__(self, message: str, code: ErrorCode | None = None, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        if retriable is None:
            retriable = bool(code.retriable) if code is not None else self.default_retriable
        self.retriable = retriable

    def copy(self) -> "KafkaException":
        """A fresh exception like this one (to raise again without growing its traceback)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        Exception.__init__(new, self.message)
        return new

    def __repr__(self) -> str:
        code = f", code={self.code.name}" if self.code is not None else ""
        return f"{type(self).__name__}({self.message!r}{code}, retriable={self.retriable})"


class KafkaConnectionError(KafkaException):
    """A broker could not be reached, or a connection dropped; always retriable."""

    default_retriable = True


class KafkaTimeoutError(KafkaException):
    """A request or call did not complete within its timeout; retriable."""

    default_retriable = True

    def __init__(self, message: str, code: ErrorCode | None = ErrorCode.request_timed_out,
                 retriable: bool | None = None) -> None:
        super().__init__(message, code, retriable)


class AuthenticationException(KafkaException):
    """The broker could not be authenticated to, or refused who the client says it is: never
    retriable (Kafka's ``AuthenticationException``); a client stops instead of retrying."""

    def __init__(self, message: str, code: ErrorCode | None = ErrorCode.sasl_authentication_failed) -> None:
        super().__init__(message, code, retriable=False)


class SaslAuthenticationException(AuthenticationException):
    """SASL authentication failed: wrong credentials, a mechanism the broker does not enable, or a
    broker that could not prove it knows the SCRAM credentials (Kafka's
    ``SaslAuthenticationException`` / ``UnsupportedSaslMechanismException``)."""


class SslAuthenticationException(AuthenticationException):
    """The TLS handshake failed: the broker's certificate is not trusted or does not name the host,
    or the broker refused the client's certificate (Kafka's ``SslAuthenticationException``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None)


class IllegalStateException(KafkaException):
    """A call that the object's current state does not allow (e.g. use after close)."""


class WakeupException(KafkaException):
    """``wakeup()`` was called from another thread while (or before) a blocking call ran."""


class RecordDeserializationException(KafkaException):
    """A key or value deserializer raised; names the record by topic, partition and offset."""

    def __init__(self, topic: str, partition: int, offset: int, message: str | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(message or f"error deserializing the record at {topic}-{partition} offset {offset}")


class CorruptRecordException(KafkaException):
    """A record batch failed its CRC32C check (``check.crcs``) or does not parse."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.corrupt_message, retriable=False)


class ConfigException(KafkaException):
    """A configuration key that is unknown or a value out of range; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message, ErrorCode.invalid_config, retriable=False)


def error_for_code(code: int | ErrorCode, context: str) -> KafkaException:
    """A KafkaException for a broker error code; ``context`` says what the request was about."""
    error = ErrorCode(code)
    return KafkaException(f"{context}: {error.name.upper()} (error code {int(error)})", error)
