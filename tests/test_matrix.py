"""``python -m contracts matrix``: the bundle (matrix.json, the heatmap, the page, the table), the pairs, the prefill/decode view.

The matrix runs over built-ins (oracle, torch-native, aiter-model), the CPU
engine adapters (sglang-torch, vllm-torch, lmdeploy-torch: each skips with
the reason when its engine is not installed, and is then listed as
unavailable in the bundle), a CUDA adapter (unavailable here, with its
reason) and a planted candidate whose name is HTML. The page and the
heatmap are opened in headless Chromium (tests/test_html_report.py's
helper; without the browser tools that test fails, as there).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
from pathlib import Path

import pytest
import torch

import oracle
from contracts.commands import matrix
from contracts.candidates import Candidate, all_candidates, register
from contracts.commands._common import ExitCode
from contracts.reports.bundle import read_matrix
from contracts.reports.matrix import render_matrix_table
from contracts.cases.plan import pinned_rows

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HOSTILE = "<script>window.__pwned=1</script>planted"
ENGINE_CANDIDATES = ("sglang-torch", "vllm-torch", "lmdeploy-torch")
FAMILIES = "random_bf16,tie_pool_straddle,nan_sparse,zero_sum"


def _quiet(fn, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fn(*args)
    return code, out.getvalue(), err.getvalue()


def _torch_topk(scores, bias, topk, renormalize, routed_scaling_factor):
    """fp32 sigmoid + bias, torch.topk: NaN first, torch's tie order."""
    sig = scores.float().sigmoid()
    ids = torch.topk(sig + bias.float(), topk, dim=-1).indices
    w = sig.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return (w * routed_scaling_factor).float(), ids.int()


def _oracle(scores, bias, topk, renormalize, routed_scaling_factor):
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract="aiter")


def _batch_dependent(scores, bias, topk, renormalize, routed_scaling_factor):
    """The oracle below 64 rows per call, torch.topk from 64 rows on: a router whose kernel changes with the batch."""
    return (_oracle if scores.shape[0] < 64 else _torch_topk)(scores, bias, topk, renormalize, routed_scaling_factor)


for _c in (Candidate(name=HOSTILE, route=_torch_topk, description='<img src=x onerror="window.__pwned=2">'),
           Candidate(name="batch-dependent", route=_batch_dependent, description="oracle below 64 rows, torch.topk above")):  # fmt: skip
    if _c.name not in all_candidates():
        register(_c)


def _engines_here() -> tuple[list[str], dict[str, str]]:
    here, missing = [], {}
    for name in ENGINE_CANDIDATES:
        ok, why = all_candidates()[name].available("cpu")
        (here.append(name) if ok else missing.__setitem__(name, why))
    return here, missing


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("matrix") / "bundle"
    names = ["oracle", "torch-native", "aiter-model", *ENGINE_CANDIDATES, "sglang-radix", HOSTILE]
    code, stdout, stderr = _quiet(matrix.main, ["--candidate", ",".join(names), "--rows", "480", "--families", FAMILIES,
                                                "--device", "cpu", "--out", str(out), "--quiet"])  # fmt: skip
    # torch.topk under the hostile name declares nothing, so it FAILs against the oracle: the matrix exits 1, as a check would.
    assert code == ExitCode.FAILED and "matrix: against the oracle," in stderr and "fail" in stderr, stderr
    assert read_matrix(out).member(HOSTILE).status.value == "fail"
    assert "bundle:" in stdout and "oracle (aiter)" in stdout
    return out


@pytest.fixture(scope="module")
def report(bundle):
    return read_matrix(bundle)


@pytest.mark.slow  # a matrix of three candidates in workers, then the page and the heatmap: ~15 s
def test_bundle_holds_the_json_the_heatmap_the_page_and_the_table(bundle, report):
    assert {p.name for p in bundle.iterdir()} == {"matrix.json", "matrix.png", "matrix.html", "matrix.txt"}
    png = (bundle / "matrix.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000
    assert (bundle / "matrix.txt").read_text().strip() == render_matrix_table(report)
    data = json.loads((bundle / "matrix.json").read_text())
    assert data["kind"] == "router-contracts-matrix" and data["contract"] == "aiter"


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_every_pair_and_every_candidate_against_the_oracle(report):
    names = [m.name for m in report.candidates]
    assert len(report.pairs) == len(names) * (len(names) - 1) // 2
    assert [p.a for p in report.oracle] == names
    assert report.against_oracle("oracle").rows_differing == 0
    assert report.pair("oracle", HOSTILE).rows_differing == report.against_oracle(HOSTILE).rows_differing > 0
    for p in report.pairs + report.oracle:
        if p.rows_compared:
            assert sum(f.rows_compared for f in p.families.values()) == p.rows_compared
            assert sum(p.causes.values()) == p.rows_differing
            assert sum(f.rows_differing for f in p.families.values()) == p.rows_differing
    planted = report.against_oracle(HOSTILE)
    assert {"nan_last", "tie_order"} <= set(planted.causes) and planted.declared_rows == 0
    assert report.member(HOSTILE).status.value == "fail"


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_a_differing_pair_shows_rows_side_by_side_with_a_replay_line(report):
    pair = report.pair("aiter-model", HOSTILE)
    assert pair.rows_differing and pair.examples
    ex = pair.examples[0]
    assert ex.a_ids != ex.b_ids or ex.a_weights != ex.b_weights
    assert ex.replay.startswith("python -m contracts.check --candidate ") and f"--replay {ex.case}" in ex.replay.replace("'", "")
    assert f"--row {ex.row}" in ex.replay and "--against" in ex.replay
    assert pair.oracle_agrees is not None and sum(vars(pair.oracle_agrees).values()) == pair.rows_differing


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_candidates_that_cannot_run_say_why(report):
    radix = report.member("sglang-radix")
    assert radix.status.value == "unavailable" and "cuda" in radix.reason
    assert report.against_oracle("sglang-radix").rows_compared == 0
    here, missing = _engines_here()
    for name, why in missing.items():
        assert report.member(name).status.value == "unavailable" and report.member(name).reason == why


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_engine_adapters_run_isolated_and_agree_with_their_declarations(report):
    here, missing = _engines_here()
    if not here:
        pytest.skip(f"no engine installed: {missing}")
    for name in here:
        m, vs = report.member(name), report.against_oracle(name)
        # every row answered but those the adapter's gate refuses (the torch routers: logits of column stride 1 only,
        # so the pinned transposed and column-strided layouts are skipped, not run)
        assert m.isolated and m.rows_answered + m.rows_skipped == report.rows_run and m.rows_answered > m.rows_skipped
        assert m.status.value == "pass", (name, vs.causes)
        assert set(vs.causes) - {"near_tie"} <= set(m.declared)
        assert vs.declared_rows == vs.rows_differing - vs.near_tie_rows > 0


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_the_table_reads_like_the_matrix(report):
    table = render_matrix_table(report)
    assert "oracle (aiter)" in table and "sglang-radix" in table and "UNAVAILABLE" in table
    first = report.pair("oracle", "torch-native")
    assert f"{first.rows_differing:,} (" in table


@pytest.mark.slow  # reads the module's matrix of six candidates in workers: ~18 s, paid by the first
def test_page_escapes_names_and_loads_nothing(bundle):
    page = (bundle / "matrix.html").read_text()
    assert HOSTILE not in page and "&lt;script&gt;window.__pwned=1&lt;/script&gt;planted" in page
    assert 'onerror="' not in page
    assert "Content-Security-Policy" in page and "http://" not in page and "https://" not in page
    assert 'src="data:image/png;base64,' in page


@pytest.mark.slow  # a matrix whose candidate crashes its worker: ~7 s
def test_a_crashing_candidate_is_a_reported_error_and_the_others_go_on(tmp_path):
    crashing = "tests.planted.segfault:route"
    code, stdout, _ = _quiet(matrix.main, ["--candidate", f"oracle,{crashing},torch-native", "--rows", "300", "--families", FAMILIES,
                                           "--device", "cpu", "--out", str(tmp_path / "m"), "--quiet"])  # fmt: skip
    assert code == ExitCode.FAILED
    r = read_matrix(tmp_path / "m")
    dead = r.member(crashing)
    assert dead.isolated and dead.status.value == "error" and dead.error.kind == "crash" and "SIGSEGV" in dead.error.message
    assert dead.rows_answered > 0, "it answered two cases before it crashed"
    assert r.pair("oracle", crashing).not_compared == {f"{crashing} stopped with an error": r.rows_run - dead.rows_answered}
    assert r.pair("oracle", "torch-native").rows_compared == r.rows_run, "the others ran every case"


def test_grouped_matrix_shows_the_engines_group_masks(tmp_path):
    here, missing = _engines_here()
    if not {"sglang-torch", "lmdeploy-torch"} <= set(here):
        pytest.skip(f"needs sglang and lmdeploy: {missing}")
    code, _, stderr = _quiet(matrix.main, ["--candidate", "oracle,sglang-torch,lmdeploy-torch", "--contract", "deepseek-v3",
                                           "--rows", "800", "--no-isolate", "--device", "cpu", "--out", str(tmp_path / "g"), "--quiet"])  # fmt: skip
    assert code == ExitCode.OK, stderr
    r = read_matrix(tmp_path / "g")
    assert (r.contract, r.experts, r.topk) == ("deepseek-v3", 256, 8)
    assert r.member("sglang-torch").status.value == r.member("lmdeploy-torch").status.value == "pass"
    assert "group_mask" in r.pair("sglang-torch", "lmdeploy-torch").causes, "-inf against 0.0 for the dropped groups"


# ---------------------------------------------------------------- prefill/decode


@pytest.mark.slow  # a split matrix of two candidates: ~5 s
def test_split_counts_the_tokens_whose_routing_changes_across_the_split(tmp_path):
    code, stdout, _ = _quiet(matrix.main, ["--split", "batch-dependent:batch-dependent@64", "--rows", "400", "--families", FAMILIES,
                                           "--device", "cpu", "--out", str(tmp_path / "a"), "--quiet"])  # fmt: skip
    # A split-only matrix compares the two sides with each other; no member is checked against the oracle, none FAILs.
    assert code == ExitCode.OK
    split = read_matrix(tmp_path / "a").split
    assert (split.below, split.above, split.split) == ("batch-dependent", "batch-dependent", 64)
    pair = split.pair
    assert pair.a == "batch-dependent@M<64" and pair.b == "batch-dependent@M>=64"
    pinned = sum(pinned_rows(name, 1025, experts=896, topk=16, contract="aiter") for name in FAMILIES.split(","))
    assert pair.rows_compared == 400 + pinned and pair.rows_differing > 0  # and each family's pinned cases
    assert {"nan_last", "tie_order"} <= set(pair.causes)
    assert pair.oracle_agrees.candidate == pair.rows_differing, "below 64 rows it is the oracle"
    assert pair.examples and all(ex.departs == pair.b for ex in pair.examples)
    assert "prefill/decode: batch-dependent below 64 rows per batch" in stdout

    code, _, _ = _quiet(matrix.main, ["--split", "oracle:oracle@64", "--rows", "200", "--families", FAMILIES, "--device", "cpu",
                                      "--out", str(tmp_path / "b"), "--quiet"])  # fmt: skip
    assert code == ExitCode.OK and read_matrix(tmp_path / "b").split.pair.rows_differing == 0


def test_split_replay_line_reruns_the_row(tmp_path):
    _, _, _ = _quiet(matrix.main, ["--split", "batch-dependent:batch-dependent@64", "--rows", "200", "--families", "nan_sparse",
                                   "--device", "cpu", "--out", str(tmp_path / "a"), "--quiet"])  # fmt: skip
    ex = read_matrix(tmp_path / "a").split.pair.examples[0]
    family_seed_rows = ex.case
    code, stdout, _ = _quiet(matrix.main, ["--candidate", "batch-dependent@M<64,batch-dependent@M>=64", "--replay", family_seed_rows,
                                           "--row", str(ex.row), "--device", "cpu", "--out", str(tmp_path / "r"), "--quiet"])  # fmt: skip
    statuses = {m.name: m.status.value for m in read_matrix(tmp_path / "r").candidates}
    assert code == (ExitCode.FAILED if "fail" in statuses.values() else ExitCode.OK), statuses
    below = [line for line in stdout.splitlines() if line.startswith("  batch-dependent@M<64 ")]
    above = [line for line in stdout.splitlines() if line.startswith("  batch-dependent@M>=64 ")]
    assert str(ex.a_ids) in below[0] and str(ex.b_ids) in above[0], "ids first, then weights"


@pytest.mark.parametrize("args, needle", [
    (["--rows", "10"], "--candidate A,B,... or --split"),
    (["--candidate", "oracle"], "at least two candidates"),
    (["--candidate", "oracle,oracle"], "more than once"),
    (["--split", "oracle@64"], "must be A:B@M0"),
    (["--split", "oracle:oracle@1"], "at least 2"),
    (["--candidate", "oracle,torch-native", "--contract", "nope"], "not a known contract"),
    (["--candidate", "oracle,torch-natve"], "did you mean 'torch-native'"),
    (["--candidate", "oracle,torch-native", "--row", "2"], "--row needs --replay"),
])  # fmt: skip
def test_usage_errors_are_one_line(args, needle, tmp_path):
    code, _, stderr = _quiet(matrix.main, [*args, "--out", str(tmp_path / "x")])
    assert code == ExitCode.USAGE and needle in stderr and len(stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- in a browser


@pytest.mark.slow  # the module's matrix and a headless chromium
def test_page_and_heatmap_in_headless_chromium(bundle, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.test_html_report import _severe, headless_chromium

    width, height = struct.unpack(">II", (bundle / "matrix.png").read_bytes()[16:24])
    with headless_chromium(tmp_path / "chromium-profile") as browser:
        browser.get((bundle / "matrix.png").resolve().as_uri())
        shown = browser.execute_script("var i = document.querySelector('img'); return i && [i.naturalWidth, i.naturalHeight];")
        assert shown == [width, height], "the heatmap PNG decodes in the browser"

        browser.get((bundle / "matrix.html").resolve().as_uri())
        assert _severe(browser) == []
        assert browser.execute_script("return window.__pwned === undefined")
        grid = browser.find_element(By.ID, "matrix")
        assert grid.is_displayed() and "torch-native" in grid.text and HOSTILE in grid.text
        image = browser.find_element(By.CSS_SELECTOR, "#heatmap img.plot")
        assert image.is_displayed()
        assert browser.execute_script("return arguments[0].naturalWidth", image) == width
        link = grid.find_element(By.CSS_SELECTOR, "td a")
        target = link.get_attribute("href").split("#", 1)[1]
        assert browser.find_element(By.ID, target).tag_name == "details"
        external = browser.execute_script(
            "return Array.from(document.querySelectorAll('[src],[href]'))"
            ".map(el => el.getAttribute('src') || el.getAttribute('href'))"
            ".filter(v => /https?:\\/\\/|^\\s*\\/\\//i.test(v));"
        )
        assert external == []
        shot = tmp_path / "matrix.png"
        assert browser.save_screenshot(str(shot)) and shot.read_bytes().startswith(PNG_SIGNATURE)
        keep = os.environ.get("ROUTER_KEEP_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(shot.read_bytes())


def test_run_matrix_takes_the_checks_options_record_and_refuses_one_candidates_options(tmp_path):
    from contracts.run.matrix import run_matrix
    from contracts.run.options import CheckOptions, OptionError

    options = CheckOptions(rows=20, families=("random_fp32",), max_batch=1, isolate=False, progress=False, out=tmp_path / "m")
    done = run_matrix(["oracle", "torch-native"], options)
    assert done.report.rows > 0 and {m.name for m in done.report.candidates} == {"oracle", "torch-native"}
    for field, value in (("against", "oracle"), ("exact", True), ("repeat", 2), ("shard", (0, 2))):
        with pytest.raises(OptionError, match=f"{field} belong to one candidate's check"):
            run_matrix(["oracle", "torch-native"], options, **{field: value})
    with pytest.raises(OptionError, match="run_matrix: .*fields of contracts.run.options.CheckOptions"):
        run_matrix(["oracle", "torch-native"], options, no_such_option=1)
