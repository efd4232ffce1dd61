"""Issue 32 item 11: bundles are all new or all old, one writer per --out.

Before: two checks into one --out at once both printed the same bundle path
and one silently replaced the other; a symlinked --out ended in a
NotADirectoryError traceback after the check ran, with no bundle; --force
deleted files the harness had not written; a folder mixing a multi-candidate
run and a single run read as "No regression" to diff and 0 failures to JUnit
although a candidate in it FAILED.
"""

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from contracts.check import main as check_main
from contracts.commands.report import main as report_main
from contracts.commands.diff import main as diff_main
from contracts.reports.bundle_layout import BundleExistsError
from contracts.reports.out_folder import lock_path, prepare_out

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--families", "random_fp32", "--rows", "40", "--no-isolate", "--quiet"]
FAILING = "tests.broken_candidates:scaled_twice"


def _check(out, *candidates, extra=()):
    return check_main([*(a for c in candidates for a in ("--candidate", c)), "--out", str(out), *SMALL, *extra])


def _error_line(capsys, *needles):
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in captured.err, captured.err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_second_writer_into_an_out_in_use_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from contracts.reports.out_folder import prepare_out; "
         "prepare_out(sys.argv[1]); print('held', flush=True); time.sleep(120)", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _check(out, "oracle") == 2
        _error_line(capsys, "--out", "in use by another run", f"pid {holder.pid}")
        assert list(out.iterdir()) == [] and lock_path(out).exists()  # nothing written by the refused run
    finally:
        holder.kill()
        holder.wait()
    # the writer is gone (killed: its lock file stays, but the kernel dropped its lock): the folder is free
    assert _check(out, "oracle") == 0
    assert json.loads((out / "summary.json").read_text())["status"] == "pass"
    # this process wrote it and may write it again (sequential runs of one process are one writer)
    assert _check(out, "oracle", extra=["--force"]) == 0


@pytest.mark.slow  # two checks through links (15-25 s)
def test_a_symlinked_out_is_written_through_and_a_dangling_one_refused_before_the_run(tmp_path, capsys):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    assert _check(link, "oracle") == 0
    assert json.loads((real / "summary.json").read_text())["status"] == "pass"
    assert _check(link, FAILING, extra=["--force"]) == 1  # replaced through the link; the link stays a link
    assert link.is_symlink() and json.loads((real / "summary.json").read_text())["status"] == "fail"
    capsys.readouterr()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert _check(dangling, "oracle") == 2
    _error_line(capsys, "--out", "symlink", "not a directory")


def test_force_removes_only_the_harness_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert _check(out, "oracle", "serial") == 0  # index.json, index.md and a folder per candidate
    (out / "oracle" / "my-notes.txt").write_text("mine")
    assert _check(out, "oracle", extra=["--force"]) == 2
    _error_line(capsys, "did not write (oracle)")
    assert (out / "oracle" / "my-notes.txt").read_text() == "mine" and (out / "index.json").exists()
    (out / "oracle" / "my-notes.txt").unlink()
    assert _check(out, "oracle", extra=["--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["summary.json", "details.json", "mismatches.csv", "report.md", "report.html"]
        + (["mismatches.parquet"] if (out / "mismatches.parquet").exists() else []))  # fmt: skip


def test_a_clean_exit_removes_the_lock_file(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", "import sys; from contracts.reports.out_folder import prepare_out; prepare_out(sys.argv[1])", str(out)],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.is_dir() and not lock_path(out).exists()


def test_prepare_out_refuses_a_folder_of_other_files_even_with_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.bin").write_bytes(b"x")
    with pytest.raises(BundleExistsError, match="holds no bundle"):
        prepare_out(out, force=True)
    assert (out / "data.bin").exists()


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    """A multi-candidate run with a FAIL in it, and a single PASS run."""
    root = tmp_path_factory.mktemp("multi")
    assert _check(root / "multi", "oracle", FAILING) == 1
    assert _check(root / "single", "oracle") == 0
    return root


def _refused_by_diff_and_junit(capsys, old, mixed, tmp_path):
    capsys.readouterr()
    assert diff_main([str(old), str(mixed)]) == 2
    _error_line(capsys, "mixes bundles of different runs")
    assert report_main(["junit", str(mixed), "-o", str(tmp_path / "junit.xml")]) == 2
    _error_line(capsys, "mixes bundles of different runs")
    assert not (tmp_path / "junit.xml").exists()


@pytest.mark.slow  # its fixture runs a two-candidate check (15-32 s)
def test_a_single_bundle_beside_an_index_is_refused_by_diff_and_junit(multi, tmp_path, capsys):
    # what two checks into one --out at once left: the single run's files at the top, the multi run's index and folders
    mixed = tmp_path / "mixed"
    shutil.copytree(multi / "multi", mixed)
    for p in (multi / "single").iterdir():
        shutil.copy(p, mixed / p.name)
    _refused_by_diff_and_junit(capsys, multi / "single", mixed, tmp_path)


@pytest.mark.slow  # its fixture runs a two-candidate check (10 s)
def test_an_index_member_replaced_by_another_run_is_refused(multi, tmp_path, capsys):
    mixed = tmp_path / "mixed"
    shutil.copytree(multi / "multi", mixed)
    index = json.loads((mixed / "index.json").read_text())
    failing = next(e for e in index["candidates"] if e["status"] == "fail")
    member = mixed / Path(failing["bundle"]).name
    shutil.rmtree(member)
    shutil.copytree(multi / "single", member)  # a PASS where the index says FAIL
    _refused_by_diff_and_junit(capsys, multi / "single", mixed, tmp_path)


def test_a_whole_multi_candidate_bundle_still_reads_and_fails(multi, tmp_path, capsys):
    capsys.readouterr()
    assert report_main(["junit", str(multi / "multi"), "-o", str(tmp_path / "junit.xml")]) == 0
    suites = ET.parse(tmp_path / "junit.xml").getroot()
    assert int(suites.get("failures")) >= 1


def test_index_md_links_each_candidate_report_and_fits_120_columns(multi):
    """Issue 33: index.md was a 342-column table with a right-aligned note and no link to the reports."""
    import re
    from urllib.parse import unquote

    text = (multi / "multi" / "index.md").read_text()
    links = re.findall(r"^- \[([^\]]+)\]\(([^)]+)\): (PASS|FAIL)$", text, flags=re.M)
    assert {name for name, _, _ in links} == {"oracle", FAILING} and ("oracle", "oracle/report.html", "PASS") in links
    for _, target, _ in links:
        assert (multi / "multi" / unquote(target)).is_file()
    assert max(len(line) for line in text.splitlines()) <= 120
