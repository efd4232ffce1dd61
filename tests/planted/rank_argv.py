"""``python -m tests.planted.rank_argv COMMAND ARGS...``: ``python -m contracts COMMAND ARGS...`` on every torchrun rank,
except that the rank named by ``PLANTED_ARGV_RANK`` appends ``PLANTED_ARGV`` (shell words) to its arguments.

torchrun gives every rank the same command line; hosts launched by hand (one torchrun per host) need not. This
stands in for a host launched with a ``--seed``, ``--contract`` or ``--exact`` of its own.
"""

import os
import shlex
import sys

from contracts.commands import main
from contracts.commands._common import exit_process

if __name__ == "__main__":
    argv = sys.argv[1:]
    if os.environ.get("RANK") == os.environ.get("PLANTED_ARGV_RANK"):
        argv += shlex.split(os.environ.get("PLANTED_ARGV", ""))
    exit_process(main(argv))
