"""Fixtures of the comparison's tests."""

import pytest

from tests.compare.strict_torch import strict_broadcasting


@pytest.fixture
def strict_torch():
    """torch 2.11's ``isclose`` strictness (``tests/compare/strict_torch.py``) for the whole test."""
    with strict_broadcasting():
        yield
