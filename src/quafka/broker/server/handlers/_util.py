"""Helpers shared by handler modules: building kio response entities across versions."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing

from kio.index import load_response_schema

from quafka.protocol.errors import ErrorCode

NO_THROTTLE = datetime.timedelta(0)


@functools.lru_cache(maxsize=None)
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.lru_cache(maxsize=None)
def item_class(cls: type, field_name: str) -> type:
    """The entity class of a nested field (`tuple[X, ...]`, `X` or `X | None`) of `cls`."""
    tp = typing.get_type_hints(cls)[field_name]
    while True:
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        elif typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
        else:
            return tp


def make(cls: type, **values):
    """Construct `cls` from the keyword arguments that are its fields (others are ignored)."""
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def make_items(cls: type, field_name: str, items: list[dict]) -> tuple:
    sub = item_class(cls, field_name)
    return tuple(make(sub, **item) for item in items)


def code(value: int | ErrorCode) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


@functools.lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


AUTHORIZED_OPERATIONS_OMITTED = -2147483648
