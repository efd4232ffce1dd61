"""No false green from bundles, names and messages (issue 22, items 2, 7, 8, 9, 12, 13 and 17).

Regression tests for fixes already in the harness; each docstring says what
the harness did before. The candidates live in ``tests/adversarial``.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from contracts.check import main as check_main
from contracts.commands.diff import main as diff_main
from contracts.commands.merge import main as merge_main
from contracts.commands.report import main as report_main
from contracts.reports.bundle import BundleError, open_check
from contracts.reports.markdown import _detail_line
from contracts.reports.schema import RowDetail
from contracts.run.checks import bundle_dirname

REPO = Path(__file__).resolve().parent.parent
# --quick in place of --rows 70: random_fp32's pinned dtype pairs, layouts, call contexts and options once each, at one
# launch class (84 cases, not 323): these tests are about the bundles, names and refusals, not the plan
SMALL = ["--families", "random_fp32", "--quick", "--no-isolate", "--quiet"]


def _check(out, candidate, *extra):
    return check_main(["--candidate", candidate, "--out", str(out), *SMALL, *extra])


def _summary(folder):
    return json.loads((Path(folder) / "summary.json").read_text())


def _one_line_error(capsys, *needles):
    """The command printed exactly one line on stderr, ``error: ...``, with each needle, and no traceback."""
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A PASS bundle (the oracle) and a FAIL bundle (every row in reversed order) of small checks."""
    root = tmp_path_factory.mktemp("bundles")
    assert _check(root / "pass", "oracle") == 0
    assert _check(root / "fail", "tests.adversarial.names:colon_first") == 1
    return root


# ---------------------------------------------------------------- item 2: the plugin's per-clause tests

VLLM_LIKE = '''
"""vLLM's torch paths: the right experts, unsorted, and 0/0 = NaN weights on a zero sum."""
import oracle


def route(scores, bias, topk, renormalize, routed_scaling_factor):
    w, ids = oracle.route(scores, bias, topk, renormalize=False, routed_scaling_factor=1.0, contract="aiter")
    order = ids.sort(dim=1).indices
    w, ids = w.gather(1, order), ids.gather(1, order)
    if renormalize:
        w = w / w.sum(dim=1, keepdim=True)
    return w * routed_scaling_factor, ids
'''


@pytest.mark.slow  # a pytest run of the conformance suite in a subprocess, its check in a worker: ~18 s
def test_an_unsorted_router_with_nan_weights_fails_the_renorm_guard_conformance_test(tmp_path):
    """Before: its rows were blamed output_order only and their weights never checked, so
    ``test_renorm_guard[zero_sum]`` passed."""
    (tmp_path / "vllm_like.py").write_text(textwrap.dedent(VLLM_LIKE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "contracts.pytest_plugin", "--pyargs", "contracts.conformance",
         "--candidate", "vllm_like:route", "--rows", "64", "--no-isolate", "-k", "zero_sum and (renorm_guard or output_order)", "-q", "-rf"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    failed = re.findall(r"^FAILED \S+::(\S+)", done.stdout, flags=re.M)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_renorm_guard[zero_sum]" in failed and "test_output_order[zero_sum]" in failed


# ---------------------------------------------------------------- item 7: a reused --out


def test_a_failing_run_into_an_out_holding_a_pass_bundle_is_refused_then_replaced_whole(tmp_path, capsys):
    """Before: the failing run wrote its cells beside the old PASS summary.json and ``diff OLD NEW`` said no regression."""
    candidate = "tests.broken_candidates:wrong_tie_order"  # passes without ties (random_fp32), fails on all_equal
    out, old = tmp_path / "out", tmp_path / "old"
    assert _check(out, candidate) == 0
    shutil.copytree(out, old)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert _check(out, candidate, "--families", "all_equal") == 2
    _one_line_error(capsys, "--out", "already holds a bundle", "--force")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched

    # issue 32 item 11: --force replaces the harness's own files only; a file it did not write stops it
    (out / "stale-note.txt").write_text("left from the earlier run")
    assert _check(out, candidate, "--families", "all_equal", "--force") == 2
    _one_line_error(capsys, "--out", "did not write (stale-note.txt)")
    assert (out / "stale-note.txt").exists() and _summary(out)["status"] == "pass"
    (out / "stale-note.txt").unlink()
    assert _check(out, candidate, "--families", "all_equal", "--force") == 1
    assert _summary(out)["status"] == "fail"
    open_check(out)  # every part is the new run's
    capsys.readouterr()
    assert diff_main([str(old), str(out)]) == 1
    # the two runs checked other families, so diff pairs them as different checks (issue 55: pair what was checked,
    # not names): the new one is unpaired and did not pass, a regression either way
    assert "only in the new bundle (fail)" in capsys.readouterr().out


def _mixed(bundles, tmp_path):
    """The PASS bundle with the FAIL bundle's mismatch cells and details copied in by hand."""
    mixed = tmp_path / "mixed"
    shutil.copytree(bundles / "pass", mixed)
    for name in ("mismatches.csv", "mismatches.parquet", "details.json"):
        if (bundles / "fail" / name).exists():
            shutil.copy(bundles / "fail" / name, mixed / name)
    return mixed


def test_a_hand_mixed_bundle_is_refused_by_the_readers_diff_merge_and_reports(bundles, tmp_path, capsys):
    """Before: diff read the old summary beside the new cells ("no regression"); ``report junit`` read them until
    it went through ``open_check`` too."""
    mixed = _mixed(bundles, tmp_path)
    with pytest.raises(BundleError, match="sha256 differs"):
        open_check(mixed)
    capsys.readouterr()
    assert diff_main([str(bundles / "pass"), str(mixed)]) == 2
    _one_line_error(capsys, str(mixed), "sha256 differs")
    assert merge_main([str(tmp_path / "merged"), str(mixed)]) == 2
    _one_line_error(capsys, str(mixed), "sha256 differs")
    assert report_main(["junit", str(mixed), "-o", str(tmp_path / "junit.xml")]) == 2
    _one_line_error(capsys, str(mixed), "sha256 differs")
    assert report_main(["html", str(mixed)]) == 2
    _one_line_error(capsys, str(mixed), "sha256 differs")


# ---------------------------------------------------------------- item 8: merge checks that shards belong together


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    base = ["--candidate", "oracle", "--families", "random_fp32,all_equal", "--rows", "60", "--no-isolate", "--quiet"]
    made = {"1": ["--shard", "1/2"], "2": ["--shard", "2/2"], "rows": ["--shard", "2/2", "--rows", "61"],
            "families": ["--shard", "2/2", "--families", "random_fp32"], "experts": ["--shard", "2/2", "--experts", "64"],
            "topk": ["--shard", "2/2", "--topk", "8"], "repeat": ["--shard", "2/2", "--repeat", "2"]}  # fmt: skip
    for name, extra in made.items():
        argv = base + extra  # the later --rows/--families win
        assert check_main([*argv, "--out", str(root / name)]) == 0
    return root


@pytest.mark.parametrize("option", ["rows", "families", "experts", "topk", "repeat"])
def test_merge_refuses_shards_run_with_different_options(shards, tmp_path, capsys, option):
    """Before: shards with different --rows, --families, --topk, --experts or --repeat merged, keeping shard 1's command."""
    assert merge_main([str(tmp_path / "merged"), str(shards / "1"), str(shards / option)]) == 2
    _one_line_error(capsys, f"options.{option}=", "not shards of one check")


def _as_v1(folder, tmp_path, name):
    """A copy of a shard bundle as an older harness wrote it: no ``options`` in its summary."""
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    doc = _summary(copy)
    doc.pop("options")
    doc["schema_version"] = 1
    (copy / "summary.json").write_text(json.dumps(doc))
    return copy


def test_merge_of_v1_shards_compares_their_commands_without_shard_and_out(shards, tmp_path, capsys):
    one, two = _as_v1(shards / "1", tmp_path, "v1-1"), _as_v1(shards / "2", tmp_path, "v1-2")
    assert merge_main([str(tmp_path / "ok"), str(one), str(two)]) == 0  # only --shard and --out differ
    other = _as_v1(shards / "rows", tmp_path, "v1-rows")
    capsys.readouterr()
    assert merge_main([str(tmp_path / "refused"), str(one), str(other)]) == 2
    _one_line_error(capsys, "not shards of one check", "--rows 61")


# ---------------------------------------------------------------- item 9: names are not paths


def test_candidate_names_never_choose_paths_outside_out_and_never_collide(tmp_path, capsys):
    """Before: a Candidate named ``../../x`` or an absolute path wrote outside --out, and ``a:b_c`` and ``a_b:c``
    shared one folder (only the PASS survived; JUnit showed 0 failures)."""
    absolute = Path("/tmp/router-contracts-absolute-name")
    assert not absolute.exists(), "left over from an earlier run; remove it"
    out = tmp_path / "deep" / "out"
    out.parent.mkdir()  # --out's folder must exist
    names = ",".join(f"tests.adversarial.names:{n}" for n in ("dotdot", "absolute", "colon_first", "colon_second"))
    assert check_main(["--candidate", names, "--out", str(out), *SMALL]) == 1
    assert not absolute.exists() and not (tmp_path / "x").exists() and not (out.parent.parent / "x").exists()
    index = {c["candidate"]: c for c in json.loads((out / "index.json").read_text())["candidates"]}
    folders = {name: Path(c["bundle"]).resolve() for name, c in index.items()}
    assert set(folders) == {"../../x", str(absolute), "a:b_c", "a_b:c"}
    assert len(set(folders.values())) == 4 and all(f.parent == out.resolve() for f in folders.values())
    assert {index["a:b_c"]["status"], index["a_b:c"]["status"]} == {"fail", "pass"}
    assert bundle_dirname("a:b_c") != bundle_dirname("a_b:c")

    assert report_main(["junit", str(out), "-o", str(tmp_path / "junit.xml")]) == 0
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert int(root.get("failures")) > 0
    suites = {s.find("properties/property[@name='candidate']").get("value"): s for s in root.iter("testsuite")}
    assert int(suites["a:b_c"].get("failures")) > 0 and int(suites["a_b:c"].get("failures")) == 0


# ---------------------------------------------------------------- item 12: corrupt summary.json

CORRUPT = {
    "empty object": (b"{}", "candidate"),
    "a list": (b"[]", "expected a JSON object"),
    "bad bytes": (b'{"candidate": "\xff\xfe"}', "not UTF-8"),
    "wrong types": (None, "rows_checked"),
    "truncated": (None, "not valid JSON"),
}


def _corrupt(bundles, tmp_path, kind):
    folder = tmp_path / "corrupt"
    shutil.copytree(bundles / "pass", folder)
    data, _ = CORRUPT[kind]
    text = (folder / "summary.json").read_bytes()
    if kind == "wrong types":
        doc = json.loads(text)
        doc["rows_checked"] = "many"
        data = json.dumps(doc).encode()
    elif kind == "truncated":
        data = text[: len(text) // 2]
    (folder / "summary.json").write_bytes(data)
    return folder


@pytest.mark.parametrize("kind", list(CORRUPT))
@pytest.mark.parametrize("command", ["diff", "merge", "report junit", "report html"])
def test_a_corrupt_summary_is_one_line_naming_file_and_field_and_exit_2(bundles, tmp_path, capsys, kind, command):
    """Before: tracebacks, or exit 1 (the "regression" code) from diff."""
    bad = _corrupt(bundles, tmp_path, kind)
    capsys.readouterr()
    if command == "diff":
        code = diff_main([str(bundles / "pass"), str(bad)])
    elif command == "merge":
        code = merge_main([str(tmp_path / "merged"), str(bad), str(bundles / "pass")])
    else:
        code = report_main([*command.split()[1:], str(bad), *(["-o", str(tmp_path / "j.xml")] if "junit" in command else [])])
    assert code == 2
    _one_line_error(capsys, "summary.json", CORRUPT[kind][1])


# ---------------------------------------------------------------- item 13: replay ids are validated


@pytest.mark.parametrize(
    "replay, needle",
    [("random_bf16:99999999999999999999:3", "seed"), ("random_bf16:1:100000000", "rows must be 0..1,048,576"),
     ("random_bf16:-1:3", "seed"), ("random_bf16:1:-3", "rows"), ("no_such_family:1:3", "family")],
)  # fmt: skip
def test_replay_ids_out_of_range_are_one_line_usage_errors(tmp_path, capsys, replay, needle):
    """Before: tracebacks; the second tried to allocate 358 GB."""
    assert check_main(["--candidate", "oracle", "--replay", replay, "--out", str(tmp_path / "r"), "--quiet"]) == 2
    _one_line_error(capsys, "--replay", needle)
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- item 17: what reaches the terminal and report.md


def test_ansi_escapes_and_bidi_overrides_in_a_name_are_shown_escaped(tmp_path, capsys):
    out = tmp_path / "ansi"
    assert _check(out, "tests.adversarial.names:ansi") == 1
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    for text in (printed, report):
        assert "\x1b" not in text and "\u202e" not in text
        assert "\\x1b[32mPASS\\x1b[0m \\u202eevil" in text


def test_validity_rows_do_not_show_a_tie_group_and_counts_are_pluralised(tmp_path):
    out = tmp_path / "int64"
    assert _check(out, "tests.broken_candidates:int64_ids") == 1
    report = (out / "report.md").read_text()
    assert "`validity`" in report and "Tie group at the cutoff: None" not in report and "None expert" not in report
    one = RowDetail(row=0, clause="tie_order", verdict="mismatch", reason="x", tie_group_size=1, renormalize=True, routed_scaling_factor=1.0)
    assert "Tie group at the cutoff: 1 expert;" in _detail_line(one)
