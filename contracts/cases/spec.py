"""A case as a replayable spec (``CaseSpec``): what ``contracts.cases.build.build_case`` needs to rebuild it bit for
bit, and its replay id (``family:seed:rows`` and the tags of what it pins)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CaseSpec", "admitted_fields"]


@dataclass(frozen=True)
class CaseSpec:
    family: str
    case_seed: int
    rows: int
    experts: int
    topk: int
    n_group: int = 1  # expert groups of a grouped contract (DeepSeek: 8 groups, 4 kept); 1 = none
    topk_group: int = 1
    bulk: bool = False  # drawn on the candidate's device by the family's vectorized maker
    bias: bool = True  # the contract has a correction bias (else the candidate gets ``bias=None``)
    bias_dtype: str | None = None  # pinned: "bf16", "fp16" or "fp32" (None: drawn from the seed, fp32 or the logits' dtype)
    logits_dtype: str | None = None  # pinned: "fp16" (None: the family's, bf16 or fp32)
    offset: int | None = None  # pinned storage offset of a strided family's rows (None: drawn, 1..63)
    bias_offset: int = 0  # pinned: the bias starts this many elements into its buffer (1: not aligned for vector loads)
    logits_offset: int = 0  # pinned: contiguous logits (row stride E) that start this many elements into their buffer
    column_stride: int = 1  # pinned: the logits are every N-th column of a wider buffer, from its second (stride(1) == N)
    transposed: bool = False  # pinned: the logits are the transpose of a contiguous [E, M] buffer (strides (1, M))
    bias_stride: int = 1  # pinned: the bias is every N-th element of a wider buffer (stride(0) == N)
    renormalize: bool | None = None  # pinned call option (None: drawn, 3 in 4 renormalize); one the contract admits
    # pinned autograd context of the call (None: grad enabled, as a plain script calls): "on", "off" (torch.no_grad)
    # or "inference" (torch.inference_mode, as a serving engine's forward runs)
    grad_mode: str | None = None
    # pinned: the bias is handed over as an nn.Parameter, "frozen" (requires_grad=False, as vLLM and SGLang load it)
    # or "trainable" (requires_grad=True, as a transformers model holds it); None: a plain tensor
    bias_parameter: str | None = None
    # pinned: the logits require grad, a view of a leaf as a training step's gate output is (grad mode "on" only: a
    # tensor made under no_grad or inference mode never requires grad)
    logits_grad: bool = False
    # pinned: the call runs under torch.autocast(device, bfloat16) ("bf16") or float16 ("fp16"), as mixed precision runs
    # a model
    autocast: str | None = None
    # pinned: the call runs under torch.use_deterministic_algorithms(True) (warn_only: an op without a deterministic
    # form warns rather than raises; torch.empty then fills with NaN), as a reproducible run sets it
    deterministic: bool = False
    # pinned: the call runs under torch.set_default_dtype(bfloat16) ("bf16"), as some training frameworks set it: a
    # tensor a router makes without a dtype is bf16 there
    default_dtype: str | None = None
    zero_bias: bool = False  # pinned: every bias element is +0.0 (a freshly initialised e_score_correction_bias)
    scaling: float | None = None  # pinned routed_scaling_factor (None: drawn from SCALING_FACTORS)

    # The call options the contract admits (``oracle.Contract.admitted_options``): build_case draws only these.
    renormalize_options: tuple[bool, ...] = (True, False)
    scaling_options: tuple[float, ...] | None = None  # None: any (the usual factors are drawn)
    source: str = ""  # captured logits: the file and layer the rows come from (``contracts.cases.captured``); "" = a family's maker
    expert_scale: bool = False  # the contract has a per-expert weight scale (Gemma 4): build_case draws one per case

    @property
    def tags(self) -> tuple[str, ...]:
        """What the spec pins, as replay-id parts: ``bulk``, ``logits-fp16``, ``bias-bf16``, ``offset-0``,
        ``bias_offset-1``, ``logits_offset-1``, ``column_stride-2``, ``transposed``, ``bias_stride-2``,
        ``renormalize-off``, ``scaling-2.5``, ``grad-inference``, ``bias_parameter-frozen``, ``logits_grad``, ``autocast``
        (bf16), ``autocast-fp16``, ``default_dtype-bf16``, ``deterministic``, ``zero_bias``."""
        return (("bulk",) if self.bulk else ()) + ((f"logits-{self.logits_dtype}",) if self.logits_dtype else ()) + (
            (f"bias-{self.bias_dtype}",) if self.bias_dtype else ()) + (
            (f"offset-{self.offset}",) if self.offset is not None else ()) + (
            (f"bias_offset-{self.bias_offset}",) if self.bias_offset else ()) + (
            (f"logits_offset-{self.logits_offset}",) if self.logits_offset else ()) + (
            (f"column_stride-{self.column_stride}",) if self.column_stride != 1 else ()) + (
            ("transposed",) if self.transposed else ()) + (
            (f"bias_stride-{self.bias_stride}",) if self.bias_stride != 1 else ()) + (
            (f"renormalize-{'on' if self.renormalize else 'off'}",) if self.renormalize is not None else ()) + (
            (f"scaling-{self.scaling:g}",) if self.scaling is not None else ()) + (
            (f"grad-{self.grad_mode}",) if self.grad_mode is not None else ()) + (
            (f"bias_parameter-{self.bias_parameter}",) if self.bias_parameter is not None else ()) + (
            ("logits_grad",) if self.logits_grad else ()) + (
            (("autocast",) if self.autocast == "bf16" else (f"autocast-{self.autocast}",)) if self.autocast else ()) + (
            (f"default_dtype-{self.default_dtype}",) if self.default_dtype else ()) + (
            ("deterministic",) if self.deterministic else ()) + (("zero_bias",) if self.zero_bias else ())  # fmt: skip

    @property
    def in_context(self) -> bool:
        """Whether the case pins a call context (``CALL_CONTEXTS``) rather than the default, or (captured logits) call
        options other than the model's: either way it repeats rows of the file's walk."""
        return (self.grad_mode is not None or self.bias_parameter is not None or self.logits_grad or self.autocast is not None
                or self.default_dtype is not None or self.deterministic
                or bool(self.source) and (self.renormalize is not None or self.scaling is not None))

    @property
    def replay_id(self) -> str:
        return ":".join([self.family, str(self.case_seed), str(self.rows), *self.tags])


def admitted_fields(admitted: dict | None) -> dict:
    """The ``CaseSpec`` fields for a contract's ``admitted_options()`` (``{}`` when it admits every option)."""
    if not admitted:
        return {}
    out = {}
    if tuple(admitted["renormalize"]) != (True, False):
        out["renormalize_options"] = tuple(admitted["renormalize"])
    if admitted["routed_scaling_factor"] is not None:
        out["scaling_options"] = tuple(admitted["routed_scaling_factor"])
    if admitted.get("expert_scale"):
        out["expert_scale"] = True
    return out
