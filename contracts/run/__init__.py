"""The library functions the commands, the nightly and the pytest plugin call, with explicit keyword options.

- ``check``: one candidate over a plan of cases (``check_candidate``), with ``tally`` (the counts) and ``replay``;
- ``checks``: several candidates in one run, isolation, bundles as each finishes (``run_checks``);
- ``probe``, ``search``, ``bench``, ``nightly``: the other tools;
- ``options``, ``progress``, ``signals``: what they share.
"""
