"""Candidates whose names are not what the registry knows or what a folder may be called.

``displayed`` is a ``Candidate`` object whose display name the registry does
not know: its replay lines must name ``tests.adversarial.names:displayed``.
The others have names that are paths (``../../x``, an absolute path) or that
collide once unsafe characters are replaced (``a:b_c`` and ``a_b:c``); the
first of that pair fails, the second passes.
"""

from contracts.candidates import Candidate

from tests.planted._common import correct


def _reversed(scores, bias, topk, renormalize, rsf):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.flip(1), ids.flip(1)


displayed = Candidate(name="My Router (display name)", route=_reversed, description="fails output_order on every row")
dotdot = Candidate(name="../../x", route=correct)
absolute = Candidate(name="/tmp/router-contracts-absolute-name", route=correct)
colon_first = Candidate(name="a:b_c", route=_reversed)
colon_second = Candidate(name="a_b:c", route=correct)
ansi = Candidate(name="\x1b[32mPASS\x1b[0m \u202eevil", route=_reversed)
