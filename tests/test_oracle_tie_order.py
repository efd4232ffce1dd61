"""Tie-order tests of the oracle (``pytest -k tie_order`` selects them)."""

import pytest
import torch

import oracle

from reference import LANE_RANK_FROM_SPEC, aiter_priority

E, K = 896, 16


def _route(scores, contract, topk=K, bias=None):
    bias = torch.zeros(scores.shape[1]) if bias is None else bias
    return oracle.route(scores, bias, topk, contract=contract)[1]


def _simulate_aiter_wave_reduction(active_lanes):
    """Winner lane of aiter's six-stage DPP argmax when ``active_lanes`` hold equal maxima."""
    value = [(1 if lane in active_lanes else 0, lane) for lane in range(64)]

    def stage(source, rows=None):
        nonlocal value
        moved = list(value)
        for lane in range(64):
            if rows is None or lane // 16 in rows:
                if value[source(lane)][0] > value[lane][0]:  # strictly greater replaces; ties keep local
                    moved[lane] = value[source(lane)]
        value = moved

    stage(lambda i: (i & ~3) | (1, 0, 3, 2)[i & 3])  # quad_perm [1,0,3,2]
    stage(lambda i: (i & ~3) | (2, 3, 0, 1)[i & 3])  # quad_perm [2,3,0,1]
    stage(lambda i: (i & ~7) | (7 - (i & 7)))  # row_half_mirror
    stage(lambda i: (i & ~15) | (15 - (i & 15)))  # row_mirror
    stage(lambda i: 16 * (i // 16) - 1, rows=(1, 3))  # row_bcast:15
    stage(lambda i: 31, rows=(2, 3))  # row_bcast:31
    return value[63][1]


def test_tie_order_lane_table_follows_from_dpp_schedule():
    remaining, order = set(range(64)), []
    while remaining:
        lane = _simulate_aiter_wave_reduction(remaining)
        order.append(lane)
        remaining.remove(lane)
    derived = [order.index(lane) for lane in range(64)]
    assert derived == LANE_RANK_FROM_SPEC == list(oracle.LANE_RANK)


def test_tie_order_dpp_winner_is_lowest_rank_on_random_subsets():
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        subset = set(torch.randperm(64, generator=gen)[: int(torch.randint(1, 64, (1,), generator=gen))].tolist())
        assert _simulate_aiter_wave_reduction(subset) == min(subset, key=lambda lane: oracle.LANE_RANK[lane])


def test_tie_order_aiter_priority_closed_form_for_896():
    prio = oracle.tie_priority(E, "aiter").tolist()
    for e in range(E):
        vec, rank = e >> 2, oracle.LANE_RANK[(e >> 2) & 63]
        bank = vec >> 6
        vec_rank = rank * 3 + bank if rank < 32 else 96 + (rank - 32) * 4 + bank
        assert prio[e] == vec_rank * 4 + (e & 3)


@pytest.mark.parametrize("experts", [1, 3, 4, 7, 64, 224, 255, 256, 257, 384, 896, 1000])
def test_tie_order_priority_is_a_permutation_for_any_e(experts):
    for rule in oracle.TIE_RULES:
        prio = oracle.tie_priority(experts, rule)
        assert sorted(prio.tolist()) == list(range(experts))
    assert oracle.tie_priority(experts, "aiter").tolist() == aiter_priority(experts)


def test_tie_order_all_equal_row_aiter():
    ids = _route(torch.zeros(2, E), "aiter")
    assert ids[0, :5].tolist() == [252, 253, 254, 255, 508]
    assert ids[0].tolist() == oracle.tie_order(E, "aiter")[:K].tolist()
    assert torch.equal(ids[0], ids[1])


def test_tie_order_all_equal_row_serial():
    ids = _route(torch.zeros(1, E), "serial")
    assert ids[0].tolist() == list(range(K))


@pytest.mark.parametrize("contract", ["aiter", "serial"])
@pytest.mark.parametrize("pool", [17, 64, 896])
def test_tie_order_pool_straddles_cutoff(contract, pool):
    gen = torch.Generator().manual_seed(pool)
    above = 5 if pool < E else 0  # experts strictly above the tie value
    members = torch.randperm(E, generator=gen)
    scores = torch.full((1, E), -3.0)
    scores[0, members[:above]] = torch.linspace(3.0, 2.0, above) if above else scores[0, members[:0]]
    tied = members[above : above + pool]
    scores[0, tied] = 1.0
    ids = _route(scores, contract)[0].tolist()
    rule = oracle.get_contract(contract).tie_rule
    prio = oracle.tie_priority(E, rule)
    expected_tied = sorted(tied.tolist(), key=lambda e: int(prio[e]))[: K - above]
    assert ids[:above] == members[:above].tolist()
    assert ids[above:] == expected_tied


@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_tie_order_pool_entirely_above_cutoff(contract):
    scores = torch.full((1, E), -3.0)
    tied = [900 % E, 17, 300, 301, 508, 640]
    scores[0, tied] = 2.0
    scores[0, [5, 6, 7]] = 5.0
    ids = _route(scores, contract, topk=K)[0].tolist()
    prio = oracle.tie_priority(E, oracle.get_contract(contract).tie_rule)
    assert ids[:3] == sorted([5, 6, 7], key=lambda e: int(prio[e]))
    assert ids[3:9] == sorted(tied, key=lambda e: int(prio[e]))


def test_tie_order_bf16_quantized_ties_are_exact_in_ranking():
    # Two logits that round to the same bf16 value tie exactly after sigmoid.
    scores = torch.full((1, E), -4.0, dtype=torch.bfloat16)
    scores[0, 10] = 1.001
    scores[0, 700] = 1.002
    assert scores[0, 10] == scores[0, 700]
    ids = _route(scores, "aiter", topk=1)[0].tolist()
    prio = oracle.tie_priority(E, "aiter")
    assert ids == [10 if prio[10] < prio[700] else 700]


def test_tie_order_rows_are_independent_of_batch_position():
    gen = torch.Generator().manual_seed(5)
    base = torch.randint(-2, 3, (1, E), generator=gen).float()
    batch = torch.randn(300, E, generator=gen)
    batch[137] = base
    alone = _route(base, "aiter")
    assert torch.equal(_route(batch, "aiter")[137], alone[0])
