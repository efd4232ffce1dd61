"""Entry point of earlier releases: ``python -m contracts.nightly`` is ``python -m contracts nightly`` (contracts.commands.nightly)."""

from .commands._common import exit_process
from .commands.nightly import main

if __name__ == "__main__":
    exit_process(main())
