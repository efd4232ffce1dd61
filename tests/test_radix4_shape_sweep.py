"""kernels.radix4.shape_sweep's analysis: the switch points it picks from a sweep, on a synthetic sweep (CPU)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kernels.radix4 import shape_sweep


def _synthetic(tmp_path, *, max_m=400, noise=None, seeds=None):
    """Block best below M = 100, warp from 100 to 299, dense from 300 (lines crossing there), both contracts;
    with ``seeds``, one buffer each (``noise`` then also takes the seed), else a sweep without a seed column."""
    rows = []
    for seed in seeds or (None,):
        for contract in ("aiter", "serial"):
            for m in range(1, max_m + 1):
                for shape, us in (("block", 2.0 + m / 100), ("warp", 2.5 + m / 200), ("dense", 3.25 + m / 400)):
                    lo, hi = shape_sweep.SHAPE_RANGES[shape]
                    if lo <= m <= hi:
                        bump = (noise(m, shape) if seed is None else noise(m, shape, seed)) if noise else 0.0
                        rows.append((contract, 896, 16, *(() if seed is None else (seed,)), m, shape, us + bump))
    path = tmp_path / "sweep.csv"
    columns = ["contract", "experts", "topk", *(() if seeds is None else ("seed",)), "m", "launch_shape", "us"]
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)
    return path


# Each analysis pivots two contracts' curves and draws a matplotlib plot: 5-10 s on this 2-core machine.
@pytest.mark.slow
def test_the_switch_points_are_where_the_best_shape_changes(tmp_path):
    result = shape_sweep.analyse(_synthetic(tmp_path), tmp_path)
    picked = result["shapes"]["896/16"]
    assert (picked["first_warp_m"], picked["first_dense_m"]) in {(100, 300), (101, 300), (100, 301), (101, 301)}
    assert picked["contracts"]["aiter"]["monotone_drop_pct_smoothed"] == 0.0  # each line rises with M
    assert json.loads((tmp_path / "switch_points.json").read_text()) == result
    assert (tmp_path / "sweep-896-16.png").stat().st_size > 0


@pytest.mark.slow  # as above: one analysis with its plot
def test_a_single_outlier_does_not_move_the_points_and_a_fall_is_measured(tmp_path):
    spike = lambda m, shape: 5.0 if (m, shape) == (50, "warp") else (-0.6 if m >= 350 else 0.0)  # noqa: E731
    picked = shape_sweep.analyse(_synthetic(tmp_path, noise=spike), tmp_path)["shapes"]["896/16"]
    assert 95 <= picked["first_warp_m"] <= 105 and 295 <= picked["first_dense_m"] <= 305
    # every shape 0.6 us faster from M = 350: the chosen curve falls there, and the figure says by how much
    assert picked["contracts"]["aiter"]["monotone_drop_pct_smoothed"] == pytest.approx(0.6 / (3.25 + 349 / 400) * 100, abs=1.0)  # smoothing blurs the edge


@pytest.mark.slow  # as above: one analysis with its plot
def test_the_points_come_from_the_mean_over_the_buffers(tmp_path):
    # Buffer 0 holds a slow row from M = 30 on that costs the block shape 1 us; buffer 1 holds none. Read off
    # buffer 1 alone the warp shape would start at 100; on average over both, a batch of 30 or more random rows
    # is faster a warp per token (block 2.8 + M/100 - 0.3 against warp 2.5 + M/200 there).
    slow_row = lambda m, shape, seed: 1.0 if (seed, shape) == (0, "block") and m >= 30 else 0.0  # noqa: E731
    result = shape_sweep.analyse(_synthetic(tmp_path, noise=slow_row, seeds=(0, 1)), tmp_path)
    picked = result["shapes"]["896/16"]
    assert result["seeds"] == [0, 1] and "mean over 2 buffer(s)" in result["smoothing"]
    assert 26 <= picked["first_warp_m"] <= 34 and 295 <= picked["first_dense_m"] <= 305


def test_bad_arguments_exit_with_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        shape_sweep.main(["--out", str(tmp_path), "--max-m", "0", "--analyse", str(tmp_path / "x.csv")])
    assert exc.value.code == 2 and "--max-m" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        shape_sweep.main(["--out", str(tmp_path), "--analyse", str(tmp_path / "missing.csv")])
    assert exc.value.code == 2 and "--analyse" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        shape_sweep.main(["--out", str(tmp_path), "--seeds", "0"])
    assert exc.value.code == 2 and "--seeds" in capsys.readouterr().err
    for bad in ("896x16", "256/8"):  # not E/K; a shape whose launch shape never switches
        with pytest.raises(SystemExit) as exc:
            shape_sweep.main(["--out", str(tmp_path), "--shapes", bad])
        assert exc.value.code == 2 and "--shapes" in capsys.readouterr().err
