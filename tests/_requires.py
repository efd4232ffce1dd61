"""Skips for what a host lacks, with the reason on the skip line.

The GPU host's image brings its own transformers (5.17 when last looked at) and no moto; CI installs the pinned
extras, so there these skips never fire and every test runs. A host that lacks them reports the tests as skipped with
the reason, not as failures of the harness.
"""

import pytest

from kernels.models._table import MIN_TRANSFORMERS


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def transformers_for_models():
    """The installed transformers, or a skip when it is missing or older than the release the model contracts follow."""
    transformers = pytest.importorskip("transformers", reason="the models extra (pip install '.[models]') is not installed")
    if _release(transformers.__version__) < _release(MIN_TRANSFORMERS):
        pytest.skip(f"transformers {transformers.__version__} is older than {MIN_TRANSFORMERS}, the release the model "
                    "contracts follow; pip install -U '.[models]'", allow_module_level=True)  # fmt: skip
    return transformers
