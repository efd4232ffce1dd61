"""report.html: escaping, self-containment, the sections, and the page in a real headless Chromium.

The browser test needs Debian's chromium and chromium-driver (``bash
scripts/setup.sh --ci-tools`` installs them). Without them it fails, on
purpose: a skip would hide a missing install in CI. ``ROUTER_ALLOW_NO_BROWSER=1``
turns that failure into a skip on a machine where that is known and fine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import oracle
from contracts import check
from contracts.commands._common import ExitCode
from contracts.bench import main as bench_main
from contracts.run import bench
from contracts.reports.html import render_html, write_html
from contracts.candidates import Candidate, all_candidates, register

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
    summary = {"status": "fail", "candidate": "c", "contract": "aiter", "device": "cpu", "clauses": {"selection": 1},
               "families": {}, "rows_checked": 1, "mismatched_rows": 1}  # fmt: skip
    detail = {"clause": "selection", "verdict": "mismatch", "family": "f", "case": "f:1:1", "row": 0, "reason": "r",
              "expected_ids": [5, 6, 7], "actual_ids": [5, 7, 9], "expected_weights": [0.5, 0.25, 0.25],
              "actual_weights": [0.5, 0.25, float("nan")], "tie_group_size": 2, "straddles_cutoff": True,
              "nan_count": 0, "replay": "python -m contracts.check --replay f:1:1 --row 0"}  # fmt: skip
    html_text = render_html(summary, [detail])
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
    summary = {"status": "error", "candidate": "c", "contract": "aiter", "device": "cpu", "clauses": {}, "families": {},
               "error": {"kind": "exception", "case": "f:1:2", "message": "raised RuntimeError: <b>x</b>",
                         "traceback": "Traceback ...\nRuntimeError: <b>x</b>", "replay": "python -m contracts.check --replay f:1:2"}}  # fmt: skip
    page = render_html(summary, [])
    section = page[page.index('id="error"') :]
    assert 'class="verdict error"' in page and "<b>x</b>" not in page
    assert section.count("&lt;b&gt;x&lt;/b&gt;") == 2 and "--replay f:1:2" in section
