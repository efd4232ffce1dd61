"""Which clauses a mismatched row breaks: every aspect checked on every row, vectorized.

A row is looked at in three independent aspects, each naming at most one
clause (the most specific explanation that fits), each in its own module:

1. **validity** (``validity``): ids out of range, an expert twice (but the
   expert-0 fallback of contracts that have one).
2. **ids** (``ids``): the candidate's experts against the expected ones.
   - special values first: NaN chosen over a number, NaN slots in the wrong
     order, NaN chosen at all where the contract never takes it, aiter's
     round index emitted as an id (``nan_last``); slots beyond the values
     that beat the floor (``sentinel_fallback``); beside those, the row
     whole must still hold the top numbers (``row_whole``);
   - grouped contracts (``groups``): experts from a group the contract
     dropped (``group_mask`` when more groups were used than kept, or the
     mask value let a dropped expert through; ``group_selection`` when the
     candidate kept other groups and chose right within them;
     ``group_tie_order`` when those groups tie the kept ones exactly, and
     then its experts are judged within the groups it kept, so an expert tie
     broken there is also ``tie_order``: ``contracts.compare.group_ties``);
   - equal ranking keys (``ties``): an exact tie (equal inputs, both
     saturated, both masked, or an infinite value) broken against the tie
     rule is ``tie_order``; keys that are equal only by rounding, or values
     within both scores' error bounds, are a **near tie** (not a failure);
   - the counterfactuals: the ids a router would give that ranks -0.0 apart
     from +0.0 (``signed_zero``, only when no simpler explanation fits), or
     that flushes subnormal ranking values to zero (named in the reason);
   - otherwise ``selection`` (another set) or ``output_order`` (the same
     set in another order; never for contracts whose order is ``any``).
3. **weights** (``weights``): the candidate's weights against the contract's
   weights *for the candidate's own experts* (matched by expert id), so a
   wrong selection never hides a broken renormalization. Weights that are
   the contract's rounded to a 16-bit dtype (the logits' bf16/fp16, or one
   the candidate's weights all lie in) are a cast, ``weight_accuracy``,
   before any rule is tried; each rule is then also tried rounded, so a rule
   broken in bf16 keeps its name: ``bias_in_weight`` (the weights are built
   from sig + bias), ``renorm_guard`` (a zero or negative sum divided, or no
   renormalization), ``scaling`` (the factor applied twice or not at all),
   else ``weight_accuracy``.

Beside the clauses, how far a row departs from the contract's choice
(``departures``): what a declared bounded clause must bound.

The result is per-row arrays (``Blame``, ``clauses``, with the reason codes);
text is made later, only for the rows a report shows
(``contracts.compare.reasons``). ``blame.attribute`` runs the aspects; the
shared per-row helpers live in ``rows``.
"""

from .blame import attribute
from .clauses import CLAUSE_ORDER, INDEX, NEAR_TIE, NONE, Blame
from .departures import group_departure, selection_departure
from .weights import known_factors

__all__ = ["CLAUSE_ORDER", "INDEX", "NEAR_TIE", "NONE", "Blame", "attribute", "group_departure", "known_factors", "selection_departure"]
