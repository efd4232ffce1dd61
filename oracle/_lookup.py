"""A contract by name, as given, or from a TOML path; built-in names are reserved for the built-ins."""

from __future__ import annotations

import os

from ._builtin import BUILTIN_CONTRACTS
from ._contracts import Contract
from ._toml import load_contract

__all__ = ["contract_label", "get_contract", "is_builtin"]


def is_builtin(contract: Contract) -> bool:
    """``contract`` is one of the built-ins, field for field."""
    return BUILTIN_CONTRACTS.get(contract.name) == contract


def get_contract(contract: str | os.PathLike | Contract) -> Contract:
    """A ``Contract`` as is, a built-in by name, or a user contract from a ``.toml`` path.

    A contract file may not take a built-in's name (``load_contract``), so a
    name the harness prints is always the contract the verdict was earned under.
    """
    if isinstance(contract, Contract):
        return contract
    if isinstance(contract, os.PathLike) or (isinstance(contract, str) and contract.endswith(".toml")):
        return load_contract(contract)
    try:
        return BUILTIN_CONTRACTS[contract]
    except (KeyError, TypeError):
        raise ValueError(
            f"contract={contract!r} is not a known contract; use one of {sorted(BUILTIN_CONTRACTS)} or a .toml path"
        ) from None


def contract_label(contract: Contract) -> str:
    """How reports name ``contract``: a built-in by its name, a user contract by its name, file and digest.

    A user contract's ``source`` (``load_contract``) is its file and sha256
    digest, so two files that share a name are never reported as one.
    """
    if is_builtin(contract) or not contract.source:
        return contract.name
    return f"{contract.name} (user contract {contract.source})"
