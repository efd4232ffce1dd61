"""Equal ranking values: clauses tie_order, signed_zero."""


def test_tie_order(contract_family, conformance):
    """Exact ties follow the contract's tie priority (aiter: wave64 lane order; serial: lowest index)."""
    conformance.assert_clause(contract_family, "tie_order")


def test_signed_zero(contract_family, conformance):
    """-0.0 and +0.0 rank as equal."""
    conformance.assert_clause(contract_family, "signed_zero")
