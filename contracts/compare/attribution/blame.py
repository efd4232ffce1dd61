"""``attribute``: every aspect of every bad row at once, into one ``Blame``."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch

from oracle import Contract

from ...cases.build import Case
from .clauses import INDEX, NONE, R_ROUND_INDEX, Blame
from .departures import GroupFacts, group_departure, selection_departure
from .ids import IdsAspect, aiter_round_index_rows, ids_aspect
from .row_whole import row_whole_aspect
from .rows import BadRows, unmatched
from .validity import ValidityAspect, validity_aspect
from .weights import weights_aspect

if TYPE_CHECKING:
    from ..expected import Expected, RowValues

__all__ = ["attribute"]


def attribute(case: Case, expected: Expected, values: RowValues, actual_weights: torch.Tensor, actual_ids: torch.Tensor,
              rows: torch.Tensor, contract: Contract, *, out_of_range: torch.Tensor, twice: torch.Tensor,
              ids_equal: torch.Tensor) -> Blame:  # fmt: skip
    """The blame of the ``rows`` (int64 indices into the case) that are not a clean match: the candidate's answer
    ``actual_weights``, ``actual_ids`` [M, k] against ``expected``; ``values`` are the oracle's for those rows;
    ``out_of_range``, ``twice``, ``ids_equal`` [M]: the comparison's masks (``verdicts``)."""
    actual_raw = actual_ids.index_select(0, rows).long()
    bad = _bad_rows(case, expected, values, actual_weights, actual_raw, rows)
    equal = ids_equal.index_select(0, rows)  # [B]
    validity = validity_aspect(contract, actual_raw, bad.valid, out_of_range=out_of_range.index_select(0, rows),
                               twice=twice.index_select(0, rows), ids_equal=equal)  # fmt: skip
    ids = ids_aspect(bad, contract, ~equal, validity.invalid)
    if contract.nan_rule == "last":
        validity, ids = _round_index_is_the_nan_rule(bad, validity, ids, out_of_range.index_select(0, rows))
    row_whole = row_whole_aspect(bad, contract, ids.clause, ids.freed)
    # a group tie resolved another way (ids: group_tie_order): what the experts break within those groups
    within = ids.within_clause >= 0
    core, core_code = torch.where(within, ids.within_clause, row_whole.clause), torch.where(within, ids.within_code, row_whole.code)
    groups = GroupFacts.of(bad)
    same_set = ~unmatched(bad.actual_ids, bad.expected_ids).any(1)
    weights = weights_aspect(bad, contract, case, equal, same_set, validity.invalid)
    return Blame(validity.clause, ids.clause, weights.clause, validity.code, ids.code, weights.code, ids.first_differing_slot,
                 weights.reference, weights.ok, core=core, core_code=core_code, weights2=weights.second_clause,
                 weights2_code=weights.second_code, factor=weights.factor, selection_departure=selection_departure(bad, groups),
                 group_departure=group_departure(bad, contract, groups))  # fmt: skip


def _bad_rows(case: Case, expected: Expected, values: RowValues, actual_weights: torch.Tensor, actual_raw: torch.Tensor,
              rows: torch.Tensor) -> BadRows:  # fmt: skip
    experts = case.scores.shape[1]
    logits = case.scores.index_select(0, rows).float()
    return BadRows(
        expected_ids=expected.ids.index_select(0, rows).long(), actual_ids=actual_raw.clamp(0, experts - 1),
        actual_weights=actual_weights.index_select(0, rows), expected_weights=expected.weights.index_select(0, rows),
        keys=values.keys, selection=values.selection, ranking=values.ranking, scores=values.scores, logits=logits,
        bias=None if case.bias is None else case.bias.float(), logits_max=torch.nan_to_num(logits, nan=-math.inf).amax(1),
        valid=values.valid, kept=values.kept, group_scores=values.group_scores,
    )  # fmt: skip


def _round_index_is_the_nan_rule(rows: BadRows, validity: ValidityAspect, ids: IdsAspect,
                                 out_of_range: torch.Tensor) -> tuple[ValidityAspect, IdsAspect]:  # fmt: skip
    """aiter's round index shows as an id twice: it is the NaN rule that broke (``nan_last``), not validity
    (``ids.aiter_round_index_rows``; an id out of range stays validity)."""
    round_index = aiter_round_index_rows(rows, validity.invalid) & ~out_of_range
    validity = dataclasses.replace(validity, clause=torch.where(round_index, NONE, validity.clause))
    ids = dataclasses.replace(ids, clause=torch.where(round_index, INDEX["nan_last"], ids.clause),
                              code=torch.where(round_index, R_ROUND_INDEX, ids.code))  # fmt: skip
    return validity, ids
