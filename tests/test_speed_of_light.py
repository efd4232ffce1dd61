"""benchmarks/radix4_speed_of_light.py on the CPU: its probes compile for sm_90 and export what the script calls,
its table is read the way its docstring says, and bad arguments are one line. (The probes run only on a GPU.)"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sol():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("radix4_speed_of_light", REPO / "benchmarks" / "radix4_speed_of_light.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_probes_compile_for_sm_90_and_export_the_entries_the_script_calls(sol):
    from kernels._build import compile_shared

    lib = ctypes.CDLL(str(compile_shared(sol.SOURCE, compiler="nvcc", flags=["-O3", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90"])))
    sol.Probes(lib)  # sets the argument types of both entries: a missing one raises AttributeError
    assert hasattr(lib, "radix4_speed_of_light") and hasattr(lib, "radix4_speed_of_light_empty")


def test_the_table_reads_each_column_above_the_floor_of_its_m(sol):
    row = {"shape": "896/16", "M": 1024, **{c: 2.0 for c in sol.COLUMNS}}
    row.update(floor=0.8, empty_pdl=0.7, keys=1.78, radix4=3.01, radix4_pdl=2.5)
    text = sol.render([row], "header")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("above the floor"))
    cells = [round(float(v), 2) for v in lines[at + 2].split()[2:]]
    # read, keys, bound, write, write_16w, read_block, radix4, after_keys = radix4 - keys
    assert cells == [1.2, 0.98, 1.2, 1.2, 1.2, 1.2, 2.21, 1.23]
    assert "1.70 / 1.80" in text.splitlines()[-1]  # radix4 with PDL above the floor / above the PDL floor


@pytest.mark.parametrize("args, named", [(["--m", "0"], "--m"), (["--m", "1,x"], "--m"), (["--shapes", "512/8"], "--shapes"),
                                         (["--rotate", "0"], "--rotate")])  # fmt: skip
def test_bad_arguments_are_one_line_naming_the_argument(sol, tmp_path, capsys, args, named):
    with pytest.raises(SystemExit) as exit_:
        sol.main(["--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and named in err[-1] and "Traceback" not in "\n".join(err), err
