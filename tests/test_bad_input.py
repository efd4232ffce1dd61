"""Bad input everywhere: one line naming the argument and the fix, exit 2; the routing API raises only what it documents.

Command line: every malformed argument of ``contracts.check`` gives exit 2
and a single ``error: ...`` line on stderr that names the argument.

Routing API: hypothesis throws random shapes, dtypes, strides, devices,
top-k values and odd argument types at ``oracle.route`` and at the
candidates' route callables, and checks that the only exceptions are the
documented ones (``oracle.RoutingArgumentError`` from the oracle,
``ValueError`` from our kernels' wrappers), never an IndexError or a
RuntimeError from inside torch, and that valid arguments are never refused.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import oracle
from contracts.check import main

# ---------------------------------------------------------------- the command line


def _usage(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("call", ["sweep_sizes", "tail_sizes"])
@pytest.mark.parametrize("args, name", [(("many",), "max_batch="), ((-1,), "max_batch="), ((True,), "max_batch="),
                                        ((100, (7, "x")), "points="), ((100, 7), "points=")])  # fmt: skip
def test_the_plans_batch_sizes_refuse_what_is_not_a_batch_size_in_one_line(call, args, name):
    import sys

    import contracts.cases.batch_sizes  # noqa: F401

    with pytest.raises(ValueError, match=name) as info:
        getattr(sys.modules["contracts.cases.batch_sizes"], call)(*args)
    assert "\n" not in str(info.value) and "pass " in str(info.value)


@pytest.mark.parametrize(
    "argv, names, fix",
    [
        (["--candidate", "no-such-router"], "no-such-router", "known: "),
        (["--candidate", "oracle", "--against", "no-such-router"], "--against", "known: "),
        (["--candidate", "tests.planted.healthy:", "--no-isolate"], "--candidate", "package.module:attr"),
        (["--candidate", "tests.planted.healthy:no_such_attr", "--no-isolate"], "no_such_attr", "--candidate"),
        (["--candidate", "no_such_module_xyz:route", "--no-isolate"], "no_such_module_xyz", "No module named"),
        (["--candidate", "oracle", "--families", "random_bf16,no_such_family"], "--families", "known: random_bf16"),
        (["--candidate", "oracle", "--rows", "0"], "--rows", "e.g. --rows"),
        (["--candidate", "oracle", "--rows", "-5"], "--rows", "e.g. --rows"),
        (["--candidate", "oracle", "--rows", "many"], "--rows", "e.g. --rows"),
        (["--candidate", "oracle", "--shard", "3/2"], "--shard", "e.g. --shard 1/2"),
        (["--candidate", "oracle", "--shard", "half"], "--shard", "I/N"),
        (["--candidate", "oracle", "--timeout", "0"], "--timeout", "e.g. --timeout 60"),
        (["--candidate", "oracle", "--timeout", "-1"], "--timeout", "e.g. --timeout 60"),
        (["--candidate", "oracle", "--repeat", "0"], "--repeat", "e.g. --repeat"),
        (["--candidate", "oracle", "--topk", "20", "--experts", "16"], "--topk", "--topk <= 16"),
        (["--candidate", "oracle", "--contract", "nope"], "--contract", "choose from"),
        (["--candidate", "oracle", "--device", "tpu"], "--device", "use cpu or cuda"),
        (["--candidate", "oracle", "--replay", "random_bf16:12"], "--replay", "FAMILY:SEED:ROWS"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:grad-sideways"], "--replay", ":grad-on|off|inference"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:bias_parameter-x"], "--replay", ":bias_parameter-frozen|trainable"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:logits_offset-99999"], "--replay", ":logits_offset-N"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:autocast-fp8"], "--replay", ":autocast-fp16"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:autocast:autocast-fp16"], "--replay", ":autocast"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:deterministic-1"], "--replay", ":deterministic"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:default_dtype-fp16"], "--replay", ":default_dtype-bf16"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:grad-off:logits_grad"], "--replay", "logits_grad needs grad on"),
        (["--candidate", "oracle", "--replay", "random_fp32:1:64:zero_bias-1"], "--replay", ":zero_bias"),
        (["--rows", "10"], "--candidate", "required"),
    ],
)
def test_bad_argument_is_one_line_naming_the_argument(capsys, tmp_path, argv, names, fix):
    code, err = _usage(capsys, [*argv, "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert names in err and fix in err, err


def test_unknown_candidate_lists_the_known_ones(capsys, tmp_path):
    code, err = _usage(capsys, ["--candidate", "radix5", "--out", str(tmp_path)])
    assert code == 2
    for known in ("oracle", "torch-native", "aiter-model", "radix4", "serial", "block-argmax"):
        assert known in err


def test_unwritable_out_names_out(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = _usage(capsys, ["--candidate", "oracle", "--rows", "10", "--out", str(blocker / "bundle")])
    assert code == 2 and len(err.splitlines()) == 1
    assert "--out" in err and "not writable" in err and "choose another directory" in err


@pytest.mark.parametrize("isolate", ["--isolate", "--no-isolate"])
def test_module_that_fails_to_import_shows_its_error_and_where(capsys, tmp_path, isolate):
    code, err = _usage(capsys, ["--candidate", "tests.planted.broken_import:route", isolate, "--rows", "10", "--out", str(tmp_path)])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "ImportError: planted: the native backend libplanted.so is not installed" in err
    assert "broken_import.py:3" in err  # the line that failed, from the traceback


# ---------------------------------------------------------------- the routing API

_DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])
_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.bool, torch.complex64]
_SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 30.0, -30.0, 1.0]
_ODD_TOPK = [2.0, True, "4", None, np.int64(2), torch.tensor(2), -1, 0]
_ODD_FLAGS = [1, 0, None, "yes", np.bool_(True)]
_ODD_SCALES = [math.nan, math.inf, -math.inf, True, "2.5", None, 3, -1.0, 0.0, np.float32(2.5)]


@st.composite
def routing_calls(draw, devices=("cpu",)):
    """(scores, bias, topk, renormalize, routed_scaling_factor, valid): random, often malformed, arguments."""
    device = draw(st.sampled_from(devices))
    rows, experts = draw(st.integers(0, 5)), draw(st.integers(0, 40))
    layout = draw(st.sampled_from(["contiguous", "contiguous", "row_strided", "transposed", "1d", "3d", "list", "numpy"]))
    dtype = draw(st.sampled_from(_DTYPES[:2] * 3 + _DTYPES[2:]))
    fill = draw(st.sampled_from(["normal", "special", "equal"]))
    values = torch.randn(rows, experts)
    if fill == "special":
        values = torch.tensor(_SPECIAL)[torch.randint(0, len(_SPECIAL), (rows, experts))]
    elif fill == "equal":
        values = torch.ones(rows, experts)
    base = values.to(dtype) if dtype != torch.bool else values > 0
    if layout == "row_strided":
        wide = torch.zeros(rows, experts + 7, dtype=base.dtype)
        wide[:, 3 : 3 + experts] = base
        scores = wide[:, 3 : 3 + experts]
    elif layout == "transposed":
        scores = base.t().contiguous().t()
    elif layout == "1d":
        scores = base.reshape(-1)
    elif layout == "3d":
        scores = base.reshape(1, rows, experts)
    elif layout == "list":
        scores = values.tolist()
    elif layout == "numpy":
        scores = values.numpy()
    else:
        scores = base
    if isinstance(scores, torch.Tensor) and device != "cpu":
        scores = scores.to(device)
    bias_kind = draw(st.sampled_from(["ok", "ok", "ok", "bf16", "long", "short", "2d", "int", "list", "other_device", "strided"]))
    bias = {
        "ok": lambda: torch.randn(experts) * 0.1,
        "bf16": lambda: (torch.randn(experts) * 0.1).bfloat16(),
        "long": lambda: torch.zeros(experts + 1),
        "short": lambda: torch.zeros(max(experts - 1, 0)),
        "2d": lambda: torch.zeros(1, experts),
        "int": lambda: torch.zeros(experts, dtype=torch.int64),
        "list": lambda: [0.0] * experts,
        "other_device": lambda: torch.zeros(experts, device="meta" if device == "cpu" else "cpu"),
        "strided": lambda: torch.zeros(2 * experts)[::2],
    }[bias_kind]()
    if isinstance(bias, torch.Tensor) and bias_kind != "other_device" and device != "cpu":
        bias = bias.to(device)
    topk = draw(st.one_of(st.integers(-1, experts + 2), st.sampled_from(_ODD_TOPK)))
    renormalize = draw(st.one_of(st.booleans(), st.sampled_from(_ODD_FLAGS)))
    rsf = draw(st.one_of(st.sampled_from([1.0, 2.5, 2.827]), st.sampled_from(_ODD_SCALES)))
    valid = (
        layout in ("contiguous", "row_strided")
        and dtype in (torch.float32, torch.bfloat16)
        and experts >= 1
        and bias_kind in ("ok", "bf16")
        and type(topk) is int
        and 1 <= topk <= experts
        and type(renormalize) is bool
        and type(rsf) in (int, float)
        and math.isfinite(rsf)
        and device != "meta"
    )
    return scores, bias, topk, renormalize, rsf, valid


def _outcome(route, call):
    scores, bias, topk, renormalize, rsf, valid = call
    try:
        weights, ids = route(scores, bias, topk, renormalize, rsf)
    except Exception as exc:  # noqa: BLE001 -- the test sorts it below
        return exc, valid
    rows = scores.shape[0]
    assert tuple(weights.shape) == (rows, topk) and tuple(ids.shape) == (rows, topk)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    return None, valid


def _oracle(contract):
    def route(scores, bias, topk, renormalize, rsf):
        return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)

    return route


def _assert_documented(route, call, allowed):
    exc, valid = _outcome(route, call)
    if exc is not None:
        assert isinstance(exc, allowed), f"undocumented {type(exc).__name__}: {exc}"
        assert not valid, f"valid arguments refused: {type(exc).__name__}: {exc}"


_PROPERTY = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_REAL_DEVICES = tuple(d for d in _DEVICES if d != "meta")


@pytest.mark.parametrize("contract", ["aiter", "serial"])
@_PROPERTY
@given(call=routing_calls(devices=_REAL_DEVICES))
def test_oracle_route_raises_only_routing_argument_error(contract, call):
    _assert_documented(_oracle(contract), call, oracle.RoutingArgumentError)


@_PROPERTY
@given(call=routing_calls(devices=("meta",)))
@example(call=(torch.zeros(2, 8, device="meta"), torch.zeros(8, device="meta"), 2, True, 1.0, False))
def test_oracle_route_on_meta_raises_only_routing_argument_error(call):
    _assert_documented(_oracle("aiter"), call, oracle.RoutingArgumentError)


def _serial_host():
    from kernels.serial import scan

    ok, why = scan.available("cpu")
    if not ok:
        pytest.skip(f"serial host build unavailable: {why}")
    return scan.route


def _gpu_kernel(module):
    def get():
        import importlib

        return importlib.import_module(module).route

    return get


@pytest.mark.parametrize(
    "get_route",
    [_serial_host, _gpu_kernel("kernels.radix4"), _gpu_kernel("kernels.serial.block_argmax")],
    ids=["serial", "radix4", "block-argmax"],
)
@_PROPERTY
@given(call=routing_calls(devices=("cpu", "meta")))
def test_kernel_wrappers_raise_only_value_error(get_route, call):
    # CPU and meta only: no kernel build or launch here. The GPU kernels refuse both with ValueError.
    route = get_route()
    if get_route is not _serial_host:
        call = (*call[:5], False)
    _assert_documented(route, call, ValueError)


@pytest.mark.parametrize("module", ["kernels.adapters.torch_native", "kernels.adapters.aiter_model"])
@_PROPERTY
@given(call=routing_calls(devices=_REAL_DEVICES))
@example(call=(torch.randn(2, 8), torch.zeros(8), 9, True, 1.0, False))
def test_adapters_raise_only_value_error(module, call):
    import importlib

    _assert_documented(importlib.import_module(module).route, call, ValueError)


def test_a_usage_error_under_no_isolate_is_one_line_from_the_command(tmp_path):
    # Started as a command, --no-isolate runs the check in a supervised child; a usage error found there (an unknown
    # family) ended the child with 2 and no completion record, and the supervisor added a second line blaming the
    # candidate ("ended without finishing ... the candidate ... ended it") on 75b5150.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "contracts", "check", "--candidate", "oracle", "--families", "nope", "--no-isolate",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "unknown family 'nope'" in done.stderr, done.stderr
