"""Candidates that serve at most ``CAP`` rows per bulk call, for the sliced bulk cases (``in_slices``).

``capped`` raises on a call larger than any coverage case, so a check passes
only if every bulk case reached it in slices; ``wrong_last_row`` breaks the last row of every call
(mismatches at the slice ends, which a replay must reproduce); ``ragged``
returns one row short on every second call (a malformed slice).
"""

import itertools

import oracle
from contracts.candidates import Candidate
from contracts.cases.families import FAMILIES

CAP = 1000  # max_rows: what bulk cases are sliced to
LARGEST = max(max(f.sizes) for f in FAMILIES.values())  # the coverage cases' largest batch: max_rows does not cut those


def _route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0):
    if scores.shape[0] > LARGEST:
        raise ValueError(f"serves at most {LARGEST} rows per call, got {scores.shape[0]}")
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract="aiter")


def _wrong_last_row(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0):
    w, ids = _route(scores, bias, topk, renormalize, routed_scaling_factor)
    if ids.shape[0]:
        ids[-1] = (ids[-1] + 1) % scores.shape[1]  # another expert set: an ids finding on the call's last row
    return w, ids


_calls = itertools.count()


def _ragged(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0):
    w, ids = _route(scores, bias, topk, renormalize, routed_scaling_factor)
    return (w[:-1], ids[:-1]) if next(_calls) % 2 and w.shape[0] > 1 else (w, ids)


capped = Candidate(name="capped", route=_route, max_rows=CAP, origin=__name__)
wrong_last_row = Candidate(name="wrong-last-row", route=_wrong_last_row, max_rows=CAP, origin=__name__)
ragged = Candidate(name="ragged", route=_ragged, max_rows=CAP, origin=__name__)
