"""User contracts cannot pose as built-ins, are named by file and digest, and numbers outside sane ranges are refused;
the oracle's modules import without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import oracle

ORACLE = Path(oracle.__file__).resolve().parent


def _oracle_imports(path: Path) -> set[str]:
    """The oracle modules ``path`` imports (relative imports, at any depth: lazy and TYPE_CHECKING ones too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out.add(node.module or "")
    return out


def test_the_oracle_import_graph_has_no_cycle():
    graph = {p.stem: _oracle_imports(p) for p in ORACLE.glob("*.py")}
    state: dict[str, str] = {}

    def visit(module, path):
        state[module] = "open"
        for dep in graph.get(module, ()):
            assert state.get(dep) != "open", f"import cycle: {' -> '.join([*path, dep])}"
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


def _write(tmp_path, text, name="user.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, name", [
    ('base = "aiter"\nweight_rtol = 0.5\n', "aiter.toml"),  # the name from the file name
    ('base = "aiter"\nname = "aiter"\nweight_rtol = 0.5\n', "mine.toml"),  # the name written out
    ('base = "serial"\nname = "aiter"\n', "mine.toml"),  # another built-in's fields under aiter's name
])  # fmt: skip
def test_a_user_contract_may_not_take_a_builtin_name(tmp_path, text, name):
    path = _write(tmp_path, text, name)
    with pytest.raises(oracle.ContractError) as info:
        oracle.get_contract(str(path))
    message = str(info.value)
    assert "\n" not in message and "'aiter' is a built-in contract's name" in message and "needs its own name" in message


def test_a_file_that_writes_a_builtin_out_is_that_builtin(tmp_path):
    path = _write(tmp_path, 'base = "aiter"\nname = "aiter"\nsummary = "mine"\n', "mine.toml")
    assert oracle.load_contract(path) is oracle.BUILTIN_CONTRACTS["aiter"]


def test_a_user_contract_is_named_by_its_file_and_digest(tmp_path):
    one = oracle.load_contract(_write(tmp_path, 'base = "aiter"\nname = "lab"\nweight_rtol = 0.5\n', "a.toml"))
    two = oracle.load_contract(_write(tmp_path, 'base = "aiter"\nname = "lab"\nweight_rtol = 0.25\n', "b.toml"))
    assert one.name == two.name == "lab"
    label_one, label_two = oracle.contract_label(one), oracle.contract_label(two)
    assert label_one != label_two
    assert label_one.startswith("lab (user contract ") and str(tmp_path / "a.toml") in label_one and "sha256:" in label_one
    assert oracle.contract_label(oracle.get_contract("aiter")) == "aiter"


@pytest.mark.parametrize("line, field, bound", [
    ("experts = 1000000000000", "experts", "[1, 65536]"),
    ("near_tie_ulp = 100000000000000000000000000000", "near_tie_ulp", "[0, 8388608]"),
    ("near_tie_x_ulp = 1e30", "near_tie_x_ulp", "[0, 8388608]"),
    ("weight_rtol = 1e30", "weight_rtol", "[0, 1]"),
    ("weight_atol = 2.0", "weight_atol", "[0, 1]"),
    ("routed_scaling_factor = 1e300", "routed_scaling_factor", "[-1000000, 1000000]"),
    ("floor = -1e300", "floor", "[-3.4e+38, 3.4e+38]"),
])  # fmt: skip
def test_toml_numbers_outside_sane_ranges_are_one_line_naming_the_field_and_range(tmp_path, line, field, bound):
    path = _write(tmp_path, f'base = "serial"\nname = "big"\n{line}\n')
    with pytest.raises(oracle.ContractError) as info:
        oracle.load_contract(path)
    message = str(info.value)
    assert "\n" not in message and f"{field}=" in message and bound in message, message


def test_a_check_names_a_user_contract_by_file_and_digest(tmp_path):
    import json

    from contracts.check import main

    path = _write(tmp_path, 'base = "aiter"\nname = "lab"\n', "lab.toml")
    out = tmp_path / "bundle"
    code = main(["--candidate", "oracle", "--contract", str(path), "--rows", "200", "--no-isolate", "--out", str(out), "--quiet",
                 "--families", "random_fp32"])  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["contract"].startswith("lab (user contract ") and "sha256:" in summary["contract"]
    assert str(path) in summary["contract"] and "lab (user contract" in (out / "report.md").read_text()
