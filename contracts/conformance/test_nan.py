"""NaN and the serial sentinel: clauses nan_last, sentinel_fallback."""


def test_nan_last(contract_family, conformance):
    """aiter: NaN ranks below every number and fills slots last; serial: NaN is never taken."""
    conformance.assert_clause(contract_family, "nan_last")


def test_sentinel_fallback(contract_family, conformance):
    """serial only: values <= -1e30 are never taken; with nothing left, expert 0 is emitted (again)."""
    conformance.assert_clause(contract_family, "sentinel_fallback")
