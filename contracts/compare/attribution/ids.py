"""The ids aspect: the candidate's experts against the expected ones, one clause per row.

The readings run in this order, a row keeping the first clause that explains it (``Assignment``):

1. grouped contracts: the contract's own rule within other groups (``groups.read_other_groups``);
2. the special values (``nan_last``, ``sentinel_fallback``), then a group tie resolved another way
   (``group_tie_order``, judged with the experts within the groups kept: ``within_tied_groups``) and a leak
   (``group_mask``);
3. the row whole at the expected cutoff: ``signed_zero``, an exact tie broken against the rule (``tie_order``),
   or a near tie (no failure);
4. a group tie at the cutoff the router kept none of the experts of, another group kept in its place
   (``group_selection``), then ``selection`` or ``output_order`` (each also read as a flush of subnormals).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

import oracle
from oracle import Contract

from ..group_ties import masked_outside, tie_resolution
from .clauses import (
    INDEX, NEAR_TIE, NONE, R_GROUP_SELECTION, R_GROUP_TIE, R_NAN_ORDER, R_NAN_OVER_NUMBER, R_NAN_TAKEN, R_NEAR_SET,
    R_NEAR_ULP, R_NUMBER_OVER_NAN, R_ORDER, R_ORDER_FTZ, R_ROUND_INDEX, R_SELECTION, R_SELECTION_FTZ, R_SENTINEL,
    R_SIGNED_ZERO, R_TIE_ORDER, R_TIE_SET,
)  # fmt: skip
from .groups import read_group_leak, read_other_groups
from .rows import Assignment, BadRows, at, contract_keys, same_ids, select_under, unmatched
from .ties import exact_pairs, flush_to_zero_alternative, minus_zeros, near_pairs, near_to, sign_explains

__all__ = ["IdsAspect", "aiter_round_index_rows", "ids_aspect"]


@dataclass(frozen=True)
class IdsAspect:
    """The ids aspect of each row, [B] each but ``freed``."""

    clause: torch.Tensor  # clause index, NONE, or NEAR_TIE
    code: torch.Tensor
    first_differing_slot: torch.Tensor  # -1 where the ids are equal slot by slot
    # [B, k]: the slots whose expert the clause found (nan_last's round index) leaves free, for the row-whole check
    freed: torch.Tensor
    # where the clause is a group tie resolved another way, what the router's experts break within the groups it kept
    # (``within_tied_groups``; NONE elsewhere)
    within_clause: torch.Tensor
    within_code: torch.Tensor


@dataclass(frozen=True)
class _Differences:
    """The candidate's row against the expected one, as multisets (the fallback repeats expert 0) and slot by slot."""

    extra: torch.Tensor  # [B, k] the candidate's slots the expected row lacks
    missing: torch.Tensor  # [B, k] the expected slots the candidate lacks
    same_set: torch.Tensor  # [B]
    expected_keys: torch.Tensor  # [B, k] rank keys of the expected experts
    actual_keys: torch.Tensor  # [B, k] ... of the candidate's
    expected_nan: torch.Tensor  # [B, k] the expected expert's key is NaN's
    actual_nan: torch.Tensor  # [B, k]
    slots: torch.Tensor  # [k] 0, 1, ..., k - 1
    differing: torch.Tensor  # [B, k] the slots whose ids differ
    order_matters: bool  # the contract's output order is not ``any``


@dataclass(frozen=True)
class _TiedGroups:
    """``within_tied_groups``' reading, [B] each: the rows it explains, and the clause of their experts."""

    rows: torch.Tensor  # bool
    clause: torch.Tensor  # NONE where the experts are the contract's choice within those groups, or a near tie of it
    code: torch.Tensor

    @staticmethod
    def none(like: torch.Tensor) -> "_TiedGroups":
        clause = torch.full(like.shape, NONE, dtype=torch.long, device=like.device)
        return _TiedGroups(torch.zeros_like(like, dtype=torch.bool), clause, torch.zeros_like(clause))


def _differences(rows: BadRows, contract: Contract) -> _Differences:
    expected, actual = rows.expected_ids, rows.actual_ids
    extra, missing = unmatched(actual, expected), unmatched(expected, actual)
    expected_keys, actual_keys = at(rows.keys, expected), at(rows.keys, actual)
    return _Differences(
        extra=extra, missing=missing, same_set=~extra.any(1), expected_keys=expected_keys, actual_keys=actual_keys,
        expected_nan=expected_keys == oracle.NAN_KEY, actual_nan=actual_keys == oracle.NAN_KEY,
        slots=torch.arange(expected.shape[1], device=expected.device), differing=expected != actual,
        order_matters=contract.output_order != "any",
    )  # fmt: skip


def ids_aspect(rows: BadRows, contract: Contract, differs: torch.Tensor, invalid: torch.Tensor, *,
               groups_settled: bool = False) -> IdsAspect:  # fmt: skip
    """The ids aspect of the rows that ``differ`` and are not ``invalid`` ([B] bool each). ``groups_settled``: the
    rows' groups are the ones to judge the experts in (no group clause is tried)."""
    diff = _differences(rows, contract)
    assignment = Assignment(differs & ~invalid)
    first_slot = torch.where(diff.differing.any(1), diff.differing.float().argmax(1), torch.full_like(assignment.clause, -1))
    grouped = rows.kept is not None and not groups_settled
    # groups: a choice the contract's own rule gives within other groups (group scores, group ties, the mask value)
    # before the special values, which would otherwise take the blame for an expert of another group
    replaced = read_other_groups(rows, contract, assignment, diff.extra) if grouped else None
    within = _TiedGroups.none(assignment.todo)
    tie_read_first = grouped and contract.nan_rule == "first"
    if tie_read_first:
        within = _read_group_tie_before_the_nan_rule(rows, contract, assignment, diff)
    freed = _read_special_values(rows, contract, assignment, diff)
    if grouped:
        if not tie_read_first:
            # groups that tie the kept ones, kept in their place: the group tie rule's, and the experts judged there
            within = _read_group_tie(rows, contract, assignment, diff)
        read_group_leak(rows, assignment, diff.extra)
    _read_ties(rows, contract, assignment, diff, first_slot)
    if grouped and bool((assignment.todo & ~diff.same_set).any()):
        within = _read_group_tie_with_none_of_its_experts(rows, contract, assignment, diff, within)
    if grouped and replaced is not None:
        assignment.assign(replaced, "group_selection", R_GROUP_SELECTION)
    _read_selection(rows, contract, assignment, diff)
    return IdsAspect(assignment.clause, assignment.code, first_slot, freed, within.clause, within.code)


# ---------------------------------------------------------------- the special values


def _read_special_values(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences) -> torch.Tensor:
    """``nan_last`` by the contract's NaN rule, then ``sentinel_fallback``: slots beyond the values that beat the
    floor. Returns the slots freed by aiter's round index ([B, k]; none but under nan_rule "last")."""
    freed = torch.zeros_like(diff.extra)
    if contract.nan_rule == "last":
        freed = _aiter_round_index_slots(rows, diff)
        assignment.assign(freed.any(1), "nan_last", R_ROUND_INDEX)
        _read_nan_last(rows, assignment, diff)
    elif contract.nan_rule == "never":
        assignment.assign((diff.extra & diff.actual_nan).any(1), "nan_last", R_NAN_TAKEN)
    else:
        _read_nan_first(rows, assignment, diff)
    if contract.has_fallback:
        beyond_valid = diff.differing & (diff.slots >= rows.valid.unsqueeze(1))
        assignment.assign(beyond_valid.any(1), "sentinel_fallback", R_SENTINEL)
    return freed


def _aiter_round_index_slots(rows: BadRows, diff: _Differences) -> torch.Tensor:
    """bool [B, k]: slots where the candidate's id is the slot's own index in place of a NaN or -inf expert, in the
    slots past the values above -inf: aiter's round index, which stands in a slot only once those values have run
    out (``tests/test_aiter_model_deviations.py::test_round_index_appears_as_the_expert_id``)."""
    minus_inf_expected = at(rows.ranking, rows.expected_ids) == -math.inf
    numbers = (~torch.isnan(rows.selection) & (rows.selection > -math.inf)).sum(1, keepdim=True)
    round_index = (rows.actual_ids == diff.slots) & (diff.slots >= numbers) & (rows.expected_ids != diff.slots)
    return round_index & diff.extra & (diff.expected_nan | minus_inf_expected)


def aiter_round_index_rows(rows: BadRows, invalid: torch.Tensor) -> torch.Tensor:
    """bool [B]: ``invalid`` rows whose repeated id is aiter's round index (the slot's own index where the contract
    has a NaN or -inf expert): the NaN rule broke, not validity, which aiter-model could not declare
    (``tests/test_aiter_model_deviations.py::test_family_triggers_its_deviation[nan_dense-nan_last]`` and
    ``test_aiter_model_fails_only_where_rsf_over_sum_overflows``)."""
    actual, expected = rows.actual_ids, rows.expected_ids
    own_index = (actual == torch.arange(actual.shape[1], device=actual.device)) & (expected != actual)
    nan_or_minus_inf = (at(rows.keys, expected) == oracle.NAN_KEY) | (at(rows.ranking, expected) == -math.inf)
    return invalid & (own_index & nan_or_minus_inf).any(1)


def _read_nan_last(rows: BadRows, assignment: Assignment, diff: _Differences) -> None:
    """nan_rule "last": a NaN expert chosen over a number, or NaN slots in another order than the contract's."""
    assignment.assign((diff.extra & diff.actual_nan).any(1) & (diff.missing & ~diff.expected_nan).any(1), "nan_last", R_NAN_OVER_NUMBER)
    if diff.order_matters:
        numbers = (~torch.isnan(rows.selection)).sum(1)
        assignment.assign((diff.differing & (diff.slots >= numbers.unsqueeze(1))).any(1), "nan_last", R_NAN_ORDER)
    else:  # a set: other NaN experts fill the slots numbers cannot
        assignment.assign((diff.extra & diff.actual_nan).any(1) & (diff.missing & diff.expected_nan).any(1), "nan_last", R_NAN_ORDER)


def _read_nan_first(rows: BadRows, assignment: Assignment, diff: _Differences) -> None:
    """nan_rule "first": a number taken over a NaN expert. An extra NaN of a group the contract drops is no number (the
    selection keys mask it as -inf), it is the group clauses' (NaN group scores tie at the top)."""
    number_actual = ~torch.isnan(at(rows.ranking, rows.actual_ids))
    took_a_number = (diff.extra & ~diff.actual_nan & number_actual).any(1)
    assignment.assign(took_a_number & (diff.missing & diff.expected_nan).any(1), "nan_last", R_NUMBER_OVER_NAN)


# ---------------------------------------------------------------- group ties, with the experts within the groups kept


def _read_group_tie(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences) -> _TiedGroups:
    """Groups that tie the kept ones, kept in their place: ``group_tie_order``, and the experts judged there."""
    tied = within_tied_groups(rows, contract, assignment.todo, diff.extra)
    assignment.assign(tied.rows, "group_tie_order", R_GROUP_TIE)
    return tied


def _read_group_tie_before_the_nan_rule(rows: BadRows, contract: Contract, assignment: Assignment,
                                        diff: _Differences) -> _TiedGroups:  # fmt: skip
    """Under nan_rule "first" NaN group scores tie one another at the top, and a router that keeps other NaN groups
    takes the numbers of those groups over the NaN experts of the contract's: the group tie is read before the NaN
    clause, which would otherwise blame those numbers. Megatron's group_limited_topk, nan_sparse rows with more NaN
    groups than it keeps (``tests/compare/test_group_ties.py::
    test_nan_group_scores_kept_another_way_are_a_group_tie_under_nan_first``)."""
    return _read_group_tie(rows, contract, assignment, diff)


def _read_group_tie_with_none_of_its_experts(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences,
                                             within: _TiedGroups) -> _TiedGroups:  # fmt: skip
    """Another set, no tie nor near tie within the contract's groups and no expert of a group it drops: did the router
    keep a group that ties the kept ones exactly at the cutoff, in place of a tied one it then took no expert of? The
    experts are then judged within the groups it kept; only here, after the ties within the contract's own groups, so
    a near tie stays a near tie. torch.topk's own order among bf16 group sums that tie: Megatron's group_limited_topk,
    ``bf16_near_ties:619007217:1024`` row 955 under mcore-sigmoid (``tests/compare/test_group_ties.py::
    test_a_tied_group_kept_with_none_of_its_experts_is_a_group_tie``). Returns ``within`` with these rows' reading."""
    todo = assignment.todo
    late = within_tied_groups(rows, contract, todo & ~diff.same_set, diff.extra, unused=True)
    taken = late.rows & todo
    within = _TiedGroups(within.rows, torch.where(taken, late.clause, within.clause), torch.where(taken, late.code, within.code))
    assignment.assign(late.rows, "group_tie_order", R_GROUP_TIE)
    return within


def within_tied_groups(rows: BadRows, contract: Contract, todo: torch.Tensor, extra: torch.Tensor,
                       unused: bool = False) -> _TiedGroups:  # fmt: skip
    """The ``todo`` rows whose groups resolve a group-score tie another way than the contract
    (``group_ties.tie_resolution``), and the ids aspect of their experts against the contract's choice within the
    groups that resolution keeps; ``extra`` [B, k]: the router's experts the contract does not choose. ``unused``: the
    resolutions that keep another tied group in place of a tied one the contract keeps and the router took no expert
    of (``tie_resolution``'s ``unused``)."""
    reading = _TiedGroups.none(todo)
    if not bool(todo.any()):
        return reading
    resolves, groups = tie_resolution(rows.actual_ids, extra, rows.ranking, rows.kept, rows.group_scores, contract.topk_group,
                                      contract.group_mask, nan_first=contract.nan_rule == "first", unused=unused)  # fmt: skip
    sub = (todo & resolves).nonzero().squeeze(1)
    if sub.numel() == 0:
        return reading
    kept = groups.index_select(0, sub)
    subset = rows.subset(sub)
    selection = masked_outside(subset.ranking, kept, contract.group_mask)
    expected = select_under(selection, subset.expected_ids.shape[1], contract.replace(n_group=1, topk_group=1))
    subset = dataclasses.replace(subset, expected_ids=expected, selection=selection, keys=oracle.rank_keys(selection.contiguous()),
                                 kept=kept)  # fmt: skip
    differs = ~same_ids(expected, subset.actual_ids, contract)
    inner = ids_aspect(subset, contract, differs, torch.zeros_like(differs), groups_settled=True)
    failing = inner.clause >= 0  # a near tie (NEAR_TIE) or the contract's own choice there (NONE) adds no clause
    explained = ~failing | _only_a_tie_rule_broken(inner.clause)
    reading.rows[sub] = explained
    reading.clause[sub] = torch.where(failing & explained, inner.clause, reading.clause[sub])
    reading.code[sub] = torch.where(failing & explained, inner.code, reading.code[sub])
    return reading


_TIE_CLAUSES = torch.tensor([INDEX[name] for name in ("tie_order", "nan_last", "signed_zero")])


def _only_a_tie_rule_broken(inner_clause: torch.Tensor) -> torch.Tensor:
    """bool [B]: the experts within the groups a tie resolution keeps break a tie rule at most. Other experts there
    (selection) mean the groups were not a tie's resolution but something else, so such a row goes on to the group
    clauses: lmdeploy's 0.0 mask in a few_valid row of -inf groups took experts that rank below the kept groups' own,
    group_mask as before this reading (``tests/compare/test_group_ties.py::
    test_a_zero_mask_leak_among_groups_tied_at_the_cutoff_stays_group_mask``)."""
    return torch.isin(inner_clause, _TIE_CLAUSES.to(inner_clause.device))


# ---------------------------------------------------------------- the row whole: exact ties, near ties, signed zeros


@dataclass(frozen=True)
class _RowWhole:
    """Whether a row's difference can be a tie at all, and the pairs of extra and missing experts that tie."""

    # [B]: every expert the candidate has over and every one it lacks sits at the expected cutoff, on its key or
    # within both scores' error bounds of its value; a dropped top-1 expert, or a repeat in place of a chosen one, is
    # a selection whatever else holds
    whole: torch.Tensor
    relevant: torch.Tensor  # [B, k (actual), k (expected)]: an extra expert against a missing one
    near_or_equal: torch.Tensor  # [B, k, k]: ... that is a near pair or of an equal key


def _row_whole(rows: BadRows, contract: Contract, diff: _Differences) -> _RowWhole:
    keys = contract_keys(rows, contract)
    expected_keys, actual_keys = at(keys, rows.expected_ids), at(keys, rows.actual_ids)
    counted = diff.slots < rows.valid.unsqueeze(1)  # the expected slots filled by an eligible expert
    cut_slot = torch.where(counted, expected_keys, torch.full_like(expected_keys, 1 << 62)).argmin(1, keepdim=True)
    cut, cut_expert = expected_keys.gather(1, cut_slot), rows.expected_ids.gather(1, cut_slot)
    relevant = diff.extra.unsqueeze(2) & diff.missing.unsqueeze(1)
    near = near_pairs(rows, contract, rows.actual_ids.unsqueeze(2), rows.expected_ids.unsqueeze(1))
    near_or_equal = (near | (diff.actual_keys.unsqueeze(2) == diff.expected_keys.unsqueeze(1))) & relevant
    # (a near pair across the cutoff also counts: two faithful roundings may differ from the oracle's cutoff value
    # by more than the cutoff expert's own bound; each side of the swap must still have its own partner)
    ok_actual = ~diff.extra | (actual_keys == cut) | near_to(rows, contract, rows.actual_ids, cut_expert) | near_or_equal.any(2)
    ok_expected = ~diff.missing | (expected_keys == cut) | near_to(rows, contract, rows.expected_ids, cut_expert) | near_or_equal.any(1)
    return _RowWhole(ok_actual.all(1) & ok_expected.all(1) & (rows.valid > 0), relevant, near_or_equal)


def _read_ties(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences, first_slot: torch.Tensor) -> None:
    """``signed_zero``, then an exact tie broken against the rule (``tie_order``, even beside near ties), then a near
    tie alone (``NEAR_TIE``, no failure), for sets (another set at the cutoff) and orders (the same set)."""
    whole = _row_whole(rows, contract, diff)
    pair_exact = exact_pairs(rows, rows.actual_ids.unsqueeze(2), rows.expected_ids.unsqueeze(1), contract) & whole.relevant
    pair_near = whole.near_or_equal & ~pair_exact
    extra_exact, extra_near = pair_exact.any(2), pair_near.any(2)
    set_explained = whole.whole & (~diff.extra | extra_exact | extra_near).all(1)
    set_near = whole.whole & (~diff.extra | extra_near).all(1)
    order_explained, order_near = _order_ties(rows, contract, diff)
    _read_signed_zero(rows, contract, assignment, diff, whole, first_slot)
    order = diff.same_set & diff.order_matters
    assignment.assign(~diff.same_set & set_explained & ~set_near, "tie_order", R_TIE_SET)
    assignment.assign(order & order_explained & ~order_near, "tie_order", R_TIE_ORDER)
    assignment.assign(~diff.same_set & set_near, NEAR_TIE, R_NEAR_SET)
    assignment.assign(order & order_near, NEAR_TIE, R_NEAR_ULP)


def _order_ties(rows: BadRows, contract: Contract, diff: _Differences) -> tuple[torch.Tensor, torch.Tensor]:
    """(explained, near) [B]: the same set in another order, read over the pairs of experts whose relative order differs
    from the expected one: every such pair an exact or near tie; only near-tied pairs swapped (an expert moved past two
    exactly tied ones that kept their order, a near tie)."""
    slots = diff.slots
    # slot of each actual expert in the expected list
    where = (rows.actual_ids.unsqueeze(2) == rows.expected_ids.unsqueeze(1)).float().argmax(2)
    inverted = (slots.view(1, -1, 1) < slots.view(1, 1, -1)) & (where.unsqueeze(2) > where.unsqueeze(1))
    first, second = rows.actual_ids.unsqueeze(2), rows.actual_ids.unsqueeze(1)
    inverted_exact = inverted & exact_pairs(rows, first, second, contract)
    equal_keys = diff.actual_keys.unsqueeze(2) == diff.actual_keys.unsqueeze(1)
    inverted_near = inverted & (near_pairs(rows, contract, first, second) | equal_keys) & ~inverted_exact
    return (~inverted | inverted_exact | inverted_near).all(2).all(1), (~inverted | inverted_near).all(2).all(1)


def _read_signed_zero(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences, whole: _RowWhole,
                      first_slot: torch.Tensor) -> None:  # fmt: skip
    """signed_zero: where ranking values -0.0 and +0.0 tie (a contract that ranks logits, gpt-oss; the sigmoid
    contracts never rank a -0.0), the answer is what ranking them apart gives, and no plain tie rule gives it. Before
    tie_order: a router that declares its tie order must not hide a sign bug behind it. Sets: the chosen members of
    the expected cutoff's tie group; orders: the expert put at the first differing slot, out of the same-key experts
    placed from there on."""
    negative = minus_zeros(rows).bool()
    zero = rows.selection == 0
    mixed = (zero & negative).any(1) & (zero & ~negative).any(1)
    if not bool((assignment.todo & mixed).any()):
        return
    actual, slots = rows.actual_ids, diff.slots
    first = first_slot.clamp(min=0).unsqueeze(1)
    at_first = actual.gather(1, first)
    chosen = torch.zeros_like(zero).scatter_(1, actual, True)
    cutoff = at(rows.keys, rows.expected_ids).amin(1, keepdim=True)  # a set differs at the expected cutoff's tie group
    group = (rows.keys == cutoff) & zero
    by_set = whole.whole & (~diff.extra | at(zero, actual)).all(1) & sign_explains(rows, contract, chosen, group)
    later = torch.zeros_like(zero).scatter_(1, actual, (slots >= first).expand_as(actual))
    placed = torch.zeros_like(zero).scatter_(1, at_first, True)
    by_order = at(zero, at_first).squeeze(1) & sign_explains(rows, contract, placed, later & zero)
    assignment.assign(mixed & torch.where(diff.same_set, diff.order_matters & by_order, by_set), "signed_zero", R_SIGNED_ZERO)


# ---------------------------------------------------------------- what is left: another set, another order


def _read_selection(rows: BadRows, contract: Contract, assignment: Assignment, diff: _Differences) -> None:
    """``selection`` (another set) or ``output_order`` (the same set in another order; never for contracts whose order
    is ``any``), each first as what a router flushing subnormal ranking values to zero gives."""
    k = rows.expected_ids.shape[1]
    flushed = flush_to_zero_alternative(rows, contract, k) if bool(assignment.todo.any()) else None
    flushed_match = same_ids(flushed, rows.actual_ids, contract) if flushed is not None else torch.zeros_like(assignment.todo)
    assignment.assign(~diff.same_set & flushed_match, "selection", R_SELECTION_FTZ)
    assignment.assign(~diff.same_set, "selection", R_SELECTION)
    if diff.order_matters:
        assignment.assign(diff.same_set & flushed_match, "output_order", R_ORDER_FTZ)
        assignment.assign(diff.same_set, "output_order", R_ORDER)
