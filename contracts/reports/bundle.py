"""The one reader and writer of report bundles.

A check bundle is a folder::

    summary.json        the Summary (written last: its presence means the rest is complete)
    details.json        row examples (RowDetail), a few per clause
    mismatches.parquet  mismatch cells (CELL_COLUMNS), when pyarrow is installed
    mismatches.csv      the same cells
    report.md           the text report
    report.html         the page a person reads

A multi-candidate check adds ``index.json`` over one such folder per
candidate; a nightly adds ``nightly.json`` over ``candidates/``, ``pairs/``,
``probe/`` and ``bench/``. A matrix bundle (``python -m contracts matrix``)
holds ``matrix.json`` (the MatrixReport, written last), ``matrix.png`` (the
heatmap), ``matrix.html`` and ``matrix.txt`` (the terminal table).

Writing is atomic per bundle: the files are made in a fresh temporary
folder beside the target, which then replaces the target whole, so a reader
never sees old and new files mixed (``contracts.reports.out_folder``, which
also prepares and locks ``--out``; the files' names are
``contracts.reports.bundle_layout``'s). ``summary.json`` records the sha256 of
each data file it was written with, and the reader refuses a bundle whose
files do not match it. Every read error is a one-line ``BundleError``
naming the file and, for a bad record, the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ._atomic import write_json, write_text
from .bundle_layout import CELLS_CSV, CELLS_PARQUET, DATA_FILES, DETAILS, INDEX, MATRIX, NIGHTLY, SUMMARY, BundleError, BundleFileMissing
from .json_records import from_json, to_json
from .matrix_schema import MatrixReport
from .out_folder import write_folder
from .schema import CELL_COLUMNS, INT64_MAX, SCHEMA_VERSION, CheckResult, NightlyEnvelope, RecordError, RowDetail, Status, Summary

# BundleError is what every reader here raises: its callers catch it from this module.
__all__ = ["BundleError", "CheckBundle", "empty_cells", "find_checks", "open_check", "read_cells", "read_details", "read_json", "read_matrix",
           "read_nightly", "read_summary", "refuse_mixed", "write_check_bundle", "write_html", "write_index", "write_matrix_bundle",
           "write_matrix_json", "write_plain_bundle"]  # fmt: skip

_STRING_COLUMNS = ("family", "case", "clause", "verdict", "reason")


# ---------------------------------------------------------------- reading


def read_json(path: Path):
    """Parsed JSON of ``path``; BundleError naming the file for missing, unreadable or malformed files."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise BundleFileMissing(f"{path} is missing; pass a bundle folder written by the check command") from None
    except OSError as exc:
        raise BundleError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path} is not UTF-8 text (byte {exc.start}): a corrupt or truncated file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): a corrupt or truncated file") from None
    except ValueError:  # an integer of more digits than Python converts (over 4,300)
        raise BundleError(f"{path} holds an integer of over 4,300 digits; counts must be integers from 0 to {INT64_MAX:,}") from None


def _record(cls, path: Path):
    try:
        return from_json(cls, read_json(path), str(path))
    except RecordError as exc:
        raise BundleError(str(exc)) from None


def read_summary(path: Path) -> Summary:
    """The Summary of a bundle folder (or of a ``summary.json`` path)."""
    path = Path(path)
    return _record(Summary, path / SUMMARY if path.is_dir() else path)


def read_matrix(path: Path) -> MatrixReport:
    """The MatrixReport of a matrix bundle folder (or of a ``matrix.json`` path)."""
    path = Path(path)
    return _record(MatrixReport, path / MATRIX if path.is_dir() else path)


def read_details(folder: Path) -> list[RowDetail]:
    path = Path(folder) / DETAILS
    if not path.exists():
        return []
    data = read_json(path)
    if not isinstance(data, list):
        raise BundleError(f"{path}: expected a JSON list of row details, got {type(data).__name__}")
    try:
        return [from_json(RowDetail, d, f"{path} item {i}") for i, d in enumerate(data)]
    except RecordError as exc:
        raise BundleError(str(exc)) from None


def empty_cells():
    import pandas as pd

    return pd.DataFrame(columns=list(CELL_COLUMNS))


def read_cells(folder: Path, columns: list[str] | None = None):
    """The mismatch cells of a bundle as a DataFrame: parquet when present and readable, else the CSV."""
    import pandas as pd

    folder = Path(folder)
    parquet, csv = folder / CELLS_PARQUET, folder / CELLS_CSV
    frame = None
    if parquet.exists():
        try:
            frame = pd.read_parquet(parquet, columns=columns)
        except ImportError:
            frame = None  # no pyarrow here: the CSV holds the same cells
        except (ValueError, OSError) as exc:
            raise BundleError(f"{parquet} cannot be read as parquet: {exc}") from None
    if frame is None and csv.exists():
        try:
            frame = pd.read_csv(csv, usecols=columns)
        except pd.errors.EmptyDataError:
            frame = None
        except (ValueError, OSError) as exc:
            raise BundleError(f"{csv} cannot be read as CSV: {exc}") from None
        if frame is not None:
            for column in _STRING_COLUMNS:
                if column in frame:
                    frame[column] = frame[column].fillna("").astype(str)
    if frame is None:
        frame = empty_cells() if columns is None else pd.DataFrame(columns=columns)
    return frame


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class CheckBundle:
    """A check bundle folder, read through this module."""

    folder: Path
    summary: Summary
    _details: list[RowDetail] | None = field(default=None, repr=False)
    _cells: object = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.summary.label

    def details(self) -> list[RowDetail]:
        if self._details is None:
            self._details = read_details(self.folder)
        return self._details

    def cells(self):
        if self._cells is None:
            self._cells = read_cells(self.folder)
        return self._cells


def open_check(folder: Path, *, verify: bool = True) -> CheckBundle:
    """A check bundle; with ``verify``, BundleError when its data files are not the ones its summary was written with."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError(f"{folder} is not a folder")
    summary = read_summary(folder)
    if verify:
        for name, digest in summary.files.items():
            path = folder / name
            if not path.exists():
                raise BundleError(f"{path} is missing, but {folder / SUMMARY} was written with it: an incomplete bundle")
            if _sha256(path) != digest:
                raise BundleError(
                    f"{path} is not the file {folder / SUMMARY} was written with (sha256 differs): "
                    "parts of two runs are mixed in this folder; rerun into an empty --out"
                )
    return CheckBundle(folder, summary)


def read_nightly(root: Path) -> NightlyEnvelope:
    return _record(NightlyEnvelope, Path(root) / NIGHTLY)


def refuse_mixed(root: Path) -> None:
    """BundleError when ``root`` holds bundles of more than one run: a single bundle and an index (or a nightly) side by
    side, an index whose members' summaries are not the ones it lists, or a check bundle below an index that it does
    not list. Each reader would see only part of such a folder (a FAIL beside a PASS read as "no regression")."""
    root = Path(root)
    tops = [m for m in (SUMMARY, INDEX, NIGHTLY) if (root / m).exists()]
    if len(tops) > 1:
        raise BundleError(f"{root} mixes bundles of different runs ({' and '.join(tops)} side by side); rerun into an empty --out")
    if tops != [INDEX]:
        return
    index = read_json(root / INDEX)
    entries = index.get("candidates") if isinstance(index, dict) else None
    if not isinstance(entries, list):
        raise BundleError(f"{root / INDEX}: field candidates must be a list")
    listed = set()
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("bundle"):
            continue
        folder = root / Path(str(entry["bundle"])).name
        listed.add(folder.name)
        if not (folder / SUMMARY).exists():
            continue
        s = read_summary(folder)
        for key in ("candidate", "status", "rows_checked", "mismatched_rows"):
            want, got = entry.get(key), to_json(s).get(key)
            if key in entry and want != got:
                raise BundleError(
                    f"{root} mixes bundles of different runs: {INDEX} lists {entry.get('candidate')!r} with {key}={want!r}, "
                    f"but {folder / SUMMARY} has {got!r}; rerun into an empty --out"
                )  # fmt: skip
    strays = sorted(p.parent.name for p in root.glob(f"*/{SUMMARY}") if p.parent.name not in listed)
    if strays:
        raise BundleError(f"{root} mixes bundles of different runs: {', '.join(strays)} not listed in its {INDEX}; rerun into an empty --out")


def find_checks(root: Path) -> dict[str, CheckBundle | Summary]:
    """Every check under ``root`` by label: a nightly's candidates and pairs, an index's candidates, one bundle, or any below.

    A nightly check that wrote no bundle (it errored before) is returned as the Summary its record holds.
    """
    root = Path(root)
    if not root.is_dir():
        raise BundleError(f"{root} is not a folder")
    refuse_mixed(root)
    found: dict[str, CheckBundle | Summary] = {}
    if (root / NIGHTLY).exists():
        envelope = read_nightly(root)
        for section in (envelope.candidates, envelope.pairs):
            for label, rec in section.items():
                folder = root / rec["bundle"] if rec.get("bundle") else None
                if folder is not None and (folder / SUMMARY).exists():
                    found[label] = open_check(folder)
                elif rec.get("status") in ("error", "interrupted"):
                    found[label] = Summary(
                        candidate=label, contract="", device="", status=Status(rec["status"]),
                        reason=rec.get("reason"), interrupted=rec.get("reason") if rec["status"] == "interrupted" else None,
                    )  # fmt: skip
    elif (root / SUMMARY).exists():
        bundle = open_check(root)
        found[bundle.label] = bundle
    else:
        for path in sorted(root.rglob(SUMMARY)):
            bundle = open_check(path.parent)
            found.setdefault(bundle.label, bundle)
    return found


# ---------------------------------------------------------------- writing


def _write_cells(folder: Path, cells) -> None:
    import importlib.util

    import pandas as pd

    frame = cells if cells is not None else empty_cells()
    if not isinstance(frame, pd.DataFrame):
        frame = pd.DataFrame(list(frame), columns=list(CELL_COLUMNS))
    frame = frame.reindex(columns=list(CELL_COLUMNS))
    frame.to_csv(folder / CELLS_CSV, index=False)
    if importlib.util.find_spec("pyarrow") is not None:
        frame.to_parquet(folder / CELLS_PARQUET, index=False)


def write_check_bundle(target: Path, result: CheckResult, *, bench_dir: Path | None = None) -> Path:
    """Write one check's bundle atomically (see the module docstring); ``result.summary.files`` gets the hashes."""
    from .html import render_bundle_html
    from .markdown import render_markdown

    summary = result.summary

    def fill(folder: Path) -> None:
        if summary.status is not Status.UNAVAILABLE:
            _write_cells(folder, result.cells)
            write_json(folder / DETAILS, [to_json(d) for d in result.details])
        summary.files = {name: _sha256(folder / name) for name in DATA_FILES if (folder / name).exists()}
        write_text(folder / "report.md", render_markdown(result))
        write_text(folder / "report.html", render_bundle_html(result, bench_dir=bench_dir))
        write_json(folder / SUMMARY, to_json(summary))  # last: its presence means the bundle is complete

    return write_folder(target, fill)


def write_plain_bundle(target: Path, result: CheckResult) -> Path:
    """The bundle of a check whose full bundle could not be written (a writer raised: ``contracts.run.containment``):
    each file that still writes, a one-line stand-in for each report that does not, and ``summary.json`` last."""
    from .html import render_bundle_html
    from .markdown import render_markdown

    summary = result.summary

    def fill(folder: Path) -> None:
        parts = [("report.md", lambda: render_markdown(result)), ("report.html", lambda: render_bundle_html(result))]
        if summary.status is not Status.UNAVAILABLE:
            _attempt(lambda: _write_cells(folder, result.cells))
            _attempt(lambda: write_json(folder / DETAILS, [to_json(d) for d in result.details]))
        summary.files = {name: _sha256(folder / name) for name in DATA_FILES if (folder / name).exists()}
        for name, render in parts:
            if not _attempt(lambda: write_text(folder / name, render())):
                write_text(folder / name, f"{name} could not be written: the harness failed (summary.json has the error)\n")
        write_json(folder / SUMMARY, to_json(summary))

    return write_folder(target, fill)


def _attempt(write: Callable[[], object]) -> bool:
    try:
        write()
    except Exception:  # noqa: BLE001 -- a file of a bundle already ERROR: the summary says why; the rest is still written
        return False
    return True


def write_html(bundle_dir: Path, bench_dir: Path | None = None) -> Path:
    """(Re)write ``bundle_dir/report.html`` from the bundle's files; return its path.

    It lives here, not in ``html``, so that ``html`` renders records and never reads bundles (one direction:
    ``bundle`` -> ``html``; the two importing each other was an import cycle).
    """
    from .html import render_bundle_html

    bundle = open_check(Path(bundle_dir))
    available = bundle.summary.status is not Status.UNAVAILABLE
    result = CheckResult(bundle.summary, bundle.cells() if available else None, bundle.details() if available else [])
    return write_text(bundle.folder / "report.html", render_bundle_html(result, bundle_dir=bundle.folder, bench_dir=bench_dir))


def write_index(root: Path, summaries: list[Summary], *, command: str, interrupted: str | None = None,
                not_started: list[str] = (), merged_shards: list[str] | None = None) -> Path:  # fmt: skip
    """``index.json`` and ``index.md`` over the per-candidate bundles of a multi-candidate run."""
    from .terminal import verdict_table

    keys = ("candidate", "contract", "device", "status", "rows_checked", "mismatched_rows", "reason", "bundle")
    entries = [{k: v for k, v in to_json(s).items() if k in keys} for s in summaries]
    entries += [
        {"candidate": name, "status": "interrupted", "rows_checked": 0, "reason": "not started: the run was interrupted", "bundle": None}
        for name in not_started
    ]  # fmt: skip
    doc = {"schema_version": SCHEMA_VERSION, "command": command, "interrupted": interrupted, "candidates": entries}
    if merged_shards is not None:
        doc["merged_shards"] = merged_shards
    write_json(Path(root) / INDEX, doc)
    links = "".join(f"- [{_md_text(s.label)}]({_md_link(s, Path(root))}): {s.verdict}\n" for s in summaries if s.bundle)
    write_text(Path(root) / "index.md", "# Check index\n\n```\n" + (verdict_table(summaries) if summaries else "(nothing ran)") + "\n```\n"
               + (f"\nReports:\n\n{links}" if links else ""))
    return Path(root) / INDEX


def _md_text(text: str) -> str:
    from .text import clean

    return clean(text).replace("[", "\\[").replace("]", "\\]")


def _md_link(s: Summary, root: Path) -> str:
    """The relative link from ``index.md`` to a candidate's ``report.html`` (its folder's name, URL-quoted)."""
    from urllib.parse import quote

    return quote(f"{Path(s.bundle).name}/report.html")


def write_matrix_json(target: Path, report: MatrixReport) -> Path:
    """Only ``matrix.json``: the matrix bundle when its renderers failed (``contracts.run.containment``)."""
    return write_folder(target, lambda folder: write_json(folder / MATRIX, to_json(report)))


def write_matrix_bundle(target: Path, report: MatrixReport) -> Path:
    """A matrix bundle, atomically: the heatmap, the page, the table, then ``matrix.json``."""
    from .matrix import HEATMAP, PAGE, TABLE, render_heatmap_png, render_matrix_html, render_matrix_table

    def fill(folder: Path) -> None:
        report.files = {"heatmap": HEATMAP, "page": PAGE, "table": TABLE}
        png = render_heatmap_png(report)
        (folder / HEATMAP).write_bytes(png)
        write_text(folder / TABLE, render_matrix_table(report) + "\n")
        write_text(folder / PAGE, render_matrix_html(report, heatmap_png=png))
        write_json(folder / MATRIX, to_json(report))  # last: its presence means the bundle is complete

    return write_folder(target, fill)
