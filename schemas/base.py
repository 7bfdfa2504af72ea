"""The base class of reclaim's Avro records and the typed field readers their ``from_avro`` uses."""

from __future__ import annotations

import abc
import enum
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Self, TypeVar

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.errors import DecodeReason, RecordDecodeError

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
MAX_TIMESTAMP_MILLIS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: Avro's timestamp-millis readers turn longs into datetimes, which end there."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MILLI = timedelta(milliseconds=1)

E = TypeVar("E", bound=enum.Enum)
R = TypeVar("R", bound="AvroRecord")


class AvroRecord(abc.ABC):
    """A frozen dataclass that mirrors one Avro record schema field for field.

    Subclasses set ``SCHEMA`` (loaded from their ``.avsc`` file) and implement ``to_avro`` and
    ``_from_avro``. Enums map to Avro enum symbols by name, nested records to nested dicts.
    """

    SCHEMA: ClassVar[RecordSchema]
    AVRO_ATTRIBUTES: ClassVar[bool] = False
    """True when ``to_avro()`` is each schema field's attribute of the same name, an enum by its name, a
    nested record by its own ``to_avro()`` (its type ``AVRO_ATTRIBUTES`` too), a map from a tuple of
    key-unique pairs, and nothing else: the codec then encodes the record from its attributes, without
    building the dict (its output is checked against fastavro's for every such type)."""

    @abc.abstractmethod
    def to_avro(self) -> dict[str, Any]:
        """The record as the dict fastavro writes (timestamps as epoch millis)."""

    @classmethod
    def from_avro(cls, data: object) -> Self:
        """Build the record from a dict fastavro read (or ``to_avro`` produced).

        Raises
        ------
        RecordDecodeError
            With reason ``INVALID_RECORD`` when a field is missing, of the wrong type, or out of
            range (e.g. an enum symbol this code does not know).
        """
        if not isinstance(data, Mapping):
            raise RecordDecodeError(
                DecodeReason.INVALID_RECORD,
                f"{cls.SCHEMA.name}: expected a mapping, got {type(data).__name__}",
            )
        try:
            return cls._from_avro(data)
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise RecordDecodeError(DecodeReason.INVALID_RECORD, f"{cls.SCHEMA.name}: {exc}") from exc

    @classmethod
    def from_datum(cls, datum: dict[str, Any]) -> Self:
        """Build the record from a datum fastavro read with this type's own schema (``SCHEMA``).

        fastavro has already checked each field's presence and Avro type, so a type may override
        ``_from_datum`` to skip ``from_avro``'s re-checks; the checks of values (enum symbols this
        code knows, timestamp range) stay. ``datum`` is handed over: an override may convert it in place
        and keep it as the record's own, so the caller keeps no reference to it and does not read it again.

        Raises
        ------
        RecordDecodeError
            With reason ``INVALID_RECORD``, as ``from_avro``.
        """
        try:
            return cls._from_datum(datum)
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise RecordDecodeError(DecodeReason.INVALID_RECORD, f"{cls.SCHEMA.name}: {exc}") from exc

    @classmethod
    @abc.abstractmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        """Build from a mapping; raise ValueError or TypeError naming the bad field."""

    @classmethod
    def _from_datum(cls, datum: dict[str, Any]) -> Self:
        return cls._from_avro(datum)


def check_millis(name: str, value: int) -> None:
    """Raise ValueError unless ``value`` is epoch millis that an Avro timestamp-millis reader accepts."""
    if not 0 <= value <= MAX_TIMESTAMP_MILLIS:
        raise ValueError(f"{name} must be epoch millis in [0, {MAX_TIMESTAMP_MILLIS}], got {value}")


def new_incarnation() -> str:
    """A new stream incarnation: 128 random bits as 32 hex digits, made when a stream is created (as Kafka's
    topic ids, KIP-516), so that a stream deleted and created again under its name is another stream."""
    return secrets.token_hex(16)


def millis_now() -> int:
    """The current time as epoch millis, for records' timestamp fields."""
    return (datetime.now(UTC) - _EPOCH) // _ONE_MILLI


def _field(data: Mapping[str, Any], name: str) -> Any:
    if name not in data:
        raise ValueError(f"missing field {name!r}")
    return data[name]


def get_str(data: Mapping[str, Any], name: str) -> str:
    """The string field ``name``."""
    value = _field(data, name)
    if not isinstance(value, str):
        raise TypeError(f"field {name!r} must be a string, got {type(value).__name__}")
    return value


def get_opt_str(data: Mapping[str, Any], name: str) -> str | None:
    """The nullable string field ``name`` (absent counts as null)."""
    return None if data.get(name) is None else get_str(data, name)


def get_long(data: Mapping[str, Any], name: str) -> int:
    """The long field ``name``, checked to fit 64 signed bits."""
    value = _field(data, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"field {name!r} must be an integer, got {type(value).__name__}")
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"field {name!r} does not fit a long: {value}")
    return value


def get_bool(data: Mapping[str, Any], name: str) -> bool:
    """The boolean field ``name``."""
    value = _field(data, name)
    if not isinstance(value, bool):
        raise TypeError(f"field {name!r} must be a boolean, got {type(value).__name__}")
    return value


def get_str_array(data: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The array<string> field ``name``."""
    items = get_array(data, name)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"field {name!r} must hold strings, got {type(item).__name__}")
    return tuple(items)


def get_opt_long(data: Mapping[str, Any], name: str) -> int | None:
    """The nullable long field ``name`` (absent counts as null)."""
    return None if data.get(name) is None else get_long(data, name)


def millis_of(value: datetime | int) -> int:
    """Epoch millis from what fastavro reads for a timestamp-millis field (an aware datetime)."""
    return value if isinstance(value, int) else (value - _EPOCH) // _ONE_MILLI


def get_millis(data: Mapping[str, Any], name: str) -> int:
    """The timestamp-millis field ``name`` as epoch millis; fastavro reads it as an aware datetime."""
    value = _field(data, name)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"field {name!r} is a naive datetime")
        return millis_of(value)
    return get_long(data, name)


def get_enum(data: Mapping[str, Any], name: str, enum_type: type[E]) -> E:
    """The enum field ``name``, from its symbol (or an instance of ``enum_type``)."""
    value = _field(data, name)
    if isinstance(value, enum_type):
        return value
    if not isinstance(value, str) or value not in enum_type.__members__:
        raise ValueError(
            f"field {name!r}: {value!r} is not a {enum_type.__name__} symbol {list(enum_type.__members__)}"
        )
    return enum_type[value]


def get_opt_enum(data: Mapping[str, Any], name: str, enum_type: type[E]) -> E | None:
    """The nullable enum field ``name`` (absent counts as null)."""
    return None if data.get(name) is None else get_enum(data, name, enum_type)


def get_record(data: Mapping[str, Any], name: str, record_type: type[R]) -> R:
    """The nested record field ``name``."""
    return record_type.from_avro(_field(data, name))


def get_opt_record(data: Mapping[str, Any], name: str, record_type: type[R]) -> R | None:
    """The nullable nested record field ``name`` (absent counts as null)."""
    return None if data.get(name) is None else get_record(data, name, record_type)


def get_array(data: Mapping[str, Any], name: str) -> list[Any]:
    """The array field ``name``."""
    value = _field(data, name)
    if not isinstance(value, list | tuple):
        raise TypeError(f"field {name!r} must be an array, got {type(value).__name__}")
    return list(value)


def get_str_map(data: Mapping[str, Any], name: str) -> dict[str, str]:
    """The map<string, string> field ``name``."""
    value = _field(data, name)
    if not isinstance(value, Mapping):
        raise TypeError(f"field {name!r} must be a map, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"field {name!r} must map strings to strings, got {key!r}: {item!r}")
    return dict(value)
