"""The routing-contract conformance suite, run through the pytest plugin::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route

A package of pytest files that the plugin (``contracts.pytest_plugin``)
runs: one test function per clause of the contract checked, generated from
the contract's clause list and parametrized over the case families
(``test_tie_order[all_equal]``), and ``test_check_verdict``. ``contracts.pytest_plugin``
documents the options and what pass, fail, xfail and skip mean.
"""
