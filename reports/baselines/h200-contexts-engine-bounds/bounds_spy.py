"""One-off (not product): run `contracts check` in-process and record the largest departures behind the
declared bounded clauses: per row blamed on weight_accuracy's catch-all, the largest relative weight error; per row
blamed on selection (not the flush-to-zero counterfactual), attribution.selection_departure. Usage:
python .gpu-48/bounds_spy.py OUT.json -- <check arguments>"""
import json, math, sys, time

import torch

import contracts.compare.verdicts as V
from contracts.commands import main

A = V.A
worst = {"weight_accuracy": 0.0, "weight_rows": 0, "selection": 0.0, "selection_rows": 0}
orig = V._declared_per_row


def spy(declared, blame, weights, bounds):
    catch_all = ((blame.weights == V._WEIGHT_ACCURACY) & (blame.weights_code == A.R_ACCURACY)) | (
        (blame.weights2 == V._WEIGHT_ACCURACY) & (blame.weights2_code == A.R_ACCURACY))
    if bool(catch_all.any()):
        w, ref = weights.float()[catch_all], blame.reference_weights.float()[catch_all]
        err = ((w - ref).abs() - 2.0**-126).clamp_min(0)
        rel = torch.where(err == 0, torch.zeros_like(err), err / ref.abs())
        rel = torch.nan_to_num(rel, nan=math.inf, posinf=math.inf)
        worst["weight_accuracy"] = max(worst["weight_accuracy"], float(rel.max()))
        worst["weight_rows"] += int(catch_all.sum())
    sel = (blame.ids == V._SELECTION) & (blame.ids_code != A.R_SELECTION_FTZ)
    if bool(sel.any()):
        worst["selection"] = max(worst["selection"], float(blame.selection_departure[sel].max()))
        worst["selection_rows"] += int(sel.sum())
    return orig(declared, blame, weights, bounds)


V._declared_per_row = spy
out, args = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
t0 = time.time()
rc = main(args)
log2 = {k: (round(math.log2(v), 2) if v > 0 else None) for k, v in worst.items() if not k.endswith("rows")}
record = {"args": args, "rc": rc, "seconds": round(time.time() - t0, 1), **worst, "log2": log2}
print(json.dumps(record))
with open(out, "w") as f:
    json.dump(record, f, indent=1)
