"""The conformance tests: one per clause of the contract checked, generated from its clause list.

``test_<clause>[<family>]`` for every clause of the contract (the grouped
contracts' ``group_*`` clauses and the weight clauses included, as the
contract lists them) and every family that applies to it, and
``test_check_verdict``: the check's own verdict. ``contracts.pytest_plugin``
runs one check per session and says what pass, fail, xfail and skip mean.
"""

from contracts.pytest_plugin import clause_names_under_test


def test_check_verdict(conformance):
    """The check's verdict: pass; fail, error, not_covered and interrupted fail this test."""
    conformance.assert_verdict()


def _clause_test(clause: str):
    def test(contract_family, conformance):
        conformance.assert_clause(contract_family, clause)

    test.__name__ = test.__qualname__ = f"test_{clause}"
    test.__doc__ = f"No row of the family breaks clause {clause} unexpectedly."
    return test


for _clause in clause_names_under_test():
    globals()[f"test_{_clause}"] = _clause_test(_clause)
del _clause
