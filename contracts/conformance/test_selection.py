"""Which experts, in which slots: clauses validity, selection, output_order."""


def test_validity(contract_family, conformance):
    """fp32 weights and int32 ids of shape [M, k], ids in range, no repeats, inputs unchanged."""
    conformance.assert_clause(contract_family, "validity")


def test_selection(contract_family, conformance):
    """The k experts with the largest ranking values sig(x) + bias are chosen."""
    conformance.assert_clause(contract_family, "selection")


def test_output_order(contract_family, conformance):
    """Winners sit in the contract's output order (aiter: key then tie priority; serial: selection order)."""
    conformance.assert_clause(contract_family, "output_order")
