"""JUnit XML from report bundles, for CI test tabs.

One ``<testsuite>`` per check (a candidate, or a candidate against another),
one ``<testcase>`` per family x clause:

- classname ``contracts.<candidate>.<family>`` (``<a>-vs-<b>`` for a pair; dots
  and colons in names become ``_`` so viewers do not split them), name the clause;
- ``<failure>`` when the family has unexpected mismatches attributed to the
  clause: the message says how many rows, the text shows the first mismatch
  (ids and weights side by side) and the command that replays it;
- ``<skipped>`` when the family's shapes are not covered by the candidate;
- a declared deviation seen in the family passes, with a ``<system-out>`` note;
- an unavailable candidate, or a pair that does not apply on this host, is one
  skipped testcase (classname ``contracts.<label>``, name ``available``) with the reason;
- a candidate that raised, or a check that was interrupted, adds an ``<error>`` testcase named ``run``.

``python -m contracts report junit BUNDLE [-o FILE]`` writes the file for any
bundle (a nightly, a multi-candidate check, or a single check). Data come
from the bundle files only, read through ``contracts.reports.bundle``.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from ._atomic import write_atomic
from .bundle import BundleError, open_check, read_cells, read_details, read_nightly
from .schema import to_json

__all__ = ["CheckEntry", "build_junit", "entries_for_bundle", "first_mismatch", "write_junit"]

# Characters XML 1.0 cannot carry (tracebacks may hold them).
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass
class CheckEntry:
    """One check as JUnit sees it: a bundle folder, or only a reason it did not run."""

    label: str  # "oracle", "serial vs block-argmax"
    bundle: Path | None = None
    summary: dict | None = None
    skip_reason: str | None = None  # did not run here (pair not applicable, candidate absent)
    error: str | None = None  # the harness itself failed for this check


def _clean(text) -> str:
    return _XML_ILLEGAL.sub("?", str(text))


def _class_part(label: str) -> str:
    return re.sub(r"[.:\s/]+", "_", label.replace(" vs ", "-vs-"))


def _read_cells(bundle: Path) -> pd.DataFrame:
    try:
        return read_cells(bundle)
    except BundleError:
        return pd.DataFrame()


def _details(bundle: Path) -> list[dict]:
    return [to_json(d) for d in read_details(bundle)]


def _fallback_replay(summary: dict, case: str, row) -> str:
    """The replay line of a case the bundle recorded only as mismatch cells, built from the summary."""
    from ..run.replay import replay_command

    target = summary.get("replay_target") or {}  # older bundles: the display names, as they were
    options = summary.get("options") or {}
    experts, topk = options.get("experts"), options.get("topk")
    if experts is None or topk is None:
        try:
            words = shlex.split(summary.get("command") or "")
        except ValueError:
            words = []
        given = {flag: words[words.index(flag) + 1] for flag in ("--experts", "--topk") if flag in words and words.index(flag) + 1 < len(words)}
        try:
            experts, topk = int(given.get("--experts", 896)), int(given.get("--topk", 16))
        except ValueError:
            experts, topk = 896, 16
    spec = SimpleNamespace(replay_id=str(case), experts=int(experts), topk=int(topk))  # what a replay line takes of a CaseSpec
    return replay_command(
        target.get("candidate") or summary["candidate"], summary["contract"], summary["device"], spec, int(row),
        target.get("against") or summary.get("against"), bool(summary.get("bit_exact")), int(options.get("repeat") or 1),
        pythonpath=target.get("pythonpath"),
    )  # fmt: skip


def _first_mismatch_text(detail: dict | None, cell: dict | None, summary: dict) -> str:
    if detail is not None:
        lines = [f"case {detail['case']}, row {detail['row']}: {detail.get('reason', '')}"]
        for key in ("expected_ids", "actual_ids", "expected_weights", "actual_weights"):
            if detail.get(key) is not None:
                lines.append(f"{key.replace('_', ' '):>16}: {detail[key]}")
        lines.append(f"tie group at the cutoff: {detail.get('tie_group_size')}; straddles: {detail.get('straddles_cutoff')}; "
                     f"NaN in row: {detail.get('nan_count')}")  # fmt: skip
        lines.append(f"replay: {detail.get('replay') or _fallback_replay(summary, detail['case'], detail['row'])}")
        return "\n".join(lines)
    if cell is not None:
        return (
            f"case {cell['case']}, row {cell['row']}, column {cell['col']}: {cell.get('reason', '')}\n"
            f"expected id {cell['expected_id']} weight {cell['expected_weight']}; "
            f"actual id {cell['actual_id']} weight {cell['actual_weight']}\n"
            f"replay: {_fallback_replay(summary, cell['case'], cell['row'])}"
        )
    return f"no example recorded (the bundle's cell cap was reached); rerun: {summary.get('command', '')}"


def first_mismatch(bundle: Path, summary: dict, family: str, clause: str, *, details: list | None = None, cells: pd.DataFrame | None = None) -> str:
    """The first unexpected mismatch of ``clause`` in ``family`` as text, with its replay command."""
    if details is None:
        details = _details(bundle)
    detail = next((d for d in details if d.get("family") == family and d.get("clause") == clause and d.get("verdict") == "mismatch"), None)
    cell = None
    if detail is None:
        cells = _read_cells(bundle) if cells is None else cells
        if not cells.empty:
            hit = cells[(cells["family"] == family) & (cells["clause"] == clause) & (cells["verdict"] == "mismatch")]
            cell = hit.iloc[0].to_dict() if len(hit) else None
    return _first_mismatch_text(detail, cell, summary)


def _testcase(suite: ET.Element, classname: str, name: str, time: float = 0.0) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{time:.3f}")


def _suite_for_check(root: ET.Element, entry: CheckEntry) -> None:
    label = _class_part(entry.label)
    suite = ET.SubElement(root, "testsuite", name=f"contracts.{label}")
    props = ET.SubElement(suite, "properties")
    summary = entry.summary or {}
    for key in ("candidate", "against", "contract", "device", "status", "rows_checked", "seed", "shard"):
        if summary.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=_clean(summary[key]))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    if entry.error:
        case = _testcase(suite, f"contracts.{label}", "run")
        ET.SubElement(case, "error", message=_clean(entry.error.strip().splitlines()[-1] if entry.error.strip() else "error")).text = _clean(entry.error)
        counts.update(tests=1, errors=1)
    elif entry.skip_reason or summary.get("status") == "unavailable" or not summary:
        reason = entry.skip_reason or summary.get("reason") or "not run"
        case = _testcase(suite, f"contracts.{label}", "available")
        ET.SubElement(case, "skipped", message=_clean(reason))
        counts.update(tests=1, skipped=1)
    else:
        _clause_cases(suite, label, entry, summary, counts)

    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{float(summary.get('duration_s') or 0):.3f}")


def _clause_cases(suite: ET.Element, label: str, entry: CheckEntry, summary: dict, counts: dict) -> None:
    bundle = entry.bundle
    details = _details(bundle) if bundle is not None else []
    cells = _read_cells(bundle) if bundle is not None else pd.DataFrame()
    declared = summary.get("expected_deviations") or {}
    clauses = list(summary.get("clauses") or {})
    declared_rows: dict[tuple[str, str], int] = {}
    if not cells.empty and declared:
        seen = cells[cells["verdict"] == "expected"].drop_duplicates(["case", "row", "clause"])
        declared_rows = seen.groupby(["family", "clause"]).size().to_dict()

    for family, fam in (summary.get("families") or {}).items():
        classname = f"contracts.{label}.{family}"
        not_covered = fam.get("rows", 0) == 0 and fam.get("rows_skipped", 0) > 0
        for clause in clauses:
            case = _testcase(suite, classname, clause)
            counts["tests"] += 1
            bad = (fam.get("clauses") or {}).get(clause, 0)
            if not_covered:
                ET.SubElement(case, "skipped", message=f"not covered: the candidate does not serve these shapes ({fam['rows_skipped']:,} rows skipped)")
                counts["skipped"] += 1
            elif bad:
                message = f"{bad:,} of {fam['rows']:,} rows of family {family} break clause {clause}"
                failure = ET.SubElement(case, "failure", message=_clean(message), type="ContractMismatch")
                failure.text = _clean(message + "\n" + first_mismatch(bundle, summary, family, clause, details=details, cells=cells))
                counts["failures"] += 1
            elif clause in declared and declared_rows.get((family, clause)):
                note = (f"declared deviation: {declared[clause].get('reason', '')} "
                        f"({declared_rows[(family, clause)]:,} rows in this family, reported as expected)")  # fmt: skip
                ET.SubElement(case, "system-out").text = _clean(note)

    if summary.get("status") == "interrupted":  # the rows that did not run prove nothing: never a green suite
        case = _testcase(suite, f"contracts.{label}", "run")
        message = f"interrupted ({summary.get('interrupted') or 'signal'}) after {summary.get('rows_checked', 0):,} rows; the counts cover only what ran"
        ET.SubElement(case, "error", message=_clean(message), type="Interrupted").text = _clean(message)
        counts["tests"] += 1
        counts["errors"] += 1
    if summary.get("error"):
        err = summary["error"]
        case = _testcase(suite, f"contracts.{label}", "run")
        ET.SubElement(case, "error", message=_clean(f"the candidate raised in case {err.get('case')}")).text = _clean(err.get("traceback", ""))
        counts["tests"] += 1
        counts["errors"] += 1
    if declared:
        lines = [f"{clause}: {d.get('rows', 0):,} rows, observed={d.get('observed')}: {d.get('reason', '')}" for clause, d in declared.items()]
        ET.SubElement(suite, "system-out").text = _clean("declared deviations (never failures):\n" + "\n".join(lines))


def _tool_case(suite: ET.Element, classname: str, name: str, record: dict, counts: dict) -> None:
    case = _testcase(suite, classname, name)
    counts["tests"] += 1
    status = record.get("status")
    if status == "error":
        reason = record.get("reason") or record.get("error") or "error"
        ET.SubElement(case, "error", message=_clean(reason)).text = _clean(record.get("traceback") or reason)
        counts["errors"] += 1
    elif status not in ("ok", "done"):
        ET.SubElement(case, "skipped", message=_clean(record.get("reason") or status or "not run"))
        counts["skipped"] += 1
    else:
        notes = [f"{k}: {record[k]}" for k in ("matches", "consistent", "path", "command") if record.get(k) is not None]
        if notes:
            ET.SubElement(case, "system-out").text = _clean("\n".join(notes))


def _tool_suite(root: ET.Element, tool: str, record: dict) -> None:
    """The probe (one testcase per candidate probed) or the bench (one testcase)."""
    suite = ET.SubElement(root, "testsuite", name=f"contracts.{tool}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    runs = record.get("runs")
    if record.get("status") == "ok" and isinstance(runs, dict) and runs:
        for name, run in runs.items():
            _tool_case(suite, f"contracts.{tool}", name, run, counts)
    else:
        _tool_case(suite, f"contracts.{tool}", "run", record, counts)
    for key, value in counts.items():
        suite.set(key, str(value))


def entries_for_bundle(bundle: Path) -> tuple[list[CheckEntry], dict]:
    """The checks in a bundle (nightly, multi-candidate, or single) and, for a nightly, its tool records."""
    bundle = Path(bundle)
    if (bundle / "nightly.json").exists():
        nightly = read_nightly(bundle)
        entries = []
        for section in (nightly.candidates, nightly.pairs):
            for label, rec in section.items():
                folder = bundle / rec["bundle"] if rec.get("bundle") else None
                summary = rec.get("summary")
                if folder is not None and (folder / "summary.json").exists():
                    summary = to_json(open_check(folder).summary)
                skip = rec.get("reason") if rec.get("status") == "skipped" else None
                error = (rec.get("traceback") or rec.get("reason")) if rec.get("status") in ("error", "interrupted") and not summary else None
                entries.append(CheckEntry(label, folder, summary, skip, error))
        tools = {k: v for k, v in (("probe", nightly.probe), ("bench", nightly.bench)) if isinstance(v, dict) and v}
        return entries, tools
    if (bundle / "summary.json").exists():
        summary = to_json(open_check(bundle).summary)
        return [CheckEntry(_label(summary), bundle, summary)], {}
    folders = sorted(p.parent for p in bundle.glob("*/summary.json"))
    if not folders:
        raise BundleError(f"{bundle} holds no nightly.json or summary.json: not a report bundle")
    entries = []
    for folder in folders:
        summary = to_json(open_check(folder).summary)
        entries.append(CheckEntry(_label(summary), folder, summary))
    return entries, {}


def _label(summary: dict) -> str:
    return summary["candidate"] + (f" vs {summary['against']}" if summary.get("against") else "")


def build_junit(entries: list[CheckEntry], tools: dict | None = None, *, name: str = "router-contracts") -> ET.ElementTree:
    root = ET.Element("testsuites", name=name)
    for entry in entries:
        _suite_for_check(root, entry)
    for tool, record in (tools or {}).items():
        _tool_suite(root, tool, record)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, 0)) for s in root.findall("testsuite"))))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, entries: list[CheckEntry], tools: dict | None = None) -> Path:
    """Write the JUnit file atomically and check that it parses back."""
    tree = build_junit(entries, tools)
    write_atomic(Path(path), lambda p: tree.write(p, encoding="utf-8", xml_declaration=True))
    ET.parse(path)  # raises ParseError if the file is not well-formed
    return Path(path)
