"""Issue 57's limits on size: no module of the harness's run, candidates, cases, reports and compare packages, nor of
the oracle, over ``MAX_MODULE_LINES`` lines, and no function or method there over ``MAX_FUNCTION_LINES``.

A module that long does several jobs and a function that long several steps; the fix is to split them where their
jobs part (docs/checking.md's layout names the modules), not to squeeze lines. Read with ``ast``, so a function's
length is from its ``def`` to its last line (docstring and comments included, decorators not); nested functions and
methods count on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("contracts/run", "contracts/candidates", "contracts/cases", "contracts/reports", "contracts/compare", "oracle")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# Modules over the limits for now (none: contracts/compare/attribution.py, the last one, is the package
# contracts/compare/attribution/ since issue 56); test_every_exception_is_still_over_the_limits fails once one fits.
EXPECTED_OVER: frozenset[str] = frozenset()


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _over_the_limits(text: str, name: str) -> list[str]:
    """What in ``text`` (the source of module ``name``) is over the limits, one line each."""
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno}: function {node.name} is {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_walk_finds_the_packages_and_the_reader_sees_a_long_function_and_module():
    # A broken walk or reader would make the test below pass on nothing.
    names = {_name(p) for p in _modules()}
    assert {"contracts/run/checks.py", "contracts/cases/plan.py", "contracts/reports/bundle.py", "oracle/_route.py"} <= names
    assert len(names) > 100, sorted(names)
    method = ["class A:", "    def method(self):", *(f"        x = {i}" for i in range(MAX_FUNCTION_LINES))]  # one line over
    found = _over_the_limits("\n".join(method) + "\n", "long.py")
    assert found == [f"long.py:2: function method is {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})"], found
    assert _over_the_limits("x = 1\n" * (MAX_MODULE_LINES + 1), "big.py") == [f"big.py: {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})"]
    assert _over_the_limits("x = 1\n" * MAX_MODULE_LINES, "fits.py") == []


def test_no_module_or_function_is_over_the_limits():
    found = [line for path in _modules() if _name(path) not in EXPECTED_OVER
             for line in _over_the_limits(path.read_text(encoding="utf-8"), _name(path))]
    assert not found, f"{len(found)} over the limits; split them where their jobs part:\n" + "\n".join(found)


def test_every_exception_is_still_over_the_limits():
    # An exception that no longer needs its entry would hide the next module or function to grow past the limits.
    fitting = sorted(name for name in EXPECTED_OVER if not _over_the_limits((ROOT / name).read_text(encoding="utf-8"), name))
    assert not fitting, f"{', '.join(fitting)} now fit the limits: take them out of EXPECTED_OVER in tests/test_module_size.py"
