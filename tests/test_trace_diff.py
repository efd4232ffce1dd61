"""trace-diff: a trace pair with known differences, each attributed to the right cause, with exact counts.

Trace A is the oracle's routing of random logits. Trace B starts as the same
and then gets, in known rows of each layer: logits perturbed by a few ULP
that move the cutoff (``logits_differ``), logits perturbed by a few ULP far
from the cutoff (no flip), a router defect (columns reversed: ``router``,
``output_order``, side b) and a near tie broken the other way (``near_tie``).
"""

from __future__ import annotations

import json
import shlex

import pytest
import torch

import oracle
from contracts.commands import main as contracts_main
from contracts.run.trace_diff import TraceError, diff_traces

CONTRACT = "qwen3-moe"
LAYERS, TOKENS, E, K = 2, 300, 64, 8
MOVED, FAR, DEFECT, NEAR = range(0, 40, 4), range(1, 40, 4), range(2, 40, 4), range(3, 40, 4)


def _route(logits: torch.Tensor):
    c = oracle.get_contract(CONTRACT)
    return oracle.route(logits, None, K, renormalize=c.default_renormalize, routed_scaling_factor=c.routed_scaling_factor, contract=c)


def _up(x: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        x = torch.nextafter(x, torch.tensor(float("inf")))
    return x


def _down(x: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        x = torch.nextafter(x, torch.tensor(float("-inf")))
    return x


def build_pair(tmp_path, fmt: str = "safetensors"):
    """(path A, path B, expected causes per layer)."""
    g = torch.Generator().manual_seed(7)
    la = torch.randn(LAYERS, TOKENS, E, generator=g)
    ids_a, w_a, ids_b, w_b, lb = [], [], [], [], la.clone()
    for layer in range(LAYERS):
        x = la[layer]
        order = x.argsort(1, descending=True)
        for r in list(MOVED) + list(NEAR):  # the k-th and (k+1)-th experts 3 ULP (MOVED) or 1 ULP (NEAR) apart, below the k-th
            kth, nxt = order[r, K - 1], order[r, K]
            x[r, nxt] = _down(x[r, kth], 3 if r in MOVED else 1)
        w, ids = _route(x)
        y = lb[layer]
        y.copy_(x)
        for r in MOVED:  # B's logit of the (k+1)-th expert 6 ULP up: above the k-th, the oracle takes it
            y[r, order[r, K]] = _up(x[r, order[r, K - 1]], 3)
        for r in FAR:  # a few ULP on the lowest expert: no routing change
            y[r, order[r, -1]] = _up(x[r, order[r, -1]], 5)
        wb, idb = _route(y)
        for r in MOVED:
            assert set(idb[r].tolist()) != set(ids[r].tolist()), "the construction must move the cutoff"
        idb, wb = idb.clone(), wb.clone()
        for r in DEFECT:  # the defect: columns reversed
            idb[r], wb[r] = idb[r].flip(0), wb[r].flip(0)
        for r in NEAR:  # the near tie broken the other way: the (k+1)-th expert in the last column
            idb[r, K - 1] = order[r, K]
        ids_a.append(ids), w_a.append(w), ids_b.append(idb), w_b.append(wb)
    a = {"ids": torch.stack(ids_a), "weights": torch.stack(w_a), "logits": la}
    b = {"ids": torch.stack(ids_b), "weights": torch.stack(w_b), "logits": lb}
    pa, pb = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in a.items()}, str(pa))
        save_file({k: v.contiguous() for k, v in b.items()}, str(pb))
    else:
        torch.save(a, pa), torch.save(b, pb)
    return pa, pb


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_every_flip_gets_its_cause_with_exact_counts(tmp_path, fmt):
    pa, pb = build_pair(tmp_path, fmt)
    d = diff_traces(pa, pb, CONTRACT)
    n = len(MOVED)
    assert d.rows == LAYERS * TOKENS
    assert d.causes == {"logits_differ": LAYERS * n, "near_tie": LAYERS * n, "router": LAYERS * n}
    assert d.flips == sum(d.causes.values()) == 3 * LAYERS * n
    assert d.router_clauses == {"output_order": LAYERS * n} and d.router_sides == {"a": 0, "b": LAYERS * n, "both": 0}
    assert d.moved_cutoff == LAYERS * n
    assert d.logits_differ_rows == 2 * LAYERS * n  # MOVED and FAR rows; FAR rows are not flips
    for layer in d.layers:
        assert (layer["flips"], layer["logits_differ"], layer["near_tie"], layer["router"]) == (3 * n, n, n, n)
    by_token = {(w["layer"], w["token"]): w for w in d.worst}
    assert d.worst[0]["cause"] == "router"  # the router's flips first: they fail the run
    for (layer, token), w in by_token.items():
        want = "logits_differ" if token in MOVED else "near_tie" if token in NEAR else "router"
        assert w["cause"] == want, (layer, token, w)
        if want == "logits_differ":
            assert 0 < w["max_ulp"] <= 6 and w["moves_cutoff"]


def test_same_logits_on_both_sides_is_a_clean_diff_and_exit_0(tmp_path):
    pa, _ = build_pair(tmp_path)
    out = tmp_path / "out"
    assert contracts_main(["trace-diff", str(pa), str(pa), "--contract", CONTRACT, "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "trace_diff.json").read_text())
    assert record["flips"] == 0 and record["causes"] == {"logits_differ": 0, "near_tie": 0, "router": 0}


def test_command_writes_json_and_page_and_exits_1_on_router_flips(tmp_path, capsys):
    pa, pb = build_pair(tmp_path)
    out = tmp_path / "out"
    assert contracts_main(["trace-diff", str(pa), str(pb), "--contract", CONTRACT, "--out", str(out), "--quiet"]) == 1
    record = json.loads((out / "trace_diff.json").read_text())
    assert sum(record["causes"].values()) == record["flips"] == 60
    assert len(record["layers"]) == LAYERS and record["worst"][0]["replay"].startswith("python -m contracts trace-diff")
    page = (out / "trace_diff.html").read_text()
    assert "data:image/png;base64," in page and "output_order" in page
    capsys.readouterr()
    replay = shlex.split(record["worst"][0]["replay"])
    assert replay[:4] == ["python", "-m", "contracts", "trace-diff"]
    assert contracts_main(replay[3:]) == 0  # the replay line: that token side by side
    shown = capsys.readouterr().out
    assert f"token {record['worst'][0]['token']}" in shown and "oracle on a's logits" in shown


def test_bad_traces_are_one_line_errors(tmp_path, capsys):
    pa, _ = build_pair(tmp_path)
    torch.save({"ids": torch.zeros(3, 2, dtype=torch.long), "weights": torch.zeros(3, 2)}, tmp_path / "nologits.pt")
    with pytest.raises(TraceError, match="neither"):
        diff_traces(tmp_path / "nologits.pt", tmp_path / "nologits.pt", CONTRACT)
    with pytest.raises(TraceError, match="same tokens"):
        diff_traces(pa, tmp_path / "nologits.pt", CONTRACT)
    assert contracts_main(["trace-diff", str(tmp_path / "missing.pt"), str(pa), "--contract", CONTRACT]) == 2
    err = capsys.readouterr().err
    assert "missing.pt" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert contracts_main(["trace-diff", str(pa), str(pa), "--contract", "no-such"]) == 2
