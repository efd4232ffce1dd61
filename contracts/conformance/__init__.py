"""The routing-contract conformance suite: a package of pytest test files, not library code.

Nothing in the harness imports these modules; pytest collects them when it is given
``--pyargs contracts.conformance``, and the pytest plugin (``contracts.pytest_plugin``,
registered through the ``pytest11`` entry point) supplies ``--candidate`` and the shared
check the tests read. They live in the installed package so that ``pytest --pyargs`` finds
them in any environment where router-contracts is installed::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route

One test function per contract clause, in modules by clause group
(selection, ties, NaN and sentinels, weights), each parametrized over the
case families: ``test_tie_order[all_equal]``. ``contracts.pytest_plugin``
documents the options and what pass, fail, xfail and skip mean.
"""
