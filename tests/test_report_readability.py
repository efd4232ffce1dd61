"""Issue 33, the reports: what a reader sees is what the counts say (fast: records made by hand, no check run)."""

from contracts.reports.html import render_html, slots
from contracts.reports.markdown import render_markdown
from contracts.reports.schema import CheckResult, RowDetail, Status, Summary
from contracts.reports.text import ulp_meaning

NEAR = RowDetail(row=2, clause="selection", verdict="near_tie", reason="within the bound of the cutoff value", family="f", case="f:1:4",
                 expected_ids=[5, 6, 7], actual_ids=[5, 6, 9], expected_weights=[0.5, 0.3, 0.2], actual_weights=[0.5, 0.3, 0.2],
                 tie_group_size=12, straddles_cutoff=True, nan_count=0, renormalize=True, routed_scaling_factor=1.0)  # fmt: skip
BIAS = RowDetail(row=0, clause="bias_in_weight", verdict="mismatch", reason="the weights include the bias", family="random_bf16",
                 case="random_bf16:1:4", expected_ids=[1, 2, 3], actual_ids=[1, 2, 3], expected_weights=[0.5, 0.3, 0.2],
                 actual_weights=[0.6, 0.25, 0.15], tie_group_size=1, straddles_cutoff=False, nan_count=0, renormalize=True,
                 routed_scaling_factor=1.0)  # fmt: skip


def _summary(**kw):
    base = dict(candidate="c", contract="aiter", device="cpu", status=Status.PASS, rows_checked=100, near_tie_rows=1)
    return Summary(**{**base, **kw})


def test_a_near_tie_example_is_not_shown_as_differing_ids():
    cells = slots(NEAR)
    assert [x.expected_class for x in cells] == ["", "", "near missing"]
    assert not any("diff" in x.expected_class or "diff" in x.actual_class for x in cells)
    page = render_html(CheckResult(_summary(), None, [NEAR]))
    example = page.split('<details class="example"', 1)[1].split("</details>", 1)[0]
    assert 'class="diff' not in example and 'class="near missing"' in example
    assert "~ near tie" in render_markdown(CheckResult(_summary(), None, [NEAR])) and "<-" not in render_markdown(CheckResult(_summary(), None, [NEAR]))


def test_a_weight_clause_example_carries_no_tie_group_line():
    s = _summary(status=Status.FAIL, mismatched_rows=1, clauses={"bias_in_weight": 1})
    page = render_html(CheckResult(s, None, [BIAS, NEAR]))
    bias, near = page.split('<details class="example"')[1:3]
    if "the weights include the bias" not in bias:
        bias, near = near, bias
    assert "Tie group" not in bias and "Tie group at the cutoff: 12 experts (straddles the cutoff)" in near
    md = render_markdown(CheckResult(s, None, [BIAS]))
    assert "Tie group" not in md


def test_a_huge_weight_distance_is_explained():
    assert "rounding" in ulp_meaning(2)
    assert "wrong sign" in ulp_meaning(1.04e9)
    s = _summary(status=Status.FAIL, mismatched_rows=5, clauses={"scaling": 5}, max_weight_ulp=1.04e9)
    page = render_html(CheckResult(s, None, []))
    card = page.split('id="card-ulp"', 1)[1].split("</div></div>", 1)[0]
    assert "wrong sign" in card and "fp32 ULP" in card
    assert "wrong sign" in render_markdown(CheckResult(s, None, []))


def test_each_clause_row_is_shaded_failing_only_with_rows():
    s = _summary(status=Status.FAIL, mismatched_rows=3, clauses={"selection": 3, "weight_accuracy": 0}, clauses_broken={"selection": 3})
    page = render_html(CheckResult(s, None, []))
    table = page.split('id="clause-table"', 1)[1].split("</table>", 1)[0]
    rows = {r.split('<td class="mono">', 1)[1].split("<", 1)[0]: r for r in table.split("<tr")[2:]}
    assert 'class="failing"' in rows["selection"] and 'class="failing"' not in rows["weight_accuracy"]


def test_a_declared_weight_accuracy_seen_only_within_tolerance_is_not_shaded_as_a_problem():
    from contracts.reports.schema import DeclaredDeviation

    s = _summary(clauses={"selection": 0, "weight_accuracy": 0},
                 expected_deviations={"weight_accuracy": DeclaredDeviation("ULP-level", rows=0, observed=True, inexact_rows=765)})  # fmt: skip
    page = render_html(CheckResult(s, None, []))
    table = page.split('id="clause-table"', 1)[1].split("</table>", 1)[0]
    row = next(r for r in table.split("<tr")[2:] if "weight_accuracy" in r)
    assert 'class="failing"' not in row and "tag declared" not in row and "within tolerance</span>" in row
    assert "765 rows within tolerance, not bit-exact" in row
