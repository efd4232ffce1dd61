"""What a bundle folder holds: the names of its files, and the errors of reading or writing one.

``contracts.reports.bundle`` reads and writes the files; ``contracts.reports.out_folder`` prepares the ``--out``
folder they go in and replaces a bundle folder whole.
"""

from __future__ import annotations

__all__ = ["BUNDLE_MARKERS", "CELLS_CSV", "CELLS_PARQUET", "DATA_FILES", "DETAILS", "HARNESS_FILES", "INDEX", "MATRIX", "NIGHTLY", "SUMMARY",
           "BundleError", "BundleExistsError", "BundleFileMissing"]  # fmt: skip

SUMMARY, DETAILS, CELLS_PARQUET, CELLS_CSV = "summary.json", "details.json", "mismatches.parquet", "mismatches.csv"
INDEX, NIGHTLY, MATRIX = "index.json", "nightly.json", "matrix.json"
DATA_FILES = (DETAILS, CELLS_PARQUET, CELLS_CSV)  # hashed into summary.json
BUNDLE_MARKERS = (SUMMARY, INDEX, NIGHTLY, MATRIX)

# What the harness writes into an --out (``--force`` removes these and nothing else): bundle files, the
# reports over them, and the temporary folders of an interrupted write.
HARNESS_FILES = frozenset({
    SUMMARY, DETAILS, CELLS_PARQUET, CELLS_CSV, INDEX, NIGHTLY, MATRIX, "report.md", "report.html", "index.md",
    "matrix.png", "matrix.html", "matrix.txt", "junit.xml", "diff.json", "diff.md", "bench.json", "bench.png",
})  # fmt: skip


class BundleError(ValueError):
    """A path that does not hold a readable bundle; the message names the file (and the field)."""


class BundleFileMissing(BundleError, FileNotFoundError):
    """A file a bundle needs is not there."""


class BundleExistsError(BundleError):
    """``--out`` already holds a bundle (or other files) and replacing it was not asked for."""

