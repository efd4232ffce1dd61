"""Issue 34 item 7: the summary counts the mismatched rows per clause and per call option exactly, at any --rows
(the mismatch cells are capped), and the HTML and markdown reports show that split."""

import json

import pytest

from contracts.cases import build_case
from contracts.cases.plan import iter_plan
from contracts.candidates.registry import get_candidate
from contracts.reports.markdown import render_markdown
from contracts.reports.html import render_html
from contracts.run.candidate_check import check_candidate
from contracts.run.tally import batch_size_class, call_options
from tests.broken_candidates import _route

FAMILIES = ["random_bf16", "random_fp32"]
ROWS = 400


def unscaled_unless_renormalized(scores, bias, topk, renormalize, rsf):
    """Wrong only where ``renormalize`` is False: the scaling factor is left out there (a call-option defect)."""
    return _route(scores, bias, topk, renormalize, rsf if renormalize else 1.0)


def _run(max_cells):
    cand = get_candidate("tests.test_option_counts:unscaled_unless_renormalized")
    specs = list(iter_plan(FAMILIES, ROWS, 0, 896, 16))
    return specs, check_candidate(cand, specs, contract="aiter", device="cpu", max_cells=max_cells, progress=None)


# Two whole checks (one capped, one not) and the diagnosis of a failing one: ~15 s on a loaded 2-core machine,
# shared by the tests below; they must be real checks, as the point is that the counts match what really ran.
SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def capped_and_full():
    specs, capped = _run(max_cells=40)
    _, full = _run(max_cells=10**9)
    return specs, capped, full


def test_batch_size_classes_split_at_powers_of_two():
    assert [batch_size_class(n) for n in (1, 2, 3, 4, 5, 1024, 1025, 2048, 2049)] == [
        "1", "2", "3-4", "3-4", "5-8", "513-1024", "1025-2048", "1025-2048", "2049-4096"]  # fmt: skip


@SLOW
def test_counts_by_option_equal_a_recount_of_an_uncapped_run(capped_and_full):
    specs, capped, full = capped_and_full
    s = capped.summary
    assert s.status.value == "fail" and s.cells_capped, "the cap must bite for this test to mean anything"
    assert not full.summary.cells_capped
    # the recount: every mismatched row of the uncapped cells, under its case's options
    cells = full.cells[full.cells["verdict"] == "mismatch"].drop_duplicates(["case", "row"])
    options = {spec.replay_id: call_options(build_case(spec)) for spec in specs}
    recount: dict = {}
    for case in cells["case"]:
        for option, value in options[case].items():
            recount.setdefault(option, {}).setdefault(value, 0)
            recount[option][value] += 1
    counted = {o: {v: c.mismatched_rows for v, c in values.items() if c.mismatched_rows} for o, values in s.by_option.items()}
    assert counted == recount
    # the defect lives only where renormalize is False, on every batch size and dtype pair
    assert s.by_option["renormalize"]["True"].mismatched_rows == 0
    assert s.by_option["renormalize"]["False"].mismatched_rows == s.mismatched_rows > 0
    assert s.by_option["renormalize"]["False"].clauses == {"scaling": s.mismatched_rows}
    for values in s.by_option.values():
        assert sum(c.rows for c in values.values()) == s.rows_checked
        assert sum(c.mismatched_rows for c in values.values()) == s.mismatched_rows
    assert set(s.by_option["dtypes"]) >= {"bfloat16 logits, float32 bias", "float32 logits, float32 bias"}


@SLOW
def test_reports_show_the_split(capped_and_full, tmp_path):
    _, capped, _ = capped_and_full
    s = capped.summary
    md = render_markdown(capped)
    false = s.by_option["renormalize"]["False"]
    assert "## Mismatched rows by call option" in md
    assert f"| renormalize | False | {false.rows:,} | {false.mismatched_rows:,} | scaling: {false.mismatched_rows:,} |" in md
    page = render_html(capped)
    assert 'data-option="renormalize" data-value="False"' in page
    row = page.split('data-option="renormalize" data-value="False"', 1)[1].split("</tr>", 1)[0]
    assert f'data-count="mismatched_rows">{false.mismatched_rows:,}<' in row


@SLOW
def test_the_split_survives_the_bundle_and_a_merge_of_shards(capped_and_full, tmp_path):
    from contracts.reports.bundle import open_check, write_check_bundle
    from contracts.reports.merge import sum_summaries

    _, capped, _ = capped_and_full
    write_check_bundle(tmp_path / "b", capped)
    back = open_check(tmp_path / "b").summary
    assert back.by_option == capped.summary.by_option
    doubled = sum_summaries([back, back], back)
    assert doubled.by_option["renormalize"]["False"].mismatched_rows == 2 * back.by_option["renormalize"]["False"].mismatched_rows
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["by_option"]["batch_size"]
