"""The test suite's own set-up stays as README describes it (issue 33).

- the ``ci`` hypothesis profile is derandomized (CI runs are repeatable);
- pytest-xdist runs the suite on every core and .ci/run prints the slowest tests;
- every ``slow`` mark says why in a comment on its line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def test_the_ci_profile_is_derandomized():
    ci = settings.get_profile("ci")
    assert ci.derandomize is True and ci.deadline is None


def test_the_suite_runs_on_every_core_and_ci_prints_the_slowest_tests():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())
    addopts = ini["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert addopts[addopts.index("-n") + 1] == "auto"
    assert any(d.startswith("pytest-xdist") for d in ini["project"]["optional-dependencies"]["test"])
    assert "--durations=25" in (REPO / ".ci" / "run").read_text()


def test_every_slow_mark_says_why():
    """A slow mark (``@pytest.mark.slow`` or a module's ``x = pytest.mark.slow``) has a ``#`` comment on its line or
    on the line above; uses of an alias need none."""
    missing = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "pytest.mark.slow" not in line.split("#", 1)[0]:
                continue
            if "#" not in line and not (n and lines[n - 1].lstrip().startswith("#")):
                missing.append(f"{path.relative_to(REPO)}:{n + 1}")
    assert not missing, f"slow marks without a comment saying why: {missing}"
