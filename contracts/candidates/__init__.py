"""Candidates: the routers under test, and how they are called.

- ``registry``: ``Candidate`` (name, contract, devices, gates, declared
  deviations) and the registry of names;
- ``builtin``: our kernels, the adapters and the oracle, registered here,
  after the registry and before any user code can claim their names;
- ``engines``: the serving engines' own routers (SGLang, vLLM, lmdeploy,
  FlashInfer), registered the same way, loaded on first use;
- ``models``: the released models' own routers (transformers), ``hf-<family>``,
  loaded on first use;
- ``trainers``: the trainers' own routers (megatron-core, Transformer Engine),
  ``mcore-<family>`` and ``te-fused``, loaded on first use;
- ``batched``: ``A@M<M0`` / ``B@M>=M0``, a candidate routed only in batches
  below or at least M0 rows (the prefill/decode view);
- ``calling``: a candidate's calls on a case (repeats, graph replay, slices,
  the ``--against`` candidate) and their result records, the same in every
  process; ``fenced_call``: one call, on private inputs in the case's context,
  behind a fence against ``os._exit``; ``compile_watch``: torch.compile's
  recompiles across a check;
- ``worker``: the candidate in a worker process, where a crash or hang is a
  report, not the end of the run.
"""

from .registry import (
    Candidate,
    CandidateLoadError,
    DuplicateCandidateError,
    UnknownCandidateError,
    all_candidates,
    get_candidate,
    load_spec,
    register,
)
from . import builtin  # noqa: E402,F401  (registers the built-ins, after the registry exists)
from . import engines  # noqa: E402,F401  (the serving engines' routers, kernels.engines.ADAPTERS; loads no engine code)
from . import models  # noqa: E402,F401  (the models' own routers from transformers, kernels.models; loads no transformers)
from . import trainers  # noqa: E402,F401  (the trainers' routers, kernels.trainers: megatron-core, TE; loads neither)
from . import batched  # noqa: E402,F401  (names like radix4@M<1024: a candidate at a chosen batch size)

__all__ = [
    "Candidate",
    "CandidateLoadError",
    "DuplicateCandidateError",
    "UnknownCandidateError",
    "all_candidates",
    "get_candidate",
    "load_spec",
    "register",
]
