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
import hashlib
import os
from pathlib import Path

from ._builtin import BUILTIN_CONTRACTS
from ._contracts import FIELD_NAMES, FIELD_VALUES, Contract, ContractError

__all__ = ["USER_DIGEST_CHARS", "contract_from_mapping", "load_contract"]

# A user contract is named in reports by its file and this many hex digits of the file's sha256.
USER_DIGEST_CHARS = 12

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
        raw = path.read_bytes()
        data = toml.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ContractError(f"{path}: cannot read the contract file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ContractError(f"{path}: not a UTF-8 text file; a contract file is TOML text") from None
    except toml.TOMLDecodeError as exc:
        raise ContractError(f"{path}: not valid TOML: {exc}") from None
    digest = hashlib.sha256(raw).hexdigest()[:USER_DIGEST_CHARS]
    return contract_from_mapping(data, where=str(path), default_name=path.stem, source=f"{path} sha256:{digest}")


def _unknown_key(where: str, key) -> ContractError:
    close = difflib.get_close_matches(str(key), ("base", *FIELD_NAMES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ContractError(f"{where}: unknown field {key!r}{hint}; the fields are base, {', '.join(FIELD_NAMES)}")


def contract_from_mapping(data: dict, *, where: str = "contract", default_name: str | None = None, source: str | None = None) -> Contract:
    """A contract from a mapping of field values (what ``load_contract`` reads), validated.

    ``source``: what the contract's ``source`` field records (``load_contract``
    gives the file and its digest, followed by the file's own ``source`` text).
    A user contract may not take a built-in contract's name (one that writes
    a built-in out field for field is that built-in).
    """
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
    if source is not None:  # the file and its digest first: reports name a user contract by them
        fields["source"] = source + (f" ({fields['source']})" if fields.get("source") else "")
    fields.setdefault("source", where)
    try:
        contract = Contract(**fields)
    except ContractError as exc:
        raise ContractError(f"{where}: {exc}") from None
    return _not_posing_as_a_builtin(contract, where=where, named="name" in data)


def _not_posing_as_a_builtin(contract: Contract, *, where: str, named: bool) -> Contract:
    """A file may take a built-in's name only by writing that built-in out (it then *is* the built-in)."""
    builtin = BUILTIN_CONTRACTS.get(contract.name)
    if builtin is None:
        return contract
    if contract.replace(summary=builtin.summary, source=builtin.source) == builtin:
        return builtin
    how = "set name = \"...\" to a name of your own" if named else "rename the file or set name = \"...\""
    raise ContractError(f"{where}: name={contract.name!r} is a built-in contract's name, and the file changes its fields; "
                        f"a user contract needs its own name ({how})")
