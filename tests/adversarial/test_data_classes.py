"""Issue 55's data classes: ids read two ways, data mixed, tracebacks.

Each test here passed the hole on c7e47c9 (a broken router's exit 0, shards of two files merged into one PASS, a
file read past its tensor, a traceback) and must keep failing loudly: a router blamed, a merge refused, one line
and exit 2.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from contracts.commands import main as contracts_main
from tests.adversarial import data_classes as dc

QWEN = dc.QWEN


def _diff(capsys, a, b, out, *extra):
    code = contracts_main(["trace-diff", str(a), str(b), "--contract", QWEN, "--out", str(out), "--quiet", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(err: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------- ids read two ways


@pytest.mark.parametrize("bad", [2**32, 2**31, -1, 16, -(2**32) + 3])
def test_an_id_outside_the_experts_is_validity_in_trace_diff_however_it_wraps(tmp_path, capsys, bad):
    t = dc.trace()
    b = {k: v.clone() for k, v in t.items()}
    b["ids"][3, 0] = bad if bad < 0 or bad >= 16 else bad
    if bad >= 2**31:
        b["ids"][3, 0] = t["ids"][3, 0] + bad  # expert + 2^32 (or 2^31): the same expert after a cast to int32, or a negative one
    pa, pb = dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", b)
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    assert code == 1, out + err
    record = json.loads((tmp_path / "out" / "trace_diff.json").read_text())
    assert record["causes"]["router"] == 1 and record["router_clauses"] == {"validity": 1}, record
    assert record["worst"][0]["ids_b"][0] == int(b["ids"][3, 0]), "the id as read, not as cast"


def test_an_id_outside_the_experts_on_both_sides_is_still_validity(tmp_path, capsys):
    t = dc.trace()
    t["ids"][5, 1] = 16 + 2**32
    pa, pb = dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", t)
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    assert code == 1, out + err
    record = json.loads((tmp_path / "out" / "trace_diff.json").read_text())
    assert record["router_clauses"] == {"validity": 1} and record["router_sides"]["both"] == 1, record


def test_ids_that_are_not_integers_are_one_line(tmp_path, capsys):
    t = dc.trace()
    b = {**t, "ids": t["ids"].float()}
    code, out, err = _diff(capsys, dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", b), tmp_path / "out")
    assert code == 2 and "ids" in err and "b.pt" in err, err
    _one_line(err)


# ---------------------------------------------------------------- data mixed: trace-diff pairs layers by name


def _swapped(tmp_path, b_logits: bool):
    t = dc.trace(layers=2)
    names = ["model.layers.1.mlp.gate", "model.layers.2.mlp.gate"]
    b = {k: v.flip(0).contiguous() for k, v in t.items() if k != "logits" or b_logits}
    return dc.save(tmp_path / "a.safetensors", t, names), dc.save(tmp_path / "b.safetensors", b, names[::-1])


@pytest.mark.parametrize("b_logits", [True, False], ids=["both-logits", "replay"])
def test_trace_diff_pairs_layers_by_name_not_by_index(tmp_path, capsys, b_logits):
    pa, pb = _swapped(tmp_path, b_logits)
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    record = json.loads((tmp_path / "out" / "trace_diff.json").read_text())
    assert code == 0 and record["flips"] == 0 and record["logits_differ_rows"] == 0, record
    assert [layer["name"] for layer in record["layers"]] == ["model.layers.1.mlp.gate", "model.layers.2.mlp.gate"]


def test_layers_in_one_trace_only_are_reported_and_fail(tmp_path, capsys):
    t = dc.trace(layers=2)
    pa = dc.save(tmp_path / "a.safetensors", t, ["gate.1", "gate.2"])
    pb = dc.save(tmp_path / "b.safetensors", t, ["gate.1", "gate.3"])
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    assert code != 0 and "gate.2" in out + err and "gate.3" in out + err, out + err
    assert "Traceback" not in err


def test_two_empty_traces_are_not_a_pass(tmp_path, capsys):
    empty = {"ids": torch.zeros(0, 4, dtype=torch.long), "weights": torch.zeros(0, 4), "logits": torch.zeros(0, 16)}
    pa, pb = dc.save(tmp_path / "a.pt", empty), dc.save(tmp_path / "b.pt", empty)
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    assert code != 0, out + err
    _one_line(err)


# ---------------------------------------------------------------- tracebacks: trace-diff's inputs checked up front


def _trace_pair_with(tmp_path, **b_changes):
    t = dc.trace()
    b = {k: v for k, v in {**t, **b_changes}.items() if v is not None}
    return dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", b)


@pytest.mark.parametrize("change, says", [
    (dict(logits=None, bias=torch.zeros(15)), "bias"),  # a bias of the wrong length in the trace without logits
    (dict(logits="fp64"), "float64"),  # fp32 against fp64 logits
    (dict(logits="int"), "logits"),  # integer logits
    (dict(weights="int"), "weights"),
])  # fmt: skip
def test_trace_diff_inputs_that_do_not_fit_are_one_line_and_exit_2(tmp_path, capsys, change, says):
    t = dc.trace()
    b = dict(t)
    for key, value in change.items():
        if value == "fp64":
            b[key] = t[key].double()
        elif value == "int":
            b[key] = t[key].round().long()
        elif value is None:
            b.pop(key)
        else:
            b[key] = value
    pa, pb = dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", b)
    code, out, err = _diff(capsys, pa, pb, tmp_path / "out")
    assert code == 2 and says in err and "b.pt" in err, (code, out, err)
    _one_line(err)


def test_a_float64_bias_in_a_trace_is_taken_as_fp32(tmp_path, capsys):
    t = dc.trace()
    b = {**t, "bias": torch.zeros(16, dtype=torch.float64)}
    code, out, err = _diff(capsys, dc.save(tmp_path / "a.pt", t), dc.save(tmp_path / "b.pt", b), tmp_path / "out", "--contract", "deepseek-v3-reference")
    assert code in (0, 1) and "Traceback" not in err, err


# ---------------------------------------------------------------- data mixed: captured files read through the library, pinned


def test_a_safetensors_range_shorter_than_its_shape_is_refused_not_read_past(tmp_path, capsys):
    from contracts.cases.captured import CapturedError
    from contracts.cases.logits_file import open_logits

    path = dc.short_range_safetensors(tmp_path / "short.safetensors")
    with pytest.raises(CapturedError, match="safetensors"):
        open_logits(str(path)).logits(0, 0, 8)
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "aiter", "--topk", "4", "--logits", str(path), "--no-isolate",
                           "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "short.safetensors" in err, err
    _one_line(err)


def _captured(tmp_path, experts=32, tokens=40, seed=0):
    from safetensors.torch import save_file

    path = tmp_path / f"logits{seed}.safetensors"
    save_file({"logits": torch.randn(1, tokens, experts, generator=torch.Generator().manual_seed(seed))}, str(path))
    return path


def _rewrite_check(tmp_path, monkeypatch, isolate: bool):
    from contracts.run.checks import run_checks

    path = _captured(tmp_path, tokens=300)
    monkeypatch.setenv("REWRITE_LOGITS", str(path))
    dc._rewritten.clear()
    run = run_checks(["tests.adversarial.data_classes:rewrites_the_logits_file"], contract="aiter", topk=4, logits=path, isolate=isolate,
                     progress=False, out=tmp_path / "out", force=True)  # fmt: skip
    return path, run.summaries[0]


def test_a_logits_file_rewritten_during_a_check_is_an_error_naming_it(tmp_path, monkeypatch):
    path, s = _rewrite_check(tmp_path, monkeypatch, isolate=False)
    assert s.status.value == "error", (s.status, s.mismatched_rows, s.clauses_broken)
    assert str(path) in s.error.message and "changed" in s.error.message, s.error
    assert not s.clauses_broken, "a changed file is never a blame"
    assert s.error.kind == "input_changed", "neither the candidate's fault nor the harness's"


@pytest.mark.slow  # an isolated check: the worker process imports torch and the harness (~8 s on the shared machine)
def test_a_logits_file_rewritten_under_an_isolated_check_is_an_error_not_a_blame(tmp_path, monkeypatch):
    path, s = _rewrite_check(tmp_path, monkeypatch, isolate=True)
    assert s.status.value == "error", (s.status, s.mismatched_rows, s.clauses_broken)
    assert str(path) in s.error.message and "changed" in s.error.message, s.error
    assert not s.clauses_broken and not s.mismatched_rows, "a changed file is never a blame"


# ---------------------------------------------------------------- tracebacks: a float64 bias is taken everywhere


def _float64_bias(tmp_path, fmt):
    b = torch.randn(32, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    if fmt == "pt":
        torch.save(b, tmp_path / "bias.pt")
        return tmp_path / "bias.pt"
    from safetensors.torch import save_file

    save_file({"bias": b}, str(tmp_path / "bias.safetensors"))
    return tmp_path / "bias.safetensors"


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_a_float64_bias_is_taken_as_fp32_by_check(tmp_path, capsys, fmt):
    bias = _float64_bias(tmp_path, fmt)
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "deepseek-v3", "--topk", "4", "--logits", str(_captured(tmp_path)),
                           "--bias", str(bias), "--no-isolate", "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, out + err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "pass" and summary["options"]["logits"]["bias_dtype"] == "float64"
    assert any("float64" in n and "fp32" in n for n in summary["notes"]), summary["notes"]


def test_a_float64_bias_is_taken_as_fp32_by_matrix(tmp_path, capsys):
    bias = _float64_bias(tmp_path, "pt")
    code = contracts_main(["matrix", "--candidate", "oracle,torch-native", "--contract", "aiter", "--topk", "4", "--logits",
                           str(_captured(tmp_path)), "--bias", str(bias), "--no-isolate", "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, out + err


@pytest.mark.slow  # the nightly: checks of two candidates, its junit and its bundle: ~17 s on the shared machine
def test_a_float64_bias_is_taken_as_fp32_by_nightly(tmp_path, capsys):
    bias = _float64_bias(tmp_path, "safetensors")
    code = contracts_main(["nightly", "--candidates", "oracle,torch-native", "--logits", str(_captured(tmp_path)), "--bias", str(bias),
                           "--no-probe", "--no-bench", "--device", "cpu", "--out", str(tmp_path / "nightly")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code != 2 and "Traceback" not in out + err, out + err  # the gate's exit code is the nightly's business
    assert "check oracle [contract aiter]: pass" in out and "check torch-native [contract aiter]: pass" in out, out + err


def test_float64_logits_are_refused_in_one_line_by_check(tmp_path, capsys):
    from safetensors.torch import save_file

    save_file({"logits": torch.randn(1, 20, 32, dtype=torch.float64)}, str(tmp_path / "l64.safetensors"))
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "aiter", "--topk", "4", "--logits", str(tmp_path / "l64.safetensors"),
                           "--no-isolate", "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "float64" in err and "l64.safetensors" in err, err
    _one_line(err)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ---------------------------------------------------------------- data mixed: merge refuses shards of two checks


def _shard(tmp_path, name, i, **kw):
    from contracts.run.checks import run_checks

    # on the CPU: the device field is one of the compared ones, and the test below sets it to cuda:0 on one shard
    kw = {"families": ["random_fp32"], "rows": 60, "max_batch": 64, "device": "cpu", **kw}
    run_checks(["oracle"], shard=(i, 2), isolate=False, progress=False, out=tmp_path / name, force=True, **kw)
    return tmp_path / name


def _merge(capsys, tmp_path, *shards):
    code = contracts_main(["merge", str(tmp_path / "merged"), *map(str, shards)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_shards_of_two_max_batches_are_not_merged(tmp_path, capsys):
    a, b = _shard(tmp_path, "s1", 1), _shard(tmp_path, "s2", 2, max_batch=32)
    code, out, err = _merge(capsys, tmp_path, a, b)
    assert code == 2 and "max_batch" in err, out + err
    _one_line(err)


def test_shards_of_two_logits_files_are_not_merged(tmp_path, capsys):
    a = _shard(tmp_path, "s1", 1, contract="aiter", topk=4, logits=_captured(tmp_path, seed=1), families=None)
    b = _shard(tmp_path, "s2", 2, contract="aiter", topk=4, logits=_captured(tmp_path, seed=2), families=None)
    code, out, err = _merge(capsys, tmp_path, a, b)
    assert code == 2 and "sha256" in err, out + err
    _one_line(err)


def test_shards_of_one_logits_file_with_two_biases_are_not_merged(tmp_path, capsys):
    logits = _captured(tmp_path, seed=1)
    biases = []
    for seed in (1, 2):
        biases.append(tmp_path / f"bias{seed}.pt")
        torch.save(torch.randn(32, generator=torch.Generator().manual_seed(seed)), biases[-1])
    a = _shard(tmp_path, "s1", 1, contract="aiter", topk=4, logits=logits, logits_bias=biases[0], families=None)
    b = _shard(tmp_path, "s2", 2, contract="aiter", topk=4, logits=logits, logits_bias=biases[1], families=None)
    code, out, err = _merge(capsys, tmp_path, a, b)
    assert code == 2 and "bias_sha256" in err, out + err


@pytest.mark.parametrize("path, value, merges", [
    ("options.exact", True, False), ("options.bulk_rows", 7, False), ("options.call_rows", 5, False), ("isolated", True, False),
    ("device", "cuda:0", False), ("options.repeat", 3, False), ("options.new_option", 1, False), ("options.timeout", 5.0, False),
    ("schema_version", 1, False), ("options.groups", [8, 4], False),
    ("duration_s", 99.0, True), ("environment.platform", "another host", True), ("stages", None, True), ("files", {}, True),
])  # fmt: skip
def test_merge_compares_every_field_but_the_shard_host_and_timing(tmp_path, capsys, path, value, merges):
    a, b = _shard(tmp_path, "s1", 1), _shard(tmp_path, "s2", 2)
    data = json.loads((b / "summary.json").read_text())
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[leaf] = value
    (b / "summary.json").write_text(json.dumps(data))
    code, out, err = _merge(capsys, tmp_path, a, b)
    assert (code == 0) == merges, (path, code, out, err)
    if not merges:
        assert path.split(".")[-1] in err, err
        _one_line(err)


@pytest.mark.parametrize("command", [
    ["matrix", "--candidate", "oracle,torch-native", "--contract", "aiter"],
    ["nightly", "--candidates", "oracle", "--no-probe", "--no-bench", "--device", "cpu"],
])  # fmt: skip
def test_float64_logits_are_refused_in_one_line_by_matrix_and_nightly(tmp_path, capsys, command):
    from safetensors.torch import save_file

    save_file({"logits": torch.randn(1, 20, 32, dtype=torch.float64)}, str(tmp_path / "l64.safetensors"))
    code = contracts_main([*command, "--logits", str(tmp_path / "l64.safetensors"), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2 and "float64" in err and "l64.safetensors" in err, out + err
    _one_line(err)


def test_an_integer_bias_in_a_logits_file_is_refused_not_taken_as_zero(tmp_path, capsys):
    from safetensors.torch import save_file

    save_file({"logits": torch.randn(1, 20, 32), "bias": torch.ones(32, dtype=torch.int32)}, str(tmp_path / "lb.safetensors"))
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "aiter", "--topk", "4", "--logits", str(tmp_path / "lb.safetensors"),
                           "--no-isolate", "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "bias" in err and "lb.safetensors" in err, err
    _one_line(err)
