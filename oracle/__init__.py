"""The routing oracle: every routing contract as an executable fp32 reference.

This package *defines* what a correct MoE router top-k returns. It imports
only torch (and the standard library; ``tomli`` on Python 3.10 for contract
files). A contract is data (``Contract``, a frozen dataclass of small
orthogonal fields; docs/contracts_as_data.md is the field reference), and
one vectorized ``route`` is driven by those fields. Public surface:

- ``route(scores, bias, topk, *, renormalize, routed_scaling_factor, contract, num_expert_group, topk_group)``
  -> ``(weights fp32 [M, k], ids int32 [M, k])``
- ``route_with_values(...)``: ``route`` plus the scores and ranking it used;
  ``route_trace(...)``: everything, as a ``RouteTrace`` (groups kept, cutoffs)
- ``Contract`` / ``ContractError`` / ``FIELD_VALUES``; ``BUILTIN_CONTRACTS`` (all
  built-ins), ``CONTRACTS`` (the two the harness checks today: aiter, serial),
  ``get_contract(name | Contract | path.toml)``, ``load_contract(path)``,
  ``contract_label(c)`` (a user contract named by its file and digest), ``is_builtin(c)``
- ``ClauseName`` (the closed clause vocabulary), ``Clause``, ``CLAUSE_NAMES``
  (the clause names of ``CONTRACTS``)
- ``variants(contract)`` -> ``[Variant(label, field, value, contract)]``: the
  single-field changes a diagnosis tries
- ``tie_priority(E, rule)`` / ``tie_order(E, rule)`` / ``group_tie_priority(G, rule)``
- ``rank_keys(values)``: the fp32 -> ordered int32 key map
- ``ranking_values(scores, bias, contract)``: ``(scores, ranking)`` in fp32;
  ``sigmoid(scores, contract)``: the contract's fp32 sigmoid

The built-in contracts
----------------------

=====================  ==========  ===============  =======  ============  ======  =======  ========  ==========
contract               E / k       scoring          bias     groups        mask    ties     NaN       renormalize
=====================  ==========  ===============  =======  ============  ======  =======  ========  ==========
``aiter``              896 / 16    sigmoid (exact)  ranks    --            --      aiter    last      guard
``serial``             896 / 16    sigmoid (expf)   ranks    --            --      lowest   never     eps 1e-20
``deepseek-v3``        256 / 8     sigmoid (exact)  ranks    8, keep 4     -inf    lowest   last      eps 1e-20
``deepseek-v3-ref..``  256 / 8     sigmoid (exact)  ranks    8, keep 4     0.0     lowest   last      eps 1e-20
``qwen3-moe``          128 / 8     softmax          none     --            --      lowest   last      raw
``mixtral``            8 / 2       softmax          none     --            --      lowest   last      raw
``gpt-oss``            128 / 4     softmax of top4  none     --            --      lowest   last      (off)
=====================  ==========  ===============  =======  ============  ======  =======  ========  ==========

Beside these, one contract per released MoE family (``MODEL_CONTRACTS``:
deepseek-v4, llama4, glm4-moe, kimi-k2, minimax-m2, qwen3-next, qwen2-moe,
olmoe, dbrx, gemma4, ernie4.5, longcat-flash, mistral4, deepseek-v2,
hunyuan-moe, dots1, jamba, granite-moe), each following its transformers
router class (docs/models.md; ``python -m contracts contracts`` lists them).

Common to all: the ranking add in fp32 (``score_precision="fp32"``), group
score the top-2 sum, group ties to the lowest group, scaling by
``routed_scaling_factor`` after renormalization (2.5 by default for the
DeepSeek ones, else 1.0), weights to rtol 1e-5 / atol 1e-6, ids exactly.
Output order: key descending then tie priority (aiter, softmax ones),
selection order (serial; the same ids), any (DeepSeek: compared as a set).
``serial`` alone has the -1e30 floor and the expert-0 fallback.
"""

from ._builtin import BUILTIN_CONTRACTS, CLAUSE_NAMES, CONTRACTS, MCORE_CONTRACTS, MODEL_CONTRACTS, SERIAL_SENTINEL
from ._clauses import Clause, ClauseName
from ._contracts import FIELD_NAMES, FIELD_VALUES, SCALING_FACTORS, Contract, ContractError
from ._lookup import contract_label, get_contract, is_builtin
from ._keys import NAN_KEY, rank_keys
from ._parts import select_ids, weights_from
from ._route import RouteTrace, ranking_values, renormalizes, route, route_trace, route_with_values, sigmoid
from ._tie_priority import GROUP_TIE_RULES, LANE_RANK, TIE_RULES, group_tie_priority, tie_order, tie_priority
from ._toml import contract_from_mapping, load_contract
from ._validate import LOGIT_DTYPES, RoutingArgumentError
from ._variants import Variant, variants

__all__ = [
    "BUILTIN_CONTRACTS",
    "CLAUSE_NAMES",
    "CONTRACTS",
    "FIELD_NAMES",
    "FIELD_VALUES",
    "GROUP_TIE_RULES",
    "LANE_RANK",
    "LOGIT_DTYPES",
    "MCORE_CONTRACTS",
    "MODEL_CONTRACTS",
    "NAN_KEY",
    "SCALING_FACTORS",
    "SERIAL_SENTINEL",
    "TIE_RULES",
    "Clause",
    "ClauseName",
    "Contract",
    "ContractError",
    "RouteTrace",
    "RoutingArgumentError",
    "Variant",
    "contract_from_mapping",
    "contract_label",
    "get_contract",
    "group_tie_priority",
    "is_builtin",
    "load_contract",
    "rank_keys",
    "ranking_values",
    "renormalizes",
    "route",
    "route_trace",
    "route_with_values",
    "select_ids",
    "sigmoid",
    "tie_order",
    "tie_priority",
    "variants",
    "weights_from",
]
