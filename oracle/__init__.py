"""The routing oracle: both contracts as an executable fp32 reference.

This package *defines* what a correct MoE router top-k returns. It imports
only torch. Public surface:

- ``route(scores, bias, topk, *, renormalize, routed_scaling_factor, contract)``
  -> ``(weights fp32 [M, k], ids int32 [M, k])``
- ``CONTRACTS`` / ``get_contract(name)``: the contracts as named clauses
- ``tie_priority(E, rule)`` / ``tie_order(E, rule)``: the tie permutations
- ``rank_keys(values)``: the fp32 -> ordered int32 key map
- ``ranking_values(scores, bias, contract)``: ``(sig, sig + bias)`` in fp32
- ``route_with_values(...)``: ``route`` plus the ``sig`` and ``ranking`` it used

The contracts, clause by clause
-------------------------------

================  ==========================================  ==========================================
clause            ``aiter``                                   ``serial``
================  ==========================================  ==========================================
sigmoid           ``torch.sigmoid`` fp32 (aiter: exp2 + rcp)  ``1 / (1 + exp(-x))`` fp32
ranking           ``sig + bias`` fp32                         ``sig + bias`` fp32
tie_order         aiter wave64 lane priority                  lowest index
nan_last          NaN below -inf; fills slots last            NaN never taken
signed_zero       -0 == +0                                    -0 == +0
sentinel          none                                        only values > -1e30; else expert 0
output_order      key desc, priority asc                      selection order
weights           ``sig[id]``                                 ``sig[id]``
renorm_guard      ``/ sum`` only if ``sum > 0``               ``/ (den + 1e-20)``, den in selection order
scaling           ``* routed_scaling_factor`` after           ``* routed_scaling_factor`` after
tolerance         rtol 1e-5, atol 1e-6; ids exact             rtol 1e-5, atol 1e-6; ids exact
================  ==========================================  ==========================================
"""

from ._contracts import CLAUSE_NAMES, CONTRACTS, Clause, Contract, get_contract
from ._keys import NAN_KEY, rank_keys
from ._route import SERIAL_SENTINEL, ranking_values, route, route_with_values
from ._tie_priority import LANE_RANK, TIE_RULES, tie_order, tie_priority
from ._validate import LOGIT_DTYPES, RoutingArgumentError

__all__ = [
    "CLAUSE_NAMES",
    "CONTRACTS",
    "LANE_RANK",
    "LOGIT_DTYPES",
    "NAN_KEY",
    "SERIAL_SENTINEL",
    "TIE_RULES",
    "Clause",
    "Contract",
    "RoutingArgumentError",
    "get_contract",
    "rank_keys",
    "ranking_values",
    "route",
    "route_with_values",
    "tie_order",
    "tie_priority",
]
