"""User contracts from TOML files: flat keys named like the ``Contract`` fields, optionally on top of a built-in.

::

    base = "deepseek-v3"      # optional: start from a built-in contract
    name = "my-router"        # default: the file name without .toml
    group_mask = 0.0          # any field; floor = "none" unsets the floor

Every error is one line that names the file, the field, the value and what
is allowed (unknown keys too).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ._contracts import FIELD_NAMES, FIELD_VALUES, Contract, ContractError

__all__ = ["contract_from_mapping", "load_contract"]

_REQUIRED_WITHOUT_BASE = ("scoring", "experts", "topk")


def _toml_module():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib


def load_contract(path: str | os.PathLike) -> Contract:
    """The contract a TOML file describes, validated."""
    path = Path(path)
    toml = _toml_module()
    try:
        data = toml.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ContractError(f"{path}: cannot read the contract file ({exc.strerror or exc})") from None
    except toml.TOMLDecodeError as exc:
        raise ContractError(f"{path}: not valid TOML: {exc}") from None
    return contract_from_mapping(data, where=str(path), default_name=path.stem)


def _unknown_key(where: str, key) -> ContractError:
    close = difflib.get_close_matches(str(key), ("base", *FIELD_NAMES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ContractError(f"{where}: unknown field {key!r}{hint}; the fields are base, {', '.join(FIELD_NAMES)}")


def contract_from_mapping(data: dict, *, where: str = "contract", default_name: str | None = None) -> Contract:
    """A contract from a mapping of field values (what ``load_contract`` reads), validated."""
    from ._builtin import BUILTIN_CONTRACTS

    fields = dict(data)
    for key, value in fields.items():
        if isinstance(value, (dict, list)):
            raise ContractError(f"{where}: {key}={value!r} is not allowed; fields are flat values (a string, number or bool)")
        if key != "base" and key not in FIELD_NAMES:
            raise _unknown_key(where, key)
    base_name = fields.pop("base", None)
    if fields.get("floor") == "none":
        fields["floor"] = None
    if base_name is not None:
        if base_name not in BUILTIN_CONTRACTS:
            raise ContractError(f"{where}: base={base_name!r} is not a built-in contract; use one of {sorted(BUILTIN_CONTRACTS)}")
        base = BUILTIN_CONTRACTS[base_name]
        inherited = {k: v for k, v in base.as_dict().items() if k not in ("name", "summary", "source")}
        fields = {**inherited, **fields}
    else:
        for key in _REQUIRED_WITHOUT_BASE:
            if key not in fields:
                allowed = f"use one of {', '.join(map(repr, FIELD_VALUES[key]))}" if key in FIELD_VALUES else "give an int"
                raise ContractError(f"{where}: field {key!r} is required when there is no base; {allowed}")
    fields.setdefault("name", default_name or "user-contract")
    fields.setdefault("summary", f"user contract {fields['name']}" + (f", based on {base_name}" if base_name else ""))
    fields.setdefault("source", where)
    try:
        return Contract(**fields)
    except ContractError as exc:
        raise ContractError(f"{where}: {exc}") from None
