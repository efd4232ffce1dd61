"""Records <-> JSON: ``from_json`` reads parsed JSON into a record of ``contracts.reports.schema`` (or
``matrix_schema``), refusing a missing field or one of the wrong type with a ``RecordError`` that names the file and
the field; ``to_json`` writes a record as plain JSON data. ``contracts.reports.bundle`` reads and writes every bundle
file through these two."""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any, Union

from .schema import INT64_MAX, READABLE_SCHEMA_VERSIONS, NightlyEnvelope, RecordError

__all__ = ["from_json", "to_json"]


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(tp, value, where: str):
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0] if errors else f"{where}: unexpected null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(f"field {where}: expected an object, got {type(value).__name__}")
        return _record(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            raise RecordError(f"field {where}: {value!r} is not one of {allowed}") from None
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise RecordError(f"field {where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise RecordError(f"field {where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp) or (str, Any)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise RecordError(f"field {where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"field {where}: expected an integer, got {_short(value)}")
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise RecordError(f"field {where}: {_short(value)} is out of range; integers here are from {-INT64_MAX - 1:,} to {INT64_MAX:,}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"field {where}: expected a number, got {_short(value)}")
        try:
            return float(value)
        except OverflowError:
            raise RecordError(f"field {where}: {_short(value)} is out of range for a number (at most about 1.8e308)") from None
    if tp is str:
        if not isinstance(value, str):
            raise RecordError(f"field {where}: expected a string, got {value!r}")
        return value
    raise RecordError(f"field {where}: no rule for type {_type_name(tp)}")


def _short(value) -> str:
    """``repr(value)``, with an integer of many digits shown by its first digits and its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        digits = str(abs(value)) if abs(value).bit_length() < 14000 else None
        return f"{'-' if value < 0 else ''}{digits[:12]}... ({len(digits)} digits)" if digits else "an integer of over 4,000 digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_HINTS: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _record(cls, data: dict, where: str):
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}" if where else f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"field {(where + '.') if where else ''}{f.name} is missing")
    return cls(**values)


def from_json(cls, data, source: str):
    """``data`` (parsed JSON) as a ``cls`` record; ``RecordError`` naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if "schema_version" in {f.name for f in dataclasses.fields(cls)} and version not in READABLE_SCHEMA_VERSIONS:
        if not (cls is NightlyEnvelope and isinstance(version, int)):
            raise RecordError(f"{source}: schema_version {version!r} is not one this harness reads ({READABLE_SCHEMA_VERSIONS})")
    try:
        record = _record(cls, data, "")
    except RecordError as exc:
        raise RecordError(f"{source}: {exc}") from None
    return record.validate(source) if hasattr(record, "validate") else record


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return value  # json writes NaN/Infinity; the readers of this project accept them
    return value


def to_json(record) -> dict:
    """A record as plain JSON data (enums as their values), field order kept."""
    return _plain(record)
