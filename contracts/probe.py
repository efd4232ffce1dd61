"""Entry point of earlier releases: ``python -m contracts.probe`` is ``python -m contracts probe`` (contracts.commands.probe)."""

from .commands._common import exit_process
from .commands.probe import main

if __name__ == "__main__":
    exit_process(main())
