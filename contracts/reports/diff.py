"""What got worse between two report bundles (``python -m contracts diff OLD NEW``).

OLD and NEW are bundle folders or their URLs (any fsspec URL: file://,
s3://, gs://...): nightly bundles (``nightly.json``), multi-candidate check
bundles (``index.json``) or single check bundles (``summary.json``). Checks
are matched by label (``candidate`` or ``candidate vs against``).

Regressions (exit 1):

- a check that passed now fails, errors or was interrupted; a check that ran is now unavailable;
- a family that had no unexpected mismatch has some now ("turned red"), and a
  clause newly violated in a family that was already red;
- a tie-order permutation recorded by the probe (``probe.json``) changed;
- a latency recorded by the bench (``bench.json``) grew by more than
  ``--latency-threshold`` (default 10%).

Reported, not regressions: declared deviations that appeared or vanished,
clauses fixed, changed mismatch counts where both runs failed, different row
counts (counts then compare less directly), checks present on one side only.

Exit codes: 0 no regression, 1 regression, 2 usage (a path that is not a bundle).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .bundle import BundleError, CheckBundle, find_checks, read_json
from .schema import to_json

__all__ = ["Bundle", "BundleError", "DiffResult", "diff_bundles", "load_bundle"]

DEFAULT_LATENCY_THRESHOLD = 0.10
_TIME_KEY = re.compile(r"(^|_)(us|ms|ns|s|sec|usec|msec|latency|median|mean|p50|p90|p95|p99|min|time)($|_)", re.IGNORECASE)
_THROUGHPUT_KEY = re.compile(r"per_s|_per_|throughput|speedup|ratio|rows|count|size", re.IGNORECASE)


@dataclass
class Bundle:
    source: str
    checks: dict[str, dict] = field(default_factory=dict)  # label -> summary
    probes: dict[str, object] = field(default_factory=dict)  # relative path -> probe.json content
    benches: dict[str, object] = field(default_factory=dict)  # relative path -> bench.json content
    nightly: dict | None = None


@dataclass
class DiffResult:
    old: str
    new: str
    regressions: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def to_dict(self) -> dict:
        return {"old": self.old, "new": self.new, "regressed": self.regressed, "regressions": self.regressions, "changes": self.changes}

    def render(self) -> str:
        lines = [f"contracts.diff\n  old: {self.old}\n  new: {self.new}"]
        if self.regressions:
            lines.append(f"\nREGRESSIONS ({len(self.regressions)}):")
            lines += [f"  - {r}" for r in self.regressions]
        if self.changes:
            lines.append(f"\nOther changes ({len(self.changes)}):")
            lines += [f"  - {c}" for c in self.changes]
        lines.append("\n" + (f"{len(self.regressions)} regression(s)." if self.regressions else "No regression."))
        return "\n".join(lines) + "\n"


def _load_local(root: Path, source: str) -> Bundle:
    if not root.is_dir():
        raise BundleError(f"{source} is not a folder")
    bundle = Bundle(source)
    try:
        checks = find_checks(root)
    except BundleError:
        raise
    for label, found in checks.items():
        summary = found.summary if isinstance(found, CheckBundle) else found
        bundle.checks[label] = to_json(summary)
    if (root / "nightly.json").exists():
        bundle.nightly = read_json(root / "nightly.json")
    for name, store in (("probe.json", bundle.probes), ("bench.json", bundle.benches)):
        for path in sorted(root.rglob(name)):
            store[path.relative_to(root).as_posix()] = read_json(path)
    if not bundle.checks and not bundle.probes and not bundle.benches:
        raise BundleError(f"{source} holds no nightly.json, summary.json, probe.json or bench.json: not a report bundle")
    return bundle


def load_bundle(where: str | Path, *, storage_options: dict | None = None) -> Bundle:
    """Read a bundle from a folder or a URL (all its files are fetched, so its data files are checked as a folder's are)."""
    text = str(where)
    if "://" not in text:
        return _load_local(Path(text), text)
    if text.startswith("file://"):  # an upload store on this machine: only complete uploads, as for any URL
        from .upload import COMPLETION_MARKERS

        path = Path(text[len("file://") :])
        if path.is_dir() and not any((path / marker).exists() for marker in COMPLETION_MARKERS):
            raise BundleError(f"{text} is an incomplete upload (no {', '.join(COMPLETION_MARKERS)} at its top); retry the upload")
        return _load_local(path, text)
    from .upload import download_bundle

    with tempfile.TemporaryDirectory(prefix="contracts-diff-") as tmp:
        try:  # every file, not only the JSON: a bundle is read with the same completeness rules as a local folder
            download_bundle(text, tmp, storage_options=storage_options, suffixes=None)
        except FileNotFoundError as exc:
            raise BundleError(str(exc)) from None
        return _load_local(Path(tmp), text)


def _diff_check(label: str, old: dict, new: dict, result: DiffResult) -> None:
    o_status, n_status = old.get("status"), new.get("status")
    if n_status == "unavailable":
        if o_status != "unavailable":
            result.regressions.append(f"{label}: was checked ({o_status}), now unavailable: {new.get('reason', '')}")
        return
    if o_status == "unavailable":
        result.changes.append(f"{label}: now checked ({n_status}); was unavailable: {old.get('reason', '')}")
        return
    if o_status == "pass" and n_status in ("fail", "error", "interrupted"):  # a stopped check proves nothing: never "no regression"
        why = f"stopped by {new.get('interrupted') or 'a signal'}" if n_status == "interrupted" else f"{new.get('mismatched_rows', 0):,} unexpected mismatched rows"
        result.regressions.append(f"{label}: status pass -> {n_status} ({why})")
    elif o_status in ("fail", "error", "interrupted") and n_status == "pass":
        result.changes.append(f"{label}: status {o_status} -> pass")
    if n_status == "error" and o_status != "error" and new.get("error"):
        result.regressions.append(f"{label}: the candidate raised in case {new['error'].get('case')}")

    o_rows, n_rows = old.get("rows_checked"), new.get("rows_checked")
    if o_rows != n_rows:
        result.changes.append(f"{label}: rows checked {o_rows} -> {n_rows} (counts compare less directly)")

    o_fams, n_fams = old.get("families") or {}, new.get("families") or {}
    for family, nf in n_fams.items():
        of = o_fams.get(family)
        if of is None or not of.get("rows"):
            continue
        n_clauses = {c: n for c, n in (nf.get("clauses") or {}).items() if n}
        o_clauses = {c: n for c, n in (of.get("clauses") or {}).items() if n}
        if nf.get("mismatched_rows", 0) and not of.get("mismatched_rows", 0):
            listed = ", ".join(f"{c} {n:,} rows" for c, n in n_clauses.items())
            result.regressions.append(f"{label}: family {family} turned red: {listed or str(nf['mismatched_rows']) + ' rows'}")
            continue
        for clause, n in n_clauses.items():
            if not o_clauses.get(clause):
                result.regressions.append(f"{label}: new violation of clause {clause} in family {family}: {n:,} rows (was 0)")
            elif n != o_clauses[clause]:
                result.changes.append(f"{label}: clause {clause} in family {family}: {o_clauses[clause]:,} -> {n:,} rows")
        for clause in o_clauses:
            if clause not in n_clauses and nf.get("rows"):
                result.changes.append(f"{label}: clause {clause} in family {family} no longer violated (was {o_clauses[clause]:,} rows)")

    o_dev, n_dev = old.get("expected_deviations") or {}, new.get("expected_deviations") or {}
    for clause in sorted(set(o_dev) | set(n_dev)):
        was = bool((o_dev.get(clause) or {}).get("observed"))
        now = bool((n_dev.get(clause) or {}).get("observed"))
        if now and not was:
            result.changes.append(f"{label}: declared deviation {clause} appeared ({(n_dev[clause] or {}).get('rows', 0):,} rows)")
        elif was and not now:
            result.changes.append(f"{label}: declared deviation {clause} vanished (is the declaration still needed?)")


def _permutations(node, path="") -> dict[str, list[int]]:
    """Lists of distinct ints (tie orders, permutations) by JSON path."""
    found = {}
    if isinstance(node, dict):
        for key, value in node.items():
            found.update(_permutations(value, f"{path}/{key}"))
    elif isinstance(node, list):
        if len(node) >= 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in node) and len(set(node)) == len(node):
            found[path or "/"] = node
        else:
            for index, value in enumerate(node):
                found.update(_permutations(value, f"{path}/{_element_id(value, index)}"))
    return found


def _element_id(value, index: int) -> str:
    # Identify list elements by their descriptive fields, so reordering a list does not look like a change.
    if isinstance(value, dict):
        keys = [f"{k}={v}" for k, v in sorted(value.items()) if isinstance(v, (str, bool)) or (isinstance(v, int) and not _TIME_KEY.search(k))]
        if keys:
            return "[" + ",".join(keys) + "]"
    return str(index)


def _latencies(node, path="") -> dict[str, float]:
    found = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if _TIME_KEY.search(str(key)) and not _THROUGHPUT_KEY.search(str(key)) and value > 0:
                    found[f"{path}/{key}"] = float(value)
            else:
                found.update(_latencies(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.update(_latencies(value, f"{path}/{_element_id(value, index)}"))
    return found


def _short(seq: list[int], at: int) -> str:
    lo = max(0, at - 2)
    return ("..." if lo else "") + str(seq[lo : at + 6])[1:-1] + ("..." if at + 6 < len(seq) else "")


def _diff_probe_doc(rel: str, old: dict, new: dict, result: DiffResult) -> None:
    """A contracts.probe document: the recovered permutation, its rule and consistency."""
    if old.get("status") != "done" or new.get("status") != "done":
        if old.get("status") != new.get("status"):
            result.changes.append(f"probe {rel}: status {old.get('status')} -> {new.get('status')}")
        return
    a, b = old.get("permutation") or [], new.get("permutation") or []
    if old.get("consistent") and not new.get("consistent"):
        result.regressions.append(f"probe {rel}: tie order no longer consistent: {new.get('dependence', '')}")
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        line = f"probe {rel}: tie order changed (rule {old.get('matches')} -> {new.get('matches')}); first difference at position {at}: [{_short(a, at)}] -> [{_short(b, at)}]"
        # An inconsistent order (torch.topk's) is not one permutation: a new draw of it is no regression.
        (result.regressions if old.get("consistent") and new.get("consistent") else result.changes).append(line)


def _diff_probes(old: dict, new: dict, result: DiffResult) -> None:
    for rel in sorted(set(old) & set(new)):
        if isinstance(old[rel], dict) and isinstance(new[rel], dict) and "permutation" in old[rel] | new[rel]:
            _diff_probe_doc(rel, old[rel], new[rel], result)
            continue
        o_perm, n_perm = _permutations(old[rel]), _permutations(new[rel])
        for path in sorted(set(o_perm) & set(n_perm)):
            a, b = o_perm[path], n_perm[path]
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                result.regressions.append(f"tie order changed: {rel}{path}: first difference at position {at}: [{_short(a, at)}] -> [{_short(b, at)}]")
        for path in sorted(set(o_perm) ^ set(n_perm)):
            result.changes.append(f"tie order {rel}{path} only in the {'old' if path in o_perm else 'new'} bundle")
    for rel in sorted(set(old) ^ set(new)):
        result.changes.append(f"probe {rel} only in the {'old' if rel in old else 'new'} bundle")


def _bench_latencies(doc) -> dict[str, float]:
    """Median us per launch by (candidate, M, timer) for a contracts.bench document; generic otherwise."""
    if isinstance(doc, dict) and doc.get("kind") == "bench" and isinstance(doc.get("candidates"), list):
        return {
            f"{c.get('name')} M={p.get('m')} ({p.get('timer')})": float(p["median_us"])
            for c in doc["candidates"]
            for p in c.get("results") or []
            if p.get("status") == "timed" and p.get("median_us")
        }
    return _latencies(doc)


def _diff_benches(old: dict, new: dict, threshold: float, result: DiffResult) -> None:
    for rel in sorted(set(old) & set(new)):
        o_lat, n_lat = _bench_latencies(old[rel]), _bench_latencies(new[rel])
        for path in sorted(set(o_lat) & set(n_lat)):
            a, b = o_lat[path], n_lat[path]
            growth = b / a - 1.0
            if growth > threshold:
                result.regressions.append(f"latency {rel} {path}: {a:g} -> {b:g} us (+{growth:.1%}, threshold {threshold:.0%})")
            elif growth < -threshold:
                result.changes.append(f"latency {rel} {path}: {a:g} -> {b:g} us ({growth:.1%})")


def diff_bundles(old: Bundle, new: Bundle, *, latency_threshold: float = DEFAULT_LATENCY_THRESHOLD) -> DiffResult:
    result = DiffResult(old.source, new.source)
    for label in new.checks:
        if label in old.checks:
            _diff_check(label, old.checks[label], new.checks[label], result)
        else:
            result.changes.append(f"{label}: only in the new bundle ({new.checks[label].get('status')})")
    for label in old.checks:
        if label not in new.checks:
            result.changes.append(f"{label}: only in the old bundle")
    _diff_probes(old.probes, new.probes, result)
    _diff_benches(old.benches, new.benches, latency_threshold, result)
    return result
