"""radix4's launch-shape switch points: the Python data (read by the case plans) equals what the C entry does."""

from __future__ import annotations

import re

import pytest

import kernels.radix4 as radix4

ENTRY = radix4.HERE / "radix4_entry.h"


def _header_points() -> dict[tuple[int, int], tuple[int, int]]:
    text = ENTRY.read_text()
    found: dict[tuple[int, int], dict[str, int]] = {}
    for which, e, k, value in re.findall(r"#define RADIX4_FIRST_(WARP|DENSE)_ROWS_(\d+)_(\d+) (\d+)\n", text):
        found.setdefault((int(e), int(k)), {})[which] = int(value)
    return {shape: (v["WARP"], v["DENSE"]) for shape, v in found.items()}


def test_every_kimi_shape_has_switch_points_equal_to_the_c_entrys():
    # The model shapes have none: a warp per token at every batch (radix4_entry.h's switch_points).
    assert set(radix4.BATCH_SWITCH_POINTS) == set(radix4.KIMI_SHAPES)
    assert _header_points() == radix4.BATCH_SWITCH_POINTS
    assert all(radix4.launch_shape_for(m, *shape) == "warp" for shape in radix4.SHAPES - radix4.KIMI_SHAPES for m in (1, 4096))


@pytest.mark.parametrize("shape", sorted(radix4.KIMI_SHAPES))
def test_switch_points_are_ordered_batch_sizes(shape):
    first_warp, first_dense = radix4.BATCH_SWITCH_POINTS[shape]
    assert 1 <= first_warp <= first_dense, "switch points are batch sizes, the warp shape before the dense one"


@pytest.mark.parametrize("shape", sorted(radix4.KIMI_SHAPES))
def test_launch_shape_for_changes_exactly_at_the_switch_points(shape):
    first_warp, first_dense = radix4.BATCH_SWITCH_POINTS[shape]
    taken = [radix4.launch_shape_for(m, *shape) for m in range(1, radix4.MAX_ROWS + 1)]
    changes = [m for m in range(2, radix4.MAX_ROWS + 1) if taken[m - 1] != taken[m - 2]]
    assert changes == sorted({m for m in (first_warp, first_dense) if 2 <= m <= radix4.MAX_ROWS})
    assert taken[0] == ("block" if first_warp > 1 else "warp" if first_dense > 1 else "dense")
    assert set(taken) <= set(radix4.LAUNCH_SHAPES)


def test_the_model_contracts_switch_points_equal_the_c_entrys():
    """The ungrouped model contracts' block-per-token shapes: the Python data, the header's defines and its list of
    shapes that build the block kernel (RADIX4_MODEL_BLOCK_SHAPES) name the same shapes and batches."""
    text = ENTRY.read_text()
    defined = {(int(e), int(k)): int(v) for e, k, v in re.findall(r"#define RADIX4_MODEL_FIRST_WARP_ROWS_(\d+)_(\d+) (\d+)\n", text)}
    assert defined == radix4.MODEL_BATCH_SWITCH_POINTS
    built = re.search(r"#define RADIX4_MODEL_BLOCK_SHAPES\(X\) (.+)\n", text).group(1)
    assert {(int(e), int(k)) for e, k in re.findall(r"X\((\d+), (\d+)\)", built)} == set(radix4.MODEL_BATCH_SWITCH_POINTS)
    for (e, k), first_warp in radix4.MODEL_BATCH_SWITCH_POINTS.items():
        assert (e, k) in radix4.SHAPES and 1 < first_warp <= radix4.MAX_ROWS
        assert radix4.launch_shape_for(first_warp - 1, e, k, entry="lowest") == "block"
        assert radix4.launch_shape_for(first_warp, e, k, entry="lowest") == "warp"
    assert radix4.launch_shape_for(1, 128, 6, entry="lowest") == "warp"  # one vector a lane: no block kernel
    assert radix4.launch_shape_for(1, 256, 8, entry="grouped") == "block"  # the groups exchange through shared memory
    assert radix4.launch_shape_for(1, 256, 8, entry="serial") == "warp"


def test_the_case_plans_pin_both_sides_of_every_switch_point():
    from contracts.cases.launch_points import switch_points

    for first_warp in radix4.MODEL_BATCH_SWITCH_POINTS.values():
        assert first_warp in switch_points()


def test_each_contracts_published_points_are_where_its_launch_shape_changes():
    # The case plan pins every dtype pair and layout at the first batch of each launch class switch_points_for names
    # (contracts.cases.launch_points.launch_points): a point missing there is a launch shape no pinned pair or layout meets.
    entries = {contract: ("serial" if contract == "serial" else rule.entry)
               for contract, rule in [*radix4.MODEL_RULES.items(), ("serial", None)]}  # fmt: skip
    for contract, entry in entries.items():
        for experts, topk in sorted(radix4._SERVED[entry]):
            shapes = [radix4.launch_shape_for(m, experts, topk, entry=entry) for m in range(1, radix4.MAX_ROWS + 1)]
            changes = tuple(m for m in range(2, radix4.MAX_ROWS + 1) if shapes[m - 1] != shapes[m - 2])
            published = tuple(p for p in radix4.switch_points_for(contract, experts, topk) if 1 < p <= radix4.MAX_ROWS)  # 1: no block class
            assert published == changes, (contract, experts, topk, published, changes)
    assert radix4.switch_points_for("mixtral", 8, 2) == ()  # a contract radix4 does not implement: no launch of its own
