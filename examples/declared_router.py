"""The DeepSeek-V3 router of examples/deepseek_v3_router.py as a ``contracts.Candidate``: its contract, and the
deviations it declares, so rows that break only those clauses are reported as ``expected`` and the run passes.

    python -m contracts check --candidate examples.declared_router:candidate

The router ranks with ``torch.topk``, as transformers' ``DeepseekV3TopkRouter`` does: equal values come out in
torch.topk's order, NaN above every number. Each declaration names one clause and says why; it excuses only that
clause's freedom (which of equal values is taken, where NaN ranks), never a dropped top expert or a wrong weight
(docs/contracts.md, "Clauses"). ``undeclared`` is the same router without them: it fails on those clauses.
"""

from __future__ import annotations

from contracts import Candidate

from examples.deepseek_v3_router import route

TORCH_TOPK_DEVIATIONS = {
    "tie_order": "torch.topk's order among equal values, not the lowest index",
    "group_tie_order": "torch.topk's order among equal group scores, not the lowest group",
    "nan_last": "torch.topk ranks NaN above every number",
    "group_mask": "a NaN expert makes its group's score NaN, which torch.topk keeps first",
}

candidate = Candidate(
    name="deepseek-v3-torch-topk",
    route=route,
    contract="deepseek-v3",
    devices=("cpu", "cuda"),
    description="DeepSeek-V3 grouped sigmoid router ranked by torch.topk (examples/declared_router.py)",
    expected_deviations={"deepseek-v3": TORCH_TOPK_DEVIATIONS},
)

undeclared = Candidate(
    name="deepseek-v3-torch-topk-undeclared",
    route=route,
    contract="deepseek-v3",
    description="the same router declaring nothing: its tie and NaN rows fail",
)
