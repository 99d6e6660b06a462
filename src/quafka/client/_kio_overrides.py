"""Response schemas the client reads differently from kio: DescribeTransactions v0's
TransactionStartTimeMs is -1 when no transaction runs (Kafka's TransactionMetadata keeps -1 in
state Empty and the broker sends it as is), which kio's datetime reader refuses as a negative
timestamp. Here the field is read as a plain int64 of milliseconds."""

from __future__ import annotations

import dataclasses
import typing

from kio.index import load_response_schema
from kio.static.primitive import i64

__all__ = ["RESPONSE_OVERRIDES"]


def _with_int_field(cls: type, name: str, replace_nested: dict[str, type] | None = None) -> type:
    """A copy of the kio entity `cls` whose field `name` is read as int64 (and whose nested entity
    fields named in `replace_nested` use the given classes)."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        tp, metadata = hints[f.name], dict(f.metadata)
        if f.name == name:
            tp, metadata = i64, {**metadata, "kafka_type": "int64"}
        elif replace_nested and f.name in replace_nested:
            tp = tuple[replace_nested[f.name], ...]
        specs.append((f.name, tp, dataclasses.field(metadata=metadata)))
    new = dataclasses.make_dataclass(cls.__name__, specs, frozen=True, slots=True)
    for attr in ("__version__", "__flexible__", "__api_key__", "__header_schema__"):
        if hasattr(cls, attr):
            setattr(new, attr, getattr(cls, attr))
    return new


def _describe_transactions_v0() -> type:
    resp = load_response_schema(65, 0)
    state = typing.get_args(typing.get_type_hints(resp)["transaction_states"])[0]
    return _with_int_field(resp, "", {"transaction_states": _with_int_field(state, "transaction_start_time")})


RESPONSE_OVERRIDES: dict[tuple[int, int], type] = {(65, 0): _describe_transactions_v0()}
