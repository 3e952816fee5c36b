"""What a protocol message looks like on the wire, declared once on its dataclass fields.

Requests and responses are frozen dataclasses whose fields are numpy arrays
or plain scalars (int, float, str, bool).  The field's type says which; what
the type cannot say (an array's dtype and shape, the smallest allowed value)
is declared in the field's metadata with :func:`array_field` and
:func:`scalar_field`, next to the field itself, so any transport can encode
and strictly check every message class without a table of its own
(``strategies.codec`` reads these declarations).

An array's shape entries are literal lengths, scalar-field expressions such
as ``"round-1"`` (the message's ``round`` minus one), or free symbols such
as ``"K"`` that must take the same value in every array of the message
naming it.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ARRAY = "fedhh.array"  # field metadata key of an ArraySpec
MINIMUM = "fedhh.minimum"  # field metadata key of a numeric scalar's smallest value
SCALAR_TYPES: tuple[type, ...] = (bool, int, float, str)

# A shape dimension: a literal length, a scalar field of the message with an
# optional offset ("round", "round-1"), or a free symbol ("K").
DIMENSION = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<sign>[+-])(?P<offset>\d+))?$")


@dataclass(frozen=True)
class ArraySpec:
    """What an array field must look like: dtype, shape, smallest element.

    ``minimum`` is the smallest allowed element (``None``: unbounded); ids,
    symbols and counts are never negative, hence the default 0.
    """

    dtype: str
    shape: tuple[int | str, ...]
    minimum: int | float | None = 0

    def __post_init__(self) -> None:
        np.dtype(self.dtype)  # refuse an unknown dtype name when the field is declared
        for dim in self.shape:
            if isinstance(dim, str) and not DIMENSION.match(dim):
                raise ValueError(f"shape dimension {dim!r} is not NAME, NAME-k or NAME+k")


def array_field(dtype: str, shape: tuple[int | str, ...], minimum: int | float | None = 0) -> Any:
    """A dataclass field holding an array of ``dtype`` and ``shape`` (see :class:`ArraySpec`)."""
    return dataclasses.field(metadata={ARRAY: ArraySpec(dtype, shape, minimum)})


def scalar_field(minimum: int | float) -> Any:
    """A numeric scalar field with its smallest allowed value (an int field has 0 unless declared)."""
    return dataclasses.field(metadata={MINIMUM: minimum})


def summed(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The element-wise int64 sum of equally shaped arrays: what the shards' additive counts combine to."""
    return typing.cast(np.ndarray, np.sum(arrays, axis=0, dtype=np.int64))


MessageT = typing.TypeVar("MessageT")


@typing.dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, array_field, scalar_field))
def message(cls: type[MessageT]) -> type[MessageT]:
    """A protocol message class: a frozen dataclass (``@message`` is ``@dataclass(frozen=True)``, and
    tells type checkers that :func:`array_field` and :func:`scalar_field` declare fields without a
    default)."""
    return dataclass(frozen=True)(cls)


@dataclass(frozen=True)
class MessageLayout:
    """The wire declarations of one message class, read from its fields."""

    message_type: type
    scalars: dict[str, type]
    minimums: dict[str, int | float]
    arrays: dict[str, ArraySpec]

    @property
    def tag(self) -> str:
        return self.message_type.__name__


def message_layout(message_type: type) -> MessageLayout:
    """The layout of a frozen message dataclass; ``TypeError`` names a field declared wrongly."""
    tag = message_type.__name__
    if not (dataclasses.is_dataclass(message_type) and message_type.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"{tag} is not a frozen dataclass")
    hints = typing.get_type_hints(message_type)
    scalars: dict[str, type] = {}
    minimums: dict[str, int | float] = {}
    arrays: dict[str, ArraySpec] = {}
    for field in dataclasses.fields(message_type):
        kind = hints[field.name]
        if kind is np.ndarray:
            if ARRAY not in field.metadata:
                raise TypeError(f"{tag}.{field.name}: an array field needs array_field(dtype, shape)")
            arrays[field.name] = field.metadata[ARRAY]
            continue
        if kind not in SCALAR_TYPES:
            raise TypeError(
                f"{tag}.{field.name}: type {kind!r} is neither np.ndarray nor one of "
                f"{[t.__name__ for t in SCALAR_TYPES]}"
            )
        scalars[field.name] = kind
        if MINIMUM in field.metadata:
            if kind not in (int, float):
                raise TypeError(f"{tag}: minimum given for {field.name!r}, which is not a numeric scalar")
            minimums[field.name] = field.metadata[MINIMUM]
        elif kind is int:
            minimums[field.name] = 0
    for name, spec in arrays.items():
        for dim in spec.shape:
            ref = DIMENSION.match(dim) if isinstance(dim, str) else None
            if ref is not None and ref["offset"] is not None and scalars.get(ref["name"]) is not int:
                raise TypeError(f"{tag}.{name}: dimension {dim!r} offsets {ref['name']!r}, which is not an int field")
    return MessageLayout(message_type, scalars, minimums, arrays)
