"""Entry point of earlier releases: ``python -m contracts.bench`` is ``python -m contracts bench`` (contracts.commands.bench)."""

from .commands._common import exit_process
from .commands.bench import main

if __name__ == "__main__":
    exit_process(main())
