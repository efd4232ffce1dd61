"""The weights: clauses bias_in_weight, renorm_guard, renormalization, scaling, weight_accuracy."""


def test_bias_in_weight(contract_family, conformance):
    """The weight is sig[id]: the correction bias ranks only."""
    conformance.assert_clause(contract_family, "bias_in_weight")


def test_renorm_guard(contract_family, conformance):
    """Renormalization as the contract guards it (aiter: divide only if the sum > 0; serial: / (den + 1e-20))."""
    conformance.assert_clause(contract_family, "renorm_guard")


def test_renormalization(contract_family, conformance):
    """Weights renormalized exactly when the call asks for it (renormalize=True)."""
    conformance.assert_clause(contract_family, "renormalization")


def test_scaling(contract_family, conformance):
    """routed_scaling_factor multiplies after renormalization."""
    conformance.assert_clause(contract_family, "scaling")


def test_weight_accuracy(contract_family, conformance):
    """Weights within the contract's tolerance (rtol 1e-5, atol 1e-6) of the oracle's."""
    conformance.assert_clause(contract_family, "weight_accuracy")
