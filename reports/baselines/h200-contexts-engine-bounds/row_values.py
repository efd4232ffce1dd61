"""One-off: for replay lines (from details.json selection mismatches), print each differing expert's logit, bias,
fp32 sigmoid and ranking value, and the candidate's weights. Usage: python row_values.py DETAILS.json [N]"""
import json, sys

import torch

import oracle
from contracts.candidates import get_candidate
from contracts.candidates.calling import CaseRunner
from contracts.cases.build import build_case
from contracts.run.options import parse_replay

rows = json.load(open(sys.argv[1]))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 2
sel = [r for r in rows if r.get("clause") in ("selection", "group_mask") and r.get("verdict") == "mismatch"][:n]
for r in sel:
    words = r["replay"].split()
    arg = lambda k, d=None: words[words.index(k) + 1] if k in words else d
    contract = arg("--contract", "aiter")
    c = oracle.get_contract(contract)
    experts, topk = int(arg("--experts", c.experts)), int(arg("--topk", c.topk))
    spec = parse_replay(arg("--replay"), experts, topk)
    case = build_case(spec, "cuda" if torch.cuda.is_available() else "cpu")
    cand = get_candidate(arg("--candidate"))
    call = CaseRunner(cand.route_under(contract)).run(case)
    w, ids = call.actual
    i = r["row"]
    x = case.scores[i].float().cpu()
    b = case.bias.float().cpu() if case.bias is not None else torch.zeros_like(x)
    sig = torch.sigmoid(x)
    print("==", r["case"], "row", i, r["clause"], r["reason"][:200])
    print("  expected", r["expected_ids"]); print("  actual  ", ids[i].tolist())
    print("  actual weights", [f"{v:.4g}" for v in w[i].float().tolist()])
    for e in sorted(set(r["expected_ids"]) ^ set(ids[i].tolist())):
        print(f"   expert {e:4d}: logit {x[e].item():.9g} bias {b[e].item():.9g} sig {sig[e].item():.9g} r {(sig[e] + b[e]).item():.9g}"
              f" {'expected' if e in r['expected_ids'] else 'actual'}")
