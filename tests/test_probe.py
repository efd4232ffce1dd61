"""The tie-order probe recovers planted priorities from answers alone, and flags tie rules that move.

The planted routers are plain callables loaded by spec
(``tests.test_probe:NAME``): the aiter contract's arithmetic with the tie
priority swapped for another permutation.
"""

import json

import pytest
import torch

import oracle
from contracts.commands.probe import main
from contracts.run.probe import lane_table, match_rules

SPEC = "tests.test_probe:"


def _route_with_priority(scores, bias, topk, renormalize, rsf, priority, *, ids_in_id_order=False):
    experts = scores.shape[1]
    sig, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking).long()
    composite = keys * experts + (experts - 1 - priority.to(scores.device))
    ids = torch.topk(composite, topk, dim=1).indices
    if ids_in_id_order:
        ids = ids.sort(dim=1).values
    w = sig.gather(1, ids)
    if renormalize:
        total = w.sum(1, keepdim=True)
        w = w / torch.where(total > 0, total, torch.ones_like(total))
    return w * rsf, ids.to(torch.int32)


def _random_priority(experts):
    return torch.randperm(experts, generator=torch.Generator().manual_seed(1234))


def aiter_router(scores, bias, topk, renormalize, rsf):
    return _route_with_priority(scores, bias, topk, renormalize, rsf, oracle.tie_priority(scores.shape[1], "aiter"))


def lowest_router(scores, bias, topk, renormalize, rsf):
    return _route_with_priority(scores, bias, topk, renormalize, rsf, torch.arange(scores.shape[1]))


def highest_router(scores, bias, topk, renormalize, rsf):
    return _route_with_priority(scores, bias, topk, renormalize, rsf, torch.arange(scores.shape[1]).flip(0))


def random_router(scores, bias, topk, renormalize, rsf):
    """A random priority, and output in expert-id order: the probe must not trust output order."""
    return _route_with_priority(scores, bias, topk, renormalize, rsf, _random_priority(scores.shape[1]), ids_in_id_order=True)


def batch_dependent_router(scores, bias, topk, renormalize, rsf):
    """Lowest index below 8 rows, highest index from 8 rows on."""
    experts = torch.arange(scores.shape[1])
    return _route_with_priority(scores, bias, topk, renormalize, rsf, experts if scores.shape[0] < 8 else experts.flip(0))


def raising_router(scores, bias, topk, renormalize, rsf):
    raise RuntimeError("kernel launch failed")


def _probe(tmp_path, candidate, *extra):
    out = tmp_path / "probe"
    code = main(["--candidate", candidate, "--out", str(out), *extra])
    doc = json.loads((out / "probe.json").read_text()) if (out / "probe.json").exists() else None
    return code, doc


@pytest.mark.parametrize(
    "router, rule, expected",
    [
        ("aiter_router", "aiter", lambda e: oracle.tie_order(e, "aiter").tolist()),
        ("lowest_router", "lowest", lambda e: list(range(e))),
        ("highest_router", "highest", lambda e: list(range(e - 1, -1, -1))),
    ],
)
def test_tie_order_recovers_planted_rules(tmp_path, capsys, router, rule, expected):
    code, doc = _probe(tmp_path, SPEC + router)
    assert code == 0
    assert doc["permutation"] == expected(896)
    assert doc["matches"] == rule and doc["consistent"] is True and doc["evidence"] == []
    assert doc["recovery_calls"] <= 64 and doc["calls"] == doc["recovery_calls"] + doc["verification_calls"]
    assert {b: v["failures"] for b, v in doc["verified"].items()} == {"1": 0, "2": 0, "7": 0, "32": 0, "64": 0, "1025": 0}
    assert doc["output_order"]["tied_winners_in_priority_order"] is True
    text = {"aiter": "matches aiter lane order", "lowest": "matches lowest index", "highest": "matches highest index"}[rule]
    assert text in capsys.readouterr().out


def test_tie_order_recovers_a_random_permutation_whatever_the_output_order(tmp_path, capsys):
    code, doc = _probe(tmp_path, SPEC + "random_router")
    assert code == 0
    assert doc["permutation"] == torch.argsort(_random_priority(896)).tolist()
    assert doc["recovery_calls"] <= 64 and doc["consistent"] is True
    assert doc["matches"] == "none"
    assert doc["first_disagreement"]["aiter"] == {"position": 0, "expected": 252, "got": doc["permutation"][0]}
    assert doc["output_order"]["tied_winners_in_priority_order"] is False  # ids come out in id order
    out = capsys.readouterr().out
    assert f"position 0, expected 252, got {doc['permutation'][0]}" in out


def test_tie_order_small_shape_within_budget(tmp_path):
    code, doc = _probe(tmp_path, SPEC + "random_router", "--experts", "64", "--topk", "4")
    assert code == 0
    assert doc["permutation"] == torch.argsort(_random_priority(64)).tolist()
    assert doc["recovery_calls"] == 64 // 4 and doc["lane_table"] is None


def test_tie_order_flags_a_rule_that_changes_with_batch_size(tmp_path, capsys):
    code, doc = _probe(tmp_path, SPEC + "batch_dependent_router")
    assert code == 0
    assert doc["consistent"] is False
    assert doc["matches"] == "highest"  # recovered at M=32, where it is highest index
    failing = {b for b, v in doc["verified"].items() if v["failures"]}
    assert failing == {"1", "2", "7"}
    assert "batch size" in doc["dependence"]
    ev = doc["evidence"][0]
    assert ev["stage"] == "verification" and ev["batch_size"] < 8 and ev["predicted"] != ev["got"]
    assert ev["got"] == sorted(sorted(ev["pool"])[: ev["winners_from_pool"]])  # it followed lowest index there
    assert "consistent: NO" in capsys.readouterr().out


def test_tie_order_aiter_model_gives_the_lane_table(tmp_path, capsys):
    code, doc = _probe(tmp_path, "aiter-model", "--device", "cpu")
    assert code == 0
    assert doc["matches"] == "aiter" and doc["consistent"] is True
    assert doc["lane_table"] == list(oracle.LANE_RANK)
    out = capsys.readouterr().out
    assert "matches aiter lane order" in out
    table = " ".join(out.split("lane table (lane -> traversal rank):")[1].split("probe.json")[0].split())
    assert table == " ".join(map(str, oracle.LANE_RANK))


@pytest.mark.parametrize("contract, rule", [("aiter", "aiter"), ("serial", "lowest")])
def test_tie_order_oracle_follows_each_contract(tmp_path, contract, rule):
    code, doc = _probe(tmp_path, "oracle", "--contract", contract, "--batch-sizes", "1,7")
    assert code == 0
    assert doc["matches"] == rule and doc["matches_contract"] is True and doc["consistent"] is True


def test_tie_order_lane_table_only_for_wave64_orders():
    assert lane_table(oracle.tie_order(896, "aiter").tolist()) == list(oracle.LANE_RANK)
    assert lane_table(list(range(896))) is None
    assert lane_table(list(range(64))) is None  # too few experts for every lane


def test_tie_order_match_rules_reports_the_first_disagreement():
    order = list(range(10))
    order[3], order[4] = 4, 3
    matches, first = match_rules(order)
    assert matches == "none"
    assert first["lowest"] == {"position": 3, "expected": 3, "got": 4}
    assert first["highest"] == {"position": 0, "expected": 9, "got": 0}


def test_probe_exit_codes(tmp_path):
    assert main(["--candidate", "radix4", "--device", "cpu", "--out", str(tmp_path / "a")]) == 3
    assert main(["--candidate", "oracle", "--experts", "20", "--topk", "16", "--out", str(tmp_path / "b")]) == 2
    assert main(["--candidate", "no-such-router", "--out", str(tmp_path / "c")]) == 2
    assert main(["--candidate", SPEC + "raising_router", "--out", str(tmp_path / "d")]) == 1
    doc = json.loads((tmp_path / "d" / "probe.json").read_text())
    assert doc["status"] == "error" and "kernel launch failed" in doc["error"]


def test_a_probe_that_cannot_run_writes_why_under_either_contract_kind(tmp_path):
    """Unavailable here, or not covering the probe's calls: probe.json says so, ungrouped (the probe's batch named)
    and grouped (one-row calls) alike."""
    from contracts.candidates import Candidate, get_candidate
    from contracts.run.probe import run_probe

    run = run_probe(get_candidate("radix4"), out=tmp_path / "a", device="cpu")
    assert run.status == "unavailable" and run.reason and "cpu" in run.reason
    assert json.loads((tmp_path / "a" / "probe.json").read_text()) == run.doc and "environment" in run.doc
    narrow = Candidate(name="test-probe-covers-nothing", route=aiter_router, covered=lambda **_: False)
    run = run_probe(narrow, out=tmp_path / "b", contract="aiter", experts=64, topk=4)
    assert run.status == "unavailable" and run.reason == "it does not cover E=64, k=4 (M=8) with bf16/fp32 logits"
    run = run_probe(narrow, out=tmp_path / "c", contract="deepseek-v3")
    assert run.status == "unavailable" and run.reason.endswith(", k=8 with bf16/fp32 logits")
    assert json.loads((tmp_path / "c" / "probe.json").read_text())["status"] == "unavailable"
