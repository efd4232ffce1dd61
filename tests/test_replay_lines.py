"""Replay lines replay (issue 22 item 11, issue 23 item 6): they name what the registry resolves, and where the module is.

Before the fix a ``Candidate`` object's replay line named its display name
(``--candidate 'My Router (display name)'``), which the registry refuses
as an unknown candidate, and a module imported from ``PYTHONPATH=src`` could
not be found when the line was pasted in another directory.
"""

import json
import shlex
import subprocess
import sys

import pytest

from contracts.candidates import Candidate
from contracts.cases import iter_plan
from contracts.check import main
from contracts.reports.json_records import from_json
from contracts.reports.junit import _fallback_replay
from contracts.reports.schema import Summary
from contracts.run.candidate_check import check_candidate
from contracts.run.replay import candidate_lookup, module_root

import tests.adversarial.names as names

ROUTER = """
import oracle
from contracts.candidates import Candidate


def _reversed(scores, bias, topk, renormalize, rsf):
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")
    return w.flip(1), ids.flip(1)


cand = Candidate(name="Outside Router", route=_reversed)
"""


def _details(out):
    return json.loads((out / "details.json").read_text())


def test_a_candidate_objects_replay_line_names_its_module_attr_and_replays(tmp_path, capsys):
    out = tmp_path / "first"
    spec = "tests.adversarial.names:displayed"
    # --quick: the quick look's cases are the full plan's own, with the same replay ids (a quarter of --rows 70's cases)
    assert main(["--candidate", spec, "--families", "random_fp32", "--quick", "--no-isolate", "--out", str(out), "--quiet"]) == 1
    s = json.loads((out / "summary.json").read_text())
    assert s["candidate"] == "My Router (display name)"  # reports keep the display name
    assert s["replay_target"] == {"candidate": spec, "against": None, "pythonpath": None}
    detail = _details(out)[0]
    words = shlex.split(detail["replay"])
    assert words[:3] == ["python", "-m", "contracts.check"] and words[words.index("--candidate") + 1] == spec
    capsys.readouterr()
    assert main(words[3:] + ["--out", str(tmp_path / "replayed"), "--no-isolate", "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert f"row {detail['row']}: {detail['clause']} (mismatch)" in printed


def test_lookups_of_registered_and_library_candidates():
    from contracts.candidates import get_candidate

    assert candidate_lookup(get_candidate("oracle")) == "oracle"
    assert candidate_lookup(Candidate(name="Unregistered", route=names.correct)) == "Unregistered"  # nothing better is known
    assert candidate_lookup(get_candidate("tests.adversarial.names:displayed")) == "tests.adversarial.names:displayed"
    assert candidate_lookup(Candidate(name="x", route=names.correct, origin="some.module")) == "x"  # a module alone is no lookup
    assert module_root("oracle") is None and module_root("tests.adversarial.names:displayed") is None  # the current directory
    assert module_root("pytest:main") is None  # installed


def test_library_checks_use_the_origin_for_the_candidate_and_against():
    cand = Candidate(name="Shown", route=names._reversed, origin="tests.adversarial.names:displayed")
    other = Candidate(name="Other shown", route=names.correct, origin="tests.adversarial.names:colon_second")
    result = check_candidate(cand, list(iter_plan(["random_fp32"], 5, 0, 896, 16)), contract="aiter", device="cpu", against=other)
    words = shlex.split(result.details[0].replay)
    assert words[words.index("--candidate") + 1] == "tests.adversarial.names:displayed"
    assert words[words.index("--against") + 1] == "tests.adversarial.names:colon_second"
    assert result.summary.against == "Other shown"


@pytest.mark.slow  # a check and its replay as commands: ~5 s
def test_a_module_from_outside_the_current_directory_gets_pythonpath_and_replays_from_elsewhere(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "outside_router_mod.py").write_text(ROUTER)
    monkeypatch.syspath_prepend(str(src))
    out = tmp_path / "first"
    assert main(["--candidate", "outside_router_mod:cand", "--families", "random_fp32", "--quick", "--out", str(out), "--quiet"]) == 1
    line = _details(out)[0]["replay"]
    assert line.startswith(f"PYTHONPATH={shlex.quote(str(src))} python -m contracts.check --candidate outside_router_mod:cand ")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if subprocess.run([sys.executable, "-c", "import contracts"], cwd=elsewhere).returncode:
        pytest.skip("contracts is not installed, so no line runs outside the checkout")
    done = subprocess.run(["bash", "-c", line.replace("python ", f"{shlex.quote(sys.executable)} ", 1) + " --quiet"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "could not import" not in done.stderr and "(mismatch)" in done.stdout


def test_junit_builds_replay_lines_from_the_summary_replay_target():
    summary = {"candidate": "Shown", "status": "fail", "contract": "aiter", "device": "cpu", "against": None,
               "command": "python -m contracts check", "options": {"experts": 64, "topk": 4, "repeat": 2},
               "replay_target": {"candidate": "pkg.mod:cand", "against": None, "pythonpath": "/opt/my routers"}}  # fmt: skip
    line = _fallback_replay(from_json(Summary, summary, "summary"), "random_fp32:7:64", 3)
    assert line == ("PYTHONPATH='/opt/my routers' python -m contracts.check --candidate pkg.mod:cand --contract aiter --device cpu "
                    "--experts 64 --topk 4 --repeat 2 --replay random_fp32:7:64 --row 3")  # fmt: skip
    # an older bundle: no replay target, no shape in its options; reading it takes the shape from its command line
    old = {k: v for k, v in summary.items() if k not in ("replay_target", "options")}
    old["command"] = "python -m contracts.check --candidate x --experts 64 --topk 4"
    line = _fallback_replay(from_json(Summary, old, "summary"), "random_fp32:7:64", 3)
    assert line.startswith("python -m contracts.check --candidate Shown --contract aiter") and "--experts 64 --topk 4" in line, line
    old["command"] = "python -m contracts.check --candidate x"  # nor on its command line: the first contract's shape
    assert "--experts 64" not in _fallback_replay(from_json(Summary, old, "summary"), "random_fp32:7:64", 3)


def test_search_replay_lines_keep_the_pythonpath_as_check_lines_do(tmp_path, monkeypatch):
    """Issue 33: search's printed --replay line dropped the PYTHONPATH the run needed (check's kept it)."""
    from contracts.run.search import replay_command

    src = tmp_path / "src"
    src.mkdir()
    (src / "outside_search_mod.py").write_text(ROUTER)
    monkeypatch.syspath_prepend(str(src))
    line = replay_command(tmp_path / "minimal.pt", "outside_search_mod:cand", "aiter")
    assert line.startswith(f"PYTHONPATH={shlex.quote(str(src))} python -m contracts search --replay ")
    assert not replay_command(tmp_path / "minimal.pt", "oracle").startswith("PYTHONPATH")


def test_replaying_one_row_routes_its_case_once_compares_that_row_and_writes_no_bundle(tmp_path, capsys, monkeypatch):
    """Issue 33: --replay ID --row N re-ran every row of the case through the whole check and wrote a bundle."""
    from contracts.compare import verdicts

    compared = []
    real = verdicts.compare_case
    monkeypatch.setattr(verdicts, "compare_case", lambda case, *a, **k: compared.append(case.spec.rows) or real(case, *a, **k))
    monkeypatch.chdir(tmp_path)
    code = main(["--candidate", "tests.broken_candidates:wrong_tie_order", "--replay", "all_equal:7:40", "--row", "5"])
    out = capsys.readouterr().out
    assert code == 1 and compared == [1]  # one row compared, not the case's 40
    assert "row 5: tie_order (mismatch)" in out and "(cutoff: slot topk-1)" in out and "no bundle written" in out
    assert list(tmp_path.iterdir()) == [] and not any(line.startswith("bundle:") for line in out.splitlines())
    assert main(["--candidate", "oracle", "--replay", "all_equal:7:40", "--row", "5"]) == 0
    assert "row 5: exact: matches the oracle" in capsys.readouterr().out
    assert main(["--candidate", "oracle", "--replay", "all_equal:7:40", "--row", "40"]) == 2
    assert "--row 40 is outside the case" in capsys.readouterr().err


@pytest.mark.parametrize("router, tag", [("ignores_the_logits_column_stride", "column_stride-2"),
                                         ("reads_dense_logits_as_row_major", "transposed"),
                                         ("reads_the_bias_at_stride_1", "bias_stride-2")])  # fmt: skip
def test_a_layout_cases_replay_id_rebuilds_its_layout(router, tag):
    # A replay of a column-strided, transposed or strided-bias case routes the same layout again: the row still fails;
    # the same case without the tag is contiguous, and the router (wrong on that layout only) is right there.
    import dataclasses

    from contracts.candidates import get_candidate
    from contracts.run.options import parse_replay
    from contracts.run.replay import replay_row

    spec = parse_replay(f"random_bf16:7:4:{tag}", 896, 16)
    assert spec.replay_id == f"random_bf16:7:4:{tag}"
    cand = get_candidate(f"tests.adversarial.evidence:{router}")
    assert replay_row(cand, "aiter", "cpu", spec, 0).failed
    plain = dataclasses.replace(spec, column_stride=1, transposed=False, bias_stride=1)
    assert not replay_row(cand, "aiter", "cpu", plain, 0).failed


@pytest.mark.parametrize("router, tags", [("wrong_when_the_logits_require_grad", "grad-on:logits_grad"),
                                          ("wrong_when_bf16_logits_require_grad_under_autocast",
                                           "grad-on:bias_parameter-trainable:logits_grad:autocast"),
                                          ("wrong_under_fp16_autocast_in_inference_mode", "grad-inference:autocast-fp16"),
                                          ("wrong_under_deterministic_algorithms", "grad-off:deterministic")])  # fmt: skip
def test_a_call_contexts_replay_id_rebuilds_the_context(router, tags):
    # The replay of a case pinned to logits requiring grad, under autocast, calls the router so again: the row still
    # fails; without the tags the router (wrong in that context only) is right.
    import dataclasses

    from contracts.candidates import get_candidate
    from contracts.run.options import parse_replay
    from contracts.run.replay import replay_row

    spec = parse_replay(f"random_bf16:7:4:{tags}", 896, 16)
    assert spec.replay_id == f"random_bf16:7:4:{tags}"
    cand = get_candidate(f"tests.adversarial.call_contexts:{router}")
    assert replay_row(cand, "aiter", "cpu", spec, 0).failed
    plain = dataclasses.replace(spec, grad_mode=None, bias_parameter=None, logits_grad=False, autocast=None, deterministic=False)
    assert not replay_row(cand, "aiter", "cpu", plain, 0).failed
