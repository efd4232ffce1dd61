"""router-contracts: prove that a mixture-of-experts router top-k kernel routes every token like its contract.

The pipeline, one package per role::

    cases/       what to feed: case families, the plan of replayable specs, Hypothesis strategies
    candidates/  the routers under test: the registry, the built-ins, calling one, the worker process
    compare/     the candidate's answer against the oracle's: verdicts and clause attribution
    run/         library functions: check, probe, search, bench, nightly
    reports/     the records (schema), the one bundle reader and writer, Markdown, HTML, JUnit, diff, merge, upload
    commands/    argument parsing and printing: ``python -m contracts COMMAND`` / ``router-contracts COMMAND``

Public surface for users who plug in their own router::

    from contracts import Candidate, register

(``python -m contracts.check``, the spelling of earlier releases, remains:
the replay lines of reports use it.)
"""

from .candidates import Candidate, all_candidates, get_candidate, register

__all__ = ["Candidate", "all_candidates", "get_candidate", "register"]
