"""What a newcomer meets in the first hour: refusals that come at once, name the option and suggest the fix.

- A misspelled candidate (``--candidate``, ``--against``) or contract is refused before torch is imported,
  with the nearest known name.
- ``--out`` inside a folder that does not exist is refused (one line naming --out), and nothing is created.
- A contract file with a TOML syntax error names its path once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oracle
from contracts.commands import check
from contracts.commands._common import BUILTIN_CONTRACT_NAMES

ROOT = Path(__file__).resolve().parent.parent


def test_the_light_list_of_contract_names_is_the_oracles():
    # The command line refuses a misspelled --contract from this list, without importing oracle (and torch).
    assert BUILTIN_CONTRACT_NAMES == tuple(oracle.BUILTIN_CONTRACTS), "add the oracle's new contract names to this list"


_PROBE = """
import io, json, sys, contextlib
from contracts.commands import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "stderr": err.getvalue(), "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize("command, args, needle", [
    ("check", ["--candidate", "oracel"], "--candidate 'oracel' is not a known candidate (did you mean 'oracle'?)"),
    ("check", ["--candidate", "oracle", "--against", "blok-argmax"], "--against 'blok-argmax' is not a known candidate (did you mean 'block-argmax'?)"),
    ("check", ["--candidate", "oracle", "--contract", "seriall"], "--contract 'seriall' is not a known contract (did you mean 'serial'?)"),
    ("matrix", ["--candidate", "oracle,torch-natve"], "--candidate 'torch-natve' is not a known candidate (did you mean 'torch-native'?)"),
    ("probe", ["--candidate", "radix"], "--candidate 'radix' is not a known candidate (did you mean 'radix4'?)"),
    ("search", ["--candidate", "oracle", "--contract", "aitr"], "--contract 'aitr' is not a known contract (did you mean 'aiter'?)"),
])  # fmt: skip
def test_a_misspelled_name_is_refused_before_torch_is_imported(command, args, needle, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _PROBE, command, *args, "--out", str(tmp_path / "b")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["code"] == 2 and needle in got["stderr"] and len(got["stderr"].strip().splitlines()) == 1, got
    assert not got["torch"], "the refusal came after torch was imported"
    assert not (tmp_path / "b").exists()


def test_out_inside_a_missing_folder_is_refused_and_nothing_is_created(tmp_path, capsys):
    out = tmp_path / "no" / "such" / "bundle"
    assert check.main(["--candidate", "oracle", "--rows", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --out {out}: the folder {out.parent} does not exist") and len(err.splitlines()) == 1
    assert not (tmp_path / "no").exists()


def test_a_toml_syntax_error_names_the_file_once(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "aiter"\nweight_rtol = [\n')
    assert check.main(["--candidate", "oracle", "--contract", str(bad), "--rows", "10", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count(str(bad)) == 1 and len(err.splitlines()) == 1, err
