"""The pinned cases of a family: what every check runs on top of its budget, by construction.

**Coverage by construction.** Given a ``max_batch``, every family also runs
its **pinned cases**, at every ``--rows`` and on top of its budget: the
``batch_sizes`` family an empty batch (0 rows: its answer must be two empty
``[0, k]`` tensors; a raise or another answer is an error of the candidate)
and one case of every batch-size class from 1 to
``max_batch`` (the first size past each power of two, ``max_batch`` itself,
and each side of every launch-shape boundary the kernel packages publish as
``BATCH_SWITCH_POINTS``), and ``ROW_TILE`` (16) consecutive sizes from the
first batch of every launch class (``tail_sizes``: every remainder of a row
tile of up to 16 rows, in every launch shape); ``random_bf16`` and ``random_fp32`` cases of each
bias dtype (bf16, fp16, fp32), and ``random_fp32`` the same with fp16 logits,
so that all nine (logits, bias) dtype pairs are made, ``random_bf16`` a bias
of each dtype that starts one element into its buffer (not aligned for vector
loads), and both families contiguous logits one element into theirs (and a bias,
logits ``ALIGNED_OFFSET`` = 256 elements in: aligned, but not where their storage starts),
logits of column stride 2 (every other column of a wider buffer) and
transposed logits (row stride 1, from 2 rows), ``random_bf16`` a bias of stride 2;
``strided`` cases at storage offset 0; every other family one case of its own
rows in every launch class (below), and those whose rows do not rest on their
bias (``ZERO_BIAS_FAMILIES``) one more with an all-zero bias; ``random_fp32`` (fp32 and
fp16 logits) and ``random_bf16`` call in every call context but the default
(``CALL_CONTEXTS``: grad on, off or inference mode, the bias a plain tensor or
an ``nn.Parameter``, frozen or trainable, the logits requiring grad, autocast:
every conjunction; a bf16 default dtype and autocast to fp16 in each grad mode and in a training step; deterministic
algorithms in each grad mode). Each of those dtype, layout and context pins
runs in **every launch class** of the checked shape: at 1 and 2 rows (one
row is often a class of its own, the decode step), at 64, and at the first
batch of each launch shape the kernels use there under the contract
(``launch_points``; radix4 at 896/16 under aiter: 7 and 1,585), so
a loader written per launch shape meets every pair and layout. A pinned case
names what it pins in its replay id (``strided:SEED:64:offset-0``,
``random_fp32:SEED:1585:logits-fp16:bias-bf16``, ``random_bf16:SEED:7:transposed``).
"""

from __future__ import annotations

from .batch_sizes import launch_class_sizes, sweep_sizes, tail_sizes
from .families import FAMILIES
from .launch_points import launch_points, switch_points

__all__ = ["ALIGNED_OFFSET", "BIAS_DTYPES", "BIAS_PARAMETERS", "BIAS_STRIDES", "CALL_CONTEXTS", "FAMILY_DATA_PINNED_ELSEWHERE", "GRAD_MODES",
           "LOGITS_STRIDES", "SCALING_FACTORS", "START_OFFSETS", "UNUSUAL_SCALING_FACTORS", "ZERO_BIAS_FAMILIES", "pinned_specs"]  # fmt: skip

# The routed scaling factors a case draws from (contracts.cases.build draws one per case): 1.0 and two that are not.
# oracle.SCALING_FACTORS's values, written out: importing oracle here would import torch before a command has checked
# its arguments (tests/test_first_hour.py); tests/test_admitted_options.py keeps the two equal.
SCALING_FACTORS = (1.0, 2.5, 2.827)
# Pinned with every renormalize option in every launch class, never drawn (drawing them would change every drawn
# case's bits): a factor below 1 and one above every drawn factor (16, a released model's). A kernel that takes
# max(factor, 1) or keeps the factor in a narrow range is right on the drawn three and wrong on a model's own.
UNUSUAL_SCALING_FACTORS = (0.375, 16.0)

# The families whose data already runs in every launch class: random_bf16 and random_fp32 in their dtype and layout
# pins, batch_sizes in its sweep and option pins. Every other family gets one plain case of each class.
FAMILY_DATA_PINNED_ELSEWHERE = frozenset({"random_bf16", "random_fp32", "batch_sizes"})
# The families whose rows mean the same with any bias (the others' bias is what they test: -inf masks, subnormal or
# signed-zero biases, a bias that decides a zero sum): each also runs with an all-zero bias in every launch class.
ZERO_BIAS_FAMILIES = frozenset({"random_bf16", "bf16_near_ties", "all_equal", "tie_pool_straddle", "tie_pool_above", "nan_sparse",
                                "nan_dense", "inf_logits", "saturated", "strided"})
# The dtypes a pinned case gives the bias: with the families' logits (bf16, fp32) and pinned fp16 logits, every
# (logits, bias) pair of the three float dtypes the contracts read is made (kernels load each pair differently).
BIAS_DTYPES = ("bf16", "fp16", "fp32")
# The layouts whose column stride is not 1, pinned in random_bf16 and random_fp32 (bf16 and fp32 logits): every
# other column of a [M, 2E] buffer, and the transpose of an [E, M] buffer (row stride 1 < E). A router that reads the
# storage as if it were contiguous, or takes the row stride alone, is wrong there only. And (random_bf16, with a
# bias) a bias of stride 2: one that indexes the bias's storage at stride 1.
LOGITS_STRIDES: tuple[dict, ...] = ({"column_stride": 2}, {"transposed": True})
BIAS_STRIDES: tuple[dict, ...] = ({"bias_stride": 2},)
# Where pinned contiguous logits and biases start in their buffers: one element in (not aligned for vector loads), and
# ALIGNED_OFFSET elements in (512 bytes or more: as aligned as an allocation, but not its start, as a row slice of a
# larger batch is). A kernel that takes the storage's pointer for an aligned tensor's (vector path) reads the
# second from the wrong place, and only the second.
ALIGNED_OFFSET = 256
START_OFFSETS = (1, ALIGNED_OFFSET)
GRAD_MODES = ("on", "off", "inference")
BIAS_PARAMETERS = ("frozen", "trainable")
# The contexts a call is pinned in: every grad mode, with the bias as a plain tensor or either kind of nn.Parameter,
# the logits requiring grad or not (grad on only) and the call under autocast or not, but the default (grad on, plain
# tensors, no autocast: every other case). A kernel wrapper whose path depends on torch.is_grad_enabled(), inference
# mode, an input's requires_grad (a custom op's autograd kernel, a fallback for tensors that require grad) or
# torch.is_autocast_enabled() is checked in each, and in each conjunction of them; the autocast dtype, the default
# dtype and deterministic algorithms in each grad mode. The first eight (grad mode x bias)
# keep their place, so the seeds of the cases that pinned them before stay what they were. Without a bias: the
# contexts with a plain bias.
def _call_contexts() -> tuple[dict, ...]:
    combos = [(m, p, False, False) for m in GRAD_MODES for p in (None, *BIAS_PARAMETERS)]
    combos += [(m, p, g, a) for m in GRAD_MODES for p in (None, *BIAS_PARAMETERS) for g in ((False, True) if m == "on" else (False,))
               for a in (None, "bf16") if g or a]  # fmt: skip
    fields = ("grad_mode", "bias_parameter", "logits_grad", "autocast")
    contexts = [{k: v for k, v in zip(fields, combo) if v or k == "bias_parameter"} for combo in combos if combo != ("on", None, False, False)]
    # A bf16 default dtype in each grad mode, and in a training step's context (a trainable bias, logits requiring
    # grad): what a router makes without a dtype is bf16 then, whatever the rest of the context is.
    contexts += [{"grad_mode": m, "bias_parameter": None, "default_dtype": "bf16"} for m in GRAD_MODES]
    contexts += [{"grad_mode": "on", "bias_parameter": "trainable", "logits_grad": True, "default_dtype": "bf16"}]
    # Autocast to fp16 (a path chosen by torch.get_autocast_dtype) in each grad mode and in a training step; and
    # deterministic algorithms (torch.are_deterministic_algorithms_enabled) in each grad mode. Appended, so the
    # contexts above keep their seeds.
    contexts += [{"grad_mode": m, "bias_parameter": None, "autocast": "fp16"} for m in GRAD_MODES]
    contexts += [{"grad_mode": "on", "bias_parameter": "trainable", "logits_grad": True, "autocast": "fp16"}]
    contexts += [{"grad_mode": m, "bias_parameter": None, "deterministic": True} for m in GRAD_MODES]
    return tuple(contexts)


CALL_CONTEXTS: tuple[dict, ...] = _call_contexts()
# The contexts random_fp32 pinned before the logits' grad and autocast were (their cases keep their seeds).
_FIRST_CONTEXTS = 3 * 3 - 1


def _own_scaling(contract: str | None, admitted: dict | None) -> float | None:
    """The contract's own ``routed_scaling_factor`` (``admitted["default_scaling"]`` where given, else the built-in
    contract's of that name); None where unknown."""
    if admitted and admitted.get("default_scaling") is not None:
        return float(admitted["default_scaling"])
    if not contract:
        return None
    try:
        import oracle

        return float(oracle.BUILTIN_CONTRACTS[contract].routed_scaling_factor) if contract in oracle.BUILTIN_CONTRACTS else None
    except Exception:  # noqa: BLE001 -- a plan without oracle's contracts pins the usual factors only
        return None



def pinned_specs(name: str, max_batch: int | None, *, bias: bool = True, points: tuple[int, ...] | None = None,
                 experts: int | None = None, topk: int | None = None, contract: str | None = None,
                 admitted: dict | None = None, extra_points: tuple[int, ...] = (), max_batch_case: bool = False) -> list[tuple[int, dict]]:  # fmt: skip
    """The pinned cases of family ``name`` as ``(rows, fields)`` (see the module docstring); none without
    ``max_batch``. The dtype and layout cases, and ``batch_sizes``' cases of each pair of call options the contract
    admits (``admitted``: its ``admitted_options()``; None admits all), run at one batch of every launch class
    (``launch_class_sizes``) of the kernels at ``(experts, topk)`` under ``contract`` (``launch_points``);
    ``points``, where given, are the switch points of both the sweep and the classes; ``extra_points`` (the
    candidate's own, ``candidate_points``) are added to both."""
    if max_batch is None:
        return []
    sweep_points = (switch_points() if points is None else points) + tuple(extra_points)
    if points is None:
        points = launch_points(experts, topk, contract) if experts is not None and topk is not None else ()
    points = tuple(points) + tuple(extra_points)  # the candidate's own (candidate_points)
    if name == "batch_sizes":  # the empty batch first (an idle rank routes 0 tokens), then one of every size class,
        # then every pair of call options the contract admits in every launch class (kernels are built per option)
        renorms = tuple(admitted["renormalize"]) if admitted else (True, False)
        factors = admitted["routed_scaling_factor"] if admitted else None
        scalings = SCALING_FACTORS + UNUSUAL_SCALING_FACTORS if factors is None else tuple(s for s in SCALING_FACTORS if s in factors)
        options = [{"renormalize": r, "scaling": s} for r in renorms for s in scalings] if len(renorms) * len(scalings) > 1 else []
        sweep = sweep_sizes(max_batch, sweep_points)
        tails = [n for n in tail_sizes(max_batch, points) if n not in sweep]
        classes = launch_class_sizes(max_batch, points)
        # the model's own routed_scaling_factor (DeepSeek-V4's 1.5, LongCat-Flash's 6) where the contract admits any
        # and the drawn and unusual factors leave it out: a router wrong only at its own model's factor fails here.
        # Last, so that the cases above keep their seeds (contracts.cases.exercised names the regime).
        own = _own_scaling(contract, admitted)
        own_options = [{"renormalize": r, "scaling": own} for r in renorms] if factors is None and own is not None and own not in scalings else []
        return [(0, {})] + [(n, {}) for n in sweep] + [(rows, o) for rows in classes for o in options] + [
            (n, {}) for n in tails] + [(rows, o) for rows in classes for o in own_options]
    fields: list[dict] = []
    if name in ("random_bf16", "random_fp32") and bias:
        fields = [{"bias_dtype": dtype} for dtype in BIAS_DTYPES]
        if name == "random_bf16":  # aligned contiguous logits, a bias of each dtype one element into its buffer (a
            # kernel that tests the logits' alignment for vector loads but not the bias's reads the bias misaligned)
            # and ALIGNED_OFFSET elements in (one that takes the storage's pointer on its vector path)
            fields += [{"bias_dtype": dtype, "bias_offset": offset} for offset in START_OFFSETS for dtype in BIAS_DTYPES]
        if name == "random_fp32":  # fp16 logits (randn * 2: no overflow), with each bias dtype
            fields += [{"logits_dtype": "fp16", "bias_dtype": dtype} for dtype in BIAS_DTYPES]
        # contiguous logits (row stride E) one element into their buffer: a kernel that picks vector loads by
        # is_contiguous() alone reads them misaligned (the strided family's rows are never contiguous); and
        # ALIGNED_OFFSET elements in, aligned: a kernel that reads the storage's start on its vector path is wrong there
        fields += [{"logits_offset": o} for o in START_OFFSETS] + (
            [{"logits_dtype": "fp16", "logits_offset": o} for o in START_OFFSETS] if name == "random_fp32" else [])
        fields += [*LOGITS_STRIDES, *(BIAS_STRIDES if name == "random_bf16" else ())]
        fields += [*CALL_CONTEXTS[:_FIRST_CONTEXTS]] if name == "random_fp32" else []
    elif name in ("random_bf16", "random_fp32"):  # no bias: the logits' dtype and layout alone
        fields = [{"logits_offset": o} for o in START_OFFSETS] + ([{"logits_dtype": "fp16"}, *({"logits_dtype": "fp16", "logits_offset": o} for o in START_OFFSETS)]
                                                                  if name == "random_fp32" else []) + [*LOGITS_STRIDES]
        fields += [c for c in CALL_CONTEXTS[:_FIRST_CONTEXTS] if c["bias_parameter"] is None] if name == "random_fp32" else []
    elif FAMILIES[name].strided:
        fields = [{"offset": 0}]
    classes = launch_class_sizes(max_batch, points)
    # every pinned dtype pair and layout in every launch class: a kernel's loads are written per launch shape (a
    # transposed one-row batch is contiguous: none)
    pins = [(rows, f) for f in fields for rows in classes if rows > 1 or not f.get("transposed")]
    if name not in FAMILY_DATA_PINNED_ELSEWHERE:  # the family's own rows (ties, NaN, infinities, ...) in every launch
        # class too: its sizes reach a class only by chance and only with budget (nan_sparse's 1, 64, 1,024 never
        # meet a block launch of 2..6 rows or a dense one), and a launch shape's tie or NaN handling is its own code
        pins += [(rows, {}) for rows in classes]
    if bias and name in ZERO_BIAS_FAMILIES:  # and with an all-zero bias (a freshly initialised e_score_correction_bias):
        # a kernel may take a bias-free path for it, with its own NaN, infinity and tie handling
        pins += [(rows, {"zero_bias": True}) for rows in classes]
    if name in ("random_bf16", "random_fp32"):  # every call context with every logits dtype (bf16 here, fp32 and fp16
        # there), in every launch class: a path a context selects (an engine's fused inference op, a training
        # fallback) has dtype and launch handling of its own. Last, so that the cases above keep their seeds.
        contexts = [c for c in CALL_CONTEXTS if bias or c["bias_parameter"] is None]
        if name == "random_bf16":  # autocast to fp16 with fp32 and fp16 logits only: a model under it makes no bf16
            # logits (its gate's output is fp16), and bf16 fed to an op autocast casts to fp16 loses range on the way
            contexts = [c for c in contexts if c.get("autocast") != "fp16"]
        later = contexts
        if name == "random_fp32":  # its first contexts with fp32 logits are pinned above; and each with fp16 logits
            done = len([c for c in CALL_CONTEXTS[:_FIRST_CONTEXTS] if bias or c["bias_parameter"] is None])
            later = contexts[done:] + [{**c, "logits_dtype": "fp16"} for c in contexts]
        pins += [(rows, f) for f in later for rows in classes]
    if max_batch_case and max_batch not in classes:  # one call of max_batch rows (MAX_BATCH_FAMILIES, max_batch_host);
        # last, so that the cases above keep their seeds
        pins += [(max_batch, {})]
    return pins
