"""Entry point of earlier releases: ``python -m contracts.check`` is ``python -m contracts check`` (contracts.commands.check)."""

from .commands._common import exit_process
from .commands.check import main

if __name__ == "__main__":
    exit_process(main())
