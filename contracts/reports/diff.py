"""What got worse between two report bundles (``python -m contracts diff OLD NEW``).

OLD and NEW are bundle folders or their URLs (any fsspec URL: file://,
s3://, gs://...): nightly bundles (``nightly.json``), multi-candidate check
bundles (``index.json``) or single check bundles (``summary.json``).

Checks are paired by what was checked, not by name (``check_key``): the
candidate (and ``--against``), the contract, the shape E/k, and the inputs:
the captured logits file's sha256, or the synthetic seed, families and rows,
as each ``summary.json`` records them. A check that did not run (it records
no inputs: unavailable, or an error before it started) pairs by its label.
A check on one side only is "unpaired" and named, with the same-named check
on the other side and how its inputs differ; when both bundles hold checks
and none pairs, the diff says so loudly, and that is a regression (it
compared nothing).

One ordering of statuses (``STATUS_RANK``), which the nightly's gate uses
too: pass < not_covered < fail < error = interrupted < unavailable = missing
(a check that ran and is no longer there). A move to a later one is a
regression; so from pass anything else is; an error on both sides is listed.

Regressions (exit 1):

- a check's status moved later in that order (pass -> fail, not_covered,
  error, interrupted, unavailable or missing; not_covered -> fail; ...);
- a check that is new (unpaired) and fails, errors or covered nothing: there
  is nothing to compare it against, so its failure is not hidden;
- nothing pairs;
- a family that had no unexpected mismatch has some now ("turned red"), and a
  clause newly violated in a family that was already red; a family that had
  rows checked and has none now;
- a tie-order permutation recorded by the probe (``probe.json``) changed;
- a bench point (candidate, M, under the same bench inputs) that was timed
  and now is an error, skipped, or gone; a latency recorded by the bench
  (``bench.json``) grew by more than ``--latency-threshold`` (default 10%).

Reported, not regressions: a status that got better, an error still an error,
declared deviations that appeared or vanished, clauses fixed, changed
mismatch counts where both runs failed, different row counts checked, new
checks that pass, new bench error points (the bench's own status says so).

Exit codes: 0 no regression, 1 regression, 2 usage (a path that is not a bundle).
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .bundle import BundleError, CheckBundle, find_checks, read_json
from .schema import Summary

__all__ = ["STATUS_RANK", "Bundle", "BundleError", "DiffResult", "check_key", "diff_bundles", "load_bundle", "status_regressed"]

DEFAULT_LATENCY_THRESHOLD = 0.10
_TIME_KEY = re.compile(r"(^|_)(us|ms|ns|s|sec|usec|msec|latency|median|mean|p50|p90|p95|p99|min|time)($|_)", re.IGNORECASE)
_THROUGHPUT_KEY = re.compile(r"per_s|_per_|throughput|speedup|ratio|rows|count|size", re.IGNORECASE)

# The one ordering of statuses for diff and the nightly gate: a move to a higher rank is a regression.
# "missing": the check (or bench point) is not in the new bundle. An unknown word ranks with the worst.
STATUS_RANK = {"pass": 0, "not_covered": 1, "fail": 2, "error": 3, "interrupted": 3, "unavailable": 4, "missing": 4}
_WORST = max(STATUS_RANK.values())


def status_regressed(old: str | None, new: str | None) -> bool:
    """Whether a check whose status was ``old`` regressed by now being ``new`` (``STATUS_RANK``)."""
    return STATUS_RANK.get(str(new), _WORST) > STATUS_RANK.get(str(old), _WORST)


def check_key(summary: Summary) -> tuple | None:
    """What a check checked, for pairing: (candidate, against, contract, E, k, inputs), the inputs being the captured
    file's sha256 or the synthetic (seed, families, rows). None for a check that records no inputs (it did not run)."""
    # options is the one part of a summary that stays a plain dict (the record leaves its keys to the writer, and an
    # older bundle holds fewer of them): hence .get here, and attributes for the rest
    options = summary.options
    if not options:
        return None
    logits = (options.get("logits") or {}).get("sha256") if isinstance(options.get("logits"), dict) else None
    families = options.get("families")
    inputs = ("logits", logits) if logits else ("synthetic", summary.seed, tuple(sorted(families)) if families else None, options.get("rows"))
    if logits:
        inputs += ((options.get("logits") or {}).get("bias_sha256"),)
    # how it was checked: a contract file's digest (two files of one name are two contracts), --exact, --max-batch
    how = tuple(options.get(k) for k in ("contract_sha256", "exact", "max_batch"))
    return (summary.candidate, summary.against, summary.contract, options.get("experts"), options.get("topk"), inputs, how)


def _inputs_text(summary: Summary) -> str:
    """The pairing key of a check in words: ``contract aiter, E=896 k=16, seed 0, 12 families, 50,000 rows``."""
    key = check_key(summary)
    if key is None:
        return f"contract {summary.contract or '?'}, no inputs recorded"
    _, _, contract, experts, topk, inputs, _how = key
    head = f"contract {contract}, E={experts} k={topk}"
    if inputs[0] == "logits":
        return f"{head}, logits sha256 {str(inputs[1])[:12]}"
    _, seed, families, rows = inputs
    fams = f"{len(families)} families" if families else "all families"
    return f"{head}, seed {seed}, {fams}, {rows:,} rows" if isinstance(rows, int) else f"{head}, seed {seed}, {fams}"


def _key_difference(old: Summary, new: Summary) -> str:
    """How two same-named checks' pairing keys differ, field by field."""
    a, b = check_key(old), check_key(new)
    if a is None or b is None:
        return "one records no inputs"
    names = ("candidate", "against", "contract", "experts", "topk")
    said = [f"{n} {x} -> {y}" for n, x, y in zip(names, a, b) if x != y]
    (ia, ib) = (a[5], b[5])
    if ia[0] != ib[0]:
        said.append(f"inputs {ia[0]} -> {ib[0]}")
    elif ia[0] == "logits":
        if ia[1] != ib[1]:
            said.append(f"logits sha256 {str(ia[1])[:12]} -> {str(ib[1])[:12]}")
        if ia[2:] != ib[2:]:
            said.append(f"bias sha256 {str(ia[2])[:12]} -> {str(ib[2])[:12]}")
    else:
        for n, x, y in zip(("seed", "families", "rows"), ia[1:], ib[1:]):
            if x != y:
                if n == "families":
                    gone, added = sorted(set(x or ()) - set(y or ())), sorted(set(y or ()) - set(x or ()))
                    said.append("families" + (f" without {', '.join(gone)}" if gone else "") + (f" with {', '.join(added)}" if added else ""))
                else:
                    said.append(f"{n} {x} -> {y}")
    for n, x, y in zip(("contract file sha256", "exact", "max_batch"), a[6], b[6]):
        if x != y:
            said.append(f"{n} {str(x)[:12] if n.endswith('sha256') and x else x} -> {str(y)[:12] if n.endswith('sha256') and y else y}")
    return "; ".join(said)


@dataclass
class Bundle:
    source: str
    # label -> its summary.json as a record: an older bundle's reads with the defaults of the fields it lacks
    # (json_records.from_json), so every field is there to read, with its type
    checks: dict[str, Summary] = field(default_factory=dict)
    probes: dict[str, object] = field(default_factory=dict)  # relative path -> probe.json content
    benches: dict[str, object] = field(default_factory=dict)  # relative path -> bench.json content
    nightly: dict | None = None


@dataclass
class DiffResult:
    old: str
    new: str
    regressions: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    paired: int = 0  # checks paired by what they checked (check_key)
    unpaired: list[str] = field(default_factory=list)  # checks on one side only, each with its side and inputs
    nothing_pairs: bool = False  # both bundles hold checks and none pairs: the diff compared nothing

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def to_dict(self) -> dict:
        return {"old": self.old, "new": self.new, "regressed": self.regressed, "regressions": self.regressions, "changes": self.changes,
                "paired": self.paired, "unpaired": self.unpaired, "nothing_pairs": self.nothing_pairs}  # fmt: skip

    def render(self) -> str:
        lines = [f"contracts.diff\n  old: {self.old}\n  new: {self.new}\n  paired checks: {self.paired}; unpaired: {len(self.unpaired)}"]
        if self.nothing_pairs:
            lines.append("\nNOTHING PAIRS: no check of the new bundle has the candidate, contract and inputs of one in the old "
                         "bundle; this diff compared no check, which is no evidence of no regression.")  # fmt: skip
        if self.regressions:
            lines.append(f"\nREGRESSIONS ({len(self.regressions)}):")
            lines += [f"  - {r}" for r in self.regressions]
        if self.changes:
            lines.append(f"\nOther changes ({len(self.changes)}):")
            lines += [f"  - {c}" for c in self.changes]
        lines.append("\n" + (f"{len(self.regressions)} regression(s)." if self.regressions else "No regression."))
        return "\n".join(lines) + "\n"


def _every_bundle_below(root: Path, bundle: Bundle) -> None:
    """A folder of check bundles: every one of them, a second of one label (the same candidate under another contract
    file, --exact, bias or batch) under its label and folder, so that none is dropped unseen (find_checks keeps only
    the first of a label)."""
    from .bundle import open_check

    bundle.checks.clear()
    for path in sorted(root.rglob("summary.json")):
        found = open_check(path.parent)
        label = found.label if found.label not in bundle.checks else f"{found.label} [{path.parent.relative_to(root).as_posix()}]"
        bundle.checks[label] = found.summary


def _load_local(root: Path, source: str) -> Bundle:
    if not root.is_dir():
        raise BundleError(f"{source} is not a folder")
    bundle = Bundle(source)
    try:
        checks = find_checks(root)
    except BundleError:
        raise
    for label, found in checks.items():
        bundle.checks[label] = found.summary if isinstance(found, CheckBundle) else found
    if not (root / "nightly.json").exists() and not (root / "summary.json").exists():
        _every_bundle_below(root, bundle)
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


def _diff_check(label: str, old: Summary, new: Summary, result: DiffResult) -> None:
    # the status words, not the enum: STATUS_RANK and the lines below are in words
    o_status, n_status = old.status.value, new.status.value
    if o_status == n_status == "unavailable":
        return
    if status_regressed(o_status, n_status):
        if n_status == "unavailable":
            why = f"was checked ({o_status}), now unavailable: {new.reason}"
        elif n_status == "interrupted":  # a stopped check proves nothing: never "no regression"
            why = f"status {o_status} -> interrupted (stopped by {new.interrupted or 'a signal'})"
        elif n_status == "error":
            error = new.error
            why = f"status {o_status} -> error (the candidate raised in case {error.case}: {error.message})" if error is not None \
                else f"status {o_status} -> error ({new.reason or 'no error recorded'})"
        elif n_status == "not_covered":
            why = f"status {o_status} -> not_covered ({new.reason or 'no row checked'}): no evidence where there was"
        else:
            why = f"status {o_status} -> {n_status} ({new.mismatched_rows:,} unexpected mismatched rows)"
        result.regressions.append(f"{label}: {why}")
    elif o_status in ("error", "interrupted") and n_status == o_status:
        result.changes.append(f"{label}: still {n_status}: {(new.error.message if new.error is not None else None) or new.reason or new.interrupted or ''}")
    elif o_status != n_status:
        result.changes.append(f"{label}: status {o_status} -> {n_status}" + (f" (was unavailable: {old.reason})" if o_status == "unavailable" else ""))
    if "unavailable" in (o_status, n_status):
        return

    if old.rows_checked != new.rows_checked:
        result.changes.append(f"{label}: rows checked {old.rows_checked} -> {new.rows_checked} (counts compare less directly)")

    o_fams, n_fams = old.families, new.families
    for family, of in o_fams.items():  # evidence that was drawn and is not any more: not covered is no pass
        if of.rows and not (family in n_fams and n_fams[family].rows):
            result.regressions.append(f"{label}: family {family} had {of.rows:,} rows checked, now none (not covered)")
    for family, nf in n_fams.items():
        of = o_fams.get(family)
        if of is None or not of.rows:
            continue
        n_clauses = {c: n for c, n in nf.clauses.items() if n}
        o_clauses = {c: n for c, n in of.clauses.items() if n}
        if nf.mismatched_rows and not of.mismatched_rows:
            listed = ", ".join(f"{c} {n:,} rows" for c, n in n_clauses.items())
            result.regressions.append(f"{label}: family {family} turned red: {listed or str(nf.mismatched_rows) + ' rows'}")
            continue
        for clause, n in n_clauses.items():
            if not o_clauses.get(clause):
                result.regressions.append(f"{label}: new violation of clause {clause} in family {family}: {n:,} rows (was 0)")
            elif n != o_clauses[clause]:
                result.changes.append(f"{label}: clause {clause} in family {family}: {o_clauses[clause]:,} -> {n:,} rows")
        for clause in o_clauses:
            if clause not in n_clauses and nf.rows:
                result.changes.append(f"{label}: clause {clause} in family {family} no longer violated (was {o_clauses[clause]:,} rows)")

    o_dev, n_dev = old.expected_deviations, new.expected_deviations
    for clause in sorted(set(o_dev) | set(n_dev)):
        was = clause in o_dev and o_dev[clause].observed
        now = clause in n_dev and n_dev[clause].observed
        if now and not was:
            result.changes.append(f"{label}: declared deviation {clause} appeared ({n_dev[clause].rows:,} rows)")
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


def _bench_points(doc) -> dict[tuple, dict] | None:
    """A contracts.bench document's points by (candidate, M, the bench's inputs), or None for another document. The
    inputs (contract, shape, dtypes, seed) are part of the key: a point timed over other inputs does not pair."""
    if not (isinstance(doc, dict) and doc.get("kind") == "bench" and isinstance(doc.get("candidates"), list)):
        return None
    method = doc.get("method") or {}
    inputs = tuple(method.get(k) for k in ("contract", "experts", "topk", "dtype", "bias_dtype", "seed"))
    points = {}
    for c in doc["candidates"]:
        for p in c.get("results") or []:
            points[(c.get("name"), p.get("m"), inputs)] = p
        if c.get("status") == "error":  # the candidate itself failed (its gate raised): one point for all its M
            points[(c.get("name"), None, inputs)] = {"status": "error", "reason": c.get("reason")}
    return points


def _latency(point: dict) -> float | None:
    """A point's median latency where it is a finite positive number, else None."""
    try:
        v = float(point.get("median_us"))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _diff_bench_doc(rel: str, old: dict[tuple, dict], new: dict[tuple, dict], threshold: float, result: DiffResult) -> None:
    for key in sorted(set(old) | set(new), key=lambda k: (str(k[0]), k[1] if k[1] is not None else -1, str(k[2]))):
        name, m, _ = key
        where = f"{name} M={m}" if m is not None else f"{name}"
        a, b = old.get(key), new.get(key)
        was, now = (a or {}).get("status", "missing"), (b or {}).get("status", "missing")
        if was == "timed" and now == "timed":
            if a.get("timer") != b.get("timer"):
                result.changes.append(f"bench {rel} {where}: timer {a.get('timer')} -> {b.get('timer')}; latencies not compared")
                continue
            if not (_latency(a) and _latency(b)):
                if _latency(a):  # timed before, and now no finite latency (NaN, inf, none): no number is no improvement
                    result.regressions.append(f"bench {rel} {where}: timed ({a.get('median_us')} us) -> no latency (median {b.get('median_us')})")
                continue
            x, y = float(a["median_us"]), float(b["median_us"])
            growth = y / x - 1.0
            line = f"latency {rel} {where} ({b.get('timer')}): {x:g} -> {y:g} us"
            if growth > threshold:
                result.regressions.append(f"{line} (+{growth:.1%}, threshold {threshold:.0%})")
            elif growth < -threshold:
                result.changes.append(f"{line} ({growth:.1%})")
        elif was == "timed":  # a point that was timed and is now an error, skipped or gone: no latency is no improvement
            why = "gone from the new bench (no point at this M, candidate and inputs)" if b is None else f"{now}: {b.get('reason') or ''}"
            result.regressions.append(f"bench {rel} {where}: timed ({a.get('median_us')} us) -> {why}")
        elif now == "error":  # an error that was not one before is a regression (one ordering of statuses); on both sides, listed
            line = f"bench {rel} {where}: {'still error' if was == 'error' else f'{was} -> error'}: {b.get('reason') or ''}"
            (result.changes if was == "error" else result.regressions).append(line)
        elif was == "error":
            result.changes.append(f"bench {rel} {where}: error -> {now}")


def _diff_benches(old: dict, new: dict, threshold: float, result: DiffResult) -> None:
    for rel in sorted(set(old) & set(new)):
        o_points, n_points = _bench_points(old[rel]), _bench_points(new[rel])
        if o_points is not None and n_points is not None:
            _diff_bench_doc(rel, o_points, n_points, threshold, result)
            if old[rel].get("status") != "error" and new[rel].get("status") == "error":  # errors tied to no point (curves, plot)
                errors = new[rel].get("errors") or []
                result.regressions.append(f"bench {rel}: status {old[rel].get('status')} -> error ({len(errors)} error(s): "
                                          + "; ".join(str(e.get("message") or e.get("kind") or e) if isinstance(e, dict) else str(e) for e in errors[:3]) + ")")
            continue
        o_lat, n_lat = _latencies(old[rel]), _latencies(new[rel])
        for path in sorted(set(o_lat) & set(n_lat)):
            a, b = o_lat[path], n_lat[path]
            growth = b / a - 1.0
            if growth > threshold:
                result.regressions.append(f"latency {rel} {path}: {a:g} -> {b:g} us (+{growth:.1%}, threshold {threshold:.0%})")
            elif growth < -threshold:
                result.changes.append(f"latency {rel} {path}: {a:g} -> {b:g} us ({growth:.1%})")
    for rel in sorted(set(old) - set(new)):
        timed = [k for k, p in (_bench_points(old[rel]) or {}).items() if p.get("status") == "timed"]
        if timed:
            result.regressions.append(f"bench {rel}: gone from the new bundle ({len(timed)} timed point(s) in the old one)")
    for rel in sorted(set(new) - set(old)):
        result.changes.append(f"bench {rel}: only in the new bundle")


def _pair_checks(old: dict[str, Summary], new: dict[str, Summary]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(old label, new label) pairs by ``check_key``; then, by label, checks that record no inputs; and the leftovers."""
    by_key: dict[tuple, str] = {}
    for label, summary in new.items():
        key = check_key(summary)
        if key is not None:
            by_key.setdefault(key, label)
    pairs, left_old = [], []
    taken = set()
    for label, summary in old.items():
        key = check_key(summary)
        match = by_key.get(key) if key is not None else None
        if match is not None and match not in taken:
            pairs.append((label, match))
            taken.add(match)
        else:
            left_old.append(label)
    left_new = [n for n in new if n not in taken]
    for label in list(left_old):  # a check that did not run records no inputs: it can only pair by its name
        if label in left_new and (check_key(old[label]) is None or check_key(new[label]) is None):
            pairs.append((label, label))
            left_old.remove(label)
            left_new.remove(label)
    return pairs, left_old, left_new


def _shown(label: str, summary: Summary) -> str:
    return f"{label} [{_inputs_text(summary)}]"


def diff_bundles(old: Bundle, new: Bundle, *, latency_threshold: float = DEFAULT_LATENCY_THRESHOLD) -> DiffResult:
    result = DiffResult(old.source, new.source)
    pairs, left_old, left_new = _pair_checks(old.checks, new.checks)
    result.paired = len(pairs)
    for o_label, n_label in pairs:
        label = n_label if o_label == n_label else f"{o_label} -> {n_label}"
        _diff_check(label, old.checks[o_label], new.checks[n_label], result)
    for label in left_old:
        summary = old.checks[label]
        status = summary.status.value
        same_name = new.checks.get(label)
        where = (f"; the new bundle checked {label} with other inputs ({_key_difference(summary, same_name)}), status "
                 f"{same_name.status.value}" if same_name is not None else "; no check of that name either")  # fmt: skip
        line = f"{_shown(label, summary)}: unpaired: only in the old bundle ({status}){where}"
        result.unpaired.append(line)
        (result.regressions if status_regressed(status, "missing") else result.changes).append(
            f"{_shown(label, summary)}: status {status} -> missing: unpaired, no check of the same candidate, contract and inputs in the new bundle{where}")  # fmt: skip
    for label in left_new:
        summary = new.checks[label]
        status = summary.status.value
        line = f"{_shown(label, summary)}: unpaired: only in the new bundle ({status})"
        result.unpaired.append(line)
        if STATUS_RANK.get(str(status), _WORST) > STATUS_RANK["pass"] and status != "unavailable":
            result.regressions.append(f"{line}: nothing to compare it against, and it did not pass")
        else:
            result.changes.append(line)
    if old.checks and new.checks and not pairs:
        result.nothing_pairs = True
        result.regressions.insert(0, f"nothing pairs: none of the {len(new.checks)} check(s) of the new bundle has the candidate, "
                                     f"contract and inputs of one of the {len(old.checks)} in the old bundle (unpaired: "
                                     f"{', '.join(left_old + left_new)})")  # fmt: skip
    _diff_probes(old.probes, new.probes, result)
    _diff_benches(old.benches, new.benches, latency_threshold, result)
    return result
