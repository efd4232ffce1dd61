"""report.html: escaping, self-containment, the sections, and the page in a real headless Chromium.

The browser test needs Debian's chromium and chromium-driver (``bash
scripts/setup.sh --ci-tools`` installs them). Without them it fails, on
purpose: a skip would hide a missing install in CI. ``ROUTER_ALLOW_NO_BROWSER=1``
turns that failure into a skip on a machine where that is known and fine.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import shlex
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import oracle
from contracts import check
from contracts.commands._common import ExitCode
from contracts.commands.bench import main as bench_main
from contracts.run import bench
from contracts.reports.bundle import write_html
from contracts.reports.html import render_html
from contracts.reports.schema import CheckResult, DeclaredDeviation, ErrorRecord, FamilyCounts, RowDetail, Status, Summary
from contracts.candidates import Candidate, all_candidates, register
from tests.aiter_model_families import PASSING_AITER_MODEL_FAMILIES

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HOSTILE_NAME = "<script>window.__pwned=1</script>broken"
HOSTILE_REASON = '<img src=x onerror="window.__pwned=2">ties & "quotes"'
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _broken_route(scores, bias, topk, renormalize, routed_scaling_factor):
    """The oracle, then two planted bugs: slots 0 and 1 swapped on every 3rd row, the last id bumped on every 7th."""
    weights, ids = oracle.route(scores, bias, topk, renormalize=renormalize,
                                routed_scaling_factor=routed_scaling_factor, contract="aiter")  # fmt: skip
    weights, ids = weights.clone(), ids.clone()
    rows = torch.arange(ids.shape[0])
    swap = rows % 3 == 1
    weights[swap, 0], weights[swap, 1] = weights[swap, 1].clone(), weights[swap, 0].clone()
    ids[swap, 0], ids[swap, 1] = ids[swap, 1].clone(), ids[swap, 0].clone()
    bump = rows % 7 == 3
    ids[bump, -1] = (ids[bump, -1] + 1) % scores.shape[1]
    return weights, ids


if HOSTILE_NAME not in all_candidates():
    register(
        Candidate(
            name=HOSTILE_NAME,
            route=_broken_route,
            expected_deviations={"aiter": {"tie_order": HOSTILE_REASON}},
            description="a planted broken router whose name and reason are HTML",
        )
    )


def _quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args)


@pytest.fixture(scope="module")
def failing_bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("failing")
    code = _quiet(check.main, ["--candidate", HOSTILE_NAME, "--rows", "1500", "--families",
                               "random_bf16,tie_pool_straddle,nan_sparse", "--device", "cpu", "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 1, "the planted candidate must fail its check"
    bench_dir = out / "bench"
    assert _quiet(bench_main, ["--candidate", "oracle,torch-native", "--m", "1,8", "--repeats", "1", "--device", "cpu",
                               "--out", str(bench_dir)]) == 0  # fmt: skip
    write_html(out, bench_dir)
    return out


@pytest.fixture(scope="module")
def page(failing_bundle) -> str:
    return (failing_bundle / "report.html").read_text(encoding="utf-8")


def test_report_html_is_written_next_to_the_bundle_files(failing_bundle, page):
    summary = json.loads((failing_bundle / "summary.json").read_text())
    assert summary["status"] == "fail" and summary["mismatched_rows"] > 0
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not list(failing_bundle.glob(".report.html.*")), "the atomic write left a temporary file"


def test_names_and_reasons_from_candidates_are_escaped(page):
    assert "<script>window.__pwned" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;broken" in page
    assert "&lt;img src=x onerror=&quot;window.__pwned=2&quot;&gt;ties &amp; &quot;quotes&quot;" in page
    assert page.count("<script>") == 1  # the page's own copy-button script


def test_page_loads_nothing_from_outside(page):
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page, re.IGNORECASE)
    assert "default-src 'none'" in page  # the CSP forbids any other source
    assert "data:image/png;base64," in page


def test_sections_in_order(page):
    ids = ["verdict", "clause-table", "heatmap", "examples", "replay", "deviations", "bench", "environment"]
    positions = [page.index(f'id="{i}"') for i in ids]
    assert positions == sorted(positions)


def test_failing_clauses_and_cutoff_are_marked(failing_bundle, page):
    summary = json.loads((failing_bundle / "summary.json").read_text())
    failing = [c for c, n in summary["clauses"].items() if n]
    assert failing, summary["clauses"]
    for clause in failing:
        assert re.search(rf'<tr class="failing"><td class="mono">{clause}</td>', page)
    assert 'class="cutoff"' in page and "cutoff (slot topk-1)" in page
    assert 'class="diff' in page
    details = json.loads((failing_bundle / "details.json").read_text())
    for d in details:
        assert d["replay"].replace("<", "&lt;").replace(">", "&gt;").split("--candidate")[0] in page


def test_side_by_side_highlights_exactly_the_differing_slots():
    summary = Summary(status=Status.FAIL, candidate="c", contract="aiter", device="cpu", clauses={"selection": 1},
                      families={}, rows_checked=1, mismatched_rows=1)  # fmt: skip
    detail = RowDetail(clause="selection", verdict="mismatch", family="f", case="f:1:1", row=0, reason="r",
                       expected_ids=[5, 6, 7], actual_ids=[5, 7, 9], expected_weights=[0.5, 0.25, 0.25],
                       actual_weights=[0.5, 0.25, float("nan")], tie_group_size=2, straddles_cutoff=True,
                       nan_count=0, replay="python -m contracts.check --replay f:1:1 --row 0")  # fmt: skip
    html_text = render_html(CheckResult(summary, details=[detail]))
    body = html_text[html_text.index('<table class="sbs">') :]
    rows = re.findall(r"<tr class=\"(cutoff|)\">(.*?)</tr>", body)
    assert [klass for klass, _ in rows] == ["", "", "cutoff"]
    assert 'class="diff' not in rows[0][1]
    assert rows[1][1].count('class="diff') == 2 and 'class="diff missing"' in rows[1][1]  # 6 is not in the actual ids
    assert 'class="diff extra"' in rows[2][1] and "NaN" in rows[2][1] and "tie group of 2 straddles it" in rows[2][1]


def test_unavailable_bundle_shows_the_reason(tmp_path):
    code = _quiet(check.main, ["--candidate", "radix4", "--device", "cpu", "--out", str(tmp_path), "--quiet"])
    assert code == ExitCode.UNAVAILABLE
    reason = json.loads((tmp_path / "summary.json").read_text())["reason"]
    page = write_html(tmp_path).read_text(encoding="utf-8")
    assert "UNAVAILABLE" in page and 'class="verdict unavailable"' in page
    assert f"Not run on this host: {reason}".replace("'", "&#x27;") in page


def test_missing_summary_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary.json"):
        write_html(tmp_path)


# ---------------------------------------------------------------- in a browser


def _browser_tools():
    """(webdriver module, Service class); fails (or skips with ROUTER_ALLOW_NO_BROWSER=1) when a tool is missing."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        message = f"{', '.join(missing)} not found: run `bash scripts/setup.sh --ci-tools` to install the browser test tools"
        if os.environ.get("ROUTER_ALLOW_NO_BROWSER") == "1":
            pytest.skip(message + " (skipped: ROUTER_ALLOW_NO_BROWSER=1)")
        pytest.fail(message)
    return webdriver, Service


@contextlib.contextmanager
def headless_chromium(profile: Path):
    webdriver, Service = _browser_tools()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1280,1600"):  # fmt: skip
        options.add_argument(flag)
    profile.mkdir()
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _severe(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def test_report_in_headless_chromium(failing_bundle, tmp_path):
    with headless_chromium(tmp_path / "chromium-profile") as browser:
        check_report_in_browser(browser, failing_bundle / "report.html", tmp_path)


def check_report_in_browser(browser, report: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(report.resolve().as_uri())
    assert _severe(browser) == []

    verdict = browser.find_element(By.ID, "verdict")
    assert verdict.is_displayed() and verdict.text.startswith("FAIL")
    assert HOSTILE_NAME in verdict.text  # shown as text, not run as markup
    assert browser.execute_script("return window.__pwned === undefined")
    table = browser.find_element(By.ID, "clause-table")
    assert table.is_displayed() and "selection" in table.text
    assert browser.find_element(By.CSS_SELECTOR, "#bench img.plot").is_displayed()

    external = browser.execute_script(
        "return Array.from(document.querySelectorAll('[src],[href]'))"
        ".map(el => el.getAttribute('src') || el.getAttribute('href'))"
        ".filter(v => /https?:\\/\\/|^\\s*\\/\\//i.test(v));"
    )
    assert external == []

    button = browser.find_element(By.CSS_SELECTOR, "#replay button.copy")
    button.click()
    assert _severe(browser) == []

    browser.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    keep = os.environ.get("ROUTER_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_candidate_error_is_shown_escaped_with_its_replay():
    summary = Summary(status=Status.ERROR, candidate="c", contract="aiter", device="cpu", clauses={}, families={},
                      error=ErrorRecord(kind="exception", case="f:1:2", message="raised RuntimeError: <b>x</b>",
                                        traceback="Traceback ...\nRuntimeError: <b>x</b>", replay="python -m contracts.check --replay f:1:2"))  # fmt: skip
    page = render_html(CheckResult(summary))
    section = page[page.index('id="error"') :]
    assert 'class="verdict error"' in page and "<b>x</b>" not in page
    assert section.count("&lt;b&gt;x&lt;/b&gt;") == 2 and "--replay f:1:2" in section


# ---------------------------------------------------------------- counts never contradict the data (issue 23)


class _Page(HTMLParser):
    """The heatmap, clause, skip and deviation tables of a page, as text by data attribute."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.family_counts: dict[str, dict[str, str]] = {}  # family -> counter -> text
        self.heat: dict[tuple[str, str], dict] = {}  # (family, clause) -> data attributes and text
        self.tables: dict[str, list[list[str]]] = {}  # table id -> rows of cell texts
        self._family = self._cell = self._table = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr":
            self._family = a.get("data-family")
            if self._table:
                self.tables[self._table].append([])
        elif tag == "td":
            self._cell, self._text = a, []

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        if tag == "tr" and self._table and not self.tables[self._table][-1]:
            self.tables[self._table].pop()  # a header row
        if tag != "td" or self._cell is None:
            return
        text = "".join(self._text).strip()
        if self._table and self.tables[self._table]:
            self.tables[self._table][-1].append(text)
        if self._family and "data-count" in self._cell:
            self.family_counts.setdefault(self._family, {})[self._cell["data-count"]] = text
        if self._family and "data-clause" in self._cell:
            self.heat[(self._family, self._cell["data-clause"])] = {**self._cell, "text": text}
        self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._text.append(data)


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


def _section(page: str, ident: str) -> str:
    start = page.index(f'id="{ident}"')
    end = page.find("<section", start)
    return page[start : end if end > 0 else len(page)]


def assert_counts_match_summary(page: str, summary: dict) -> None:
    """Every count of the heatmap equals summary.json's counter (read as plain JSON, not through the schema)."""
    parsed = _parse(page)
    assert set(parsed.family_counts) == set(summary["families"])
    for family, fam in summary["families"].items():
        shown = parsed.family_counts[family]
        raised = any(f.get("rows_raised") for f in summary["families"].values())
        for counter in ("rows", "rows_skipped", "near_tie_rows", "expected_rows", "mismatched_rows") + (("rows_raised",) if raised else ()):
            assert shown[counter] == f"{fam.get(counter, 0):,}", (family, counter)
        for clause in summary["clauses"]:
            cell = parsed.heat[(family, clause)]
            unexpected = fam["clauses"].get(clause, 0)
            broken = fam.get("clauses_broken", {}).get(clause, unexpected)
            assert int(cell["data-unexpected"]) == unexpected and int(cell["data-broken"]) == broken, (family, clause)
            if unexpected:
                assert f"{unexpected:,}" in cell["text"]
            if "expected_clauses" in fam and (fam["expected_clauses"] or not fam["expected_rows"]):
                declared = fam["expected_clauses"].get(clause, 0)
                assert cell["data-declared"] == str(declared), (family, clause)
                if declared:
                    assert f"{declared:,} decl." in cell["text"], (family, clause, cell)
                elif not unexpected and broken == unexpected:
                    assert cell["text"] == "0"
            elif clause in summary["expected_deviations"] and fam["expected_rows"]:
                assert cell["data-declared"] == "not recorded" and "not recorded" in cell["text"], (family, clause)
    clause_rows = {row[0]: row for row in parsed.tables["clause-table"]}
    for clause, unexpected in summary["clauses"].items():
        assert clause_rows[clause][2] == f"{unexpected:,}"
        assert clause_rows[clause][3] == f"{summary.get('clauses_broken', {}).get(clause, unexpected):,}"


@pytest.fixture(scope="module")
def real_bundles(tmp_path_factory) -> dict[str, Path]:
    """aiter-model (skips rows, with a reason; weight_accuracy declared) and torch-native (declared deviations), as the main job writes them."""
    out = tmp_path_factory.mktemp("real")
    code = _quiet(check.main, ["--candidate", "aiter-model,torch-native", "--rows", "2000", "--device", "cpu", "--out", str(out), "--quiet",
                               "--families", PASSING_AITER_MODEL_FAMILIES])  # fmt: skip
    assert code == 0
    return {name: out / name for name in ("aiter-model", "torch-native")}


@pytest.mark.slow  # a check per candidate with its HTML page: ~7 s each
@pytest.mark.parametrize("name", ["aiter-model", "torch-native"])
def test_html_per_family_counts_equal_the_summary(real_bundles, name):
    bundle = real_bundles[name]
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["expected_deviation_rows"] > 0
    assert_counts_match_summary((bundle / "report.html").read_text(encoding="utf-8"), summary)


def test_rows_the_candidate_raised_on_are_counted_not_hidden(tmp_path):
    out = tmp_path / "raises"
    code = _quiet(check.main, ["--candidate", "tests.broken_candidates:raises", "--families", "random_bf16,all_equal", "--rows", "200",
                               "--device", "cpu", "--no-isolate", "--out", str(out), "--quiet"])  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert code == 1 and summary["status"] == "error" and summary["raised_rows"] == summary["rows_checked"] > 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert_counts_match_summary(page, summary)
    assert f"the candidate raised on {summary['raised_rows']:,} of them" in _section(page, "verdict")
    assert "planted failure inside the candidate" in _section(page, "error")


@pytest.mark.slow  # its module fixture checks two candidates (9-11 s)
def test_skipped_rows_carry_their_reason_everywhere(real_bundles):
    bundle = real_bundles["aiter-model"]
    summary = json.loads((bundle / "summary.json").read_text())
    page = (bundle / "report.html").read_text(encoding="utf-8")
    totals: dict[str, int] = {}
    for fam in summary["families"].values():
        for reason, rows in fam["skip_reasons"].items():
            totals[reason] = totals.get(reason, 0) + rows
    assert summary["rows_skipped"] > 0 and sum(totals.values()) == summary["rows_skipped"]
    verdict, cards = _section(page, "verdict"), _section(page, "figures")
    for reason, rows in totals.items():
        shown = html.escape(reason)
        assert f"{rows:,} rows: {shown}" in verdict and f"{rows:,}: {shown}" in cards
    skip_rows = _parse(page).tables["skip-table"]
    expected = [[family, f"{rows:,}", reason] for family, fam in summary["families"].items() for reason, rows in fam["skip_reasons"].items()]
    assert skip_rows == expected
    for family, fam in summary["families"].items():
        for reason, rows in fam["skip_reasons"].items():
            title = re.search(rf'<tr data-family="{family}">.*?data-count="rows_skipped" title="([^"]*)"', page).group(1)
            assert f"{rows:,} rows: {html.escape(reason)}" in title, (family, title)


@pytest.mark.slow  # the same fixture as above
def test_inexact_weight_accuracy_is_shown_not_zero_rows(real_bundles):
    bundle = real_bundles["aiter-model"]
    declared = json.loads((bundle / "summary.json").read_text())["expected_deviations"]["weight_accuracy"]
    assert declared["observed"] and declared["rows"] == 0 and declared["inexact_rows"] > 0
    page = (bundle / "report.html").read_text(encoding="utf-8")
    row = next(r for r in _parse(page).tables["deviation-table"] if r[0] == "weight_accuracy")
    assert row[1] == f"{declared['inexact_rows']:,} rows within tolerance, not bit-exact" and row[3] == "yes"
    clause = next(r for r in _parse(page).tables["clause-table"] if r[0] == "weight_accuracy")
    assert clause[1] == "within tolerance" and f"{declared['inexact_rows']:,}" in clause[4]


def test_capped_cells_do_not_change_the_counts(tmp_path):
    from contracts.cases import iter_plan
    from contracts.candidates import get_candidate
    from contracts.reports.bundle import write_check_bundle
    from contracts.run.candidate_check import check_candidate

    specs = list(iter_plan(["all_equal", "nan_sparse", "zero_sum"], 300, 0, 896, 16))
    result = check_candidate(get_candidate("torch-native"), iter(specs), contract="aiter", device="cpu", max_cells=40)
    s = result.summary
    assert s.cells_capped and s.cells_recorded < s.cells_total and s.expected_deviation_rows > s.cells_recorded
    write_check_bundle(tmp_path / "b", result)
    page = (tmp_path / "b" / "report.html").read_text(encoding="utf-8")
    assert_counts_match_summary(page, json.loads((tmp_path / "b" / "summary.json").read_text()))
    assert f"Mismatch cells: {s.cells_recorded:,} of {s.cells_total:,} recorded" in page
    notes = _section(page, "notes")
    assert notes.lower().count("mismatch cells:") == 1  # issue 33: the capped-cells note was shown twice
    for note in s.notes:
        assert html.escape(note[1:]) in notes  # the cells note once, capitalised; every other note as written


def test_a_version_1_bundle_renders_with_not_recorded_counters(tmp_path):
    from contracts.reports.bundle import open_check
    from contracts.reports.html import render_bundle_html

    baselines = Path(__file__).resolve().parent.parent / "reports" / "baselines"
    for name in ("h200-radix4", "h200-aiter-model"):
        bundle = open_check(baselines / name)
        assert bundle.summary.schema_version == 1
        page = render_bundle_html(CheckResult(bundle.summary, bundle.cells(), bundle.details()))
        raw = json.loads((baselines / name / "summary.json").read_text())
        assert_counts_match_summary(page, raw)
        assert page.count("<script>") == 1 and 'class="verdict pass"' in page
    # aiter-model counted each family's declared and skipped rows, not by clause or reason
    heat = _parse(page).heat
    assert heat[("nan_dense", "nan_last")]["data-declared"] == "not recorded"
    assert heat[("nan_dense", "selection")]["data-declared"] == "0"  # not a declared clause: exactly 0
    assert "reason not recorded" in _section(page, "skipped")
    assert "does not record how many there were in all" in _section(page, "notes")


def test_unavailable_page_says_why_and_that_nothing_ran(tmp_path):
    code = _quiet(check.main, ["--candidate", "radix4", "--device", "cpu", "--out", str(tmp_path), "--quiet"])
    assert code == ExitCode.UNAVAILABLE
    summary = json.loads((tmp_path / "summary.json").read_text())
    page = (tmp_path / "report.html").read_text(encoding="utf-8")  # written with the bundle, not only by write_html
    why = _section(page, "unavailable")
    assert html.escape(summary["reason"]) in why and "No row was checked" in why
    assert 'id="heatmap"' not in page and 'id="clause-table"' not in page
    assert summary["command"].split(" --out")[0] in _section(page, "replay")


HOSTILE = '<img src=x onerror="window.__pwned=3">\u202egnp.exe\x1b[2J'


def test_every_candidate_string_is_escaped_and_cleaned():
    summary = Summary(
        status=Status.INTERRUPTED, candidate=HOSTILE, contract="aiter", device="cpu", interrupted="SIGINT",
        rows_checked=4, rows_skipped=2, notes=[f"note {HOSTILE}"], diagnosis=[{"text": f"diagnosis {HOSTILE}"}],
        cells_capped=True, cells_recorded=1, cells_total=9, clauses={"selection": 0},
        families={HOSTILE: FamilyCounts(rows=4, rows_skipped=2, skip_reasons={f"skip {HOSTILE}": 2})},
        expected_deviations={"tie_order": DeclaredDeviation(reason=f"why {HOSTILE}")},
        error=ErrorRecord(kind="exception", case="f:1:2", message=f"raised {HOSTILE}", traceback=f"Traceback\n{HOSTILE}",
                          replay=f"python -m contracts.check --candidate {shlex.quote(HOSTILE)} --replay f:1:2"),
    )  # fmt: skip
    detail = RowDetail(row=0, clause="selection", verdict="mismatch", reason=f"reason {HOSTILE}", family=HOSTILE, case="f:1:2",
                       expected_ids=[1], actual_ids=[2], replay=f"python -m contracts.check --candidate {shlex.quote(HOSTILE)}")  # fmt: skip
    page = render_html(CheckResult(summary, details=[detail]))
    assert "<img" not in page and "\u202e" not in page and "\x1b" not in page
    escaped = "&lt;img src=x onerror=&quot;window.__pwned=3&quot;&gt;\\u202egnp.exe\\x1b[2J"
    for shown in ("note ", "diagnosis ", "skip ", "why ", "raised ", "reason ", "<td class=\"fam mono\">", 'data-family="'):
        assert shown + escaped in page, shown
    assert 'class="verdict interrupted"' in page and "Interrupted (SIGINT)" in _section(page, "verdict")
    assert "Mismatch cells: 1 of 9 recorded" in page and "--replay f:1:2" in _section(page, "replay")


def test_the_bench_section_states_the_launch_floor_when_the_bench_has_one():
    from contracts.reports.html import _bench_view

    method = {"timer": "CUDA graph replay", "experts": 896, "topk": 16, "dtype": "bf16", "bias_dtype": "bf16"}
    with_floor = _bench_view({"device": "cuda", "method": {**method, "launch_floor_us": 0.878}}, None)
    assert with_floor.lead.endswith("; launch floor 0.88 us (an empty kernel)")
    assert "launch floor" not in _bench_view({"device": "cpu", "method": {**method, "launch_floor_us": None}}, None).lead
