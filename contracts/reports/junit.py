"""JUnit XML from report bundles, for CI test tabs.

One ``<testsuite>`` per check (a candidate, or a candidate against another),
one ``<testcase>`` per family x clause:

- classname ``contracts.<candidate>.<family>`` (``<a>-vs-<b>`` for a pair; dots
  and colons in names become ``_`` so viewers do not split them), name the clause;
- ``<failure>`` when any row of the family breaks the clause unexpectedly
  (``FamilyCounts.clauses_broken``; a version-1 bundle has only the primary
  clause, ``clauses``): the message says how many rows, the text shows the
  first mismatch (ids and weights side by side) and the command that replays it;
- ``<skipped>`` when the family's rows were all skipped, with the reasons, or
  the candidate raised on all of them;
- a declared deviation seen in the family passes, with a ``<system-out>`` note;
- an unavailable candidate, or a pair that does not apply on this host, is one
  skipped testcase (classname ``contracts.<label>``, name ``available``) with the reason.

A check that did not end well is never green: a candidate that raised adds an
``<error>`` testcase named ``run``; an interrupted check an ``<error>``
testcase named ``complete``; undeclared nondeterminism a failing
``determinism`` testcase; and a failing status that no testcase above shows
a failing ``status`` testcase.

``python -m contracts report junit BUNDLE [-o FILE]`` writes the file for any
bundle (a nightly, a multi-candidate check, or a single check). Data come
from the bundle files only, read through ``contracts.reports.bundle``, as
records (``Summary``, ``RowDetail``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ._atomic import write_atomic
from .bundle import BundleError, find_checks, open_check, read_cells, read_details, read_nightly, refuse_mixed
from .json_records import from_json
from .schema import FamilyCounts, RecordError, RowDetail, Status, Summary
from .text import clean

__all__ = ["CheckEntry", "build_junit", "entries_for_bundle", "first_mismatch", "write_junit"]

# Characters XML 1.0 cannot carry that text.clean leaves alone.
_XML_ILLEGAL = re.compile("[\ufffe\uffff]")


@dataclass
class CheckEntry:
    """One check as JUnit sees it: a bundle folder, or only a reason it did not run."""

    label: str  # "oracle", "serial vs block-argmax"
    bundle: Path | None = None
    summary: Summary | None = None
    skip_reason: str | None = None  # did not run here (pair not applicable, candidate absent)
    error: str | None = None  # the harness itself failed for this check


_OUTCOMES = {"failure": "failures", "error": "errors", "skipped": "skipped"}


@dataclass
class _Counts:
    """One suite's testcases and their outcomes. Every testcase and outcome is made through ``case`` and ``mark``,
    so the counts ``close`` writes on the suite are those of its elements."""

    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    notes: list[str] = field(default_factory=list)  # the suite's <system-out>

    def case(self, suite: ET.Element, classname: str, name: str) -> ET.Element:
        self.tests += 1
        return ET.SubElement(suite, "testcase", classname=classname, name=name, time="0.000")

    def mark(self, case: ET.Element, outcome: str, message: str, text: str | None = None, kind: str | None = None) -> None:
        """A ``<failure>``, ``<error>`` or ``<skipped>`` (``outcome``) on ``case``, counted; ``kind`` is its type."""
        attributes = {"message": _clean(message)} if kind is None else {"message": _clean(message), "type": _clean(kind)}
        element = ET.SubElement(case, outcome, attributes)
        if text is not None:
            element.text = _clean(text)
        setattr(self, _OUTCOMES[outcome], getattr(self, _OUTCOMES[outcome]) + 1)

    def close(self, suite: ET.Element) -> None:
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(getattr(self, key)))


def _clean(text) -> str:
    return _XML_ILLEGAL.sub("?", clean(text, keep_newlines=True))


def _class_part(label: str) -> str:
    return re.sub(r"[.:\s/]+", "_", label.replace(" vs ", "-vs-"))


def _read_cells(bundle: Path | None) -> pd.DataFrame:
    if bundle is None:
        return pd.DataFrame()
    try:
        return read_cells(bundle)
    except BundleError:
        return pd.DataFrame()


def _as_summary(summary: Summary | dict) -> Summary:
    return summary if isinstance(summary, Summary) else from_json(Summary, summary, "summary")


def _broken(fam: FamilyCounts, clause: str) -> int:
    """Rows of the family breaking ``clause``: every row that breaks it (v2), else those with it as the primary clause."""
    return fam.clauses_broken.get(clause, fam.clauses.get(clause, 0))


# ---------------------------------------------------------------- the first mismatch as text


def _fallback_replay(s: Summary, case: str, row) -> str:
    """The replay line of a case the bundle recorded only as mismatch cells, built from the summary's fields (an older
    bundle's case shape: ``Summary.case_shape``)."""
    from types import SimpleNamespace

    from ..cases.captured import source_from_record
    from ..run.replay import replay_command

    target = s.replay_target  # None in older bundles: the display names, as they were
    options = s.options or {}
    experts, topk = s.case_shape()
    spec = SimpleNamespace(replay_id=str(case), experts=experts, topk=topk,
                           source=source_from_record(options.get("logits"), str(case)))  # what a replay line takes of a CaseSpec
    return replay_command(
        (target.candidate if target else None) or s.candidate, options.get("contract_source") or s.contract, s.device, spec, int(row),
        (target.against if target else None) or s.against, s.bit_exact, int(options.get("repeat") or 1),
        pythonpath=target.pythonpath if target else None,
    )  # fmt: skip


def _detail_text(d: RowDetail, s: Summary) -> str:
    lines = [f"case {d.case}, row {d.row}: {d.reason}"]
    if d.clauses and len(d.clauses) > 1:
        lines.append(f"the row breaks: {', '.join(d.clauses)} (primary: {d.clause})")
    for name in ("expected_ids", "actual_ids", "expected_weights", "actual_weights"):
        value = getattr(d, name)
        if value is not None:
            lines.append(f"{name.replace('_', ' '):>16}: {value}")
    lines.append(f"tie group at the cutoff: {d.tie_group_size}; straddles: {d.straddles_cutoff}; NaN logits in row: {d.nan_count}")
    lines.append(f"replay: {d.replay or _fallback_replay(s, d.case, d.row)}")
    return "\n".join(lines)


def _cell_text(cell: dict, s: Summary) -> str:
    return (
        f"case {cell['case']}, row {cell['row']}, column {cell['col']}: {cell['reason']}\n"
        f"expected id {cell['expected_id']} weight {cell['expected_weight']}; "
        f"actual id {cell['actual_id']} weight {cell['actual_weight']}\n"
        f"replay: {_fallback_replay(s, cell['case'], cell['row'])}"
    )


def _first_detail(details: list[RowDetail], family: str, clause: str) -> RowDetail | None:
    mismatches = [d for d in details if d.family == family and d.verdict == "mismatch"]
    primary = next((d for d in mismatches if d.clause == clause), None)
    return primary or next((d for d in mismatches if clause in (d.clauses or ())), None)


def first_mismatch(bundle: Path | None, summary: Summary | dict, family: str, clause: str, *,
                   details: list[RowDetail] | None = None, cells: pd.DataFrame | None = None) -> str:  # fmt: skip
    """The first unexpected mismatch of ``clause`` in ``family`` as text, with its replay command.

    ``summary`` is the bundle's Summary (or its JSON); ``details`` and ``cells``, when given, save reading them again.
    """
    s = _as_summary(summary)
    if details is None:
        details = read_details(bundle) if bundle is not None else []
    detail = _first_detail(details, family, clause)
    if detail is not None:
        return _detail_text(detail, s)
    cells = _read_cells(bundle) if cells is None else cells
    if not cells.empty:
        hit = cells[(cells["family"] == family) & (cells["clause"] == clause) & (cells["verdict"] == "mismatch")]
        if len(hit):
            return _cell_text(hit.iloc[0].to_dict(), s)
    return f"no example recorded (the bundle's cell cap was reached); rerun: {s.command}"


# ---------------------------------------------------------------- testsuites


def _suite_for_check(root: ET.Element, entry: CheckEntry) -> None:
    label = _class_part(entry.label)
    suite = ET.SubElement(root, "testsuite", name=f"contracts.{label}")
    props = ET.SubElement(suite, "properties")
    s = entry.summary
    if s is not None:
        for key in ("candidate", "against", "contract", "device", "status", "rows_checked", "seed", "shard"):
            value = getattr(s, key)
            if value is not None:
                ET.SubElement(props, "property", name=key, value=_clean(value))
    counts = _Counts()

    if entry.error:
        last_line = entry.error.strip().splitlines()[-1] if entry.error.strip() else "error"
        counts.mark(counts.case(suite, f"contracts.{label}", "run"), "error", last_line, entry.error)
    elif entry.skip_reason or s is None or s.status is Status.UNAVAILABLE:
        reason = entry.skip_reason or (s.reason if s is not None else None) or "not run"
        counts.mark(counts.case(suite, f"contracts.{label}", "available"), "skipped", reason)
    else:
        _clause_cases(suite, label, entry.bundle, s, counts)
        _run_cases(suite, label, s, counts)

    counts.close(suite)
    suite.set("time", f"{float(s.duration_s or 0) if s is not None else 0.0:.3f}")
    if counts.notes:
        ET.SubElement(suite, "system-out").text = _clean("\n".join(counts.notes))


def _clauses(s: Summary) -> list[str]:
    """The contract's clauses, then any other a family counted a row under."""
    names = list(s.clauses)
    for fam in s.families.values():
        names += [c for c in (*fam.clauses, *fam.clauses_broken) if c not in names]
    return names


def _skip_text(fam: FamilyCounts) -> str:
    reasons = "; ".join(f"{n:,} rows: {why}" for why, n in fam.skip_reasons.items()) or "reason not recorded"
    return f"{fam.rows_skipped:,} rows skipped, not covered ({reasons})"


def _declared_sample(cells: pd.DataFrame) -> dict[tuple[str, str], int]:
    """(family, clause) -> declared rows among the recorded cells, for bundles that do not count them by clause."""
    if cells.empty or "verdict" not in cells:
        return {}
    seen = cells[cells["verdict"] == "expected"].drop_duplicates(["case", "row", "clause"])
    return {(str(f), str(c)): int(n) for (f, c), n in seen.groupby(["family", "clause"]).size().items()}


def _clause_cases(suite: ET.Element, label: str, bundle: Path | None, s: Summary, counts: _Counts) -> None:
    details = read_details(bundle) if bundle is not None else []
    cells = _read_cells(bundle)
    declared = s.expected_deviations
    sample = _declared_sample(cells) if declared else {}
    clauses = _clauses(s)

    for family, fam in s.families.items():
        classname = f"contracts.{label}.{family}"
        not_covered = fam.rows == 0 and fam.rows_skipped > 0
        all_raised = fam.rows > 0 and fam.rows_raised == fam.rows  # nothing compared: the error testcase says why
        if fam.rows_skipped and not not_covered:
            counts.notes.append(f"{family}: {_skip_text(fam)}")
        if fam.rows_raised:
            counts.notes.append(f"{family}: the candidate raised on {fam.rows_raised:,} of {fam.rows:,} rows")
        for clause in clauses:
            case = counts.case(suite, classname, clause)
            bad = _broken(fam, clause)
            if not_covered or all_raised:
                why = _skip_text(fam) if not_covered else f"not compared: the candidate raised on all {fam.rows:,} rows (see the testcase 'run')"
                counts.mark(case, "skipped", why)
            elif bad:
                message = f"{bad:,} of {fam.rows:,} rows of family {family} break clause {clause}"
                primary = fam.clauses.get(clause, 0)
                also = f" ({primary:,} with it as the primary clause)" if primary != bad else ""
                text = message + also + "\n" + first_mismatch(bundle, s, family, clause, details=details, cells=cells)
                counts.mark(case, "failure", message, text, "ContractMismatch")
            elif clause in declared:
                note = _declared_note(fam, family, clause, declared[clause].reason, sample)
                if note:
                    ET.SubElement(case, "system-out").text = _clean(note)

    if declared:
        lines = [f"{clause}: {d.rows:,} rows" + (f", {d.inexact_rows:,} rows within tolerance but not bit-exact" if d.inexact_rows else "")
                 + f", observed={d.observed}: {d.reason}" for clause, d in declared.items()]  # fmt: skip
        counts.notes.append("declared deviations (never failures):\n" + "\n".join(lines))


def _declared_note(fam: FamilyCounts, family: str, clause: str, reason: str, sample: dict) -> str | None:
    rows = fam.expected_clauses.get(clause, 0)
    if rows:
        return f"declared deviation: {reason} ({rows:,} rows in this family, reported as expected)"
    if not fam.expected_clauses and sample.get((family, clause)):
        return (f"declared deviation: {reason} (at least {sample[(family, clause)]:,} rows in the recorded cells; "
                "this bundle does not count them by family and clause)")  # fmt: skip
    return None


def _run_cases(suite: ET.Element, label: str, s: Summary, counts: _Counts) -> None:
    """How the check ended: a raise, an interruption, nondeterminism, and a status no other testcase shows."""
    classname = f"contracts.{label}"
    if s.error is not None:
        message = f"the candidate raised in case {s.error.case}" if s.error.kind == "exception" else f"{s.error.kind} in case {s.error.case}: {s.error.message}"
        if s.raised_rows:
            message += f" ({s.raised_rows:,} rows of cases it raised on)"
        text = s.error.traceback or s.error.message
        if s.error.replay:
            text += f"\nreplay: {s.error.replay}"
        counts.mark(counts.case(suite, classname, "run"), "error", message, text, s.error.kind)
    if s.status is Status.INTERRUPTED or s.interrupted:
        message = f"interrupted ({s.interrupted}) after {s.rows_checked:,} rows: the check did not finish"
        counts.mark(counts.case(suite, classname, "complete"), "error", message, f"{message}\nrerun: {s.command}", "Interrupted")
    det = s.determinism
    if det is not None and (det.repeat > 1 or det.rows_differing):
        case = counts.case(suite, classname, "determinism")
        if det.rows_differing and not det.declared:
            message = f"{det.rows_differing:,} rows differed between calls in {det.cases:,} cases"
            replays = "\n".join(f"replay: {x['replay']}" for x in det.examples if "replay" in x)
            counts.mark(case, "failure", message, message + "\n" + replays, "Nondeterminism")
        elif det.rows_differing:
            ET.SubElement(case, "system-out").text = _clean(f"declared nondeterminism: {det.declared} ({det.rows_differing:,} rows differed)")
    if s.status.failed and not (counts.failures or counts.errors):
        message = f"status {s.status.value} with {s.mismatched_rows:,} unexpected mismatched rows of {s.rows_checked:,}"
        counts.mark(counts.case(suite, classname, "status"), "failure", message, f"{message}\nrerun: {s.command}", "CheckFailed")


def _tool_case(suite: ET.Element, classname: str, name: str, record: dict, counts: _Counts) -> None:
    case = counts.case(suite, classname, name)
    status = record.get("status")
    if status == "error":
        reason = record.get("reason") or record.get("error") or "error"
        counts.mark(case, "error", reason, record.get("traceback") or reason)
    elif status not in ("ok", "done"):
        counts.mark(case, "skipped", record.get("reason") or status or "not run")
    else:
        notes = [f"{k}: {record[k]}" for k in ("matches", "consistent", "path", "command") if record.get(k) is not None]
        if notes:
            ET.SubElement(case, "system-out").text = _clean("\n".join(notes))


def _tool_suite(root: ET.Element, tool: str, record: dict) -> None:
    """The probe (one testcase per candidate probed) or the bench (one testcase); their records are plain JSON."""
    suite = ET.SubElement(root, "testsuite", name=f"contracts.{tool}")
    counts = _Counts()
    runs = record.get("runs")
    if record.get("status") == "ok" and isinstance(runs, dict) and runs:
        for name, run in runs.items():
            _tool_case(suite, f"contracts.{tool}", name, run, counts)
    else:
        _tool_case(suite, f"contracts.{tool}", "run", record, counts)
    counts.close(suite)


# ---------------------------------------------------------------- bundles in, XML out


def _nightly_entry(root: Path, label: str, rec: dict) -> CheckEntry:
    """One candidate or pair of ``nightly.json`` (its records there are plain JSON, the bundle's summary a record)."""
    folder = root / rec["bundle"] if rec.get("bundle") else None
    status = rec.get("status")
    summary = None
    try:
        if folder is not None and (folder / "summary.json").exists():
            summary = open_check(folder).summary  # refuses a bundle whose parts are of two runs
        elif isinstance(rec.get("summary"), dict):
            summary = from_json(Summary, rec["summary"], f"{root / 'nightly.json'}: {label}")
    except (BundleError, RecordError) as exc:
        return CheckEntry(label, folder, None, error=f"the bundle of {label} cannot be read: {exc}")
    skip = rec.get("reason") if status == "skipped" else None
    error = None
    if status in ("error", "interrupted") and summary is None:
        error = rec.get("traceback") or rec.get("reason") or f"{label}: {status}, and no summary was written"
    return CheckEntry(label, folder, summary, skip, error)


def entries_for_bundle(bundle: Path) -> tuple[list[CheckEntry], dict]:
    """The checks in a bundle (nightly, multi-candidate, or single) and, for a nightly, its tool records."""
    bundle = Path(bundle)
    if (bundle / "nightly.json").exists():
        refuse_mixed(bundle)
        nightly = read_nightly(bundle)
        entries = [_nightly_entry(bundle, label, rec) for section in (nightly.candidates, nightly.pairs) for label, rec in section.items()]
        tools = {k: v for k, v in (("probe", nightly.probe), ("bench", nightly.bench)) if isinstance(v, dict) and v}
        return entries, tools
    checks = find_checks(bundle)  # the one reader: refuses a folder whose bundles are of different runs
    if not checks:
        raise BundleError(f"{bundle} holds no nightly.json or summary.json: not a report bundle")
    return [CheckEntry(label, found.folder, found.summary) for label, found in checks.items()], {}


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
