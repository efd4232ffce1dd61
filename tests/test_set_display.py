"""Rows under a contract whose output order is "any" are shown as sets (issue 58, item 5).

Under ``deepseek-v3`` the columns of the answer carry no meaning, so a row that differs by one expert must read as
one expert missing and one extra, with the other experts' weights compared by expert id: not as every slot red with
weight gaps of thousands of ULP because the router answered in another column order. Checked where a person reads a
row: report.md, report.html and the replay (``check --replay ... --row N``). Under an ordered contract the slot table
stays (tests/test_html_report.py).
"""

from __future__ import annotations

import re

import pytest

from contracts.commands import check

ROUTER = "tests.standins.set_router:one_expert_off"
SMALL = ["--rows", "20", "--max-batch", "2", "--families", "random_fp32", "--device", "cpu", "--no-isolate", "--quiet"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("sets") / "bundle"
    assert check.main(["--candidate", ROUTER, "--contract", "deepseek-v3", *SMALL, "--out", str(out)]) == 1
    return out


def _first_block(report_md: str) -> list[str]:
    m = re.search(r"```\n(.*?)\n```", report_md.split("## First mismatches", 1)[1], re.DOTALL)
    assert m, "report.md shows no example row"
    return m.group(1).splitlines()


def _assert_one_missing_one_extra(lines: list[str]) -> None:
    body = "\n".join(lines)
    missing = [line for line in lines if line.rstrip().endswith("missing")]
    extra = [line for line in lines if line.rstrip().endswith("extra")]
    assert len(missing) == 1 and len(extra) == 1, f"not one missing and one extra expert:\n{body}"
    matched = [line for line in lines if re.match(r"^\s*\d+\s", line) and line not in missing + extra]
    assert len(matched) == 7 and not any("<-" in line for line in matched), f"the seven shared experts are not all matched:\n{body}"
    assert "cutoff: slot" not in body, f"a slot table under output order 'any':\n{body}"


def test_report_md_shows_a_row_as_matched_missing_and_extra_experts(bundle):
    lines = _first_block((bundle / "report.md").read_text())
    _assert_one_missing_one_extra(lines)


def test_report_html_shows_the_row_as_sets_with_weights_by_expert(bundle):
    page = (bundle / "report.html").read_text()
    table = re.search(r'<table class="sbs[^"]*">.*?</table>', page, re.DOTALL)
    assert table, "report.html shows no example row"
    cells = re.findall(r'<td class="([^"]*)"', table.group(0))
    assert sum("missing" in c for c in cells) == 1 and sum("extra" in c for c in cells) == 1, table.group(0)
    assert not any(c.split()[:1] == ["diff"] or "wdiff" in c for c in cells), f"slots marked as differing:\n{table.group(0)}"
    assert "expected slot" not in table.group(0).lower()


def test_the_replay_prints_the_row_as_sets(bundle, capsys):
    md = (bundle / "report.md").read_text()
    line = re.search(r"Replay: `python -m contracts\.check (.*?)`", md).group(1).split()
    capsys.readouterr()
    assert check.main(line) == 1
    printed = capsys.readouterr().out.splitlines()
    _assert_one_missing_one_extra(printed)


def test_an_ordered_contract_and_an_older_bundle_keep_the_slot_table():
    from contracts.reports.html import render_html
    from contracts.reports.markdown import side_by_side
    from contracts.reports.schema import CheckResult, RowDetail, Status, Summary

    for order in ("rank", None):  # None: details.json written before the field existed
        d = RowDetail(row=0, clause="output_order", verdict="mismatch", reason="r", expected_ids=[3, 1], actual_ids=[1, 3],
                      expected_weights=[0.6, 0.4], actual_weights=[0.4, 0.6], output_order=order)  # fmt: skip
        assert "cutoff: slot topk-1" in side_by_side(d) and "as sets" not in side_by_side(d)
        summary = Summary(status=Status.FAIL, candidate="c", contract="aiter", device="cpu", clauses={"output_order": 1},
                          families={}, rows_checked=1, mismatched_rows=1)  # fmt: skip
        page = render_html(CheckResult(summary, details=[d]))
        assert '<table class="sbs">' in page and 'class="sbs sets"' not in page


def test_a_repeated_id_is_matched_once_and_extra_after():
    from contracts.reports.schema import RowDetail
    from contracts.reports.sets import expert_sets

    d = RowDetail(row=0, clause="validity", verdict="mismatch", reason="r", expected_ids=[5, 7], actual_ids=[7, 7],
                  expected_weights=[0.5, 0.5], actual_weights=[0.5, 0.5], output_order="any")  # fmt: skip
    assert [(x.kind, x.expert, x.expected_column, x.actual_column) for x in expert_sets(d)] == [
        ("matched", 7, 1, 0), ("missing", 5, 0, None), ("extra", 7, None, 1)]


def test_a_search_finding_under_an_order_free_contract_is_shown_as_sets():
    import torch

    import oracle
    from contracts.run.search import Finding, side_by_side
    from tests.standins.set_router import one_expert_off

    scores, bias = torch.randn(1, 256, generator=torch.Generator().manual_seed(3)), torch.zeros(256)
    w, ids = oracle.route(scores, bias, 8, renormalize=True, routed_scaling_factor=1.0, contract="deepseek-v3",
                          num_expert_group=8, topk_group=4)  # fmt: skip
    aw, aids = one_expert_off(scores, bias, 8, True, 1.0, num_expert_group=8, topk_group=4)
    detail = {"expected_ids": ids[0].tolist(), "actual_ids": aids[0].tolist(), "expected_weights": w[0].tolist(),
              "actual_weights": aw[0].tolist()}  # fmt: skip
    f = Finding(clause="selection", reason="r", row=0, scores=scores, bias=bias, topk=8, renormalize=True,
                routed_scaling_factor=1.0, detail=detail)  # fmt: skip
    lines = side_by_side(f, "deepseek-v3")
    _assert_one_missing_one_extra([line for line in lines if "input:" not in line and "logits row" not in line])
    assert sum("*" in line.split()[0] for line in lines if line[:1] == " ") == 2
