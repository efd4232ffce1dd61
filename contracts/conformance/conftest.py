"""Skip the suite, saying how to load the plugin, when pytest runs it without ``contracts.pytest_plugin``."""

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
_HOW = (
    "the conformance suite needs its plugin: "
    "pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate NAME_OR_MODULE:ATTR"
)


def pytest_collection_modifyitems(config, items):
    import contracts.pytest_plugin as plugin

    if config.pluginmanager.is_registered(plugin):
        return
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.skip(reason=_HOW))
