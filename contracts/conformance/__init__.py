"""The routing-contract conformance suite, run through the pytest plugin::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route

One test function per contract clause, in modules by clause group
(selection, ties, NaN and sentinels, weights), each parametrized over the
case families: ``test_tie_order[all_equal]``. ``contracts.pytest_plugin``
documents the options and what pass, fail, xfail and skip mean.
"""
