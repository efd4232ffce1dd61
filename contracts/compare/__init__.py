"""Compare: a candidate's answer against the expected one, row by row, clause by clause.

- ``expected``: the oracle's answer and the values it ranked;
- ``tolerance``: ULP distances and the contract's weight tolerance;
- ``attribution``: which clause a mismatched row breaks;
- ``verdicts``: one case's comparison (``compare_case``) into counts,
  mismatch cells and row examples.
"""

from .expected import Expected, agrees, expected_for
from .tolerance import ulp_distance, weights_close
from .verdicts import DETAILS_PER_CLAUSE, VERDICTS, CaseOutcome, compare_case

__all__ = ["DETAILS_PER_CLAUSE", "VERDICTS", "CaseOutcome", "Expected", "agrees", "compare_case", "expected_for", "ulp_distance", "weights_close"]
