"""Issue 58 items 4 and 6: what a new user's first hour with the command line ran into, each friction a test.

Item 4, the console hides the reason: a failing candidate's line names its top reason and the fix where one is
known (a transposed or float64 answer showed only "note: validity:64"; the reason was in report.md), and a check
where every call raised says "0 rows answered" (it said the rows were checked, at so many rows/s).

Item 6, small inconsistencies that cost retries: one spelling (``nightly --candidate``, ``--candidates`` kept as an
alias, and ``--quiet``); no prefix matching (``--candidat`` ran a whole check); "did you mean pkg:attr" for
``pkg.attr``; the broken side named on trace-diff's console and its plot's title inside the figure; NaN counts of
the row's logits; no wave64 lane order offered to a CPU router.
"""

from __future__ import annotations

import importlib
import io
import json
import sys

import pytest
import torch

import oracle
from contracts.commands import COMMANDS
from contracts.commands import main as contracts_main
from contracts.commands._common import run_main

ROUTERS = "tests.test_first_hour_cli"


# ---------------------------------------------------------------- routers a first hour writes


def _oracle_answer(scores, bias, topk, renormalize, rsf):
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")


def transposed_weights(scores, bias, topk, renormalize, rsf):
    """The right values, but the weights a transposed view (what ``torch.topk`` on a ``[k, M]`` buffer gives back)."""
    w, ids = _oracle_answer(scores, bias, topk, renormalize, rsf)
    return w.t().contiguous().t(), ids


def float64_weights(scores, bias, topk, renormalize, rsf):
    w, ids = _oracle_answer(scores, bias, topk, renormalize, rsf)
    return w.double(), ids


def always_raises(scores, bias, topk, renormalize, rsf):
    raise RuntimeError("my router is not finished")


def _check(tmp_path, candidate: str, *extra: str) -> tuple[int, str]:
    """One generated case, in process (a few seconds): the exit code and what the terminal showed."""
    from contracts.commands import check

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = check.main(["--candidate", candidate, "--replay", "random_fp32:1:64", "--out", str(tmp_path / "b"), "--no-isolate",
                           "--quiet", *extra])  # fmt: skip
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue() + err.getvalue()


# ---------------------------------------------------------------- item 4: the reason on the console


@pytest.mark.parametrize("router, reason, fix", [
    ("transposed_weights", "not a contiguous row-major [M, k] tensor", "return weights.contiguous()"),
    ("float64_weights", "dtypes weights torch.float64", "weights.float()"),
])  # fmt: skip
def test_a_failing_candidates_console_line_names_its_reason_and_the_fix(tmp_path, router, reason, fix):
    code, shown = _check(tmp_path, f"{ROUTERS}:{router}")
    assert code == 1, shown
    # the verdict table's note (not report.md alone) carries the reason and the fix
    table = shown.split("bundle:")[0]
    assert reason in table and fix in table, shown
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert fix in summary["top_reason"], summary["top_reason"]


def test_a_check_where_every_call_raised_says_0_rows_answered(tmp_path):
    code, shown = _check(tmp_path, f"{ROUTERS}:always_raises")
    assert code == 1, shown
    table = shown.split("bundle:")[0]
    assert "0 rows answered" in table and "my router is not finished" in table, shown
    # the rows column counts rows answered, and no rate is claimed for rows never answered
    figures = next(line.split() for line in table.splitlines() if " ERROR " in line)
    assert figures[figures.index("ERROR") + 1] == "0" and figures[-1] == "-", table


def test_the_diagnosis_of_a_failing_check_is_on_the_console_too():
    from contracts.reports.schema import Status, Summary
    from contracts.reports.terminal import verdict_table

    text = "matches deepseek-v3 with the group score as the group's largest value on 100% of the mismatched rows"
    s = Summary(candidate="dsv3:route", contract="deepseek-v3", device="cpu", status=Status.FAIL, rows_checked=100, mismatched_rows=100,
                clauses={"group_selection": 100}, top_reason="other groups kept", diagnosis=[{"kind": "combination", "text": text}])  # fmt: skip
    table = verdict_table([s])
    flat = " ".join(table.split())  # the lines wrap at 110 columns
    assert "why: group_selection: other groups kept" in flat and f"diagnosis: {text}" in flat, table
    assert "why:" not in verdict_table([Summary(candidate="ok", status=Status.PASS, rows_checked=10, top_reason="stale")])


# ---------------------------------------------------------------- item 6: one spelling, no prefix matching


def _parse_only(name: str, argv: list[str], capsys) -> tuple[int, str, object]:
    """Parse ``argv`` with command ``name``'s own parser, running nothing: (exit code, stderr, the parsed options)."""
    module = importlib.import_module(f"contracts.commands.{COMMANDS[name][0]}")
    parsed = []
    code = run_main(lambda: module.build_parser(f"python -m contracts {name}"), lambda args: parsed.append(args) or 0, argv)
    return code, capsys.readouterr().err, (parsed[0] if parsed else None)


def _an_abbreviation(parser) -> tuple[str, str]:
    """A long option of ``parser`` cut short so that only it starts so (what argparse's prefix matching accepted)."""
    options = sorted(o for o in parser._option_string_actions if o.startswith("--"))
    for option in sorted(options, key=len, reverse=True):
        cut = option[:-1]
        if len(cut) > 3 and [o for o in options if o.startswith(cut)] == [option]:
            return cut, option
    raise AssertionError(f"no option of {parser.prog} to abbreviate: {options}")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_refuses_an_abbreviated_option_naming_the_full_one(name, capsys):
    module = importlib.import_module(f"contracts.commands.{COMMANDS[name][0]}")
    parser = module.build_parser(f"python -m contracts {name}")
    assert parser.allow_abbrev is False
    cut, option = _an_abbreviation(parser)
    code, err, parsed = _parse_only(name, [cut, "1"], capsys)
    assert code == 2 and parsed is None, (cut, err)
    assert len(err.strip().splitlines()) == 1 and cut in err and f"did you mean {option}" in err, err


def test_candidat_is_refused_before_a_check_runs(capsys):
    # the friction itself: `check --candidat oracle` ran a 593k-row check under prefix matching
    code = contracts_main(["check", "--candidat", "oracle", "--rows", "10"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "--candidat" in err and "did you mean --candidate?" in err, err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_option_far_from_any_is_named_with_where_to_look(capsys):
    code, err, _ = _parse_only("diff", ["a", "b", "--colour"], capsys)
    assert code == 2 and "--colour" in err and "--help" in err and len(err.strip().splitlines()) == 1, err


def test_a_short_spelling_of_a_long_option_is_named(capsys):
    code, err, _ = _parse_only("check", ["--candidate", "oracle", "-q"], capsys)
    assert code == 2 and "unknown option -q (did you mean --quiet?)" in err, err


def test_nightly_takes_candidate_and_quiet_and_keeps_candidates(capsys):
    code, _, args = _parse_only("nightly", ["--candidate", "oracle,serial", "--candidate", "radix4", "--quiet"], capsys)
    assert code == 0 and args.candidate == ["oracle,serial", "radix4"] and args.quiet
    code, _, old = _parse_only("nightly", ["--candidates", "oracle,serial"], capsys)
    assert code == 0 and old.candidate == ["oracle,serial"], "the earlier spelling is kept as an alias"


def test_nightly_quiet_reaches_the_run_and_its_candidates_are_split(monkeypatch, capsys):
    import contracts.run.nightly as nightly_run
    from contracts.commands import nightly
    from contracts.commands._common import UsageError

    seen = {}

    def fake_run_nightly(**kwargs):
        seen.update(kwargs)
        raise UsageError("stopped by the test")

    monkeypatch.setattr(nightly_run, "run_nightly", fake_run_nightly)
    assert nightly.main(["--candidate", "oracle,serial", "--candidate", "radix4", "--quiet", "--no-probe"]) == 2
    assert seen["candidates"] == ["oracle", "serial", "radix4"] and seen["progress"] is False, seen


def _module(tmp_path, monkeypatch, dotted: str) -> None:
    """A package on sys.path where ``dotted`` (``pkg.mod``) defines ``route``."""
    parts = dotted.split(".")
    folder = tmp_path
    for part in parts[:-1]:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text("")
    (folder / f"{parts[-1]}.py").write_text("def route(scores, bias, topk, renormalize, rsf):\n    raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == parts[0]]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize("dotted", ["dsv3_first_hour", "fh_pkg.dsv3"])
@pytest.mark.parametrize("command", ["check", "matrix", "probe"])
def test_a_dot_for_the_colon_is_answered_with_the_colon(tmp_path, monkeypatch, capsys, dotted, command):
    _module(tmp_path, monkeypatch, dotted)
    code = contracts_main([command, "--candidate", f"{dotted}.route", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and f"did you mean '{dotted}:route'?" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "b").exists()


def test_a_dotted_name_that_resolves_nowhere_gets_no_colon_hint(tmp_path, monkeypatch, capsys):
    _module(tmp_path, monkeypatch, "fh_other")
    assert contracts_main(["check", "--candidate", "fh_other.nothing_here", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "is not a known candidate" in err and "fh_other:nothing_here" not in err, err


# ---------------------------------------------------------------- item 6: trace-diff names the broken side


def test_trace_diff_names_the_side_that_broke_on_the_console(tmp_path, capsys):
    from tests.test_trace_diff import DEFECT, LAYERS, build_pair

    pa, pb = build_pair(tmp_path)
    assert contracts_main(["trace-diff", str(pa), str(pb), "--contract", "qwen3-moe", "--out", str(tmp_path / "out"), "--quiet"]) == 1
    out = capsys.readouterr().out
    line = next((x for x in out.splitlines() if "breaks" in x), "")
    # B's columns are reversed on the DEFECT rows: B breaks output_order, A follows the contract
    assert f"B ({pb}) breaks contract qwen3-moe on {LAYERS * len(DEFECT)} flips" in line, out
    assert line.endswith(f"A ({pa}) follows it"), line


def test_the_trace_diff_plots_title_fits_its_figure(monkeypatch):
    import matplotlib
    import matplotlib.figure

    from contracts.reports.trace_diff import render_trace_diff_png

    matplotlib.use("Agg")
    shown = []
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        real_savefig(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        title = fig.axes[0].title
        shown.append((title.get_window_extent(renderer), fig.bbox))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    layer = {"layer": 0, "name": "layer 0", "logits_differ": 3, "near_tie": 1, "router": 2}
    record = {"layers": [layer], "flips": 1_234_567, "rows": 98_765_432, "contract": "deepseek-v3-reference"}
    render_trace_diff_png(record)
    (extent, figure), = shown
    assert extent.x0 >= figure.x0 and extent.x1 <= figure.x1, (extent, figure)


# ---------------------------------------------------------------- item 6: NaN counts of the logits


def test_a_rows_nan_count_counts_its_nan_logits():
    from contracts.cases.build import Case
    from contracts.cases.spec import CaseSpec
    from contracts.compare.expected import expected_for
    from contracts.compare.verdicts import compare_case

    c = oracle.get_contract("deepseek-v3")
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(4, c.experts, generator=g)
    size = c.experts // c.n_group
    nan_at = [group * size + j for group in range(c.n_group) for j in (1, 3)][:11]  # 11 NaN logits over every group
    scores[0, nan_at] = float("nan")
    spec = CaseSpec("nan_sparse", 0, 4, c.experts, c.topk, n_group=c.n_group, topk_group=c.topk_group)
    case = Case(spec, scores, torch.zeros(c.experts), True, c.routed_scaling_factor)
    exp = expected_for(case, c)
    ids = exp.ids.clone()
    ids[0] = ids[0].flip(0)  # a mismatched row 0: the columns reversed
    out = compare_case(case, exp, (exp.weights.clone(), ids), c, deviations={})
    row = next(d for d in out.rows_detail if d["row"] == 0)
    assert row["nan_count"] == 11, row


def test_the_reports_say_the_nan_count_is_of_the_logits():
    from contracts.reports.html import render_html
    from contracts.reports.junit import _detail_text
    from contracts.reports.markdown import render_markdown
    from contracts.reports.schema import CheckResult, RowDetail, Status, Summary

    d = RowDetail(row=0, clause="nan_last", verdict="mismatch", reason="a NaN expert chosen before a finite one", family="nan_dense",
                  case="nan_dense:1:4", expected_ids=[1, 2], actual_ids=[1, 9], expected_weights=[0.6, 0.4], actual_weights=[0.6, 0.4],
                  tie_group_size=1, straddles_cutoff=False, nan_count=11, renormalize=True, routed_scaling_factor=1.0)  # fmt: skip
    s = Summary(candidate="c", contract="aiter", device="cpu", status=Status.FAIL, rows_checked=4, mismatched_rows=1, clauses={"nan_last": 1})
    for text in (render_markdown(CheckResult(s, None, [d])), render_html(CheckResult(s, None, [d])), _detail_text(d, s)):
        assert "NaN logits in row: 11" in text and "NaN in row" not in text


# ---------------------------------------------------------------- item 6: diagnoses that fit the candidate's device


def routes_ties_in_aiter_lane_order(scores, bias, topk, renormalize, rsf):
    """A CPU router (no GPU lane in sight) whose ties happen to fall in aiter's lane order, checked under serial."""
    c = oracle.get_contract("serial").replace(tie_rule="aiter")
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=c)


def test_a_cpu_router_is_not_offered_a_gpu_lane_order():
    from contracts.candidates.registry import get_candidate
    from contracts.cases.plan import iter_plan
    from contracts.run.candidate_check import check_candidate

    c = oracle.get_contract("serial")
    specs = list(iter_plan(["all_equal"], 100, 0, c.experts, c.topk, bias=c.bias != "none", admitted=c.admitted_options()))
    cand = get_candidate(f"{ROUTERS}:routes_ties_in_aiter_lane_order")
    s = check_candidate(cand, specs, contract="serial", device="cpu", command="python -m contracts check --candidate X").summary
    assert s.mismatched_rows and s.diagnosis is not None
    texts = [d["text"] for d in s.diagnosis]
    assert not any("wave64" in t for t in texts), texts


def test_the_progress_line_of_a_check_whose_calls_raised_claims_no_rate():
    from contracts.reports.schema import ErrorRecord, Status, Summary
    from contracts.run.progress import Progress

    stream = io.StringIO()
    p = Progress("mine", 89_279, stream=stream)
    p.update(89_279, "random_fp32")
    error = ErrorRecord("exception", "random_fp32:1:64", "raised RuntimeError: my router is not finished")
    summary = Summary(candidate="mine", status=Status.ERROR, rows_checked=89_279, raised_rows=89_279, duration_s=1.4, rows_per_s=62_070.0,
                      error=error)  # fmt: skip
    p.close("ERROR", summary=summary)
    line = stream.getvalue().strip().splitlines()[-1]
    assert line.startswith("mine: ERROR, 0 of 89,279 rows answered") and "every call raised" in line and "rows/s" not in line, line
