"""Where radix4's warps wait: ncu's per-instruction stall samples, summarized.

Reads the per-launch SASS tables that benchmarks/h200_radix4_profile.sh
exports (``ncu --page source --print-source sass --csv``, one CSV per
launch, packed in ncu-source.tgz) and prints, for each launch:

- every sampled column's total (ncu names its stall-reason columns; the
  script takes whichever numeric columns it finds, so a new ncu's names
  still show);
- the samples in each tenth of the kernel's instructions (program order,
  which for radix4 is close to step order: keys, bound, copy, rank, write);
- the instructions with the most samples, with their nonzero columns.

Run: ``python kernels/radix4/lab/radix4_stall_sites.py ncu-source.tgz [--top 40]`` (no GPU needed).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import tarfile
from pathlib import Path


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_tables(path: Path) -> dict[str, list[dict[str, str]]]:
    """CSV member name -> its rows (ncu's warnings before the header are skipped)."""
    tables = {}
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith(".csv"):
                continue
            text = tar.extractfile(member).read().decode("utf-8", "replace")
            lines = text.splitlines()
            start = next((i for i, line in enumerate(lines) if line.startswith('"Address"') or line.startswith('"#')), None)
            if start is None:
                start = next((i for i, line in enumerate(lines) if line.count('","') > 3), None)
            if start is None:
                print(f"{member.name}: no table found (first line: {lines[0][:120] if lines else 'empty'})")
                continue
            tables[member.name] = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return tables


def summarize(name: str, rows: list[dict[str, str]], top: int) -> None:
    if not rows:
        print(f"\n{name}: empty")
        return
    columns = list(rows[0].keys())
    source = next((c for c in columns if c.lower() == "source"), columns[1] if len(columns) > 1 else columns[0])
    numeric = [c for c in columns if c != source and any(_number(r.get(c) or "") not in (None, 0.0) for r in rows[:2000])]
    samples = next((c for c in numeric if "All Samples" in c), next((c for c in numeric if "Sampl" in c), None))
    print(f"\n{name}: {len(rows)} instructions; columns with data: {numeric}")
    totals = {c: sum(_number(r.get(c) or "") or 0.0 for r in rows) for c in numeric}
    print("  totals: " + ", ".join(f"{c} {v:,.0f}" for c, v in totals.items()))
    if samples is None:
        print("  no sample column found")
        return
    values = [_number(r.get(samples) or "") or 0.0 for r in rows]
    all_samples = sum(values) or 1.0
    tenth = max(1, len(rows) // 10)
    print(f"  {samples} by tenth of the code: " + "  ".join(
        f"{i // tenth}:{sum(values[i:i + tenth]) / all_samples:5.1%}" for i in range(0, len(rows), tenth)))  # fmt: skip
    order = sorted(range(len(rows)), key=lambda i: values[i], reverse=True)[:top]
    print(f"  top {top} instructions by {samples} (index, share, text, other nonzero columns):")
    for i in sorted(order):
        r = rows[i]
        extra = ", ".join(f"{c}={r[c]}" for c in numeric if c != samples and _number(r.get(c) or "") not in (None, 0.0))
        print(f"  {i:5d} {values[i] / all_samples:5.1%}  {r[source].strip()[:60]:60s}  {extra[:200]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tgz", type=Path, help="ncu-source.tgz from benchmarks/h200_radix4_profile.sh")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    if not args.tgz.is_file():
        print(f"{args.tgz}: no such file; give the ncu-source.tgz that h200_radix4_profile.sh wrote", file=sys.stderr)
        return 2
    for name, rows in read_tables(args.tgz).items():
        summarize(name, rows, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
