"""RecordDict <-> protocol message codec, generic over the core's frozen dataclasses.

A request or response of the core is a frozen dataclass whose fields are
numpy arrays or plain scalars.  On the wire it becomes one Flower
``RecordDict`` with exactly two records:

* ``"arrays"``: an ``ArrayRecord`` with one ``Array`` per array field;
* ``"scalars"``: a ``ConfigRecord`` with one entry per scalar field, plus the
  type tag under ``"@type"`` and the contract version the sender speaks under
  ``"@version"`` (neither is a Python identifier, so neither can clash with a
  field name);
* optionally ``"notice"``: a ``ConfigRecord`` whose ``"reason"`` tells a node
  why the server refused its previous reply (see :func:`attach_notice`).

Decoding is strict because a reply comes from another process, possibly
another machine: a record with the wrong names, the wrong message type,
missing or extra fields, a scalar of the wrong type, an array of the wrong
dtype or shape, or a negative count is refused with an error that names the
field, before the server state machine sees it.  Everything the codec checks
is declared once, on the message's own dataclass fields
(``fedhh.protocols.messages``): there is no per-protocol table here.

Versions (``docs/messages.md``, "Compatibility"): the contract is versioned
``MAJOR.MINOR``.  A minor version may only add fields, which a receiver of an
older minor ignores; anything else (a field removed, renamed, retyped or
reshaped, a new meaning) is a new major version.  So a message of the same
major version is decoded strictly, except that a newer minor's fields this
side does not know are ignored; a message of another major version, or with
no version, is refused with a reason naming both versions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedhh.protocols.messages import DIMENSION, message_layout

ARRAYS_RECORD = "arrays"
SCALARS_RECORD = "scalars"
NOTICE_RECORD = "notice"
TYPE_KEY = "@type"
VERSION_KEY = "@version"
REASON_KEY = "reason"
CONTRACT_VERSION = (1, 1)  # (major, minor) of the message contract this code speaks

MessageT = TypeVar("MessageT")


class MessageDecodeError(ValueError):
    """A RecordDict that is not a well-formed encoding of the expected message."""


class VersionMismatch(MessageDecodeError):
    """A message in a contract version this side cannot decode (another major version, or none)."""


def version_text(version: tuple[int, int] = CONTRACT_VERSION) -> str:
    """A version as it travels, ``"MAJOR.MINOR"``."""
    return f"{version[0]}.{version[1]}"


def parse_version(value: Any) -> tuple[int, int]:
    """``"MAJOR.MINOR"`` as a pair; :class:`VersionMismatch` for anything else."""
    major, dot, minor = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise VersionMismatch(
            f'the message carries contract version {value!r}; expected "MAJOR.MINOR" '
            f"(this side speaks {version_text()})"
        )
    return int(major), int(minor)


class MessageCodec(Generic[MessageT]):
    """Encode and strictly decode one message class."""

    def __init__(self, message_type: type[MessageT]) -> None:
        """The codec of ``message_type``, from the wire declarations on its fields."""
        layout = message_layout(message_type)
        self.message_type = message_type
        self.tag = layout.tag
        self.scalar_types = layout.scalars
        self.minimums = layout.minimums
        self.arrays = layout.arrays

    # -- encoding -------------------------------------------------------------------

    def encode(self, message: MessageT) -> RecordDict:
        """The message as a RecordDict (validated, so a bad message never leaves)."""
        if type(message) is not self.message_type:
            raise TypeError(f"expected a {self.tag}, got {type(message).__name__}")
        values = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}  # type: ignore[arg-type]
        scalars = {name: _plain_scalar(values[name]) for name in self.scalar_types}
        arrays = {name: np.asarray(values[name]) for name in self.arrays}
        self._check(scalars, arrays, what="cannot encode")
        config = ConfigRecord({TYPE_KEY: self.tag, VERSION_KEY: version_text(), **scalars})
        array_record = ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in arrays.items()})
        return RecordDict({ARRAYS_RECORD: array_record, SCALARS_RECORD: config})

    # -- decoding -------------------------------------------------------------------

    def decode(self, content: RecordDict) -> MessageT:
        """The message a RecordDict carries; :class:`MessageDecodeError` if malformed."""
        names = set(content.keys()) - {NOTICE_RECORD}
        if names != {ARRAYS_RECORD, SCALARS_RECORD}:
            raise MessageDecodeError(
                f"{self.tag}: expected records {sorted([ARRAYS_RECORD, SCALARS_RECORD])}, got {sorted(names)}"
            )
        config, array_record = content[SCALARS_RECORD], content[ARRAYS_RECORD]
        if not isinstance(config, ConfigRecord) or not isinstance(array_record, ArrayRecord):
            raise MessageDecodeError(
                f"{self.tag}: record {SCALARS_RECORD!r} must be a ConfigRecord and "
                f"{ARRAYS_RECORD!r} an ArrayRecord, got {type(config).__name__} and "
                f"{type(array_record).__name__}"
            )
        tag = config.get(TYPE_KEY)
        if tag != self.tag:
            raise MessageDecodeError(f"expected a {self.tag} message, the record carries {tag!r}")
        newer_minor = _newer_minor(self.tag, config.get(VERSION_KEY))
        scalars = {key: value for key, value in config.items() if key not in (TYPE_KEY, VERSION_KEY)}
        array_names = set(array_record.keys())
        if newer_minor:  # fields a later minor version added: optional by the compatibility rule
            scalars = {key: value for key, value in scalars.items() if key in self.scalar_types}
            array_names &= set(self.arrays)
        _check_names(self.tag, "scalar", set(scalars), set(self.scalar_types))
        _check_names(self.tag, "array", array_names, set(self.arrays))
        arrays = {name: _to_numpy(self.tag, name, array_record[name]) for name in self.arrays}
        self._check(scalars, arrays, what="malformed")
        return self.message_type(**scalars, **arrays)

    # -- validation shared by both directions ---------------------------------------

    def _check(self, scalars: dict[str, Any], arrays: dict[str, np.ndarray], what: str) -> None:
        def fail(field: str, problem: str) -> MessageDecodeError:
            return MessageDecodeError(f"{what} {self.tag}.{field}: {problem}")

        for name, kind in self.scalar_types.items():
            value = scalars[name]
            if type(value) is not kind:
                raise fail(name, f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
            if name in self.minimums and not scalars[name] >= self.minimums[name]:
                raise fail(name, f"must be >= {self.minimums[name]}, got {value!r}")
        symbols: dict[str, tuple[int, str]] = {}
        for name, spec in self.arrays.items():
            array = arrays[name]
            if array.dtype != np.dtype(spec.dtype):
                raise fail(name, f"expected dtype {spec.dtype}, got {array.dtype}")
            if array.ndim != len(spec.shape):
                raise fail(name, f"expected {len(spec.shape)} dimension(s) {spec.shape}, got shape {array.shape}")
            for axis, (dim, size) in enumerate(zip(spec.shape, array.shape)):
                expected = self._dimension(dim, scalars, symbols, name, size)
                if size != expected:
                    raise fail(
                        name,
                        f"axis {axis} ({dim}) must have length {expected}, got shape {array.shape}"
                        + _symbol_origin(dim, symbols),
                    )
            if spec.minimum is not None and array.size and array.min() < spec.minimum:
                raise fail(name, f"values must be >= {spec.minimum}, found {array.min()}")

    def _dimension(
        self, dim: int | str, scalars: dict[str, Any], symbols: dict[str, tuple[int, str]], field: str, size: int
    ) -> int:
        if isinstance(dim, int):
            return dim
        ref = DIMENSION.match(dim)
        assert ref is not None
        if ref["name"] in self.scalar_types:
            offset = int(ref["offset"] or 0) * (-1 if ref["sign"] == "-" else 1)
            return int(scalars[ref["name"]]) + offset
        return symbols.setdefault(dim, (size, field))[0]


def _symbol_origin(dim: int | str, symbols: dict[str, tuple[int, str]]) -> str:
    if isinstance(dim, str) and dim in symbols:
        size, field = symbols[dim]
        return f" ({dim} = {size} from field {field!r})"
    return ""


def _newer_minor(tag: str, value: Any) -> bool:
    """Whether a message's version is a newer minor of this side's major; refuses any other major."""
    if value is None:
        raise VersionMismatch(f"{tag}: the message carries no contract version (this side speaks {version_text()})")
    major, minor = parse_version(value)
    if major != CONTRACT_VERSION[0]:
        raise VersionMismatch(
            f"{tag}: the message speaks contract version {major}.{minor}, this side {version_text()}; "
            f"only major version {CONTRACT_VERSION[0]} can be decoded"
        )
    return minor > CONTRACT_VERSION[1]


def attach_notice(content: RecordDict, reason: str) -> RecordDict:
    """``content`` with a notice telling its receiver why its previous reply was refused."""
    noticed = RecordDict(dict(content.items()))
    noticed[NOTICE_RECORD] = ConfigRecord({REASON_KEY: reason})
    return noticed


def notice_of(content: RecordDict) -> str | None:
    """The reason a message's notice carries, if it has one."""
    record = content.get(NOTICE_RECORD)
    if isinstance(record, ConfigRecord) and isinstance(record.get(REASON_KEY), str):
        return str(record[REASON_KEY])
    return None


def _check_names(tag: str, kind: str, got: set[str], expected: set[str]) -> None:
    missing, extra = sorted(expected - got), sorted(got - expected)
    if missing or extra:
        raise MessageDecodeError(f"{tag}: {kind} fields missing {missing}, unexpected {extra}")


def _to_numpy(tag: str, name: str, array: Array) -> np.ndarray:
    """Deserialise one Array and check it matches its own declared dtype and shape."""
    try:
        value = array.numpy()  # np.load with allow_pickle=False: no object arrays
    except (TypeError, ValueError, OSError, EOFError) as error:
        raise MessageDecodeError(f"malformed {tag}.{name}: cannot read the array ({error})") from None
    if str(value.dtype) != array.dtype or tuple(value.shape) != tuple(array.shape):
        raise MessageDecodeError(
            f"malformed {tag}.{name}: header says {array.dtype}{tuple(array.shape)}, data is {value.dtype}{value.shape}"
        )
    return value


def _plain_scalar(value: Any) -> Any:
    """numpy scalars (np.int64, np.float64, np.bool_) as the Python values they hold."""
    return value.item() if isinstance(value, np.generic) else value


_CODECS: dict[type, MessageCodec[Any]] = {}


def codec_for(message_type: type[MessageT]) -> MessageCodec[MessageT]:
    """The codec of a message class, built once per process."""
    codec = _CODECS.get(message_type)
    if codec is None:
        codec = _CODECS[message_type] = MessageCodec(message_type)
    return codec
